import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// The PostgreSQL spelling of the query compiler's conditions (`SQLDialect.postgres`).
///
/// Values are compared as jsonb where the stored JSON type matters (numbers, booleans, strings in
/// equality, objects and arrays): `data #> '{p}' = to_jsonb($1::numeric)` never matches a string
/// row and never raises a cast error on one. Text comparisons (`$lt` on strings, Dates by their
/// ISO text, Pointers by objectId) use `COLLATE "C"` so strings order by bytes as on SQLite.
/// Binds are carried as `SQLiteValue` (`null/integer/real/text`) and mapped to `PGValue` when the
/// statement runs; every placeholder carries an explicit cast, so the server never guesses types.
extension QueryCompiler {
    /// Placeholder marker in PostgreSQL text, replaced by `$1…$n` in order once the statement is
    /// complete. A control character: validated names and SQL keywords never contain it, and
    /// request values never reach the text.
    public static let pgMark = "\u{1}"
    static let m = pgMark

    /// `data #> '{a,b}'`: the jsonb value at `path` (+ `sub`), SQL NULL when missing. Names are
    /// validated identifiers, so the array literal needs no quoting.
    static func pgJSON(_ path: String, _ sub: String? = nil) -> String {
        "(data #> '{\(pgPath(path, sub))}')"
    }

    /// `data #>> '{a,b}'`: the value at `path` as text.
    static func pgText(_ path: String, _ sub: String? = nil) -> String {
        "(data #>> '{\(pgPath(path, sub))}')"
    }

    static func pgPath(_ path: String, _ sub: String?) -> String {
        var p = ""
        p.reserveCapacity(path.utf8.count + 12)
        for c in path.unicodeScalars { p.unicodeScalars.append(c == "." ? "," : c) }
        if let sub { p += "," + sub }
        return p
    }

    static let pgTrue = Frag("TRUE"), pgFalse = Frag("FALSE")
    static func pgIsTrue(_ f: Frag) -> Bool { f.sql == "TRUE" || f.sql == "1" }
    static func pgIsFalse(_ f: Frag) -> Bool { f.sql == "FALSE" || f.sql == "0" }
    /// The shared code's `alwaysTrue`/`alwaysFalse` (`1`/`0`) in PostgreSQL's spelling.
    static func pgFinal(_ f: Frag) -> Frag {
        if pgIsTrue(f) { return pgTrue }
        if pgIsFalse(f) { return pgFalse }
        return f
    }

    static func pgAnd(_ parts: [Frag]) -> Frag {
        if parts.contains(where: pgIsFalse) { return pgFalse }
        let kept = parts.filter { !pgIsTrue($0) }
        if kept.isEmpty { return pgTrue }
        if kept.count == 1 { return kept[0] }
        return Frag("(" + kept.map { "(\($0.sql))" }.joined(separator: " AND ") + ")", kept.flatMap(\.binds))
    }

    static func pgOr(_ parts: [Frag]) -> Frag {
        if parts.contains(where: pgIsTrue) { return pgTrue }
        let kept = parts.filter { !pgIsFalse($0) }
        if kept.isEmpty { return pgFalse }
        if kept.count == 1 { return kept[0] }
        return Frag("(" + kept.map { "(\($0.sql))" }.joined(separator: " OR ") + ")", kept.flatMap(\.binds))
    }

    /// A NULL (missing field) makes the positive test NULL; its negation must then match.
    static func pgNot(_ f: Frag) -> Frag {
        if pgIsTrue(f) { return pgFalse }
        if pgIsFalse(f) { return pgTrue }
        return Frag("NOT coalesce(\(f.sql),false)", f.binds)
    }

    /// `field == value` (`equality`'s rules: null matches missing; arrays contain scalars).
    func pgEquality(_ field: FieldRef, _ raw: JSONValue, _ value: QueryValue) throws(ParseError) -> Frag {
        let m = Self.m
        if case .null = value {
            guard field.kind == .json else { return Self.pgFalse }
            let e = Self.pgJSON(field.path)
            return Frag("(\(e) IS NULL OR \(e) = 'null'::jsonb)")
        }
        if isArray(field) {
            if case .json(let text) = value, raw.arrayValue != nil {
                return Frag("\(Self.pgJSON(field.path)) = \(m)::jsonb", [.text(text)])
            }
            return anyElement(field, try elementCondition(value, op: "="))
        }
        if field.declared == .geoPoint {
            guard case .geoPoint(let lat, let lng) = value else {
                throw ParseError(.incorrectType, "field \(field.path) is a GeoPoint and cannot be compared with a \(value.typeName)")
            }
            return Frag("(\(Self.pgJSON(field.path, "latitude")) = to_jsonb(\(m)::numeric) AND \(Self.pgJSON(field.path, "longitude")) = to_jsonb(\(m)::numeric))",
                        [.real(lat), .real(lng)])
        }
        if case .json(let text) = value {
            return Frag("\(Self.pgJSON(field.path)) = \(m)::jsonb", [.text(text)])
        }
        _ = try operand(field, value)  // the same type checks (111) as SQLite
        return try pgCompare(field, value, op: "=")
    }

