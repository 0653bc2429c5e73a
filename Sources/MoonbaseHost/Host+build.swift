import MoonbaseAPI
import MoonbaseAuth
import MoonbaseCore
import MoonbaseCron
import MoonbaseHTTP
import MoonbaseJSON
import MoonbaseLua
import MoonbaseQuota
import MoonbaseStore

/// The composition root: the only place that builds the store, the services,
/// Cloud Code and the server. Used by `serve`, `call`, `jobs run` and the tests.
public final class Host: Sendable {
    public let services: Services
    public let api: API
    public let watcher: FolderWatcher?

    /// Builds everything for `config`; `serving` adds the file watcher and background services.
    public static func build(_ config: HostConfig, serving: Bool) throws(ParseError) -> Host {
        Log.configure(format: config.logFormat, level: config.logLevel)
        try FileSystem.makeDirectories(config.dataDir, mode: 0o700)
        let clock = SystemClock()
        // Only the server makes the key it prints; the other verbs never leave one behind.
        let masterKey = try MasterKey.resolve(config, create: serving)
        let store = try openStore(config, clock: clock)
        var authConfig = AuthConfig(appId: config.appId)
        authConfig.loginMaxFailures = config.loginMaxFailures
        authConfig.sessionLifetimeMillis = config.sessionLengthSeconds * 1000
        authConfig.accessTokenLifetimeMillis = config.accessTokenSeconds * 1000
        authConfig.refreshTokenLifetimeMillis = config.refreshTokenSeconds * 1000
        let auth = try AuthService(store: store, config: authConfig, clock: clock)
        let quota = Quota(config: QuotaConfig(accountingEnabled: config.accounting,
                                              monthlyRequests: Int64(config.quotaMonthlyRequests),
                                              perMinute: Int64(config.rateLimitPerMinute)), clock: clock)
        let usage: any UsageStore = store
        do { try quota.load(from: usage) } catch { throw ParseError.internalError("loading usage: \(error)") }
        let metrics = ServerMetrics()
        let files = try FileStore(dir: config.filesDir, store: store, clock: clock)
        let objects = ObjectService(store: store)
        // MOONBASE_LUA_* set the limits of functions, triggers and routes; jobs keep their own
        // (1 h, 256 MB, no DB-operation limit) except an explicit instruction budget and the result cap.
        var jobLimits = LuaLimits.jobDefaults
        jobLimits.maxInstructions = Int64(config.luaMaxInstructions)
        jobLimits.maxResultBytes = Int64(config.maxResponseMB) << 20
        let limits = LuaLimitsConfig(
            functions: LuaLimits(timeoutMs: Int64(config.luaTimeoutMs), maxMemoryMB: Int64(config.luaMaxMemoryMB),
                                 maxDbOps: Int64(config.luaMaxDbOps), maxInstructions: Int64(config.luaMaxInstructions),
                                 writerHoldMs: Int64(config.luaWriterHoldMs), maxVMMemoryMB: Int64(config.luaMaxVMMemoryMB),
                                 maxResultMB: Int64(config.maxResponseMB)),
            jobs: jobLimits, loading: .loadDefaults)
        let cloud = CloudService(objects: objects, auth: auth, files: files, limits: limits, clock: clock)
        objects.setTriggers(cloud)
        let recorder = JobStatusRecorder(store: store, keepPerJob: config.jobHistoryPerJob)
        var cronOptions = Scheduler.Options()
        cronOptions.cronMinuteMs = config.testOnlyCronMinuteMs
        let jobs = JobService(runner: CloudJobRunner(cloud: cloud, metrics: metrics, store: store), recorder: recorder, metrics: metrics,
                              clock: clock, cronDir: config.cronDir, options: cronOptions)
        // Hosts sharing a database learn each other's counts at each flush: flushing twice a
        // second keeps a limit's overshoot within one second of traffic per other host.
        let flusher = serving && config.accounting
            ? UsageFlusher(quota: quota, sink: usage, intervalMillis: store.isSharedByHosts ? 500 : nil) : nil
        let services = Services(config: config, masterKey: masterKey, clock: clock, store: store,
                                parseConfig: ConfigService(store: store),
                                accountMail: AccountMailService(store: store, clock: clock),
                                auth: auth, quota: quota, metrics: metrics, files: files, cloud: cloud, jobs: jobs,
                                usage: usage, usageFlusher: flusher,
                                realtime: try RealtimeService(store: store, auth: auth, cloud: cloud, metrics: metrics))
        let api = try API(services: services)
        // Declarations and routes follow every generation; the first load happens here.
        cloud.observeReload { gen in
            Host.applyDeclarations(gen.registry, store: store)
            api.reloadLuaRoutes()
            jobs.reload(jobs: Set(gen.registry.jobs.keys))
        }
        let errors = Host.loadCloudCode(cloud.code, store: store, functionsDir: config.functionsDir, observe: serving)
        if !errors.isEmpty && cloud.generation.id == 0 {
            // Nothing loaded: serve without Cloud Code (the errors are logged and listed by
            // GET /admin/functions), but still read the schedules' syntax.
            jobs.reload(jobs: [])
        }
        var watcher: FolderWatcher?
        if serving {
            watcher = FolderWatcher(folders: [config.functionsDir, config.cronDir]) { changed in
                if changed.contains(config.functionsDir) {
                    Host.loadCloudCode(cloud.code, store: store, functionsDir: config.functionsDir)
                } else {
                    jobs.reload(jobs: Set(cloud.registry.jobs.keys))
                }
            }
        }
        return Host(services: services, api: api, watcher: watcher)
    }

