import MoonbaseCore
import MoonbaseHTTP
import MoonbaseJSON
import MoonbaseStore

/// `POST /parse/batch`: up to 50 class sub-requests, answered in order; `transaction: true`
/// makes it all-or-nothing. A batch costs one unit.
enum BatchEndpoint {
    static let maxRequests = 50

    static func routes(_ s: Services) -> [(String, String, Endpoint)] {
        [("POST", "/parse/batch", Endpoint("batch", access: .app) { req throws(ParseError) in
            let body = try req.jsonBody()
            guard let requests = body["requests"]?.arrayValue else {
                throw ParseError(.invalidJSON, "requests must be an array")
            }
            guard requests.count <= maxRequests else {
                throw ParseError(.invalidJSON, "too many requests in one batch (\(requests.count) > \(maxRequests))")
            }
            let caller = s.caller(req)
            let base = s.baseURL(req)
            if body["transaction"]?.boolValue == true {
                let results = try s.store.transaction { () throws(ParseError) -> [JSONValue] in
                    var out: [JSONValue] = []
                    for r in requests { out.append(["success": try run(s, r, caller, base)]) }
                    return out
                }
                return .json(200, JSON.encode(.array(results)))
            }
            var out: [JSONValue] = []
            for r in requests {
                do throws(ParseError) {
                    out.append(["success": try run(s, r, caller, base)])
                } catch {
                    out.append(["error": ["code": .int(Int64(error.code.rawValue)), "error": .string(error.message)]])
                }
            }
            return .json(200, JSON.encode(.array(out)))
        })]
    }

    /// One sub-request: `{method, path, body}` with path `/parse/classes/…` or `/classes/…`.
    static func run(_ s: Services, _ r: JSONValue, _ caller: CallerContext, _ base: String) throws(ParseError) -> JSONValue {
        guard let method = r["method"]?.stringValue?.uppercased(), var path = r["path"]?.stringValue else {
            throw ParseError(.invalidJSON, "each batch request needs a method and a path")
        }
        if path.hasPrefix("/parse/") { path = String(path.dropFirst(6)) }
        var parts = path.split(separator: "/").map(String.init)
        // `/roles[/ID]` is Parse's path for `/classes/_Role[/ID]`.
        if parts.first == "roles", parts.count <= 2 { parts = ["classes", "_Role"] + parts.dropFirst() }
        guard parts.count >= 2, parts.count <= 3, parts[0] == "classes" else {
            throw ParseError(.invalidJSON, "unsupported batch path: \(path)")
        }
        let className = parts[1]
        let body: JSONObject
        switch r["body"] {
        case nil, .null?: body = [:]
        case .object(let o)?: body = o
        default: throw ParseError(.invalidJSON, "the body of a batch request must be a JSON object")
        }
        switch (method, parts.count) {
        case ("POST", 2):
            let o = try s.objects.create(className, body, caller: caller)
            return ["objectId": .string(o.objectId), "createdAt": .string(ISO8601.format(millis: o.createdAt))]
        case ("PUT", 3):
            let o = try s.objects.update(className, parts[2], body, caller: caller)
            return ["updatedAt": .string(ISO8601.format(millis: o.updatedAt))]
        case ("DELETE", 3):
            try s.objects.delete(className, parts[2], caller: caller)
            return .object([:])
        case ("GET", 3):
            return try JSON.parse(try s.objects.get(className, parts[2], caller: caller))
        case ("GET", 2):
            // The body holds the query's parameters as JSON values (`where` an object or JSON
            // text, `limit` a number even beyond 64 bits, lists as arrays or comma text).
            let q = try FindQuery(className: className, options: body, maxLimit: FindQuery.restMaxLimit)
            return try JSON.parse(try s.objects.find(q, caller: caller).responseBody())
        default:
            throw ParseError(.invalidJSON, "unsupported batch request: \(method) \(path)")
        }
    }
}
