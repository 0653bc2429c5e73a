import MoonbaseCore
import MoonbaseJSON
import MoonbaseStore
import Synchronization
import Testing

/// The store as the layers above see it: only through `any Store` (no connection, no SQL), on
/// the real SQLite implementation.
@Suite(.timeLimit(.minutes(1)))
struct StoreBoundaryTests {
    let f: StorageFixture
    var store: any Store { f.store }
    init() throws { f = try StorageFixture() }

    @Test func bulkWritesTakeAWhereJSONAndRespectACLs() throws {
        for i in 0..<10 { _ = try store.insert("Job", fields: ["n": .int(Int64(i))], acl: nil, identity: .master) }
        let mine = try store.insert("Job", fields: ["n": 1000], acl: ["u1": ["read": true, "write": true]], identity: .master)
        #expect(try store.updateWhere("Job", where: ["n": ["$lt": 5]], changes: ["n": ["__op": "Increment", "amount": 100]],
                                      identity: .master) == 5)
        #expect(try store.count("Job", where: ["n": ["$gte": 100]], identity: .master) == 6)
        #expect(try store.distinct("Job", field: "n", where: ["n": ["$lt": 100]], identity: .master).count == 5)
        // The anonymous caller neither sees nor deletes the object only u1 may write.
        #expect(try store.deleteWhere("Job", where: ["n": ["$gte": 100]], identity: .anonymous) == 5)
        #expect(try store.fetchRaw("Job", objectId: mine.objectId) != nil)
        #expect(try store.deleteWhere("Nope", where: nil, identity: .master) == 0)
        // A bad where is refused by the store's compiler, not run.
        #expect(parseCode { try store.deleteWhere("Job", where: ["n": ["$bogus": 1]], identity: .master) } == 102)
        let q = try FindQuery(className: "Job", options: ["where": ["n": ["$lt": 100]], "order": "n"], maxLimit: 100)
        let r = try store.find(q, identity: .master, afterFind: nil, afterFindApplies: nil)
        #expect(try r.objects().compactMap { $0["n"]?.intValue } == [5, 6, 7, 8, 9])
    }

    @Test func afterCommitRunsOnlyOnceTheOutermostTransactionCommits() throws {
        let ran = Mutex<[String]>([])
        #expect(!store.inTransaction)
        store.afterCommit { ran.withLock { $0.append("now") } }
        #expect(ran.withLock { $0 } == ["now"])
        let id = try store.transaction { () throws(ParseError) -> String in
            #expect(store.inTransaction)
            let o = try store.insert("Note", fields: ["t": "a"], acl: nil, identity: .master)
            try store.transaction { () throws(ParseError) in
                store.afterCommit { ran.withLock { $0.append("inner") } }
            }
            // Joined, not committed: the action waits for the outer commit.
            #expect(ran.withLock { $0 } == ["now"])
            #expect(try store.fetchRaw("Note", objectId: o.objectId) != nil)  // reads see the own write
            return o.objectId
        }
        #expect(!store.inTransaction)
        #expect(ran.withLock { $0 } == ["now", "inner"])
        #expect(try store.fetchRaw("Note", objectId: id) != nil)
    }

    @Test func anErrorEscapingTheTransactionRollsBackWritesAndDropsAfterCommit() throws {
        let ran = Atomic<Int>(0)
        var created: String?
        #expect(parseCode {
            try store.transaction { () throws(ParseError) in
                created = try store.insert("Note", fields: ["t": "gone"], acl: nil, identity: .master).objectId
                store.afterCommit { ran.add(1, ordering: .relaxed) }
                throw ParseError(.scriptFailed, "abort")
            }
        } == ParseErrorCode.scriptFailed.rawValue)
        #expect(ran.load(ordering: .relaxed) == 0)
        #expect(try store.fetchRaw("Note", objectId: try #require(created)) == nil)
        // A nested failure caught inside keeps the outer transaction's other writes.
        let kept = try store.transaction { () throws(ParseError) -> String in
            let k = try store.insert("Note", fields: ["t": "kept"], acl: nil, identity: .master)
            do throws(ParseError) {
                try store.transaction { () throws(ParseError) in
                    _ = try store.insert("Note", fields: ["t": "undone"], acl: nil, identity: .master)
                    throw ParseError(.scriptFailed, "inner")
                }
            } catch {}
            return k.objectId
        }
        #expect(try store.fetchRaw("Note", objectId: kept) != nil)
        #expect(try store.count("Note", where: nil, identity: .master) == 1)
    }

    @Test func changeFeedIsReadThroughTheProtocol() throws {
        let head0 = try store.changeFeedHead()
        let a = try store.insert("Note", fields: ["t": "a"], acl: nil, identity: .master)
        _ = try store.update("Note", objectId: a.objectId, changes: ["t": "b"], identity: .master)
        let b = try store.insert("Note", fields: ["t": "c"], acl: nil, identity: .master)
        try store.delete("Note", objectId: b.objectId, identity: .master)
        let head = try store.changeFeedHead()
        #expect(head == head0 + 4)
        let rows = try store.changeFeed("Note", after: head0, through: head, limit: 10)
        #expect(rows.map(\.objectId) == [a.objectId, b.objectId] && rows.map(\.op) == [.save, .delete])
        #expect(rows[0].object.map { try? $0.json(for: .master)["t"] } == "b")
        #expect(try store.compactChangeFeed(batch: 100) == 4)
        f.clock.advance(byMillis: 1000)
        #expect(try store.purgeChangeFeed(before: f.clock.nowMillis()) == 1)
        #expect(parseCode { try store.checkChangeFeed(since: 1) } == ParseErrorCode.invalidEventName.rawValue)
        try store.checkChangeFeed(since: 0)
    }

    /// The feed finds an object's rows by its row id, which SQLite hands out again once the
    /// class's highest row is deleted: the next object gets the same one. The deleted object's
    /// tombstone must still be read (it is not superseded by the newcomer's saves), and
    /// compaction must keep the newcomer's latest save, before and after.
    @Test func aReusedRowIdDoesNotMixTwoObjectsInTheFeed() throws {
        let head0 = try store.changeFeedHead()
        let x = try store.insert("Reuse", fields: ["n": 1], acl: nil, identity: .master)
        _ = try store.update("Reuse", objectId: x.objectId, changes: ["n": 2], identity: .master)
        try store.delete("Reuse", objectId: x.objectId, identity: .master)
        let y = try store.insert("Reuse", fields: ["n": 3], acl: nil, identity: .master)
        _ = try store.update("Reuse", objectId: y.objectId, changes: ["n": 4], identity: .master)
        let head = try store.changeFeedHead()
        #expect(head == head0 + 5)
        func read() throws -> [String] {
            try store.changeFeed("Reuse", after: head0, through: head, limit: 10).map { "\($0.op.rawValue) \($0.objectId) \($0.seq - head0)" }
        }
        let expected = ["delete \(x.objectId) 3", "save \(y.objectId) 5"]
        #expect(try read() == expected)
        #expect(try store.compactChangeFeed(batch: 100) == 5)
        #expect(try read() == expected)
        let fromTheMiddle = try store.changeFeed("Reuse", after: head0 + 3, through: head, limit: 10)
        #expect(fromTheMiddle.map(\.objectId) == [y.objectId] && fromTheMiddle.first?.object.map { try? $0.json(for: .master)["n"] } == 4)
    }

    /// A set-based delete leaves one tombstone per object (in the same statement's seq range);
    /// a deleted object's earlier saves are no longer read, also by a reader bounded before the
    /// delete, and compaction does not change what is read.
    @Test func bulkDeleteTombstonesSupersedeEarlierSaves() throws {
        let head0 = try store.changeFeedHead()
        var ids: [String] = []
        for i in 0..<6 { ids.append(try store.insert("Tomb", fields: ["n": .int(Int64(i))], acl: nil, identity: .master).objectId) }
        _ = try store.update("Tomb", objectId: ids[0], changes: ["n": 100], identity: .master)
        let beforeDelete = try store.changeFeedHead()
        #expect(try store.deleteWhere("Tomb", where: ["n": ["$in": [100, 1, 2]]], identity: .master) == 3)
        let head = try store.changeFeedHead()
        #expect(head == beforeDelete + 3)
        let rows = try store.changeFeed("Tomb", after: head0, through: head, limit: 100)
        #expect(rows.filter { $0.op == .save }.map(\.objectId) == [ids[3], ids[4], ids[5]])
        #expect(rows.filter { $0.op == .save }.allSatisfy { $0.object != nil })
        #expect(Set(rows.filter { $0.op == .delete }.map(\.objectId)) == Set(ids[0...2]))
        #expect(rows.filter { $0.op == .delete }.allSatisfy { $0.seq > beforeDelete })
        let early = try store.changeFeed("Tomb", after: head0, through: beforeDelete, limit: 100)
        #expect(early.map(\.objectId) == [ids[3], ids[4], ids[5]])
        #expect(try store.compactChangeFeed(batch: 1000) > 0)
        #expect(try store.changeFeed("Tomb", after: head0, through: head, limit: 100).map(\.seq) == rows.map(\.seq))
        #expect(try store.changeFeed("Tomb", after: beforeDelete, through: head, limit: 100).map(\.op) == [.delete, .delete, .delete])
    }
}