    /// Loads the Cloud Code this host serves: the bundle deployed to any host when the store
    /// keeps one (it wins over the local folder, whose edits are then ignored), else the folder.
    /// With a shared store, a bundle another host stored is loaded when the store tells.
    @discardableResult
    static func loadCloudCode(_ code: CloudCode, store: any Store, functionsDir: String, observe: Bool = false) -> [String: String] {
        if observe && store.storesCodeBundles {
            // Loaded on a thread of its own: the store's listening thread only asks.
            let reload = CoalescedTask { Host.loadCloudCode(code, store: store, functionsDir: functionsDir) }
            store.observeCodeBundles { reload.request() }
        }
        // Chosen under the load lock: a deploy that finished meanwhile is seen.
        return code.load { () -> [(file: String, text: String)]? in
            guard store.storesCodeBundles else { return CloudCode.readSources(functionsDir) }
            let bundle: CodeBundle?
            do throws(ParseError) { bundle = try store.codeBundle() } catch {
                Log.error("cloud code: cannot read the deployed bundle (\(error.message)); serving the functions folder")
                return CloudCode.readSources(functionsDir)
            }
            guard let bundle else { return CloudCode.readSources(functionsDir) }
            let serving = code.generation.sources
            if serving.count == bundle.files.count
                && zip(serving, bundle.files).allSatisfy({ $0.file == $1.file && $0.text == $1.text }) {
                return nil
            }
            Log.info("cloud code: serving deployed bundle \(bundle.version) (the functions folder is not read)")
            return bundle.files
        }
    }

    /// The store `config` names: PostgreSQL at `databaseURL`, else SQLite in the data dir.
    /// - Throws: 503 when PostgreSQL cannot be reached; 1 when the SQLite file cannot be opened.
    static func openStore(_ config: HostConfig, clock: any HostClock) throws(ParseError) -> any Store {
        guard let url = config.databaseURL else { return try SQLiteDocumentStore(path: config.databasePath, clock: clock) }
        return try PostgresStore(url: url, clock: clock)
    }

    init(services: Services, api: API, watcher: FolderWatcher?) {
        self.services = services
        self.api = api
        self.watcher = watcher
    }

    /// `cloud.index`, `cloud.textIndex`, `cloud.classPermissions`: applied on every load,
    /// idempotently, through the same store calls as `/parse/schemas`.
    static func applyDeclarations(_ reg: CloudRegistry, store: any DocumentStore) {
        var byClass: [String: JSONObjectBuilder] = [:]
        for d in reg.indexes {
            let name = (d.text ? "text_" : "idx_") + d.fields.joined(separator: "_")
            var spec: JSONValue
            if d.text {
                spec = .object(JSONObject(d.fields.map { .init($0, .string("text")) }))
            } else {
                let fields = JSONValue.object(JSONObject(d.fields.map { .init($0, .int(1)) }))
                spec = d.unique ? .object(["fields": fields, "unique": true]) : fields
            }
            byClass[d.className, default: JSONObjectBuilder()].entries.append(.init(name, spec))
        }
        for (className, b) in byClass.sorted(by: { $0.key < $1.key }) {
            do throws(ParseError) {
                try store.setIndexes(className, JSONObject(b.entries))
            } catch {
                Log.error("cloud.index on \(className) not applied: \(error.message)")
            }
        }
        for p in reg.classPermissions {
            do throws(ParseError) {
                guard let o = p.permissions.objectValue else { continue }
                try store.setClassPermissions(p.className, o)
            } catch {
                Log.error("cloud.classPermissions on \(p.className) not applied: \(error.message)")
            }
        }
    }
}

struct JSONObjectBuilder {
    var entries: [JSONObject.Entry] = []
}