    /// `field op value` for a scalar-like value already checked by `operand`.
    func pgCompare(_ field: FieldRef, _ value: QueryValue, op: String) throws(ParseError) -> Frag {
        let m = Self.m
        let collate = op == "=" ? "" : " COLLATE \"C\""
        switch field.kind {
        case .objectId:
            switch value {
            case .string(let s): return Frag("objectId\(collate) \(op) \(m)::text", [.text(s)])
            case .pointer(_, let id): return Frag("objectId\(collate) \(op) \(m)::text", [.text(id)])
            default: return Self.pgFalse
            }
        case .time:
            let col = field.path
            switch value {
            case .date(let ms): return Frag("\(col) \(op) \(m)::bigint", [.integer(ms)])
            case .string(let s): return Frag("\(col) \(op) \(m)::bigint", [.integer(ISO8601.parse(s) ?? 0)])
            case .number(.integer(let n)): return Frag("\(col) \(op) \(m)::bigint", [.integer(n)])
            case .number(let n): return Frag("\(col) \(op) \(m)::float8", [n])
            default: return Self.pgFalse
            }
        case .json:
            break
        }
        var v = value
        if field.declared == .date, case .string(let s) = value, let ms = ISO8601.parse(s) { v = .date(ms) }
        let p = field.path
        switch v {
        case .date(let ms): return Frag("\(Self.pgText(p, "iso"))\(collate) \(op) \(m)::text", [.text(ISO8601.format(millis: ms))])
        case .pointer(_, let id): return Frag("\(Self.pgText(p, "objectId"))\(collate) \(op) \(m)::text", [.text(id)])
        case .file(let name): return Frag("\(Self.pgText(p, "name"))\(collate) \(op) \(m)::text", [.text(name)])
        case .number(let n):
            let e = Self.pgJSON(p)
            if op == "=" { return Frag("\(e) = to_jsonb(\(m)::numeric)", [n]) }
            return Frag("(jsonb_typeof(\(e)) = 'number' AND \(e) \(op) to_jsonb(\(m)::numeric))", [n])
        case .string(let s):
            if op == "=" { return Frag("\(Self.pgJSON(p)) = to_jsonb(\(m)::text)", [.text(s)]) }
            return Frag("(jsonb_typeof(\(Self.pgJSON(p))) = 'string' AND \(Self.pgText(p))\(collate) \(op) \(m)::text)", [.text(s)])
        case .bool(let b): return Frag("\(Self.pgJSON(p)) \(op) to_jsonb(\(m)::boolean)", [.text(b ? "true" : "false")])
        case .json(let text): return Frag("\(Self.pgJSON(p)) \(op) \(m)::jsonb", [.text(text)])
        case .null, .geoPoint: return Self.pgFalse
        }
    }

    /// One element `v` (jsonb) of an array field compared with `value` using `op`.
    func pgElementCondition(_ value: QueryValue, op: String) throws(ParseError) -> Frag {
        let m = Self.m
        let collate = op == "=" ? "" : " COLLATE \"C\""
        switch value {
        case .pointer(_, let id): return Frag("(v ->> 'objectId')\(collate) \(op) \(m)::text", [.text(id)])
        case .date(let ms): return Frag("(v ->> 'iso')\(collate) \(op) \(m)::text", [.text(ISO8601.format(millis: ms))])
        case .file(let name): return Frag("(v ->> 'name')\(collate) \(op) \(m)::text", [.text(name)])
        case .number(let n):
            if op == "=" { return Frag("v = to_jsonb(\(m)::numeric)", [n]) }
            return Frag("(jsonb_typeof(v) = 'number' AND v \(op) to_jsonb(\(m)::numeric))", [n])
        case .string(let s):
            if op == "=" { return Frag("v = to_jsonb(\(m)::text)", [.text(s)]) }
            return Frag("(jsonb_typeof(v) = 'string' AND (v #>> '{}')\(collate) \(op) \(m)::text)", [.text(s)])
        case .bool(let b):
            guard op == "=" else { throw ParseError(.invalidQuery, "booleans only compare for equality") }
            return Frag("v = to_jsonb(\(m)::boolean)", [.text(b ? "true" : "false")])
        case .json(let text): return Frag("(jsonb_typeof(v) IN ('object','array') AND v \(op) \(m)::jsonb)", [.text(text)])
        case .null: return Frag("v = 'null'::jsonb")
        case .geoPoint(let lat, let lng):
            return Frag("(v -> 'latitude' = to_jsonb(\(m)::numeric) AND v -> 'longitude' = to_jsonb(\(m)::numeric))", [.real(lat), .real(lng)])
        }
    }

