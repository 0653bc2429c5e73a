import MoonbaseCore
import MoonbaseJSON
import Synchronization

/// Object operations with class permissions, ACLs and triggers, shared by REST, batch and
/// Lua's `db.*`: a write and its before-trigger run in one
/// transaction on the writer (the trigger's own `db.*` writes join it), after-triggers run after
/// commit and their errors are logged, not returned.
///
/// Written against `DocumentStore` only: the same code serves every backend. Store calls made
/// inside `store.transaction` join it, so a before-trigger and the write it guards commit or
/// roll back together.
public final class ObjectService: Sendable {
    public let store: any DocumentStore
    let triggerBox: TriggerBox

    public init(store: any DocumentStore) {
        self.store = store
        self.triggerBox = TriggerBox()
    }

    /// Installed once Cloud Code is loaded (the store is built first).
    public func setTriggers(_ t: any TriggerRunner) { triggerBox.set(t) }
    /// The installed trigger runner (nil until Cloud Code loads).
    public var triggers: (any TriggerRunner)? { triggerBox.get() }

    func has(_ kind: TriggerKind, _ className: String, _ caller: CallerContext) -> Bool {
        triggers?.hasTrigger(kind, className) ?? false
    }

    // MARK: writes

    public func create(_ className: String, _ body: JSONObject, caller: CallerContext) throws(ParseError) -> StoredObject {
        try create(className, body, prepared: nil, caller: caller)
    }

    /// `create` of a body validated beforehand (`PreparedInsert`): the same path, the body's
    /// prepared rows used when no `beforeSave` trigger rewrites it (one added since included).
    public func create(prepared: PreparedInsert, caller: CallerContext) throws(ParseError) -> StoredObject {
        try create(prepared.className, prepared.fields, prepared: prepared, caller: caller)
    }

    private func create(_ className: String, _ body: JSONObject, prepared: PreparedInsert?,
                        caller: CallerContext) throws(ParseError) -> StoredObject {
        let identity = caller.identity
        let stored: StoredObject
        if InlineAttempt.active, let t = triggers, t.hasTrigger(.beforeSave, className) || t.hasTrigger(.afterSave, className) {
            // Triggers run Lua, which may wait: not on an I/O thread.
            throw InlineAttempt.continuesOnWorker
        }
        if let t = triggers, t.hasTrigger(.beforeSave, className) {
            try store.checkCLP(.create, className, identity)
            stored = try store.transaction { () throws(ParseError) -> StoredObject in
                var input = body
                let acl = input.removeValue(forKey: "ACL")
                let object = try t.runSave(.beforeSave, className: className, object: input, original: nil, caller: caller)
                var fields = object
                let aclOut = fields.removeValue(forKey: "ACL") ?? acl
                fields.removeValue(forKey: "objectId")
                fields.removeValue(forKey: "createdAt")
                fields.removeValue(forKey: "updatedAt")
                return try store.insert(className, fields: fields, acl: aclOut, identity: identity)
            }
        } else if let prepared {
            stored = try store.insert(prepared: prepared, identity: identity)
        } else {
            stored = try store.insert(className, fields: body, acl: nil, identity: identity)
        }
        caller.meter?.dbWrites += 1
        try runAfterSave(className, stored, original: nil, caller)
        return stored
    }

    public func update(_ className: String, _ objectId: String, _ changes: JSONObject,
                       caller: CallerContext) throws(ParseError) -> StoredObject {
        let identity = caller.identity
        let stored: StoredObject
        var originalJSON: JSONObject?
        if let t = triggers, t.hasTrigger(.beforeSave, className) {
            try store.checkCLP(.update, className, identity)
            stored = try store.transaction { () throws(ParseError) -> StoredObject in
                guard let current = try store.fetchRaw(className, objectId: objectId),
                      identity.isMaster || current.canWrite(identity)
                else { throw ParseError(.objectNotFound, "Object not found.") }
                let original = try current.json(for: .master)
                originalJSON = original
                let merged = UpdateView.apply(changes, to: original)
                let result = try t.runSave(.beforeSave, className: className, object: merged, original: original, caller: caller)
                let finalChanges = UpdateView.diff(changes: changes, merged: merged, result: result, original: original)
                return try store.update(className, objectId: objectId, changes: finalChanges, identity: identity)
            }
        } else {
            stored = try store.update(className, objectId: objectId, changes: changes, identity: identity)
        }
        caller.meter?.dbWrites += 1
        try runAfterSave(className, stored, original: originalJSON, caller)
        return stored
    }

