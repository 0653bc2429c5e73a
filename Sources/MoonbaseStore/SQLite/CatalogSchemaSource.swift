import MoonbaseCore
import MoonbaseSQLite

/// The query side's view of the schema catalog: field types and text indexes of a class, and
/// its class-level `get` permission.
struct CatalogSchemaSource: QuerySchemaSource, Sendable {
    let catalog: SchemaCatalog

    func querySchema(_ className: String, on conn: Connection) throws(ParseError) -> QuerySchema? {
        guard let s = catalog.schema(className) else { return nil }
        return QuerySchema(className: className, fields: s.fields, textIndexes: s.textIndexes)
    }

    /// The class-level `get` permission (master-only system classes included), for `include`.
    func allowsGet(_ className: String, identity: Identity) -> Bool {
        do { try catalog.checkCLP(.get, className, identity) } catch { return false }
        return true
    }

    func checkFind(_ className: String, identity: Identity) throws(ParseError) {
        try catalog.checkCLP(.find, className, identity)
    }

    func readRestriction(_ className: String, _ op: ClassOperation, identity: Identity) -> (sql: String, binds: [SQLiteValue])? {
        catalog.pointerRestriction(className, op, identity)
    }
}
