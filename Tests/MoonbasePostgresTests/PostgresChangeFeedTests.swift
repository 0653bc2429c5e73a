import Foundation
import MoonbaseCore
import MoonbaseJSON
import MoonbasePostgres
import MoonbaseStore
import Testing

extension PostgresSuite {
    @Suite struct PostgresChangeFeedTests {
        /// Writers on two hosts commit transactions that stay open a little after their first
        /// write; a reader polling the feed must never see a seq appear below one it has already
        /// seen (which numbering at write time instead of at commit would produce), and this
        /// host's listener hears every host's commits in seq order with their objects.
        @Test func seqsBecomeVisibleOnlyInCommitOrder() throws {
            let (a, url) = try freshPostgresStore()
            defer { a.close() }
            let b = try PostgresStore(url: url)
            defer { b.close() }
            _ = try a.insert("Ev", fields: ["w": 0, "i": 0], acl: nil, identity: .master)
            let listener = CollectingListener(observing: ["Ev"])
            a.setChangeListener(listener)
            let failures = Locked<[String]>([])
            let done = Locked(false)
            let writers = (0..<4).map { w in
                onThread {
                    let store = w % 2 == 0 ? a : b
                    for i in 0..<15 {
                        do throws(ParseError) {
                            try store.transaction { () throws(ParseError) in
                                _ = try store.insert("Ev", fields: ["w": .int(Int64(w)), "i": .int(Int64(i))], acl: nil, identity: .master)
                                usleep(UInt32.random(in: 0...3000))
                                _ = try store.insert("Ev", fields: ["w": .int(Int64(w)), "i": .int(Int64(i))], acl: nil, identity: .master)
                            }
                        } catch {
                            failures.update { $0.append("writer: \(error.message)") }
                        }
                    }
                }
            }
            let reader = onThread {
                var seen = Set<Int64>()
                var highest: Int64 = 0
                while !done.get {
                    do throws(ParseError) {
                        let rows = try a.changeFeed("Ev", after: 0, through: .max, limit: 100_000)
                        // Read after the rows: it covers every seq they showed.
                        let head = try a.changeFeedHead()
                        for r in rows where !seen.contains(r.seq) {
                            if r.seq < highest { failures.update { $0.append("seq \(r.seq) appeared after \(highest)") } }
                        }
                        for r in rows { seen.insert(r.seq) }
                        highest = max(highest, rows.last?.seq ?? 0)
                        if head < highest { failures.update { $0.append("head \(head) below a visible seq \(highest)") } }
                    } catch {
                        failures.update { $0.append("reader: \(error.message)") }
                    }
                }
            }
            for g in writers { g.wait() }
            done.update { $0 = true }
            reader.wait()
            #expect(failures.get.isEmpty)
            let rows = try a.changeFeed("Ev", after: 0, through: .max, limit: 100_000)
            #expect(rows.count == 121)
            #expect(zip(rows, rows.dropFirst()).allSatisfy { $0.seq < $1.seq })
            #expect(try a.changeFeedHead() == rows.last?.seq)
            // Host A's listener: both hosts' 120 inserts (B's read from the feed), each once, in
            // seq order, each with its object.
            #expect(eventually { listener.events.count == 120 })
            let events = listener.events
            #expect(events.count == 120)
            #expect(zip(events, events.dropFirst()).allSatisfy { $0.seq < $1.seq })
            #expect(events.allSatisfy { $0.hasPayload && $0.original == nil && $0.current?["w"]?.intValue != nil })
            #expect(events.map(\.seq) == Array(rows.dropFirst().map(\.seq)))
        }