    public func delete(_ className: String, _ objectId: String, caller: CallerContext) throws(ParseError) {
        let identity = caller.identity
        try store.checkCLP(.delete, className, identity)
        let hasBefore = has(.beforeDelete, className, caller)
        let hasAfter = has(.afterDelete, className, caller)
        var deletedJSON: JSONObject?
        if hasBefore || hasAfter {
            try store.transaction { () throws(ParseError) in
                guard let current = try store.fetchRaw(className, objectId: objectId),
                      identity.isMaster || current.canWrite(identity)
                else { throw ParseError(.objectNotFound, "Object not found.") }
                let json = try current.json(for: .master)
                deletedJSON = json
                if hasBefore, let t = triggers {
                    try t.runDelete(.beforeDelete, className: className, object: json, caller: caller)
                }
                try store.delete(className, objectId: objectId, identity: identity)
            }
        } else {
            try store.delete(className, objectId: objectId, identity: identity)
        }
        caller.meter?.dbWrites += 1
        if hasAfter, let t = triggers, let json = deletedJSON {
            runAfter(caller) { () throws(ParseError) in
                try t.runDelete(.afterDelete, className: className, object: json, caller: caller)
            }
        }
    }

    func runAfterSave(_ className: String, _ stored: StoredObject, original: JSONObject?, _ caller: CallerContext) throws(ParseError) {
        guard let t = triggers, t.hasTrigger(.afterSave, className) else { return }
        let json = try stored.json(for: .master)
        runAfter(caller) { () throws(ParseError) in
            _ = try t.runSave(.afterSave, className: className, object: json, original: original, caller: caller)
        }
    }

    /// After-triggers run after commit (or right away outside a transaction) in a transaction of
    /// their own, which their error rolls back; the error is only logged.
    func runAfter(_ caller: CallerContext, _ body: @escaping () throws(ParseError) -> Void) {
        let store = self.store
        let run = {
            do throws(ParseError) {
                try store.transaction { () throws(ParseError) in try body() }
            } catch {
                Log.warn("after-trigger failed: \(error.message)", requestId: caller.requestId)
            }
        }
        store.afterCommit(run)
    }

    // MARK: reads

    /// One object as JSON bytes (`keys`, `include`, afterFind), or 101.
    public func get(_ className: String, _ objectId: String, keys: [String]? = nil, include: [String] = [],
                    excludeKeys: [String] = [], caller: CallerContext) throws(ParseError) -> [UInt8] {
        try store.checkCLP(.get, className, caller.identity)
        if keys == nil, include.isEmpty, excludeKeys.isEmpty, ProtectedFields.canSplice(className),
           let schema = store.schema(className), ClassPermissions.access(schema.clp, .get, caller.identity) == .allowed,
           caller.identity.isMaster || !has(.afterFind, className, caller) {
            // A plain read by id (Lua's `db.get` in a loop, REST GET): a primary-key lookup, the
            // ACL test and the stored fields spliced, without a query compiled for it. The same
            // answer as the query below gives here: no keys, includes, pointer permissions or
            // afterFind trigger to apply, no field of the class hidden from readers.
            caller.meter?.dbReads += 1
            guard let o = try store.get(className, objectId: objectId, identity: caller.identity) else {
                throw ParseError(.objectNotFound, "Object not found.")
            }
            return o.jsonBytes(for: caller.identity)
        }
        var q = FindQuery(className: className, where: .object(["objectId": .string(objectId)]),
                          limit: 1, keys: keys, include: include)
        q.operation = .get
        q.excludeKeys = excludeKeys
        let r = try runFind(q, caller: caller)
        guard r.resultCount == 1 else { throw ParseError(.objectNotFound, "Object not found.") }
        // results is `[obj]`: strip the brackets.
        return Array(r.results.dropFirst().dropLast())
    }

    public func find(_ query: FindQuery, caller: CallerContext) throws(ParseError) -> FindResult {
        var q = query
        if let key = q.redirectClassNameForKey {
            // Parse's `redirectClassNameForKey`: the query runs on the Relation's target class.
            if let f = store.schema(q.className)?.fields[key], f.type == .relation, let target = f.targetClass { q.className = target }
            q.redirectClassNameForKey = nil
        }
        q.operation = q.limit == 0 && q.count ? .count : .find
        try store.checkCLP(q.operation, q.className, caller.identity)
        return try runFind(q, caller: caller)
    }