    /// The elements of an array field as rows `v` (none when the field is missing or not an
    /// array: `jsonb_array_elements` raises on a scalar, and `AND` does not order evaluation).
    static func pgElements(_ path: String) -> String {
        let e = pgJSON(path)
        return "jsonb_array_elements(CASE WHEN jsonb_typeof(\(e)) = 'array' THEN \(e) END) AS e(v)"
    }

    func pgAnyElement(_ field: FieldRef, _ cond: Frag) -> Frag {
        Frag("EXISTS(SELECT 1 FROM \(Self.pgElements(field.path)) WHERE \(Self.pgFinal(cond).sql))", cond.binds)
    }

    func pgContainedBy(_ field: FieldRef, _ any: Frag) -> Frag {
        Frag("(jsonb_typeof(\(Self.pgJSON(field.path))) = 'array' AND NOT EXISTS(SELECT 1 FROM \(Self.pgElements(field.path)) WHERE NOT coalesce(\(Self.pgFinal(any).sql),false)))",
             any.binds)
    }

    /// The `tsvector` of a text index over `fields` (their texts joined by spaces, `simple`
    /// configuration: lower-cased words, no stemming, no stop words). A text index on PostgreSQL
    /// is a GIN index on exactly this expression, so `$text` queries can use it.
    public static func pgTextVector(_ fields: [String]) -> String {
        "to_tsvector('simple'::regconfig, " + fields.map { "coalesce(\(pgText($0)), '')" }.joined(separator: " || ' ' || ") + ")"
    }

    /// `$text` on PostgreSQL: every word of the term as a prefix (`word:*`) in the index's
    /// tsvector. `words` are runs of letters and digits only, so the tsquery text has no
    /// operators but the ones written here; it is bound, never spliced. Records the filter for
    /// `order=$score` (`TextFilter.ftsTable` holds the tsvector expression here).
    func pgTextSearch(_ field: FieldRef, indexFields: [String], words: [String], caseSensitive: Bool, state: State) -> Frag {
        let vector = Self.pgTextVector(indexFields)
        let query = words.map { $0 + ":*" }.joined(separator: " & ")
        state.text = TextFilter(ftsTable: vector, match: query)
        var f = Frag("\(vector) @@ to_tsquery('simple'::regconfig, \(Self.m)::text)", [.text(query)])
        if caseSensitive {
            for w in words {
                f.sql += " AND strpos(\(Self.pgText(field.path)), \(Self.m)::text) > 0"
                f.binds.append(.text(w))
            }
        }
        return f
    }

    /// The latitude and longitude of a GeoPoint field as `float8` (NULL when missing).
    static func pgLatLng(_ path: String) -> (lat: String, lng: String) {
        ("(\(pgText(path, "latitude")))::float8", "(\(pgText(path, "longitude")))::float8")
    }

    /// Great-circle distance in radians between the stored point and a bound centre (haversine,
    /// the formula of SQLite's `geo_distance`). Binds: centre latitude twice, then centre
    /// longitude (degrees).
    static func pgDistance(_ path: String) -> String {
        let (lat, lng) = pgLatLng(path)
        return "(2 * asin(least(1.0, sqrt(power(sin(radians(\(lat) - \(m)::float8) / 2), 2) + cos(radians(\(lat))) * cos(radians(\(m)::float8)) "
            + "* power(sin(radians(\(lng) - \(m)::float8) / 2), 2)))))"
    }

