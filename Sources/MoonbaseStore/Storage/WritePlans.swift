import MoonbaseCore
import MoonbaseJSON

// The backend-neutral half of the write paths: what a create or update body means (fields,
// their types, relations, the ACL), how a field keeps its first type, how declared indexes
// change, and Parse's field operators applied to a document. Pure functions over JSON and
// `ClassSchema`: every backend calls them and only spells the SQL itself.

/// A validated create body: the stored fields, the types they give the schema, the relation
/// members to write after the row, and the ACL as given (resolved by `resolvedACL`).
struct InsertPlan {
    var data = JSONObject()
    var types: [(String, FieldInfo)] = []
    var aclValue: JSONValue?
    var relations: [RelationChange] = []

    /// - Throws: 105 bad or duplicate field name (`objectId` included), 111 bad typed value.
    init(className: String, fields: JSONObject, acl: JSONValue?, allowInternalFields: Bool) throws(ParseError) {
        data.entries.reserveCapacity(fields.count)
        aclValue = acl
        for e in fields {
            switch e.key {
            case "objectId": throw ParseError(.invalidKeyName, "objectId is an invalid field name.")
            case "createdAt", "updatedAt": continue
            case "ACL": if acl == nil { aclValue = e.value }; continue
            default: break
            }
            try TypedValues.checkFieldName(e.key, allowInternal: allowInternalFields)
            guard data[e.key] == nil else { throw ParseError(.invalidJSON, "duplicate field: \(e.key)") }
            let (change, info) = try FieldChange.parse(e.key, e.value)
            if case .relation(var r) = change { r.removes = []; relations.append(r) }
            guard let value = change.createValue else { continue }
            data.entries.append(.init(e.key, value))
            if let info { types.append((e.key, info)) }
        }
        if className == Roles.className { types += Roles.relationFields }
    }

    /// Every Relation field of the class shows on each object as its marker, as in Parse.
    mutating func addRelationMarkers(_ schema: ClassSchema) {
        for name in schema.fieldOrder where data[name] == nil {
            if let f = schema.fields[name], f.type == .relation, let t = f.targetClass {
                data.entries.append(.init(name, RelationChange.marker(t)))
            }
        }
    }

    /// The ACL to store: the default when none was given, none for JSON `null`.
    /// - Throws: 123 for a malformed ACL.
    func resolvedACL(className: String, objectId: String, identity: Identity) throws(ParseError) -> JSONObject? {
        switch aclValue {
        case nil: return ACLs.defaultACL(className: className, objectId: objectId, identity: identity)
        case .null?: return nil
        case let v?: return try ACLs.validate(v)
        }
    }
}

/// A validated update body: field changes (with the types they give the schema) and an
/// optional new ACL.
struct UpdatePlan {
    var changes: [FieldChange] = []
    var relations: [RelationChange] = []
    var types: [(String, FieldInfo)] = []
    var acl: JSONObject??

    /// - Throws: 105 bad or duplicate names, 111 bad typed values or operators, 123 bad ACL.
    init(changes body: JSONObject, allowInternalFields: Bool) throws(ParseError) {
        var seen = Set<String>()
        for e in body {
            switch e.key {
            case "objectId", "createdAt", "updatedAt": continue
            case "ACL":
                acl = e.value.isNull ? .some(nil) : .some(try ACLs.validate(e.value))
                continue
            default: break
            }
            guard seen.insert(e.key).inserted else { throw ParseError(.invalidJSON, "duplicate field: \(e.key)") }
            if e.key.contains(".") {
                // A nested key (`stats.views`): its top-level field is an Object; nested values
                // are canonicalised but not typed.
                guard Naming.isValidFieldPath(e.key) else { throw ParseError(.invalidKeyName, "invalid field name: \(e.key)") }
                let root = String(e.key.prefix { $0 != "." })
                try TypedValues.checkFieldName(root, allowInternal: false)
                let (change, _) = try FieldChange.parse(e.key, e.value, nested: true)
                changes.append(change)
                types.append((root, FieldInfo(type: .object)))
                continue
            }
            try TypedValues.checkFieldName(e.key, allowInternal: allowInternalFields)
            let (change, info) = try FieldChange.parse(e.key, e.value)
            changes.append(change)
            if case .relation(let r) = change { relations.append(r) }
            if let info { types.append((e.key, info)) }
        }
    }
}

