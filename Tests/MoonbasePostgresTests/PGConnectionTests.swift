import MoonbaseCore
import MoonbasePostgres
import Testing

extension PostgresSuite {
    @Suite struct PGConnectionTests {
        @Test func connectsAndReportsTheServer() throws {
            let c = try PGConnection(url: PGTestCluster.url)
            let v = try c.execute("SELECT current_setting('server_version_num')::int8").scalar?.int64 ?? 0
            #expect(v >= 150000 && v < 160000)
            #expect(c.isUsable && c.isIdle && c.backendPID > 0)
            c.close()
            #expect(!c.isUsable)
            #expect(throws: ParseError.self) { try c.execute("SELECT 1") }
        }

        @Test func anUnreachableServerIsAClearError() throws {
            // A port nothing listens on (the cluster's own port + 1 is not ours to assume; use 1).
            let e = #expect(throws: ParseError.self) { try PGConnection(url: "postgres://postgres@127.0.0.1:1/postgres") }
            #expect(e?.code == .internalError)
            #expect(e?.message == PGError.connectionLostMessage)
            #expect(e?.httpStatus == 503)
        }

        @Test func hostileStringsTravelAsParameters() throws {
            let c = try PGConnection(url: PGTestCluster.url)
            let t = uniqueTable()
            try c.execute("CREATE TABLE \(t)(id bigint PRIMARY KEY, s text)")
            let hostile = [
                "'; DROP TABLE \(t); --", "\" OR 1=1 --", "$1", "$2::text", "\\", "\\'", "E'\\x00'", "' || pg_sleep(5) || '",
                "🚀 ünïcødé 中文", String(repeating: "x", count: 100_000), "", "NULL", "\n\r\t", "$$ dollar $$",
            ]
            for (i, s) in hostile.enumerated() {
                let r = try c.execute("INSERT INTO \(t)(id, s) VALUES ($1, $2)", [.integer(Int64(i)), .text(s)])
                #expect(r.affectedRows == 1)
            }
            for (i, s) in hostile.enumerated() {
                let back = try c.execute("SELECT s FROM \(t) WHERE id = $1", [.integer(Int64(i))]).scalar
                #expect(back == .text(s))
                let found = try c.execute("SELECT id FROM \(t) WHERE s = $1", [.text(s)]).scalar
                #expect(found == .integer(Int64(i)))
            }
            #expect(try c.execute("SELECT count(*) FROM \(t)").scalar == .integer(Int64(hostile.count)))
        }

        @Test func aNulCharacterIsRefusedNotTruncated() throws {
            let c = try PGConnection(url: PGTestCluster.url)
            let e = #expect(throws: ParseError.self) { try c.execute("SELECT $1::text", [.text("a\u{0}b")]) }
            #expect(e?.code == .invalidJSON)
            #expect(c.isIdle)
        }

