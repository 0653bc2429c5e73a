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
        let plan = try InsertPlan(className: className, fields: fields, acl: acl, allowInternalFields: allowInternalFields)
        return try insert(className, plan, objectId: Random.alphanumeric(10), dataBytes: nil, identity: identity, ctx)
    }

    /// `insert(_:fields:identity:)` of a body validated beforehand (`PreparedInsert`, made outside
    /// the writer): what is left is what needs the transaction (the class permission, the
    /// schema, the rows). The same checks run, in the same order, as for the body itself.
    public func insert(prepared p: PreparedInsert, identity: Identity) throws(ParseError) -> StoredObject {
        let ctx = try storeContext()
        try ctx.catalog.checkCLP(.create, p.className, identity)
        return try insert(p.className, p.plan, objectId: p.objectId, dataBytes: p.dataBytes, identity: identity, ctx)
    }

    /// The rows of a create. `dataBytes`: the text of `plan.data` when already written (kept
    /// unless the schema gives the object relation markers).
    private func insert(_ className: String, _ planned: InsertPlan, objectId: String, dataBytes written: [UInt8]?,
                        identity: Identity, _ ctx: StoreContext) throws(ParseError) -> StoredObject {
        var plan = planned
        let schema = try ctx.catalog.ensureFields(className, plan.types, identity: identity, in: self)
        let count = plan.data.count
        plan.addRelationMarkers(schema)
        let aclObject = try plan.resolvedACL(className: className, objectId: objectId, identity: identity)
        let (rperm, wperm) = ACLs.permColumns(aclObject)
        let aclBytes = aclObject.map { JSONValue.object($0).jsonBytes }
        let dataBytes = (plan.data.count == count ? written : nil) ?? JSONValue.object(plan.data).jsonBytes
        let now = ctx.clock.nowMillis()
        let sql = Self.insertTexts.value(InsertText(className: className, geoField: nil)) {
            "INSERT INTO \(Naming.table(className))(objectId, createdAt, updatedAt, ACL, rperm, wperm, data) VALUES(?,?,?,?,?,?,?)"
        }
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
        let rid = connection.lastInsertRowid
        try insertGeoRows(className, plan.data, rid: rid)
        try applyRelations(plan.relations, owner: objectId, className: className)
        try feedInserted(className, objectId: objectId, rid: rid)
        return StoredObject(className: className, rid: rid, objectId: objectId, createdAt: now,
                            updatedAt: now, acl: aclBytes, rperm: rperm, wperm: wperm, data: dataBytes)
    }

    /// The R*Tree rows of a new object's GeoPoints (`Naming.geoDDL`), from the values at hand.
    /// Updates and deletes keep the R*Tree by trigger; a create's trigger cost a sub-program and
    /// a parse of the row's JSON text per insert (~15k instructions of a ~360k create). A stored
    /// top-level GeoPoint is a GeoPoint field: `InsertPlan` validated the point and
    /// `ensureFields` the field's type, which gave the field its R*Tree.
    func insertGeoRows(_ className: String, _ data: JSONObject, rid: Int64) throws(ParseError) {
        for e in data.entries {
            guard case .object(let point) = e.value, point["__type"]?.stringValue == "GeoPoint",
                  let lat = point["latitude"]?.doubleValue, let lng = point["longitude"]?.doubleValue else { continue }
            let sql = Self.insertTexts.value(InsertText(className: className, geoField: e.key)) {
                Naming.geoInsertSQL(className, e.key)
            }
            try connection.withStatement(sql) { (s) throws(ParseError) in
                try s.bind(.integer(rid), at: 1)
                try s.bind(.real(lat), at: 2)
                try s.bind(.real(lng), at: 3)
                try s.step()
            }
        }
    }

    /// The insert statements' texts: a class row's (`geoField` nil) and a GeoPoint's R*Tree row's.
    struct InsertText: Hashable, Sendable {
        let className: String
        let geoField: String?
    }
    static let insertTexts = TextMemo<InsertText, String>()
}

/// A create's body validated and written as text before the write transaction (on the thread
/// that received the request, while the writer serves others): its fields checked and typed
/// (`InsertPlan`), its objectId drawn, its `data` text written. A batch of creates (group commit)
/// holds the writer for each create's whole path, so what does not need the database is done
/// here: ~20k of the ~260k instructions a create spends with the writer held.
/// `WriteTransaction.insert(prepared:identity:)` does the rest.
public struct PreparedInsert: Sendable {
    public let className: String
    /// The body as given (for a path that must start from it, such as a trigger added since).
    public let fields: JSONObject
    let plan: InsertPlan
    public let objectId: String
    let dataBytes: [UInt8]

    /// - Throws: what `insert` throws for the body alone: 103 bad class name, 105 bad field
    ///   name, 111 bad typed value.
    public init(className: String, fields: JSONObject) throws(ParseError) {
        try SchemaCatalog.validateClassName(className)
        guard className != Roles.className else { throw ParseError(.invalidClassName, "roles are not prepared") }
        self.className = className
        self.fields = fields
        plan = try InsertPlan(className: className, fields: fields, acl: nil, allowInternalFields: false)
        objectId = Random.alphanumeric(10)
        dataBytes = JSONValue.object(plan.data).jsonBytes
    }
}
