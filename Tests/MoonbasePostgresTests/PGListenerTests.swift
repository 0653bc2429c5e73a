import MoonbaseCore
import MoonbasePostgres
import Testing

extension PostgresSuite {
    @Suite struct PGListenerTests {
        @Test func deliversNotificationsAndReconnectsAfterTermination() throws {
            let got = Locked<[String]>([])
            let reconnected = Locked(0)
            let listener = try PGListener(url: PGTestCluster.url, channels: ["mb_test_a", "mb_test_b"],
                                          onNotify: { channel, payload in got.update { $0.append("\(channel):\(payload)") } },
                                          onReconnect: { reconnected.update { $0 += 1 } })
            try listener.start()
            defer { listener.stop() }
            let pool = try PGPool(url: PGTestCluster.url)
            defer { pool.close() }

            try pool.withConnection { (c) throws(ParseError) in
                try c.notify(channel: "mb_test_a", payload: "seq 1")
                try c.notify(channel: "mb_test_other", payload: "not ours")
                try c.notify(channel: "mb_test_b", payload: #"{"seq": 2, "quote": "'\""}"#)
            }
            #expect(eventually { got.get.count >= 2 })
            #expect(got.get == ["mb_test_a:seq 1", #"mb_test_b:{"seq": 2, "quote": "'\""}"#])

            // Notifications are sent at commit, and never for a rolled-back transaction.
            _ = try? pool.transaction { (tx) throws(ParseError) in
                try tx.connection.notify(channel: "mb_test_a", payload: "rolled back")
                throw ParseError(.validationError, "no")
            }
            try pool.transaction { (tx) throws(ParseError) in
                try tx.connection.notify(channel: "mb_test_a", payload: "seq 3")
                #expect(!got.get.contains("mb_test_a:seq 3"))
            }
            #expect(eventually { got.get.count >= 3 })
            #expect(got.get.last == "mb_test_a:seq 3")

            // Kill the listening session: the listener reconnects, says so, and listens again.
            let pid = listener.backendPID
            #expect(pid > 0)
            try pool.withConnection { (c) throws(ParseError) in
                #expect(try c.execute("SELECT pg_terminate_backend($1::int)", [.integer(Int64(pid))]).scalar == .bool(true))
            }
            #expect(eventually(seconds: 30) { reconnected.get == 1 && listener.backendPID != 0 })
            #expect(listener.backendPID != pid)
            #expect(listener.reconnects == 1)
            try pool.withConnection { (c) throws(ParseError) in try c.notify(channel: "mb_test_b", payload: "after reconnect") }
            #expect(eventually { got.get.last == "mb_test_b:after reconnect" })
            #expect(!got.get.contains("mb_test_a:rolled back"))
        }

        @Test func stopEndsTheListeningSession() throws {
            let listener = try PGListener(url: PGTestCluster.url, channels: ["mb_test_stop"], onNotify: { _, _ in })
            try listener.start()
            let pid = Int64(listener.backendPID)
            let admin = try PGConnection(url: PGTestCluster.url)
            #expect(try admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int", [.integer(pid)]).scalar == .integer(1))
            listener.stop()
            #expect(listener.backendPID == 0)
            #expect(eventually {
                (try? admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = $1::int", [.integer(pid)]).scalar) == .integer(0)
            })
        }

        @Test func channelNamesMustBePlainIdentifiers() {
            for bad in ["", "1abc", "a-b", "a\"; DROP TABLE x; --", String(repeating: "a", count: 64), "é"] {
                let e = #expect(throws: ParseError.self) { try PGListener(url: "postgres://unused", channels: [bad], onNotify: { _, _ in }) }
                #expect(e?.code == .invalidChannelName)
            }
            #expect(PGListener.isValidChannel("_mb_changes_2"))
        }
    }
}
