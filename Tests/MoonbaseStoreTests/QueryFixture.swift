import Foundation
import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite
@testable import MoonbaseStore

/// A temporary database with class tables laid out by the store's own DDL (`Naming`), rows
/// inserted directly, and a fixed schema source: exercises the query side on real SQLite.
final class QueryFixture: QuerySchemaSource {
    let dir: String
    let conn: Connection
    var schemas: [String: QuerySchema] = [:]
    private var clock: Int64 = 1_700_000_000_000

    init() throws {
        dir = NSTemporaryDirectory() + "mb-query-\(UUID().uuidString)"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        conn = try Connection(path: dir + "/db.sqlite")
    }

    deinit {
        conn.close()
        try? FileManager.default.removeItem(atPath: dir)
    }

    func querySchema(_ className: String, on conn: Connection) throws(ParseError) -> QuerySchema? { schemas[className] }

    var executor: QueryExecutor { QueryExecutor(schemas: self) }

    /// Creates the class table, R*Trees for GeoPoint fields and FTS5 tables for text indexes.
    func createClass(_ name: String, fields: [String: FieldInfo], textIndexes: [String: [String]] = [:]) throws {
        schemas[name] = QuerySchema(className: name, fields: fields, textIndexes: textIndexes)
        try conn.execute(Naming.classTableDDL(name))
        for (f, info) in fields.sorted(by: { $0.key < $1.key }) where info.type == .geoPoint {
            try conn.execute(Naming.geoDDL(name, f))
        }
        for (idx, fs) in textIndexes { try conn.execute(Naming.ftsDDL(name, idx, fields: fs)) }
    }

    /// Inserts an object; `readers` nil = public read. Returns its objectId.
    @discardableResult
    func insert(_ className: String, _ data: JSONValue, id: String? = nil, createdAt: Int64? = nil,
                acl: JSONValue? = nil, readers: [String]? = nil) throws -> String {
        clock += 1000
        let objectId = id ?? String(format: "o%09d", clock / 1000 % 1_000_000_000)
        let created = createdAt ?? clock
        let rperm = readers.map { "|" + $0.joined(separator: "|") + "|" }
        try conn.run("INSERT INTO \(Naming.table(className))(objectId, createdAt, updatedAt, ACL, rperm, wperm, data) VALUES (?,?,?,?,?,NULL,?)",
                     [.text(objectId), .integer(created), .integer(created), acl.map { .text(JSON.encodeString($0)) } ?? .null,
                      rperm.map { .text($0) } ?? .null, .text(JSON.encodeString(data))])
        try insertGeoRows(className, data, rid: conn.lastInsertRowid)
        return objectId
    }

    /// The R*Tree rows of an object inserted directly, as `WriteTransaction.insert` writes them.
    func insertGeoRows(_ className: String, _ data: JSONValue, rid: Int64) throws {
        for (f, info) in schemas[className]?.fields ?? [:] where info.type == .geoPoint {
            guard let p = data[f]?.objectValue, let lat = p["latitude"]?.doubleValue, let lng = p["longitude"]?.doubleValue else { continue }
            try conn.run(Naming.geoInsertSQL(className, f), [.integer(rid), .real(lat), .real(lng)])
        }
    }

    /// Runs a find and returns the result objects.
    func find(_ className: String, _ whereValue: JSONValue?, order: String? = nil, limit: Int? = nil, skip: Int? = nil,
              keys: String? = nil, include: String? = nil, count: Bool = false, identity: Identity = .master,
              afterFind: AfterFindHook? = nil) throws -> (objects: [JSONObject], count: Int?) {
        var opts = JSONObject()
        if let whereValue { opts["where"] = whereValue }
        if let order { opts["order"] = .string(order) }
        if let limit { opts["limit"] = .int(Int64(limit)) }
        if let skip { opts["skip"] = .int(Int64(skip)) }
        if let keys { opts["keys"] = .string(keys) }
        if let include { opts["include"] = .string(include) }
        if count { opts["count"] = true }
        let q = try FindQuery(className: className, options: opts, maxLimit: FindQuery.luaMaxLimit)
        let r = try executor.find(q, identity: identity, on: conn, afterFind: afterFind)
        return (try r.objects(), r.count)
    }

    /// objectIds of a find, in result order.
    func ids(_ className: String, _ whereValue: JSONValue?, order: String? = nil, limit: Int? = nil,
             identity: Identity = .master) throws -> [String] {
        try find(className, whereValue, order: order, limit: limit, identity: identity).objects.map { $0["objectId"]?.stringValue ?? "?" }
    }
}

func json(_ text: String) -> JSONValue {
    // Test literals are valid JSON; a typo should fail loudly.
    try! JSON.parse(text)
}

func geoPoint(_ lat: Double, _ lng: Double) -> JSONValue {
    ["__type": "GeoPoint", "latitude": .double(lat), "longitude": .double(lng)]
}
