import MoonbaseCore
import MoonbaseHTTP
import MoonbaseQuota

/// Which keys a route needs before its endpoint runs.
public enum Access: Sendable {
    /// No keys at all: `/parse/health`, file downloads, Lua routes, `/metrics` (unless bound to
    /// the master key), `/oauth/token` (its own client_id check).
    case open
    /// `X-Parse-Application-Id` (and the REST key when configured); sessions resolved.
    case app
    /// As `.app`, plus the master key (403/119 without it).
    case master
    /// The master key alone, no application id (`/admin/*`); 403/119 without it, so every
    /// refusal has a Parse code.
    case masterOnly
}

/// A registered API endpoint.
public struct Endpoint: Sendable {
    public typealias Body = @Sendable (APIRequest) throws(ParseError) -> HTTPResponse
    public var access: Access
    /// Answered on the I/O thread (cheap and non-blocking), not on a worker.
    public var inline: Bool
    /// Counted in usage (false for health and metrics).
    public var charged: Bool
    /// May start on the I/O thread as an attempt (Lua functions and routes, creates, and REST
    /// reads while long calls hold workers: see `API.attempt`).
    public var attemptable: Bool
    /// A stable name for metrics and usage (`classes.create`).
    public var name: String
    public var body: Body

    public init(_ name: String, access: Access, inline: Bool = false, charged: Bool = true,
                attemptable: Bool = false, _ body: @escaping Body) {
        self.attemptable = attemptable
        self.name = name
        self.access = access
        self.inline = inline
        self.charged = charged
        self.body = body
    }
}