extension ClassSchema {
    /// Parse's first-value rule: checks `incoming` types against the known fields and adds the
    /// new ones. - Returns: the fields added (empty: nothing changed).
    /// - Throws: 111 on a type mismatch, 119 when CLP `addField` forbids a new field.
    mutating func addFields(_ incoming: [(String, FieldInfo)], identity: Identity) throws(ParseError) -> [(String, FieldInfo)] {
        var added: [(String, FieldInfo)] = []
        for (name, info) in incoming {
            if let have = fields[name] {
                if have.type != info.type || ((have.type == .pointer || have.type == .relation) && info.targetClass != nil
                    && have.targetClass != info.targetClass) {
                    throw ParseError(.incorrectType,
                                     "schema mismatch for \(className).\(name); expected \(have.displayName) but got \(info.displayName)")
                }
            } else if !added.contains(where: { $0.0 == name }) {
                added.append((name, info))
            }
        }
        guard !added.isEmpty else { return [] }
        guard ClassPermissions.allows(clp, .addField, identity) else {
            throw ParseError(.operationForbidden, "Permission denied for action addField on class \(className).")
        }
        for (name, info) in added { add(name, info) }
        return added
    }

    /// The declared B-tree indexes whose expression depends on a type just learnt (a Pointer
    /// indexes its objectId, a Date its instant): they must be rebuilt.
    func indexesToRebuild(after added: [(String, FieldInfo)]) -> [IndexSpec] {
        let names = Set(added.map(\.0).filter { fields[$0]?.type == .pointer || fields[$0]?.type == .date })
        guard !names.isEmpty else { return [] }
        var out: [IndexSpec] = []
        for e in indexes {
            guard let spec = try? IndexSpec(name: e.key, json: e.value), spec.dependsOnType(of: names) else { continue }
            out.append(spec)
        }
        return out
    }

    /// One step of applying an `indexes` declaration.
    enum IndexAction {
        /// Drop the index `name` declared as `old`.
        case drop(name: String, old: JSONValue)
        /// Build `spec` (a text index, an ordered one, or nothing for a geo-only spec).
        case create(IndexSpec)
    }

    /// Applies Parse's `indexes` declaration to `indexes`: a new name is created, the same spec
    /// again is a no-op, a changed spec replaces the old index, `{"__op": "Delete"}` drops it;
    /// indexes not named are kept. - Returns: the steps, in order (empty: nothing changed).
    /// - Throws: 105/107 for a bad spec.
    mutating func planIndexes(_ specs: JSONObject) throws(ParseError) -> [IndexAction] {
        var actions: [IndexAction] = []
        for e in specs {
            let name = e.key
            let old = indexes[name]
            if e.value["__op"]?.stringValue == "Delete" {
                guard IndexSpec.isValidIndexName(name) else { throw ParseError(.invalidKeyName, "invalid index name: \(name)") }
                if let old { actions.append(.drop(name: name, old: old)) }
                indexes[name] = nil
                continue
            }
            let spec = try IndexSpec(name: name, json: e.value)
            if let old, old == e.value { continue }
            if let old { actions.append(.drop(name: name, old: old)) }
            actions.append(.create(spec))
            indexes[name] = e.value
        }
        return actions
    }
}

extension FieldChange {
    /// Parse's array operators on a field's current value (nil or `null`: an empty array).
    /// - Throws: 111 when the current value is not an array.
    static func arrayResult(_ current: JSONValue?, _ items: [JSONValue], _ op: ArrayOp) throws(ParseError) -> JSONValue {
        var values: [JSONValue] = []
        switch current {
        case nil, .null?: break
        case .array(let a)?: values = a
        default: throw ParseError(.incorrectType, "array operator on a field that is not an array")
        }
        switch op {
        case .add: values.append(contentsOf: items)
        case .addUnique: for i in items where !values.contains(i) { values.append(i) }
        case .remove: values.removeAll { items.contains($0) }
        }
        return .array(values)
    }

