import MoonbaseCore
import MoonbaseCrypto
import MoonbaseJSON
import MoonbaseSQLite

extension WriteTransaction {
    /// Creates an object (the class and new fields on first use, Parse's schemaless behaviour).
    ///
    /// - Parameters:
    ///   - fields: the body; `ACL` in it is used when `acl` is nil; `createdAt`/`updatedAt` are
    ///     ignored; `objectId` is refused (105); `__op`s give their create value.
    ///   - acl: the ACL; nil → default (`ACLs.defaultACL`); JSON `null` → none.
    ///   - allowInternalFields: lets trusted callers (the auth module) write `_`-prefixed fields
    ///     such as `_hashed_password`; never set it for client input.
    /// - Returns: the stored object (objectId from `Random.alphanumeric(10)`, createdAt =
    ///   updatedAt = the store clock's now).
    /// - Throws: 103 bad class, 105 bad field name, 111 type mismatch, 119 CLP, 123 bad ACL,
    ///   137 unique index violation.
    public func insert(_ className: String, fields: JSONObject, acl: JSONValue? = nil, identity: Identity,
                       allowInternalFields: Bool = false) throws(ParseError) -> StoredObject {
        let ctx = try storeContext()
        try SchemaCatalog.validateClassName(className)
        try ctx.catalog.checkCLP(.create, className, identity)
        if className == Roles.className { try Roles.checkCreate(fields, acl: acl, in: self); ctx.roles.invalidate(after: self) }

        var data = JSONObject()
        data.entries.reserveCapacity(fields.count)
        var types: [(String, FieldInfo)] = []
        var aclValue = acl
        var relations: [RelationChange] = []
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
        let schema = try ctx.catalog.ensureFields(className, types, identity: identity, in: self)
        // Every Relation field of the class shows on each object as its marker, as in Parse.
        for name in schema.fieldOrder where data[name] == nil {
            if let f = schema.fields[name], f.type == .relation, let t = f.targetClass {
                data.entries.append(.init(name, RelationChange.marker(t)))
            }
        }

        let objectId = Random.alphanumeric(10)
        let aclObject: JSONObject?
        switch aclValue {
        case nil: aclObject = ACLs.defaultACL(className: className, objectId: objectId, identity: identity)
        case .null?: aclObject = nil
        case let v?: aclObject = try ACLs.validate(v)
        }
        let (rperm, wperm) = ACLs.permColumns(aclObject)
        let aclBytes = aclObject.map { JSONValue.object($0).jsonBytes }
        let dataBytes = JSONValue.object(data).jsonBytes
        let now = ctx.clock.nowMillis()
        let sql = "INSERT INTO \(Naming.table(className))(objectId, createdAt, updatedAt, ACL, rperm, wperm, data) VALUES(?,?,?,?,?,?,?)"
        try connection.withStatement(sql) { (s) throws(ParseError) in
            try s.bind(.text(objectId), at: 1)
            try s.bind(.integer(now), at: 2)
            try s.bind(.integer(now), at: 3)
            if let aclBytes { try s.bindText(utf8: aclBytes, at: 4) } else { try s.bind(.null, at: 4) }
            try s.bind(rperm.map { .text($0) } ?? .null, at: 5)
            try s.bind(wperm.map { .text($0) } ?? .null, at: 6)
            try s.bindText(utf8: dataBytes, at: 7)
            try s.step()
        }
        try applyRelations(relations, owner: objectId, className: className)
        let rid = connection.lastInsertRowid
        try feedInserted(className, rid: rid)
        return StoredObject(className: className, rid: rid, objectId: objectId, createdAt: now,
                            updatedAt: now, acl: aclBytes, rperm: rperm, wperm: wperm, data: dataBytes)
    }
}
