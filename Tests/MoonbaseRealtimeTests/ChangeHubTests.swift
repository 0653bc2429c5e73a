import Foundation
import MoonbaseCore
import MoonbaseJSON
import MoonbaseRealtime
import MoonbaseSQLite
@testable import MoonbaseStore
import Testing

@Suite(.timeLimit(.minutes(1)))
struct ChangeHubTests {
    let f: RealtimeFixture
    let host: TestHost
    let hub: ChangeHub

    init() throws {
        f = try RealtimeFixture()
        host = TestHost(store: f.store)
        hub = try ChangeHub(store: f.store, visibility: Visibility(host: host))
        f.store.setChangeListener(hub)
    }

    func head() throws -> Int64 { try f.store.changeFeedHead() }

    @Test func seqIsStrictlyIncreasingAndCompactedPerObject() throws {
        let a = try f.store.insert("Note", fields: ["t": "a"], acl: nil, identity: .master)
        let b = try f.store.insert("Note", fields: ["t": "b"], acl: nil, identity: .master)
        _ = try f.store.update("Note", objectId: a.objectId, changes: ["t": "a2"], identity: .master)
        let rows = try f.store.changeFeed("Note", after: 0, through: .max, limit: 10)
        #expect(rows.map(\.objectId) == [b.objectId, a.objectId])
        let h = try head()
        #expect(rows[0].seq < rows[1].seq && rows[1].seq == h)
        // Set-based writes get one seq per object, in the same transaction.
        let n = try f.store.updateWhere("Note", where: nil,
                                        changes: ["t": "all"], identity: .master)
        #expect(n == 2)
        let after = try f.store.changeFeed("Note", after: rows[1].seq, through: .max, limit: 10)
        #expect(after.count == 2)
        _ = try f.store.deleteWhere("Note", where: nil, identity: .master)
        let tombs = try f.store.changeFeed("Note", after: 0, through: .max, limit: 10)
        #expect(tombs.count == 2 && tombs.allSatisfy { $0.op == .delete })
    }

    @Test func compactionKeepsOnlyTheLatestRowOfEachObject() throws {
        let a = try f.store.insert("Note", fields: ["t": "a"], acl: nil, identity: .master)
        let b = try f.store.insert("Note", fields: ["t": "b"], acl: nil, identity: .master)
        for i in 0..<5 { _ = try f.store.update("Note", objectId: a.objectId, changes: ["n": .int(Int64(i))], identity: .master) }
        try f.store.delete("Note", objectId: b.objectId, identity: .master)
        func count() throws -> Int64 {
            try f.database.read { (c) throws(ParseError) -> Int64 in
                guard case .integer(let n)? = try c.scalar("SELECT count(*) FROM _mb_changes") else { return -1 }
                return n
            }
        }
        let before = try f.store.changeFeed("Note", after: 0, through: .max, limit: 10)
        #expect(try count() == 8)
        while try f.store.compactChangeFeed(batch: 3) > 0 {}
        #expect(try count() == 2)
        let after = try f.store.changeFeed("Note", after: 0, through: .max, limit: 10)
        #expect(before.map(\.seq) == after.map(\.seq))
        #expect(after.map(\.op) == [.save, .delete] && after.map(\.objectId) == [a.objectId, b.objectId])
    }

    @Test func purgeMovesTheHorizonAndOldSinceIsRefused() throws {
        let a = try f.store.insert("Note", fields: ["t": "a"], acl: nil, identity: .master)
        try f.store.delete("Note", objectId: a.objectId, identity: .master)
        let seq = try head()
        f.clock.advance(byMillis: 10_000)
        #expect(try f.store.purgeChangeFeed(before: f.clock.nowMillis()) == 1)
        #expect(throws: ParseError.self) { try hub.changes("Note", since: seq - 1, limit: 10, where: nil, keys: nil, viewer: .master) }
        // since = 0 never expires; since at the horizon missed nothing.
        _ = try hub.changes("Note", since: 0, limit: 10, where: nil, keys: nil, viewer: .master)
        _ = try hub.changes("Note", since: seq, limit: 10, where: nil, keys: nil, viewer: .master)
    }

