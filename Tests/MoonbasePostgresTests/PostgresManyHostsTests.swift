import Foundation
import MoonbaseCore
import MoonbaseJSON
import MoonbasePostgres
import MoonbaseStore
import Synchronization
import Testing

extension PostgresSuite {
    /// Two stores on one database stand for two hosts: what one writes, the other's listener
    /// and caches learn through the feed and notifications.
    @Suite struct PostgresManyHostsTests {
        /// B's listener gets A's create, updates and delete with the objects before and after,
        /// also when several updates of one object land before B reads (the states in between
        /// come from the feed's `prev`, not from the object's current row).
        @Test func anotherHostsWritesArriveWithTheirObjects() throws {
            let (a, url) = try freshPostgresStore()
            defer { a.close() }
            let b = try PostgresStore(url: url)
            defer { b.close() }
            let listener = CollectingListener(observing: ["Obs"])
            b.setChangeListener(listener)
            let o = try a.insert("Obs", fields: ["v": 1], acl: nil, identity: .master)
            try a.transaction { () throws(ParseError) in
                for v in 2...4 { _ = try a.update("Obs", objectId: o.objectId, changes: ["v": .int(Int64(v))], identity: .master) }
                _ = try a.insert("Other", fields: ["x": 1], acl: nil, identity: .master)
            }
            try a.delete("Obs", objectId: o.objectId, identity: .master)
            #expect(eventually { listener.events.count == 6 })
            let e = listener.events
            guard e.count == 6 else { Issue.record("events: \(e.map(\.seq))"); return }
            #expect(e.map(\.seq) == [1, 2, 3, 4, 5, 6])
            #expect(e[0].op == .save && e[0].original == nil && e[0].current?["v"] == .int(1) && e[0].current?["objectId"] == .string(o.objectId))
            for i in 1...3 {
                #expect(e[i].op == .save && e[i].original?["v"] == .int(Int64(i)) && e[i].current?["v"] == .int(Int64(i + 1)))
            }
            #expect(e[4].isMark && e[4].className == "Other")
            #expect(e[5].op == .delete && e[5].original?["v"] == .int(4) && e[5].current == nil)
        }

        /// Both hosts write; each listener hears every commit once, in seq order: its own from
        /// memory, the other's from the feed.
        @Test func bothHostsHearEveryCommitOnceInOrder() throws {
            let (a, url) = try freshPostgresStore()
            defer { a.close() }
            let b = try PostgresStore(url: url)
            defer { b.close() }
            let la = CollectingListener(observing: ["Mix"]), lb = CollectingListener(observing: ["Mix"])
            a.setChangeListener(la)
            b.setChangeListener(lb)
            let writers = [a, b].map { store in
                onThread {
                    for i in 0..<40 { _ = try? store.insert("Mix", fields: ["i": .int(Int64(i))], acl: nil, identity: .master) }
                }
            }
            for w in writers { w.wait() }
            #expect(eventually { la.events.count == 80 && lb.events.count == 80 })
            for l in [la, lb] {
                #expect(l.events.map(\.seq) == Array(1...80))
                #expect(l.events.allSatisfy { $0.current?["i"] != nil })
            }
        }

        /// The head announcement is coalesced: however fast the commits, one NOTIFY per interval
        /// at most (plus the first and the last), and the last commit is announced.
        @Test func announcementsAreCoalesced() throws {
            let (a, url) = try freshPostgresStore()
            defer { a.close() }
            let seen = Locked<[String]>([])
            let probe = try PGListener(url: url, channels: ["mb_changes"], onNotify: { _, p in seen.update { $0.append(p) } })
            try probe.start()
            defer { probe.stop() }
            let started = Date()
            let writers = (0..<4).map { _ in
                onThread { for _ in 0..<50 { _ = try? a.insert("Burst", fields: ["x": 1], acl: nil, identity: .master) } }
            }
            for w in writers { w.wait() }
            let elapsedMillis = Date().timeIntervalSince(started) * 1000
            #expect(eventually { seen.get.last == "200" })
            let sent = a.fanoutAnnouncements
            #expect(sent >= 1)
            // The interval is measured in whole milliseconds: allow one less per interval.
            let bound = elapsedMillis / Double(PostgresStore.announceIntervalMillis - 1) + 3
            #expect(Double(sent) <= bound, "\(sent) announcements in \(elapsedMillis) ms")
            #expect(sent < 200)
        }

        /// B's listening connection is ended by the server: B reconnects and reads what A wrote
        /// meanwhile from the feed.
        @Test func aHostCatchesUpAfterLosingItsListeningConnection() throws {
            let (a, url) = try freshPostgresStore()
            defer { a.close() }
            let b = try PostgresStore(url: url)
            defer { b.close() }
            let listener = CollectingListener(observing: ["Obs"])
            b.setChangeListener(listener)
            _ = try a.insert("Obs", fields: ["v": 1], acl: nil, identity: .master)
            #expect(eventually { listener.events.count == 1 })
            let pid = b.listenerBackendPID
            #expect(pid != 0)
            try a.pool.withConnection { (c) throws(ParseError) in
                _ = try c.execute("SELECT pg_terminate_backend($1::int)", [.integer(Int64(pid))])
            }
            _ = try a.insert("Obs", fields: ["v": 2], acl: nil, identity: .master)
            #expect(eventually { listener.events.count == 2 })
            #expect(listener.events.map { $0.current?["v"] } == [.int(1), .int(2)])
            #expect(eventually { b.listenerBackendPID != 0 && b.listenerBackendPID != pid })
        }

        /// Config and code bundle changes on A reach B's observers; the bundle reads back.
        @Test func configAndCodeChangesAreAnnounced() throws {
            let (a, url) = try freshPostgresStore()
            defer { a.close() }
            let b = try PostgresStore(url: url)
            defer { b.close() }
            let configTold = Atomic<Int>(0), codeTold = Atomic<Int>(0)
            b.observeConfigChanges { configTold.add(1, ordering: .relaxed) }
            b.observeCodeBundles { codeTold.add(1, ordering: .relaxed) }
            #expect(eventually { b.listenerBackendPID != 0 })
            try a.updateConfig([.set("greeting", "hi")])
            #expect(eventually { configTold.load(ordering: .relaxed) >= 1 })
            #expect(try b.configParameters().map(\.name) == ["greeting"])
            #expect(try b.codeBundle() == nil)
            try a.updateCodeBundle(base: [(file: "main.lua", text: "-- one")]) { (files) throws(ParseError) in
                files + [(file: "b.lua", text: "-- two")]
            }
            #expect(eventually { codeTold.load(ordering: .relaxed) >= 1 })
            let bundle = try b.codeBundle()
            #expect(bundle?.version == 1)
            #expect(bundle?.files.map(\.file) == ["b.lua", "main.lua"])
            // A refused change stores nothing.
            #expect(errorCode { () throws(ParseError) in
                try b.updateCodeBundle(base: []) { (_) throws(ParseError) in throw ParseError(.scriptFailed, "no") }
            } == 141)
            #expect(try a.codeBundle()?.version == 1)
        }
    }
}
