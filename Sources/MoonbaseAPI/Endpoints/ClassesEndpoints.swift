import MoonbaseAuth
import MoonbaseCore
import MoonbaseHTTP
import MoonbaseJSON
import MoonbaseQuota
import MoonbaseStore

/// `/parse/classes/...`: create, get, update, delete, query.
enum ClassesEndpoints {
    static func routes(_ s: Services) -> [(String, String, Endpoint)] {
        [
            ("POST", "/parse/classes/:className", Endpoint("classes.create", access: .app, attemptable: true) { req throws(ParseError) in
                let className = req.param("className")
                req.target = .class(className)
                if let p = (req.http.note as? RoutedNote)?.prepared, p.insert.className == className {
                    let o = try s.objects.create(prepared: p.insert, caller: s.caller(req))
                    // A trigger added since dispatch created it from the body, with an objectId of its own.
                    return created(s, req, className: className, o, location: o.objectId == p.insert.objectId ? p.location : nil)
                }
                let body = try req.jsonBody()
                if className == "_User" {
                    // Users are created by sign-up only (the password must be hashed).
                    let r = try s.signUp(body, caller: s.caller(req))
                    let location = s.baseURL(req) + "/parse/classes/_User/\(r.userId)"
                    return .json(201, JSON.encode(.object(r.body)), headers: [("Location", location)])
                }
                let o = try s.objects.create(className, body, caller: s.caller(req))
                return created(s, req, className: className, o)
            }),
            ("GET", "/parse/classes/:className/:objectId", Endpoint("classes.get", access: .app, attemptable: true) { req throws(ParseError) in
                let className = req.param("className")
                req.target = .class(className)
                let (keys, include) = try keysAndInclude(req.http)
                let exclude = req.http.queryValue("excludeKeys").map { $0.split(separator: ",").map(String.init) } ?? []
                _ = try validated(keys: exclude, include: [])
                let bytes = try s.objects.get(className, req.param("objectId"), keys: keys, include: include,
                                              excludeKeys: exclude, caller: s.caller(req))
                return .json(200, bytes)
            }),
            ("PUT", "/parse/classes/:className/:objectId", Endpoint("classes.update", access: .app) { req throws(ParseError) in
                let className = req.param("className")
                req.target = .class(className)
                if className == "_User" { return try UsersEndpoints.update(s, req, req.param("objectId")) }
                let o = try s.objects.update(className, req.param("objectId"), try req.jsonBody(), caller: s.caller(req))
                return .json(200, updatedBody(o))
            }),
            ("DELETE", "/parse/classes/:className/:objectId", Endpoint("classes.delete", access: .app) { req throws(ParseError) in
                let className = req.param("className")
                req.target = .class(className)
                if className == "_User" {
                    try s.deleteUser(req.param("objectId"), caller: s.caller(req))
                    return .json(200, Array("{}".utf8))
                }
                try s.objects.delete(className, req.param("objectId"), caller: s.caller(req))
                return .json(200, Array("{}".utf8))
            }),
            ("GET", "/parse/classes/:className", Endpoint("classes.find", access: .app, attemptable: true) { req throws(ParseError) in
                let className = req.param("className")
                req.target = .class(className)
                let q = try FindQuery(className: className, rest: restParams(req.http))
                return .json(200, try s.objects.find(q, caller: s.caller(req)).responseBody())
            }),
        ]
    }

    /// A create's answer. `location`: its `Location` header when already made (a batched create
    /// makes it at dispatch, off the batch that holds the writer).
    static func created(_ s: Services, _ req: APIRequest, className: String, _ o: StoredObject,
                        location made: String? = nil) -> HTTPResponse {
        var w = JSONWriter(capacity: 96)
        w.raw("{\"objectId\":")
        w.string(o.objectId)
        w.raw(",\"createdAt\":\"")
        ISO8601.append(millis: o.createdAt, to: &w.bytes)
        w.raw("\"}")
        let location = made ?? createdLocation(s.baseURL(req), className: className, objectId: o.objectId)
        return .json(201, w.bytes, headers: [("Location", location)])
    }

    static func createdLocation(_ base: String, className: String, objectId: String) -> String {
        base + "/parse/classes/\(className)/\(objectId)"
    }

    static func updatedBody(_ o: StoredObject) -> [UInt8] {
        var w = JSONWriter(capacity: 48)
        w.raw("{\"updatedAt\":")
        w.string(ISO8601.format(millis: o.updatedAt))
        w.byte(UInt8(ascii: "}"))
        return w.bytes
    }

    /// Query parameters as a dictionary (last value wins), for `FindQuery(rest:)`.
    static func restParams(_ http: HTTPRequest) -> [String: String] {
        var d: [String: String] = [:]
        for (k, v) in http.query { d[k] = v }
        return d
    }

    static func keysAndInclude(_ http: HTTPRequest) throws(ParseError) -> ([String]?, [String]) {
        let keys = http.queryValue("keys").map { $0.split(separator: ",").map(String.init) }
        let include = http.queryValue("include").map { $0.split(separator: ",").map(String.init) } ?? []
        return try validated(keys: keys, include: include)
    }

    /// `keys` and `include` paths checked like query paths (105), for REST and Lua alike.
    static func validated(keys: [String]?, include: [String]) throws(ParseError) -> ([String]?, [String]) {
        for k in (keys ?? []) + include where !Naming.isValidFieldPath(k) {
            throw ParseError(.invalidKeyName, "invalid field name: \(k)")
        }
        return (keys, include)
    }
}

extension Services {
    /// The caller of an API request, for the object service and Lua.
    func caller(_ req: APIRequest) -> CallerContext {
        CallerContext(identity: req.identity, user: req.user, requestId: req.requestId, ip: req.http.remoteAddress,
                      headers: req.http.headers, meter: req.meter)
    }
}