    /// The purge finds its horizon through the tombstone index, not by walking the whole feed
    /// back from its newest row (what a plain `max(seq)` did when no tombstone was old enough).
    @Test func purgeReadsTheTombstoneIndex() throws {
        for i in 0..<50 { _ = try f.store.insert("Note", fields: ["n": .int(Int64(i))], acl: nil, identity: .master) }
        let plan = try f.database.read { (c) throws(ParseError) -> String in
            var rows: [String] = []
            try c.query("EXPLAIN QUERY PLAN " + ChangeFeed.newestOldTombstoneSQL, [.integer(0)]) { (st) throws(ParseError) in
                rows.append(st.text(3) ?? "")
            }
            return rows.joined(separator: "; ")
        }
        #expect(plan.contains("USING INDEX _mb_changes_tomb"), "\(plan)")
        #expect(try f.store.purgeChangeFeed(before: f.clock.nowMillis() + 1) == 0)
    }

    @Test func eventChoiceFollowsParse() throws {
        let sink = TestSink()
        _ = try hub.subscribe(SubscriptionSpec(className: "Post", whereClause: ["n": ["$gt": 5]]), viewer: .master, sink: sink)
        let p = try f.store.insert("Post", fields: ["n": 1], acl: nil, identity: .master)  // no event
        _ = try f.store.update("Post", objectId: p.objectId, changes: ["n": 6], identity: .master)  // enter
        _ = try f.store.update("Post", objectId: p.objectId, changes: ["n": 7], identity: .master)  // update
        _ = try f.store.update("Post", objectId: p.objectId, changes: ["n": 2], identity: .master)  // leave
        _ = try f.store.insert("Post", fields: ["n": 9], acl: nil, identity: .master)  // create
        let q = try f.store.insert("Post", fields: ["n": 10], acl: nil, identity: .master)  // create
        try f.store.delete("Post", objectId: q.objectId, identity: .master)  // delete
        let events = sink.wait(for: 6)
        #expect(events.map(\.kind) == [.enter, .update, .leave, .create, .create, .delete])
        #expect(events[1].original?["n"] == 6 && events[1].object["n"] == 7)
        #expect(events[2].object["n"] == 2 && events[2].object["className"] == "Post")
        #expect(zip(events, events.dropFirst()).allSatisfy { $0.seq < $1.seq })
    }

    @Test func visibilityOwnerStrangerMasterAndLostAccess() throws {
        let owner = TestSink(), stranger = TestSink(), master = TestSink()
        _ = try hub.subscribe(SubscriptionSpec(className: "Secret"), viewer: try host.viewer(sessionToken: "r:alice"), sink: owner)
        _ = try hub.subscribe(SubscriptionSpec(className: "Secret"), viewer: try host.viewer(sessionToken: "r:bob"), sink: stranger)
        _ = try hub.subscribe(SubscriptionSpec(className: "Secret"), viewer: .master, sink: master)
        let priv: JSONValue = ["alice": ["read": true, "write": true]]
        let s = try f.store.insert("Secret", fields: ["v": 1], acl: priv, identity: .master)
        // Sharing with bob: bob gets "enter"; then removing him: "leave" with the state he could read.
        _ = try f.store.update("Secret", objectId: s.objectId, changes: ["ACL": ["alice": ["read": true], "bob": ["read": true]]], identity: .master)
        _ = try f.store.update("Secret", objectId: s.objectId, changes: ["v": 99, "ACL": priv], identity: .master)
        #expect(master.wait(for: 3).map(\.kind) == [.create, .update, .update])
        #expect(owner.wait(for: 3).map(\.kind) == [.create, .update, .update])
        let b = stranger.wait(for: 2)
        #expect(b.map(\.kind) == [.enter, .leave])
        #expect(b[1].object["v"] == 1)  // never the values of the change that removed access
        // afterFind hides a field; a revoked session stops delivery with 209.
        host.hidden.withLock { $0 = "v" }
        _ = try f.store.update("Secret", objectId: s.objectId, changes: ["v": 100], identity: .master)
        let o = owner.wait(for: 4)
        #expect(o.count == 4 && o[3].object["v"] == nil && o[3].object["objectId"] != nil)
        #expect(master.wait(for: 4)[3].object["v"] == 100)
        host.revoked.withLock { $0.insert("r:alice") }
        _ = try f.store.update("Secret", objectId: s.objectId, changes: ["v": 101], identity: .master)
        #expect(master.wait(for: 5).count == 5)
        #expect(owner.events.withLock { $0.count } == 4)
        #expect(owner.ended.withLock { $0.map(\.1) } == [209])
    }

