import MoonbaseCore
import MoonbaseJSON
import MoonbaseSQLite

/// Parse Relations: a field `{"__type":"Relation","className":"Target"}` whose members live in a
/// join table `"_mb_join:Owner:field"` (`owningId`, `relatedId`), one per relation field. The
/// `_mb_` prefix is reserved, so no class can take the name. The owner's `data` holds the
/// Relation marker itself, so a read shows the field as Parse does.
///
/// SQL triggers remove an owner's rows when the owner is deleted and a member's rows when the
/// member is deleted, on every delete path (single, set-based, cascades), in the same transaction.
extension Naming {
    /// `"_mb_join:Post:likes"`: members of the Relation field `likes` of `Post`.
    public static func joinTable(_ className: String, _ field: String) -> String { "\"_mb_join:\(className):\(field)\"" }

    /// The join table of a Relation field and its delete triggers on the owner and target tables.
    static func relationDDL(owner: String, field: String, target: String) -> String {
        let j = joinTable(owner, field)
        let raw = "_mb_join:\(owner):\(field)"
        return """
        CREATE TABLE IF NOT EXISTS \(j)(owningId TEXT NOT NULL, relatedId TEXT NOT NULL, PRIMARY KEY(owningId, relatedId)) WITHOUT ROWID;
        CREATE INDEX IF NOT EXISTS "\(raw)__related" ON \(j)(relatedId);
        CREATE TRIGGER IF NOT EXISTS "\(raw)__owner_ad" AFTER DELETE ON \(table(owner)) BEGIN
          DELETE FROM \(j) WHERE owningId = old.objectId;
        END;
        CREATE TRIGGER IF NOT EXISTS "\(raw)__target_ad" AFTER DELETE ON \(table(target)) BEGIN
          DELETE FROM \(j) WHERE relatedId = old.objectId;
        END;
        """
    }
}

/// `AddRelation` / `RemoveRelation` members of one field (both at once for the SDKs'
/// `{"__op":"Batch","ops":[…]}`), applied after the owner row is written.
struct RelationChange {
    var field: String
    var targetClass: String
    var adds: [String] = []
    var removes: [String] = []

    static func marker(_ targetClass: String) -> JSONValue {
        ["__type": "Relation", "className": .string(targetClass)]
    }

    /// Parses `{"__op":"AddRelation"|"RemoveRelation","objects":[Pointer…]}` (every object a
    /// Pointer, or a full object, of one class) or a `Batch` of those.
    /// - Throws: 111 for anything else.
    static func parse(_ field: String, op: String, _ o: JSONObject) throws(ParseError) -> RelationChange {
        if op == "Batch" {
            guard let ops = o["ops"]?.arrayValue, !ops.isEmpty, ops.count <= 16 else {
                throw ParseError(.incorrectType, "Batch of \(field) needs 1 to 16 ops")
            }
            var out: RelationChange?
            for sub in ops {
                guard let so = sub.objectValue, let sop = so["__op"]?.stringValue, sop == "AddRelation" || sop == "RemoveRelation" else {
                    throw ParseError(.incorrectType, "Batch of \(field) holds only AddRelation and RemoveRelation")
                }
                let c = try parse(field, op: sop, so)
                if var have = out {
                    guard have.targetClass == c.targetClass else {
                        throw ParseError(.incorrectType, "Batch of \(field): all objects must be of one class")
                    }
                    for id in c.adds { have.removes.removeAll { $0 == id }; if !have.adds.contains(id) { have.adds.append(id) } }
                    for id in c.removes { have.adds.removeAll { $0 == id }; if !have.removes.contains(id) { have.removes.append(id) } }
                    out = have
                } else {
                    out = c
                }
            }
            return out!
        }
        guard let items = o["objects"]?.arrayValue else { throw ParseError(.incorrectType, "\(op) of \(field) needs an objects array") }
        var cls: String?
        var ids: [String] = []
        for x in items {
            guard x.parseType == "Pointer" || x.parseType == "Object", let c = x["className"]?.stringValue,
                  Naming.isValidClassName(c), let id = x["objectId"]?.stringValue, !id.isEmpty, id.utf8.count <= 64 else {
                throw ParseError(.incorrectType, "\(op) of \(field) needs Pointers")
            }
            if let have = cls, have != c { throw ParseError(.incorrectType, "\(op) of \(field): all objects must be of one class") }
            cls = c
            if !ids.contains(id) { ids.append(id) }
        }
        guard let cls else { throw ParseError(.incorrectType, "\(op) of \(field) needs at least one object") }
        return op == "AddRelation" ? RelationChange(field: field, targetClass: cls, adds: ids)
            : RelationChange(field: field, targetClass: cls, removes: ids)
    }

    func apply(owner objectId: String, className: String, in tx: WriteTransaction) throws(ParseError) {
        let j = Naming.joinTable(className, field)
        for id in adds { _ = try tx.connection.run("INSERT OR IGNORE INTO \(j)(owningId, relatedId) VALUES(?, ?)", [.text(objectId), .text(id)]) }
        for id in removes { _ = try tx.connection.run("DELETE FROM \(j) WHERE owningId = ? AND relatedId = ?", [.text(objectId), .text(id)]) }
    }
}

extension WriteTransaction {
    /// Writes the relation members of `changes` for the owner `objectId`, after its row was
    /// written under the caller's permissions.
    func applyRelations(_ changes: [RelationChange], owner objectId: String, className: String) throws(ParseError) {
        for c in changes { try c.apply(owner: objectId, className: className, in: self) }
    }
}