    /// `$nearSphere`, `$within`, `$geoWithin` on PostgreSQL from the shared filter: a box is its
    /// own exact test; a cap is its bounding boxes AND the haversine distance. The boxes are
    /// spelled on the stored coordinates, so the field's GiST index applies.
    ///
    /// The top-level filter (not a polygon, whose bounding box is no area of its own) is recorded
    /// for nearest-first order and for the geo cell plan (`PostgresGeoCells`), with its exact
    /// test in PostgreSQL's spelling (`exactSQL`, no GiST prefilter) and its circle.
    func pgGeo(_ g: GeoFilter, circle: GeoCircle?, isPolygon: Bool, depth: Int, state: State) throws(ParseError) -> Frag {
        let (lat, lng) = Self.pgLatLng(g.field)
        var boxes: [Frag] = []
        var exactBoxes: [Frag] = []
        // `<@ box` reaches the field's GiST index (PostgresLayout.geoIndexDDL); PostgreSQL's
        // geometric operators compare with a 1e-6 tolerance, so the BETWEENs stay as the exact test.
        let point = PostgresLayout.geoPoint(g.field)
        for b in g.boxes where !(b.south <= -90 && b.north >= 90 && b.west <= -180 && b.east >= 180) {
            let between = Frag("\(lat) BETWEEN \(Self.m)::float8 AND \(Self.m)::float8 AND \(lng) BETWEEN \(Self.m)::float8 AND \(Self.m)::float8",
                               b.binds)
            exactBoxes.append(between)
            boxes.append(Frag("(\(point) <@ box(point(\(Self.m)::float8, \(Self.m)::float8), point(\(Self.m)::float8, \(Self.m)::float8)) AND \(between.sql))",
                              [.real(b.west), .real(b.south), .real(b.east), .real(b.north)] + between.binds))
        }
        var parts: [Frag] = [boxes.isEmpty ? Frag("\(lat) IS NOT NULL") : Self.pgOr(boxes)]
        var exact = exactBoxes.isEmpty ? Frag("\(lat) IS NOT NULL") : Self.pgOr(exactBoxes)
        if let c = circle {
            let distance = Frag("\(Self.pgDistance(g.field)) <= \(Self.m)::float8",
                                [.real(c.latitude), .real(c.latitude), .real(c.longitude), .real(c.radians)])
            parts.append(distance)
            exact = distance
        }
        if isPolygon, let coords = g.exactBinds.first {
            parts.append(Self.pgPolygonContains(poly: "\(Self.m)::jsonb", lat: lat, lng: lng, binds: [coords]))
        }
        if depth == 0, state.geo == nil, !isPolygon {
            var recorded = g
            recorded.exactSQL = exact.sql
            recorded.exactBinds = exact.binds
            recorded.circle = circle
            state.geo = recorded
        }
        return Self.pgAnd(parts)
    }

    /// The inner query of `$inQuery`/`$select` on PostgreSQL: the caller's class permission
    /// (`find`), ACL and pointer permissions apply to the inner class, as on SQLite.
    func pgInnerQuery(_ cls: String, _ whereValue: JSONValue, ctx: SubqueryContext, depth: Int, state: State,
                      column: (QuerySchema) throws(ParseError) -> String) throws(ParseError) -> Frag? {
        let identity = ctx.identity
        if !identity.isMaster && ClassPermissions.masterOnlyClasses.contains(cls) {
            throw ParseError(.operationForbidden, "unauthorized: master key is required")
        }
        guard let lookup = ctx.classSchema, let inner = try lookup(cls) else { return nil }
        guard identity.isMaster || ClassPermissions.allows(inner.clp, .find, identity) else {
            throw ParseError(.operationForbidden, "Permission denied for action find on class \(cls).")
        }
        let sub = QueryCompiler(schema: inner.querySchema, subqueries: ctx, dialect: .postgres)
        let innerState = State()
        innerState.constraints = state.constraints
        var conds = [try sub.compileObject(whereValue.objectValue ?? [:], depth: depth + 1, state: innerState)]
        state.constraints = innerState.constraints
        if let acl = PostgresQuery.aclFilter(identity) { conds.append(acl) }
        if case .pointerFields(let fields) = ClassPermissions.access(inner.clp, .find, identity), let uid = identity.userId {
            conds.append(PostgresQuery.pointerCondition(fields, userId: uid))
        }
        let w = Self.pgFinal(Self.pgAnd(conds))
        return Frag("SELECT \(try column(inner.querySchema)) FROM \(Naming.table(cls)) t WHERE \(w.sql)", w.binds)
    }

