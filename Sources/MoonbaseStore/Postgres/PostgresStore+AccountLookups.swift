import MoonbaseCore
import MoonbaseJSON
import MoonbasePostgres

/// AccountStore's users and sessions on PostgreSQL, built on the document part: lookups find the
/// row's id with plain SQL on the class table (the email lookup spells the unique index's
/// expression) and read the object through `fetchRaw`; user writes go through the document
/// writes that accept internal fields; session deletes are set-based deletes by query, recorded
/// in the change feed like every delete.
extension PostgresStore {
    public func prepareAccounts() throws(ParseError) {
        try setIndexes("_User", ["auth_username": ["fields": ["username": 1], "unique": true]])
        try setIndexes("_Session", [
            "auth_token": ["fields": ["sessionTokenHash": 1], "unique": true],
            "auth_refresh": ["refreshTokenHash": 1],
            "auth_user": ["user": 1],
        ])
        try installAccountRules()
    }

    public func user(username: String) throws(ParseError) -> StoredObject? {
        try first("_User", "data->>'username' = $1", username)
    }

    public func user(email: String) throws(ParseError) -> StoredObject? {
        try first("_User", "lower(data->>'email') = lower($1)", email)
    }

    public func session(tokenHash: String) throws(ParseError) -> StoredObject? {
        try first("_Session", "data->>'sessionTokenHash' = $1", tokenHash)
    }

    public func session(refreshTokenHash: String) throws(ParseError) -> StoredObject? {
        try first("_Session", "data->>'refreshTokenHash' = $1", refreshTokenHash)
    }

    /// The object of `className` whose row matches `filter` (one `$1` text parameter).
    func first(_ className: String, _ filter: String, _ value: String) throws(ParseError) -> StoredObject? {
        let id = try pool.withConnection { (c) throws(ParseError) in
            try c.execute("SELECT objectId FROM \(Naming.table(className)) WHERE \(filter) LIMIT 1", [.text(value)]).scalar?.string
        }
        guard let id else { return nil }
        return try fetchRaw(className, objectId: id)
    }

    public func insertUser(fields: JSONObject, acl: JSONValue?) throws(ParseError) -> StoredObject {
        try insert("_User", fields: fields, acl: acl, identity: .master, allowInternalFields: true)
    }

    public func updateUser(_ userId: String, changes: JSONObject, identity: Identity) throws(ParseError) -> StoredObject {
        try update("_User", objectId: userId, changes: changes, identity: identity, allowInternalFields: true)
    }

    public func deleteSessions(userId: String, except sessionId: String?) throws(ParseError) -> Int {
        var w = JSONObject()
        w["user"] = .object(["__type": "Pointer", "className": "_User", "objectId": .string(userId)])
        if let sessionId { w["objectId"] = .object(["$ne": .string(sessionId)]) }
        return try deleteWhere("_Session", where: .object(w), identity: .master)
    }

    /// Sessions whose token expired and whose refresh token (when they have one) expired too.
    public func deleteExpiredSessions(now: Int64) throws(ParseError) -> Int {
        let date = JSONValue.object(["__type": "Date", "iso": .string(ISO8601.format(millis: now))])
        let w: JSONValue = .object([
            "expiresAt": .object(["$lte": date]),
            "$or": .array([.object(["refreshExpiresAt": .object(["$exists": false])]),
                           .object(["refreshExpiresAt": .object(["$lte": date])])]),
        ])
        return try deleteWhere("_Session", where: w, identity: .master)
    }
}
