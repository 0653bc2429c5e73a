import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// A stored object as read from its class table: the reserved columns plus the `data` JSON text
/// of the other fields, kept as bytes so responses can splice it without a parse/encode round
/// trip.
public struct StoredObject: Sendable, Equatable {
    public var className: String
    /// The row id (key of the R*Tree and FTS5 side tables).
    public var rid: Int64
    public var objectId: String
    /// Milliseconds since the epoch.
    public var createdAt: Int64
    public var updatedAt: Int64
    /// The ACL JSON text, nil when the object has none (public).
    public var acl: [UInt8]?
    public var rperm: String?
    public var wperm: String?
    /// JSON object text of the non-reserved fields.
    public var data: [UInt8]

    /// The column list every reader selects, in the order `init(className:row:)` expects.
    public static let columns = "rid, objectId, createdAt, updatedAt, ACL, rperm, wperm, data"

    /// `columns` qualified by a table alias (`t.rid, t.objectId, …`).
    public static func columns(alias: String) -> String {
        columns.split(separator: ",").map { "\(alias).\($0.trimmingPrefix(" "))" }.joined(separator: ", ")
    }

    public init(className: String, rid: Int64, objectId: String, createdAt: Int64, updatedAt: Int64,
                acl: [UInt8]?, rperm: String?, wperm: String?, data: [UInt8]) {
        self.className = className
        self.rid = rid
        self.objectId = objectId
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.acl = acl
        self.rperm = rperm
        self.wperm = wperm
        self.data = data
    }

    /// Reads a row selected with `StoredObject.columns`, starting at column `offset`.
    public init(className: String, row: Statement, offset: Int32 = 0) {
        self.className = className
        rid = row.int64(offset)
        objectId = row.text(offset + 1) ?? ""
        createdAt = row.int64(offset + 2)
        updatedAt = row.int64(offset + 3)
        acl = row.bytes(offset + 4)
        rperm = row.text(offset + 5)
        wperm = row.text(offset + 6)
        data = row.bytes(offset + 7) ?? Array("{}".utf8)
    }

    public func canRead(_ identity: Identity) -> Bool { ACLs.admits(rperm, identity) }
    public func canWrite(_ identity: Identity) -> Bool { ACLs.admits(wperm, identity) }

    /// The stored fields (without the reserved ones), parsed.
    public func fields() throws(ParseError) -> JSONObject {
        try JSON.parse(data).objectValue ?? [:]
    }

    /// The ACL, parsed (nil when none).
    public func aclObject() throws(ParseError) -> JSONObject? {
        guard let acl else { return nil }
        return try JSON.parse(acl).objectValue
    }
}
