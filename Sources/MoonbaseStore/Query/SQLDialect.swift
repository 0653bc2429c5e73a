/// The SQL spelling a `QueryCompiler` emits. The operator tree, validation, limits and error
/// codes are shared; only the text differs.
///
/// - `sqlite`: `json_extract(data,'$.p')` expressions, `?` placeholders, `1`/`0` for true/false.
/// - `postgres`: `data #> '{p}'` (jsonb) and `data #>> '{p,objectId}'` (text) expressions,
///   placeholders written as `QueryCompiler.pgMark` and numbered `$1…$n` in text order when the
///   statement is complete (`PostgresQuery.numbered`), `TRUE`/`FALSE`.
public enum SQLDialect: Sendable, Equatable {
    case sqlite
    case postgres
}