        @Test func rowsAreTypedByColumn() throws {
            let c = try PGConnection(url: PGTestCluster.url)
            let r = try c.execute("""
                SELECT 42::int8 AS i, 7::int4 AS i4, 2.5::float8 AS f, true AS b, false AS nb, 'x'::text AS s,
                       NULL::text AS n, '{"a": [1, 2]}'::jsonb AS j, 'NaN'::float8 AS nan, '-Infinity'::float8 AS inf
                """)
            #expect(r.columns == ["i", "i4", "f", "b", "nb", "s", "n", "j", "nan", "inf"])
            let row = try #require(r.rows.first)
            #expect(row["i"] == .integer(42))
            #expect(row["i4"] == .integer(7))
            #expect(row["f"] == .real(2.5))
            #expect(row["b"] == .bool(true))
            #expect(row["nb"] == .bool(false))
            #expect(row["s"] == .text("x"))
            #expect(row["n"] == .null)
            #expect(row["j"].jsonString == #"{"a": [1, 2]}"#)
            if case .real(let d) = row["nan"] { #expect(d.isNaN) } else { Issue.record("NaN not a real: \(row["nan"])") }
            #expect(row["inf"] == .real(-.infinity))
            #expect(row["missing"] == .null)
        }

        @Test func typedParametersRoundTrip() throws {
            let c = try PGConnection(url: PGTestCluster.url)
            let values: [PGValue] = [.integer(Int64.min), .integer(Int64.max), .real(0.1), .real(-1e-300), .real(123456789.125),
                                     .bool(true), .bool(false), .null, .text("t")]
            for v in values {
                let back = try c.execute("SELECT $1", [v]).scalar
                #expect(back == v, "\(v)")
            }
        }

        @Test func jsonbRoundTrip() throws {
            let c = try PGConnection(url: PGTestCluster.url)
            let t = uniqueTable()
            try c.execute("CREATE TABLE \(t)(id text PRIMARY KEY, data jsonb)")
            let doc = #"{"name": "Zoë \"quoted\" \\ 🚀", "n": 1.5, "big": 9007199254740993, "nested": {"a": [true, null, {"b": "c"}]}}"#
            try c.execute("INSERT INTO \(t) VALUES ($1, $2)", [.text("a"), .json(Array(doc.utf8))])
            // jsonb stores a normalised document (key order, spacing): equal as JSON, numbers exact.
            let back = try #require(try c.execute("SELECT data FROM \(t) WHERE id = $1", [.text("a")]).scalar?.jsonString)
            #expect(back.contains("9007199254740993"))
            #expect(back.contains(#""name": "Zoë \"quoted\" \\ 🚀""#))
            #expect(try c.execute("SELECT data = $1 FROM \(t)", [.json(Array(back.utf8))]).scalar == .bool(true))
            #expect(try c.execute("SELECT data = $1 FROM \(t)", [.json(Array(doc.utf8))]).scalar == .bool(true))
            // Operators reach inside the document with the path as a parameter.
            let name = try c.execute("SELECT data->>$1 FROM \(t)", [.text("name")]).scalar
            #expect(name == .text("Zoë \"quoted\" \\ 🚀"))
            let deep = try c.execute("SELECT data #>> $1::text[] FROM \(t)", [.text("{nested,a,2,b}")]).scalar
            #expect(deep == .text("c"))
            let hit = try c.execute("SELECT count(*) FROM \(t) WHERE data @> $1", [.json(Array(#"{"n": 1.5}"#.utf8))]).scalar
            #expect(hit == .integer(1))
            // Not JSON at all: an error with PostgreSQL's message, the connection still usable.
            let e = #expect(throws: ParseError.self) { try c.execute("SELECT $1::jsonb", [.text("{nope")]) }
            #expect(e?.code == .internalError)
            #expect(e?.message.contains("json") == true)
            #expect(c.isUsable)
        }

        @Test func affectedRowCounts() throws {
            let c = try PGConnection(url: PGTestCluster.url)
            let t = uniqueTable()
            try c.execute("CREATE TABLE \(t)(id bigint PRIMARY KEY, n bigint)")
            #expect(try c.execute("INSERT INTO \(t) SELECT g, 0 FROM generate_series(1, 10) g").affectedRows == 10)
            #expect(try c.execute("UPDATE \(t) SET n = 1 WHERE id > $1", [.integer(6)]).affectedRows == 4)
            #expect(try c.execute("DELETE FROM \(t) WHERE n = 0").affectedRows == 6)
            #expect(try c.execute("SELECT * FROM \(t)").affectedRows == 4)
        }

        @Test func sqlStatesMapToParseErrors() throws {
            let c = try PGConnection(url: PGTestCluster.url)
            let t = uniqueTable()
            try c.executeScript("CREATE TABLE \(t)(id text PRIMARY KEY, email text UNIQUE); INSERT INTO \(t) VALUES ('a', 'x@y')")
            let dup = #expect(throws: ParseError.self) {
                try c.execute("INSERT INTO \(t) VALUES ($1, $2)", [.text("b"), .text("x@y")])
            }
            #expect(dup?.code == .duplicateValue)
            #expect(dup?.underlying?.contains("23505") == true)
            let syntax = #expect(throws: ParseError.self) { try c.execute("SELEC 1") }
            #expect(syntax?.code == .internalError)
            #expect(syntax?.message.contains("syntax error") == true)
            #expect(syntax?.underlying?.contains("42601") == true)
            #expect(c.isIdle)
        }

        @Test func aTerminatedConnectionReportsConnectionLoss() throws {
            let victim = try PGConnection(url: PGTestCluster.url)
            let admin = try PGConnection(url: PGTestCluster.url)
            let pid = PGValue.integer(Int64(victim.backendPID))
            try admin.execute("SELECT pg_terminate_backend($1::int)", [pid])
            #expect(eventually {
                (try? admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int", [pid]).scalar) == .integer(0)
            })
            let e = #expect(throws: ParseError.self) { try victim.execute("SELECT 1") }
            #expect(e?.message == PGError.connectionLostMessage)
            #expect(e?.httpStatus == 503)
            #expect(!victim.isUsable)
        }
    }
}