    /// `$inQuery` on PostgreSQL: a Pointer (or an array element) into `cls` whose objectId the
    /// inner query finds.
    func pgInQuery(_ field: FieldRef, _ cls: String, _ sub: Frag) -> Frag {
        if isArray(field) {
            return anyElement(field, Frag("(CASE WHEN jsonb_typeof(v) = 'object' THEN (v ->> 'className') = \(Self.m)::text AND (v ->> 'objectId') IN (\(sub.sql)) ELSE FALSE END)",
                                          [.text(cls)] + sub.binds))
        }
        return Frag("(\(Self.pgText(field.path, "className")) = \(Self.m)::text AND \(Self.pgText(field.path, "objectId")) IN (\(sub.sql)))",
                    [.text(cls)] + sub.binds)
    }

    /// A field as a jsonb value in its canonical form for `$select` (a Pointer as its objectId,
    /// a Date as its ISO text, `createdAt`/`updatedAt` as milliseconds), so both sides compare
    /// by jsonb equality whatever their column types.
    static func pgComparable(_ ref: FieldRef, inner: Bool) -> String {
        let q = inner ? "t." : ""
        switch ref.kind {
        case .objectId: return "to_jsonb(\(q)objectId)"
        case .time: return "to_jsonb(\(q)\(ref.path))"
        case .json:
            switch ref.declared {
            case .pointer?: return "to_jsonb(\(pgText(ref.path, "objectId")))"
            case .date?: return "to_jsonb(\(pgText(ref.path, "iso")))"
            default: return pgJSON(ref.path)
            }
        }
    }

    /// Whether the point (`lat`, `lng`: SQL expressions) lies inside the polygon `poly` (a jsonb
    /// `[[lat,lng],…]`) or on its edge: `Polygon.contains` (even-odd rule) in SQL, with the same
    /// arithmetic, so both backends agree. False when either side is missing. `binds` are those
    /// of `poly`, `lat`, `lng` in that order; each expression is written once.
    static func pgPolygonContains(poly: String, lat: String, lng: String, binds: [SQLiteValue]) -> Frag {
        let prev = "lag(q.p, 1, a.poly -> -1) OVER (ORDER BY q.n)"
        return Frag("(SELECT coalesce(bool_or(e.edge) OR count(*) FILTER (WHERE e.crosses) % 2 = 1, false) "
            + "FROM (SELECT \(poly) AS poly, \(lat) AS plat, \(lng) AS plng) a, LATERAL (SELECT "
            + "abs((s.xj - s.xi) * (a.plat - s.yi) - (s.yj - s.yi) * (a.plng - s.xi)) < 1e-12 "
            + "AND a.plng BETWEEN least(s.xi, s.xj) AND greatest(s.xi, s.xj) AND a.plat BETWEEN least(s.yi, s.yj) AND greatest(s.yi, s.yj) AS edge, "
            + "CASE WHEN (s.yi > a.plat) <> (s.yj > a.plat) THEN a.plng < (s.xj - s.xi) * (a.plat - s.yi) / (s.yj - s.yi) + s.xi ELSE false END AS crosses "
            + "FROM (SELECT (q.p ->> 0)::float8 AS yi, (q.p ->> 1)::float8 AS xi, (\(prev) ->> 0)::float8 AS yj, (\(prev) ->> 1)::float8 AS xj "
            + "FROM jsonb_array_elements(CASE WHEN jsonb_typeof(a.poly) = 'array' THEN a.poly END) WITH ORDINALITY AS q(p, n)) s) e)",
            binds)
    }

    /// `$regex` with PostgreSQL's `~`/`~*` (ARE: a superset of the POSIX ERE the SQLite store
    /// uses; the shared subset is documented in docs/DECISIONS.md).
    func pgRegex(_ field: FieldRef, _ pattern: String, icase: Bool) throws(ParseError) -> Frag {
        let op = icase ? "~*" : "~"
        if isArray(field) {
            return anyElement(field, Frag("(jsonb_typeof(v) = 'string' AND (v #>> '{}') \(op) \(Self.m)::text)", [.text(pattern)]))
        }
        switch field.kind {
        case .objectId: return Frag("objectId \(op) \(Self.m)::text", [.text(pattern)])
        case .time: throw ParseError(.invalidQuery, "$regex needs a string field, not \(field.path)")
        case .json:
            switch field.declared {
            case .string?, .object?, .array?, nil:
                return Frag("(jsonb_typeof(\(Self.pgJSON(field.path))) = 'string' AND \(Self.pgText(field.path)) \(op) \(Self.m)::text)",
                            [.text(pattern)])
            default: throw ParseError(.invalidQuery, "$regex needs a string field; \(field.path) is a \(field.declared!.rawValue)")
            }
        }
    }
}
