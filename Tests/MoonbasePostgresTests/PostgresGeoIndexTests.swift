import Foundation
import MoonbaseCore
import MoonbaseJSON
import MoonbasePostgres
@testable import MoonbaseStore
import Testing

extension PostgresSuite {
    /// The GiST index of a GeoPoint field on PostgreSQL: made when the field first appears (and
    /// by the migration for classes made before), used by box-shaped geo queries (the planner
    /// matches the query's point expression to the index's), and exact at the box's edges.
    @Suite struct PostgresGeoIndexTests {
        static func gp(_ lat: Double, _ lng: Double) -> JSONValue {
            ["__type": "GeoPoint", "latitude": .double(lat), "longitude": .double(lng)]
        }

        static func indexExists(_ store: PostgresStore, _ name: String) throws -> Bool {
            try store.pool.withConnection { (c) throws(ParseError) -> Bool in
                try c.execute("SELECT CASE WHEN to_regclass($1) IS NULL THEN 0 ELSE 1 END::int8", [.text("\"\(name)\"")]).scalar?.int64 == 1
            }
        }

        /// The plan PostgreSQL picks for the find's filter with sequential scans discouraged: it
        /// uses the index only if the query spells the indexed expression.
        static func plan(_ store: PostgresStore, _ className: String, _ whereJSON: String) throws -> String {
            try store.pool.withConnection { (c) throws(ParseError) -> String in
                guard let schema = try store.lookupSchema(className, on: c) else { throw ParseError(.objectNotFound, "no class \(className)") }
                let (w, _) = try PostgresQuery.filter(schema, try JSON.parse(whereJSON), .find, .master, store: store, on: c)
                try c.executeScript("SET enable_seqscan = off")
                defer { try? c.executeScript("RESET enable_seqscan") }
                let r = try PostgresQuery.run("EXPLAIN SELECT t.objectId FROM \(Naming.table(className)) t WHERE \(w.sql)", w.binds, on: c)
                return r.rows.compactMap { $0.values.first?.string }.joined(separator: "\n")
            }
        }

        @Test func aGeoPointFieldGetsAnIndexThatBoxQueriesUseAndEdgesStayExact() throws {
            let (store, _) = try freshPostgresStore()
            defer { store.pool.close() }
            // A grid of points around New York, plus two just at and just past the box's edge.
            for i in 0..<20 {
                for j in 0..<20 {
                    _ = try store.insert("Place", fields: ["loc": Self.gp(40 + Double(i) * 0.01, -74 + Double(j) * 0.01), "n": .string(String(i * 20 + j))],
                                         acl: nil, identity: .master)
                }
            }
            _ = try store.insert("Place", fields: ["loc": Self.gp(40.05, -73.9), "n": "edge"], acl: nil, identity: .master)
            _ = try store.insert("Place", fields: ["loc": Self.gp(40.05, -73.8999999), "n": "past"], acl: nil, identity: .master)
            _ = try store.insert("Place", fields: ["n": "nowhere"], acl: nil, identity: .master)
            #expect(try Self.indexExists(store, "Place__geo__loc"))

            let box = #"{"loc":{"$within":{"$box":[{"__type":"GeoPoint","latitude":40.045,"longitude":-73.915},{"__type":"GeoPoint","latitude":40.065,"longitude":-73.9}]}}}"#
            #expect(try Self.plan(store, "Place", box).contains("Place__geo__loc"))
            let near = #"{"loc":{"$nearSphere":{"__type":"GeoPoint","latitude":40.1,"longitude":-73.9},"$maxDistanceInKilometers":2}}"#
            #expect(try Self.plan(store, "Place", near).contains("Place__geo__loc"))

            let found = try store.find(FindQuery(className: "Place", where: try JSON.parse(box), limit: 100), identity: .master,
                                       afterFind: nil, afterFindApplies: nil).objects()
            let names = Set(found.map { o in o["n"]?.stringValue ?? "?" })
            // Rows 5 and 6 (latitude 40.05, 40.06) × columns 9 and 10 (longitude -73.91, -73.90),
            // and the point on the edge; not the one 1e-7° past it, which the index's 1e-6
            // tolerance lets through to the exact test.
            #expect(names == ["109", "110", "129", "130", "edge"], "\(names)")
        }

        @Test func theMigrationIndexesGeoFieldsOfClassesMadeBefore() throws {
            let (store, _) = try freshPostgresStore()
            defer { store.pool.close() }
            _ = try store.insert("Spot", fields: ["where": Self.gp(1, 2)], acl: nil, identity: .master)
            #expect(try Self.indexExists(store, "Spot__geo__where"))
            // As a database of the release before geo indexes: no index, migration 3 not applied.
            try store.pool.withConnection { (c) throws(ParseError) in
                try c.executeScript(#"DROP INDEX "Spot__geo__where"; DELETE FROM _mb_migrations WHERE version >= 3"#)
            }
            #expect(try !Self.indexExists(store, "Spot__geo__where"))
            try PostgresMigrator.migrate(store.pool)
            #expect(try Self.indexExists(store, "Spot__geo__where"))
            let near = #"{"where":{"$nearSphere":{"__type":"GeoPoint","latitude":1,"longitude":2},"$maxDistanceInKilometers":5}}"#
            #expect(try Self.plan(store, "Spot", near).contains("Spot__geo__where"))
        }
    }
}
