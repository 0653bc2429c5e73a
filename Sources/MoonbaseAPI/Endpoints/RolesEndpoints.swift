import MoonbaseCore
import MoonbaseHTTP
import MoonbaseJSON
import MoonbaseQuota
import MoonbaseStore

/// `/parse/roles[/ID]`: Parse's REST paths for `_Role`, the same operations (and permissions) as
/// `/parse/classes/_Role[/ID]`.
enum RolesEndpoints {
    static let className = "_Role"

    static func routes(_ s: Services) -> [(String, String, Endpoint)] {
        [
            ("POST", "/parse/roles", Endpoint("roles.create", access: .app) { req throws(ParseError) in
                req.target = .class(className)
                let o = try s.objects.create(className, try req.jsonBody(), caller: s.caller(req))
                return ClassesEndpoints.created(s, req, className: className, o)
            }),
            ("GET", "/parse/roles/:objectId", Endpoint("roles.get", access: .app) { req throws(ParseError) in
                req.target = .class(className)
                let (keys, include) = try ClassesEndpoints.keysAndInclude(req.http)
                return .json(200, try s.objects.get(className, req.param("objectId"), keys: keys, include: include, caller: s.caller(req)))
            }),
            ("PUT", "/parse/roles/:objectId", Endpoint("roles.update", access: .app) { req throws(ParseError) in
                req.target = .class(className)
                let o = try s.objects.update(className, req.param("objectId"), try req.jsonBody(), caller: s.caller(req))
                return .json(200, ClassesEndpoints.updatedBody(o))
            }),
            ("DELETE", "/parse/roles/:objectId", Endpoint("roles.delete", access: .app) { req throws(ParseError) in
                req.target = .class(className)
                try s.objects.delete(className, req.param("objectId"), caller: s.caller(req))
                return .json(200, Array("{}".utf8))
            }),
            ("GET", "/parse/roles", Endpoint("roles.find", access: .app) { req throws(ParseError) in
                req.target = .class(className)
                let q = try FindQuery(className: className, rest: ClassesEndpoints.restParams(req.http))
                return .json(200, try s.objects.find(q, caller: s.caller(req)).responseBody())
            }),
        ]
    }
}