    @Test func replayThenLiveWithoutGapOrDuplicate() throws {
        var ids: [String] = []
        for i in 0..<20 { ids.append(try f.store.insert("Doc", fields: ["i": .int(Int64(i))], acl: nil, identity: .master).objectId) }
        let since = try head()
        // Missed while offline: 50 writes to 10 objects, and one delete.
        f.clock.advance(byMillis: 1000)
        for round in 0..<5 {
            for id in ids.prefix(10) { _ = try f.store.update("Doc", objectId: id, changes: ["r": .int(Int64(round))], identity: .master) }
        }
        try f.store.delete("Doc", objectId: ids[19], identity: .master)
        let sink = TestSink()
        _ = try hub.subscribe(SubscriptionSpec(className: "Doc", since: since), viewer: .master, sink: sink)
        let live = try f.store.insert("Doc", fields: ["i": 99], acl: nil, identity: .master)
        let events = sink.wait(for: 12)
        #expect(events.count == 12)
        #expect(events.prefix(10).map { $0.object["objectId"]?.stringValue } == ids.prefix(10).map { Optional($0) })
        #expect(events.prefix(10).allSatisfy { $0.object["r"] == 4 && $0.kind == .update })
        #expect(events[10].kind == .delete && events[10].object["objectId"]?.stringValue == ids[19])
        #expect(events[11].kind == .create && events[11].object["objectId"]?.stringValue == live.objectId)
        #expect(zip(events, events.dropFirst()).allSatisfy { $0.seq < $1.seq })
        usleep(100_000)
        #expect(sink.events.withLock { $0.count } == 12)
    }

    @Test func aSubscriptionArrivingBeforeAnUnobservedWriteCommitsStillGetsIt() throws {
        let live = TestSink(), resumed = TestSink()
        let since = try head()
        // The write checks "does anyone observe Race?" (no) before the subscriptions exist, and
        // commits after them: its rows must still reach both, once.
        let id = try f.store.transaction { () throws(ParseError) -> String in
            let o = try f.store.insert("Race", fields: ["n": 1], acl: nil, identity: .master)
            _ = try hub.subscribe(SubscriptionSpec(className: "Race"), viewer: .master, sink: live)
            _ = try hub.subscribe(SubscriptionSpec(className: "Race", since: since), viewer: .master, sink: resumed)
            return o.objectId
        }
        let a = live.wait(for: 1), b = resumed.wait(for: 1)
        #expect(a.map { $0.object["objectId"]?.stringValue } == [id] && a.first?.kind == .create)
        #expect(b.map { $0.object["objectId"]?.stringValue } == [id])
        _ = try f.store.update("Race", objectId: id, changes: ["n": 2], identity: .master)
        #expect(live.wait(for: 2).map(\.kind) == [.create, .update])
        #expect(resumed.wait(for: 2).count == 2)
        usleep(100_000)
        #expect(live.events.withLock { $0.count } == 2 && resumed.events.withLock { $0.count } == 2)
    }

