import MoonbaseJSON

/// How an update looks to a `beforeSave` trigger, and how the trigger's answer turns back into
/// changes: `req.object` is the stored object with the changes applied (operators computed from
/// the stored values), and only the fields the trigger changed replace the client's changes, so
/// an `Increment` the trigger leaves alone stays an atomic SQL increment.
public enum UpdateView {
    public static let reserved: Set<String> = ["objectId", "createdAt", "updatedAt", "className", "__type"]

    /// `original` with `changes` applied for presentation.
    public static func apply(_ changes: JSONObject, to original: JSONObject) -> JSONObject {
        var out = original
        for e in changes where !reserved.contains(e.key) {
            if let op = e.value["__op"]?.stringValue {
                let current = original[e.key]
                switch op {
                case "Delete":
                    out[e.key] = nil
                case "Increment":
                    let amount = e.value["amount"] ?? .int(1)
                    switch (current ?? .int(0), amount) {
                    case (.int(let a), .int(let b)): out[e.key] = .int(a &+ b)
                    default: out[e.key] = .double((current?.doubleValue ?? 0) + (amount.doubleValue ?? 0))
                    }
                case "Add", "AddUnique", "Remove":
                    var arr = current?.arrayValue ?? []
                    let objects = e.value["objects"]?.arrayValue ?? []
                    if op == "Add" {
                        arr.append(contentsOf: objects)
                    } else if op == "AddUnique" {
                        for o in objects where !arr.contains(o) { arr.append(o) }
                    } else {
                        arr.removeAll { objects.contains($0) }
                    }
                    out[e.key] = .array(arr)
                default:
                    out[e.key] = e.value
                }
            } else {
                out[e.key] = e.value
            }
        }
        return out
    }

    /// The changes to store after the trigger returned `result`.
    public static func diff(changes: JSONObject, merged: JSONObject, result: JSONObject, original: JSONObject) -> JSONObject {
        var out = JSONObject()
        for e in changes where !reserved.contains(e.key) {
            let before = merged[e.key]
            let after = result[e.key]
            if before == after {
                out[e.key] = e.value
            } else if let after {
                out[e.key] = after
            } else {
                out[e.key] = ["__op": "Delete"]
            }
        }
        for e in result where !reserved.contains(e.key) && changes[e.key] == nil {
            if original[e.key] != e.value { out[e.key] = e.value }
        }
        for e in original where !reserved.contains(e.key) && changes[e.key] == nil && result[e.key] == nil && e.key != "ACL" {
            if !e.key.hasPrefix("_") { out[e.key] = ["__op": "Delete"] }
        }
        return out
    }
}