    /// `find` of `where = equal` (only `field = scalar` equalities) with `limit` and no other
    /// option, answered from the store's statement cache when it has one for the query (Lua's
    /// `db.first`/`db.find` in a loop), else nil: the caller then runs `find`, which answers the
    /// same. Classes with an afterFind trigger (for non-master callers) always take `find`.
    public func findEqual(_ className: String, _ equal: JSONObject, limit: Int, caller: CallerContext) throws(ParseError) -> FindResult? {
        guard caller.identity.isMaster || !has(.afterFind, className, caller),
              let r = try store.findEqual(className, equal, limit: limit, identity: caller.identity) else { return nil }
        caller.meter?.dbReads += 1
        return r
    }

    func runFind(_ q: FindQuery, caller: CallerContext) throws(ParseError) -> FindResult {
        let hook: AfterFindHook?
        if !caller.identity.isMaster, let t = triggers {
            hook = { (className: String, objects: [JSONObject]) throws(ParseError) -> [JSONObject] in
                guard t.hasTrigger(.afterFind, className) else { return objects }
                // Lua runs on a worker's VM, not on an I/O thread (an included class's trigger).
                if InlineAttempt.active { throw InlineAttempt.continuesOnWorker }
                return try t.runAfterFind(className: className, objects: objects, caller: caller)
            }
        } else {
            hook = nil
        }
        caller.meter?.dbReads += 1
        let t = triggers
        // Classes without an afterFind trigger skip the hook: their rows stay spliced, unparsed.
        let applies: (String) -> Bool = { t?.hasTrigger(.afterFind, $0) ?? false }
        return try store.find(q, identity: caller.identity, afterFind: hook, afterFindApplies: applies)
    }

    public func count(_ className: String, where w: JSONValue?, caller: CallerContext) throws(ParseError) -> Int {
        try store.checkCLP(.count, className, caller.identity)
        caller.meter?.dbReads += 1
        return try store.count(className, where: w, identity: caller.identity)
    }

    public func distinct(_ className: String, field: String, where w: JSONValue?, caller: CallerContext) throws(ParseError) -> [JSONValue] {
        try store.checkCLP(.find, className, caller.identity)
        caller.meter?.dbReads += 1
        return try store.distinct(className, field: field, where: w, identity: caller.identity)
    }

    // MARK: bulk

    /// Deletes every matching object the caller may delete. Per-object triggers run unless the
    /// caller is master and passes `triggers: false` (then one set-based DELETE).
    public func deleteWhere(_ className: String, where w: JSONValue?, runTriggers: Bool,
                            caller: CallerContext) throws(ParseError) -> Int {
        let identity = caller.identity
        let triggersApply = runTriggers || !identity.isMaster
        if !triggersApply || !(has(.beforeDelete, className, caller) || has(.afterDelete, className, caller)) {
            try store.checkCLP(.delete, className, identity)
            caller.meter?.dbWrites += 1
            return try store.deleteWhere(className, where: w, identity: identity)
        }
        return try store.transaction { () throws(ParseError) -> Int in
            let ids = try matchingIds(className, w, caller)
            for id in ids { try delete(className, id, caller: caller) }
            return ids.count
        }
    }

    public func updateWhere(_ className: String, where w: JSONValue?, changes: JSONObject, runTriggers: Bool,
                            caller: CallerContext) throws(ParseError) -> Int {
        let identity = caller.identity
        let triggersApply = runTriggers || !identity.isMaster
        if !triggersApply || !(has(.beforeSave, className, caller) || has(.afterSave, className, caller)) {
            caller.meter?.dbWrites += 1
            return try store.updateWhere(className, where: w, changes: changes, identity: identity)
        }
        return try store.transaction { () throws(ParseError) -> Int in
            let ids = try matchingIds(className, w, caller)
            for id in ids { _ = try update(className, id, changes, caller: caller) }
            return ids.count
        }
    }

    func matchingIds(_ className: String, _ w: JSONValue?, _ caller: CallerContext) throws(ParseError) -> [String] {
        let q = FindQuery(className: className, where: w, limit: FindQuery.luaMaxLimit, keys: ["objectId"])
        let r = try store.find(q, identity: caller.identity, afterFind: nil, afterFindApplies: nil)
        return try r.objects().compactMap { $0["objectId"]?.stringValue }
    }
}

/// Holds the trigger runner, set once after Cloud Code loads.
final class TriggerBox: Sendable {
    /// Read by every write and by every read that may run afterFind: no shared lock.
    private let runner = ThreadSnapshot<(any TriggerRunner)?>(nil)
    func set(_ r: any TriggerRunner) { runner.update { $0 = r } }
    func get() -> (any TriggerRunner)? { runner.current }
}
