import MoonbaseCore
import MoonbaseHTTP
import MoonbaseLua

extension API {
    /// Every built-in endpoint: Parse REST under `/parse`, OAuth, admin and metrics.
    static func parseEndpoints(_ s: Services) -> [(String, String, Endpoint)] {
        ClassesEndpoints.routes(s) + RolesEndpoints.routes(s) + UsersEndpoints.routes(s) + CloudEndpoints.routes(s)
            + FilesEndpoints.routes(s) + BatchEndpoint.routes(s) + AdminEndpoints.routes(s, usage: s.usage)
            + AccountEndpoints.routes(s)
            + RealtimeEndpoints.routes(s)
    }

    /// Rebuilds the Lua route table from the current generation (hot reload).
    public func reloadLuaRoutes() {
        var r = Router<Endpoint>()
        for route in services.cloud.registry.routes {
            do {
                try r.add(route.method, route.path, CloudEndpoints.luaRoute(services, method: route.method, pattern: route.path))
            } catch {
                Log.error("route \(route.method) \(route.path) not mounted: \(error)")
            }
        }
        setLuaRoutes(r)
    }
}