    /// Applies `changes` to a stored document in memory, with the meaning `dataExpression` gives
    /// them in SQL: nested keys create their parent objects (keeping their members; a parent that
    /// is not an object is left alone), sets, increments and array operators in order, deletes
    /// last. For backends that compute the new document outside SQL under a row lock.
    /// - Throws: 111 for an array operator on a non-array, an increment of a non-number.
    static func apply(_ changes: [FieldChange], to data: inout JSONObject) throws(ParseError) {
        for c in changes where c.field.contains(".") {
            if case .delete = c { continue }
            let parts = c.field.split(separator: ".").map(String.init)
            for k in 1..<parts.count {
                let parent = Array(parts[0..<k])
                if JSONPath.get(data, parent) == nil || JSONPath.get(data, parent) == .null {
                    JSONPath.set(&data, parent, .object([:]))
                }
            }
        }
        var removes: [[String]] = []
        for c in changes {
            let path = c.field.split(separator: ".").map(String.init)
            switch c {
            case .set(_, let v): JSONPath.set(&data, path, v)
            case .increment(_, let amount):
                let current = JSONPath.get(data, path)
                JSONPath.set(&data, path, try increment(current, by: amount))
            case .array(_, let op, let items):
                JSONPath.set(&data, path, try arrayResult(JSONPath.get(data, path), items, op))
            case .relation(let r): JSONPath.set(&data, path, RelationChange.marker(r.targetClass))
            case .delete: removes.append(path)
            }
        }
        for p in removes { JSONPath.remove(&data, p) }
    }

    /// `current + amount` as SQL adds them: integers stay integers (a real past Int64's range),
    /// anything with a fraction is a real; a missing or null field counts as 0.
    static func increment(_ current: JSONValue?, by amount: JSONValue) throws(ParseError) -> JSONValue {
        let base: JSONValue
        switch current {
        case nil, .null?: base = .int(0)
        case let v? where v.isNumber: base = v
        default: throw ParseError(.incorrectType, "Increment of a field that is not a number")
        }
        if case .int(let a) = base, case .int(let b) = amount {
            let (sum, overflow) = a.addingReportingOverflow(b)
            return overflow ? .double(Double(a) + Double(b)) : .int(sum)
        }
        return .double((base.doubleValue ?? 0) + (amount.doubleValue ?? 0))
    }
}

/// Reads and writes of a dotted path inside a document (validated names only).
enum JSONPath {
    static func get(_ o: JSONObject, _ path: [String]) -> JSONValue? {
        guard let first = path.first, let v = o[first] else { return nil }
        if path.count == 1 { return v }
        guard case .object(let inner) = v else { return nil }
        return get(inner, Array(path.dropFirst()))
    }

    /// Sets the value at `path`; does nothing when a parent is missing or not an object.
    static func set(_ o: inout JSONObject, _ path: [String], _ value: JSONValue) {
        guard let first = path.first else { return }
        if path.count == 1 { o[first] = value; return }
        guard case .object(var inner)? = o[first] else { return }
        set(&inner, Array(path.dropFirst()), value)
        o[first] = .object(inner)
    }

    static func remove(_ o: inout JSONObject, _ path: [String]) {
        guard let first = path.first else { return }
        if path.count == 1 { o.removeValue(forKey: first); return }
        guard case .object(var inner)? = o[first] else { return }
        remove(&inner, Array(path.dropFirst()))
        o[first] = .object(inner)
    }
}

extension ClassPermissions {
    /// THE class-permission check of every backend: throws 119 unless `identity` may perform
    /// `op` on a class whose schema is `schema` (nil: the class does not exist yet).
    static func check(_ op: ClassOperation, _ className: String, _ identity: Identity, schema: ClassSchema?) throws(ParseError) {
        if identity.isMaster { return }
        if masterOnlyClasses.contains(className) {
            throw ParseError(.operationForbidden, "unauthorized: master key is required")
        }
        guard let s = schema else { return }
        guard allows(s.clp, op, identity) else {
            throw ParseError(.operationForbidden, "Permission denied for action \(op.rawValue) on class \(className).")
        }
    }

    /// What class permissions let `identity` do for `op` on a class with `schema`.
    static func access(_ op: ClassOperation, _ className: String, _ identity: Identity, schema: ClassSchema?) -> ClassAccess {
        if identity.isMaster { return .allowed }
        if masterOnlyClasses.contains(className) { return .denied }
        guard let s = schema else { return .allowed }
        return access(s.clp, op, identity)
    }

    /// The Swift twin of `pointerCondition` (same meaning, over a parsed document): an array
    /// field holds an object whose `objectId` is `userId`, or an object field's `objectId` is.
    static func pointerConditionHolds(_ fields: [String], object: JSONObject, userId: String) -> Bool {
        for f in fields where Naming.isValidFieldName(f) {
            switch object[f] {
            case .array(let a)?:
                if a.contains(where: { $0.objectValue?["objectId"] == .string(userId) }) { return true }
            case .object(let o)?:
                if o["objectId"] == .string(userId) { return true }
            default: continue
            }
        }
        return false
    }
}
