import MoonbaseAuth
import MoonbaseCore
import MoonbaseHTTP
import MoonbaseOutbound
import MoonbaseQuota
import MoonbaseStore
import Synchronization

/// Everything an endpoint may use, built once by the composition root (`buildHost`).
///
/// Immutable after init; every member is itself `Sendable`.
public final class Services: Sendable {
    public let config: HostConfig
    public let masterKey: String
    /// The last 500 Cloud Code calls (dashboard, `GET /admin/calls`).
    public let calls = CallRing(capacity: 500)
    public let clock: any HostClock
    /// The database behind every service, through the store's protocols (no connection here).
    public let store: any Store
    public let objects: ObjectService
    public let auth: AuthService
    public let quota: Quota
    public let metrics: ServerMetrics
    public let files: FileStore
    public let cloud: CloudService
    public let jobs: JobService
    public let usage: any UsageStore
    public let usageFlusher: UsageFlusher?
    /// Parse Config (`/parse/config`, Lua `config.get`).
    public let parseConfig: ConfigService
    /// Where Cloud Code's `http.request` may connect (`MOONBASE_HTTP_ALLOW` over the refusals).
    public let outboundPolicy: AddressPolicy
    /// Password reset and email verification tokens, mails and pages.
    public let accountMail: AccountMailService
    public let realtime: RealtimeService

    public init(config: HostConfig, masterKey: String, clock: any HostClock,
                store: any Store, parseConfig: ConfigService, accountMail: AccountMailService, auth: AuthService, quota: Quota, metrics: ServerMetrics,
                files: FileStore, cloud: CloudService, jobs: JobService,
                usage: any UsageStore, usageFlusher: UsageFlusher?, realtime: RealtimeService) {
        self.realtime = realtime
        self.config = config
        self.masterKey = masterKey
        self.clock = clock
        self.store = store
        self.objects = cloud.objects
        self.auth = auth
        self.quota = quota
        self.metrics = metrics
        self.files = files
        self.cloud = cloud
        self.jobs = jobs
        self.usage = usage
        self.usageFlusher = usageFlusher
        self.parseConfig = parseConfig
        // The allow list was validated when the configuration was read.
        self.outboundPolicy = (try? AddressPolicy(allow: config.httpAllow)) ?? AddressPolicy.strict
        self.accountMail = accountMail
        cloud.servicesBox.withLock { $0 = self }
    }

    /// The base URL for `Location` headers and file URLs: `--public-url`, else the request's Host.
    public func baseURL(_ req: APIRequest) -> String { baseURL(req.http) }

    public func baseURL(_ http: HTTPRequest) -> String {
        if let u = config.publicURL { return u.hasSuffix("/") ? String(u.dropLast()) : u }
        let host = http.header("host") ?? "\(config.host):\(config.port)"
        return "http://\(host)"
    }
}
