import MoonbaseAuth
import MoonbaseCore
import MoonbaseHTTP
import MoonbaseJSON
import MoonbaseQuota
import MoonbaseStore

/// Users, login, logout, sessions and the OAuth token endpoint.
/// Password hashing runs here, on a worker thread (these endpoints are never inline).
enum UsersEndpoints {
    static func routes(_ s: Services) -> [(String, String, Endpoint)] {
        [
            ("POST", "/parse/users", Endpoint("users.signup", access: .app) { req throws(ParseError) in
                req.target = .class("_User")
                let r = try s.signUp(try req.jsonBody(), caller: s.caller(req))
                let location = s.baseURL(req) + "/parse/users/\(r.userId)"
                return .json(201, JSON.encode(.object(r.body)), headers: [("Location", location)])
            }),
            ("POST", "/parse/login", Endpoint("users.login", access: .app) { req throws(ParseError) in
                let b = try req.jsonBody()
                return try login(s, req, username: b["username"]?.stringValue, email: b["email"]?.stringValue,
                                 password: b["password"]?.stringValue)
            }),
            ("GET", "/parse/login", Endpoint("users.login", access: .app) { req throws(ParseError) in
                try login(s, req, username: req.http.queryValue("username"), email: req.http.queryValue("email"),
                          password: req.http.queryValue("password"))
            }),
            ("POST", "/parse/logout", Endpoint("users.logout", access: .app) { req throws(ParseError) in
                guard let token = req.sessionToken else { throw ParseError(.invalidSessionToken, "Invalid session token") }
                try s.auth.logOut(token)
                return .json(200, Array("{}".utf8))
            }),
            ("GET", "/parse/users/me", Endpoint("users.me", access: .app) { req throws(ParseError) in
                guard let token = req.sessionToken else { throw ParseError(.invalidSessionToken, "Invalid session token") }
                return .json(200, JSON.encode(.object(try s.auth.me(token))))
            }),
            ("PUT", "/parse/users/me", Endpoint("users.update", access: .app) { req throws(ParseError) in
                guard let id = req.userId else { throw ParseError(.invalidSessionToken, "Invalid session token") }
                return try update(s, req, id)
            }),
            ("GET", "/parse/users/:objectId", Endpoint("users.get", access: .app) { req throws(ParseError) in
                req.target = .class("_User")
                let bytes = try s.objects.get("_User", req.param("objectId"), caller: s.caller(req))
                return .json(200, bytes)
            }),
            ("GET", "/parse/users", Endpoint("users.find", access: .app) { req throws(ParseError) in
                req.target = .class("_User")
                let q = try FindQuery(className: "_User", rest: ClassesEndpoints.restParams(req.http))
                return .json(200, try s.objects.find(q, caller: s.caller(req)).responseBody())
            }),
            ("PUT", "/parse/users/:objectId", Endpoint("users.update", access: .app) { req throws(ParseError) in
                try update(s, req, req.param("objectId"))
            }),
            ("DELETE", "/parse/users/:objectId", Endpoint("users.delete", access: .app) { req throws(ParseError) in
                req.target = .class("_User")
                try s.deleteUser(req.param("objectId"), caller: s.caller(req))
                return .json(200, Array("{}".utf8))
            }),
            ("POST", "/oauth/token", Endpoint("oauth.token", access: .open) { req throws(ParseError) in
                req.target = .api("oauth.token")
                let r = s.auth.tokenGrant(form: try form(req), ip: req.http.remoteAddress)
                let headers = r.headers.map { ($0.key, $0.value) }
                return .json(r.status, JSON.encode(.object(r.body)), headers: headers)
            }),
        ]
    }

    static func login(_ s: Services, _ req: APIRequest, username: String?, email: String?, password: String?) throws(ParseError) -> HTTPResponse {
        req.target = .api("users.login")
        let r = try s.auth.logIn(username: username, email: email, password: password, ip: req.http.remoteAddress)
        return .json(200, JSON.encode(.object(r.body)))
    }

    static func update(_ s: Services, _ req: APIRequest, _ id: String) throws(ParseError) -> HTTPResponse {
        req.target = .class("_User")
        var sessionId: String?
        if let t = req.sessionToken { sessionId = try s.auth.resolveSession(t)?.sessionId }
        let out = try s.updateUser(id, try req.jsonBody(), caller: s.caller(req), sessionId: sessionId)
        return .json(200, JSON.encode(.object(out)))
    }

    /// `application/x-www-form-urlencoded` or JSON body as string pairs (RFC 6749 §4.3).
    static func form(_ req: APIRequest) throws(ParseError) -> [String: String] {
        var out: [String: String] = [:]
        let type = req.http.header("content-type") ?? ""
        if type.hasPrefix("application/json") {
            for e in try req.jsonBody() {
                switch e.value {
                case .string(let v): out[e.key] = v
                case .int(let v): out[e.key] = String(v)
                default: break
                }
            }
            return out
        }
        let text = String(decoding: req.http.body, as: UTF8.self)
        for pair in text.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let k = formDecode(String(kv[0])) else { continue }
            out[k] = kv.count > 1 ? formDecode(String(kv[1])) ?? "" : ""
        }
        for (k, v) in req.http.query where out[k] == nil { out[k] = v }
        return out
    }

    static func formDecode(_ s: String) -> String? {
        var bytes: [UInt8] = []
        var u = Array(s.utf8)[...]
        while let c = u.first {
            u = u.dropFirst()
            if c == UInt8(ascii: "+") {
                bytes.append(32)
            } else if c == UInt8(ascii: "%"), u.count >= 2, let v = UInt8(String(decoding: u.prefix(2), as: UTF8.self), radix: 16) {
                bytes.append(v)
                u = u.dropFirst(2)
            } else {
                bytes.append(c)
            }
        }
        return String(validating: bytes, as: UTF8.self)
    }
}