        @Test func feedRowsCompactPurgeAndHead() throws {
            let (first, url) = try freshPostgresStore()
            first.close()
            // No grace: rows compact as soon as they are superseded (the default waits a minute
            // for the other hosts to read them; see compactionWaitsForTheGrace).
            let store = try PostgresStore(url: url, feedCompactionGraceMillis: 0)
            defer { store.close() }
            let o1 = try store.insert("X", fields: ["v": 1], acl: nil, identity: .master)
            _ = try store.update("X", objectId: o1.objectId, changes: ["v": 2], identity: .master)
            _ = try store.update("X", objectId: o1.objectId, changes: ["v": 3], identity: .master)
            let o2 = try store.insert("X", fields: ["v": 9], acl: ["u1": ["read": true]], identity: .master)
            try store.delete("X", objectId: o2.objectId, identity: .master)
            #expect(try store.changeFeedHead() == 5)
            let rows = try store.changeFeed("X", after: 0, through: .max, limit: 10)
            #expect(rows.map(\.seq) == [3, 5])
            #expect(rows[0].op == .save && rows[0].objectId == o1.objectId)
            #expect(try rows[0].object?.fields()["v"] == .int(3))
            #expect(rows[1].op == .delete && rows[1].objectId == o2.objectId && rows[1].object == nil && rows[1].perm == "|u1|")
            #expect(try store.changeFeed("X", after: 0, through: 4, limit: 10).map(\.seq) == [3])
            #expect(try store.changeFeed("X", after: 3, through: .max, limit: 10).map(\.seq) == [5])
            #expect(try store.changeFeed("Nothing", after: 0, through: .max, limit: 10).isEmpty)
            #expect(try store.compactChangeFeed(batch: 100) == 5)
            #expect(try store.compactChangeFeed(batch: 100) == 0)
            let left = try store.pool.withConnection { (c) throws(ParseError) in
                try c.execute("SELECT seq FROM _mb_changes ORDER BY seq").rows.map { $0[0] }
            }
            #expect(left == [.integer(3), .integer(5)])
            try store.checkChangeFeed(since: 1)
            #expect(try store.purgeChangeFeed(before: store.clock.nowMillis() + 3_600_000) == 1)
            #expect(errorCode { () throws(ParseError) in try store.checkChangeFeed(since: 1) } == 160)
            try store.checkChangeFeed(since: 5)
            try store.checkChangeFeed(since: 0)
            #expect(try store.changeFeedHead() == 5)
        }

        /// Rows younger than the grace are left alone, and so are the rows they supersede.
        @Test func compactionWaitsForTheGrace() throws {
            let (store, _) = try freshPostgresStore()
            defer { store.close() }
            let o = try store.insert("G", fields: ["v": 1], acl: nil, identity: .master)
            _ = try store.update("G", objectId: o.objectId, changes: ["v": 2], identity: .master)
            #expect(try store.compactChangeFeed(batch: 100) == 0)
            let rows = try store.pool.withConnection { (c) throws(ParseError) in
                try c.execute("SELECT count(*) FROM _mb_changes").scalar?.int64
            }
            #expect(rows == 2)
        }

        /// Writes to a class nobody observes reach the listener as one mark per run of seqs;
        /// observed ones as events with the objects before and after; a rolled-back transaction
        /// neither numbers rows nor tells the listener.
        @Test func unobservedWritesArriveAsMarks() throws {
            let (store, _) = try freshPostgresStore()
            defer { store.close() }
            let listener = CollectingListener(observing: ["Obs"])
            store.setChangeListener(listener)
            let obs = try store.insert("Obs", fields: ["v": 1], acl: nil, identity: .master)
            try store.transaction { () throws(ParseError) in
                for i in 0..<3 { _ = try store.insert("Un", fields: ["i": .int(Int64(i))], acl: nil, identity: .master) }
                _ = try store.update("Obs", objectId: obs.objectId, changes: ["v": 2], identity: .master)
            }
            _ = errorCode { () throws(ParseError) in
                try store.transaction { () throws(ParseError) in
                    _ = try store.insert("Obs", fields: ["v": 5], acl: nil, identity: .master)
                    throw ParseError(.scriptFailed, "roll back")
                }
            }
            try store.delete("Obs", objectId: obs.objectId, identity: .master)
            let e = listener.events
            #expect(e.count == 4)
            guard e.count == 4 else { return }
            #expect(e[0].seq == 1 && e[0].current?["v"] == .int(1) && e[0].original == nil)
            #expect(e[1].isMark && e[1].className == "Un" && e[1].firstSeq == 2 && e[1].seq == 4)
            #expect(e[2].seq == 5 && e[2].original?["v"] == .int(1) && e[2].current?["v"] == .int(2))
            #expect(e[3].seq == 6 && e[3].op == .delete && e[3].original?["v"] == .int(2) && e[3].current == nil)
            #expect(try store.changeFeedHead() == 6)
            store.setChangeListener(nil)
            _ = try store.insert("Obs", fields: ["v": 7], acl: nil, identity: .master)
            #expect(listener.events.count == 4)
            #expect(try store.changeFeedHead() == 7)
        }
    }
}
