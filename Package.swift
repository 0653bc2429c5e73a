// swift-tools-version:6.0
// Moonbase: one Swift binary, a Parse-compatible backend over SQLite with Lua Cloud Code.
// Layout: each C library sits behind exactly one Swift module (checked by .ci/run).
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    // Release builds leave out the run-time exclusivity checks (each access to a class's stored
    // `var` or a global calls `swift_beginAccess`, which records it in a thread-local set): about
    // 4% of a Lua hello's instructions in callgrind. The compiler still proves exclusivity
    // statically, and debug builds — the ones `make test` runs — keep the dynamic checks, so an
    // overlapping access still fails a test.
    .unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release)),
]

let package = Package(
    name: "moonbase",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "moonbase", targets: ["moonbase"]),
    ],
    targets: [
        // System libraries (Debian -dev packages through pkg-config).
        .systemLibrary(name: "CSQLite", pkgConfig: "sqlite3", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CLua", pkgConfig: "lua5.4", providers: [.apt(["liblua5.4-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(name: "CSodium", pkgConfig: "libsodium", providers: [.apt(["libsodium-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        // Debian's libwslay-dev ships no pkg-config file: the module map links -lwslay.
        .systemLibrary(name: "CWslay", providers: [.apt(["libwslay-dev"])]),
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),

        // Our C targets.
        .target(name: "CJSON"),
        .target(name: "CLuaBridge", dependencies: ["CLua", "CJSON"]),
        // Rewrites libmicrohttpd's own error answers into Parse error bodies (see guard.c).
        .target(name: "CHTTPGuard", dependencies: ["CMicroHTTPD"]),
        .target(name: "CEpoll"),
        // Gathers each commit's WAL frames into one write (see mb_walbuf.c).
        .target(name: "CSQLiteWAL", dependencies: ["CSQLite"]),

        // Swift modules, leaves first.
        .target(name: "MoonbaseCore", swiftSettings: swiftSettings),
        .target(name: "MoonbaseJSON", dependencies: ["MoonbaseCore", "CJSON"], swiftSettings: swiftSettings),
        .target(name: "MoonbaseSQLite", dependencies: ["MoonbaseCore", "MoonbaseJSON", "CSQLite", "CSQLiteWAL"], swiftSettings: swiftSettings),
        .target(name: "MoonbaseCrypto", dependencies: ["COpenSSL", "CSodium"], swiftSettings: swiftSettings),
        .target(name: "MoonbaseStore", dependencies: ["MoonbaseCore", "MoonbaseJSON", "MoonbaseSQLite", "MoonbaseCrypto", "MoonbaseQuota",
                                                     "MoonbasePostgres"],
                swiftSettings: swiftSettings),
        .target(name: "MoonbaseAuth", dependencies: ["MoonbaseCore", "MoonbaseJSON", "MoonbaseStore", "MoonbaseCrypto"], swiftSettings: swiftSettings),
        .target(name: "MoonbaseLua", dependencies: ["MoonbaseCore", "MoonbaseJSON", "MoonbaseCrypto", "CLuaBridge"], swiftSettings: swiftSettings),
        .target(name: "MoonbaseCron", dependencies: ["MoonbaseCore", "MoonbaseJSON"], swiftSettings: swiftSettings),
        .target(name: "MoonbaseQuota", dependencies: ["MoonbaseCore"], swiftSettings: swiftSettings),
        .target(name: "MoonbaseHTTP", dependencies: ["MoonbaseCore", "CMicroHTTPD", "CHTTPGuard"], swiftSettings: swiftSettings),
        .target(name: "MoonbaseOutbound", dependencies: ["CCurl"], swiftSettings: swiftSettings),
        .target(name: "MoonbasePostgres", dependencies: ["MoonbaseCore", "CLibPQ"], swiftSettings: swiftSettings),
        .target(name: "MoonbaseRealtime", dependencies: ["MoonbaseCore", "MoonbaseJSON", "MoonbaseStore"],
                swiftSettings: swiftSettings),
        .target(
            name: "MoonbaseAPI",
            dependencies: ["MoonbaseCore", "MoonbaseJSON", "MoonbaseStore", "MoonbaseAuth", "MoonbaseLua",
                           "MoonbaseCron", "MoonbaseQuota", "MoonbaseHTTP", "MoonbaseCrypto", "MoonbaseOutbound",
                           "MoonbaseRealtime"],
            swiftSettings: swiftSettings),
        .target(
            name: "MoonbaseLiveQuery",
            dependencies: ["MoonbaseCore", "MoonbaseJSON", "MoonbaseAPI", "MoonbaseAuth", "MoonbaseLua", "MoonbaseQuota",
                           "MoonbaseHTTP", "MoonbaseCrypto", "MoonbaseRealtime", "MoonbaseStore", "CWslay", "CEpoll"],
            swiftSettings: swiftSettings),
        // The composition root: builds every part and implements the leaf protocols (job runner, …).
        .target(name: "MoonbaseHost",
                dependencies: ["MoonbaseAPI", "MoonbaseAuth", "MoonbaseCore", "MoonbaseCron", "MoonbaseCrypto", "MoonbaseHTTP",
                               "MoonbaseJSON", "MoonbaseLiveQuery", "MoonbaseLua", "MoonbaseQuota", "MoonbaseStore"],
                swiftSettings: swiftSettings),
        .executableTarget(name: "moonbase", dependencies: ["MoonbaseAPI", "MoonbaseCore", "MoonbaseHost"], swiftSettings: swiftSettings),
        // `make bench`: CPU per 1 KB JSON parse/encode (the JSON budget: 10 µs each way).
        .executableTarget(name: "jsonbench", dependencies: ["CJSON", "MoonbaseCore", "MoonbaseJSON"], path: "bench/jsonbench"),

        // Tests: one target per module.
        .testTarget(name: "MoonbaseJSONTests", dependencies: ["CJSON", "MoonbaseCore", "MoonbaseJSON"]),
        .testTarget(name: "MoonbaseStoreTests", dependencies: ["MoonbaseCore", "MoonbaseJSON", "MoonbaseQuota", "MoonbaseSQLite", "MoonbaseStore"]),
        .testTarget(name: "MoonbaseLuaTests", dependencies: ["MoonbaseCore", "MoonbaseJSON", "MoonbaseLua"]),
        .testTarget(name: "MoonbaseCronTests", dependencies: ["MoonbaseCore", "MoonbaseCron", "MoonbaseJSON"]),
        .testTarget(name: "MoonbaseQuotaTests", dependencies: ["MoonbaseCore", "MoonbaseQuota"]),
        .testTarget(name: "MoonbaseCryptoTests", dependencies: ["MoonbaseCore", "MoonbaseCrypto"]),
        .testTarget(name: "MoonbaseHTTPTests", dependencies: ["MoonbaseHTTP"]),
        .testTarget(name: "MoonbaseRealtimeTests", dependencies: ["MoonbaseCore", "MoonbaseJSON", "MoonbaseRealtime", "MoonbaseSQLite", "MoonbaseStore"]),
        .testTarget(name: "MoonbaseAuthTests", dependencies: ["MoonbaseAuth", "MoonbaseCore", "MoonbaseJSON", "MoonbaseSQLite", "MoonbaseStore"]),
        // The whole host built in process (Host.build) and driven without sockets.
        .testTarget(name: "MoonbaseAPITests", dependencies: ["MoonbaseHost", "MoonbaseAPI", "MoonbaseHTTP", "MoonbaseJSON", "MoonbaseCore"]),
        .testTarget(name: "MoonbaseOutboundTests", dependencies: ["MoonbaseOutbound"]),
        // Runs against a throw-away PostgreSQL 15 cluster (tests/pg/cluster.sh) started for the run.
        .testTarget(name: "MoonbasePostgresTests", dependencies: ["MoonbaseCore", "MoonbaseJSON", "MoonbasePostgres", "MoonbaseQuota", "MoonbaseSQLite", "MoonbaseStore"]),
    ]
)