    @Test func slowConsumerIsDroppedWithReconnect() throws {
        let sink = TestSink(capacity: 3)
        _ = try hub.subscribe(SubscriptionSpec(className: "Msg"), viewer: .master, sink: sink)
        for i in 0..<10 { _ = try f.store.insert("Msg", fields: ["i": .int(Int64(i))], acl: nil, identity: .master) }
        let deadline = Date().addingTimeInterval(10)
        while sink.ended.withLock({ $0.isEmpty }), Date() < deadline { usleep(2000) }
        #expect(sink.ended.withLock { $0.first?.2 } == true)
        #expect(hub.slowConsumersDropped.load(ordering: .relaxed) == 1)
        #expect(hub.subscriptionCount.load(ordering: .relaxed) == 0)
    }

    @Test func watchSuppressesWritesThatChangeNoWatchedField() throws {
        let sink = TestSink()
        _ = try hub.subscribe(SubscriptionSpec(className: "W", watch: ["a"]), viewer: .master, sink: sink)
        _ = try f.store.insert("W", fields: ["b": 1], acl: nil, identity: .master)          // no watched field: none
        let o = try f.store.insert("W", fields: ["a": 1, "b": 1], acl: nil, identity: .master)  // create
        _ = try f.store.update("W", objectId: o.objectId, changes: ["b": 2], identity: .master)  // none
        _ = try f.store.update("W", objectId: o.objectId, changes: ["a": 2], identity: .master)  // update
        try f.store.delete("W", objectId: o.objectId, identity: .master)                        // delete
        let e = sink.wait(for: 3)
        #expect(e.map(\.kind) == [.create, .update, .delete])
        #expect(e[1].object["a"] == 2 && e[1].original?["a"] == 1)
        usleep(100_000)
        #expect(sink.events.withLock { $0.count } == 3)
    }

    @Test func keysProjectLikeREST() throws {
        let sink = TestSink()
        _ = try hub.subscribe(SubscriptionSpec(className: "Doc", keys: ["a.b", "c"]), viewer: .master, sink: sink)
        _ = try f.store.insert("Doc", fields: ["a": ["b": 1, "x": 2], "c": 3, "d": 4], acl: nil, identity: .master)
        let o = try #require(sink.wait(for: 1).first).object
        #expect(o["a"] == ["b": 1] && o["c"] == 3 && o["d"] == nil)
        #expect(o["objectId"] != nil && o["createdAt"] != nil && o["className"] == "Doc")
    }

    @Test func equalityIndexStillSeesValueChanges() throws {
        let sink = TestSink()
        _ = try hub.subscribe(SubscriptionSpec(className: "Pos", whereClause: ["group": "g1"]), viewer: .master, sink: sink)
        let p = try f.store.insert("Pos", fields: ["group": "g2"], acl: nil, identity: .master)
        _ = try f.store.update("Pos", objectId: p.objectId, changes: ["group": "g1"], identity: .master)
        _ = try f.store.update("Pos", objectId: p.objectId, changes: ["group": "g3"], identity: .master)
        #expect(sink.wait(for: 2).map(\.kind) == [.enter, .leave])
    }

    @Test func protectedFieldsAndClassPermissionsAreCheckedAtSubscribe() throws {
        let anon = Viewer.anonymous
        #expect(throws: ParseError.self) { try hub.subscribe(SubscriptionSpec(className: "_User", whereClause: ["email": "a@b"]), viewer: anon, sink: TestSink()) }
        #expect(throws: ParseError.self) { try hub.subscribe(SubscriptionSpec(className: "_User", keys: ["password"]), viewer: anon, sink: TestSink()) }
        #expect(throws: ParseError.self) { try hub.subscribe(SubscriptionSpec(className: "_Session"), viewer: anon, sink: TestSink()) }
        try f.store.setClassPermissions("Locked", ["find": [:]])
        #expect(throws: ParseError.self) { try hub.subscribe(SubscriptionSpec(className: "Locked"), viewer: anon, sink: TestSink()) }
        _ = try hub.subscribe(SubscriptionSpec(className: "Locked"), viewer: .master, sink: TestSink())
    }
}
