import MoonbaseCore

/// The Cloud Code deployed through the API, as stored for every host sharing the database.
public struct CodeBundle: Sendable {
    /// Grows by one with each deploy.
    public var version: Int64
    /// Every file (`name.lua`, `lib/…/name.lua`), sorted by name.
    public var files: [(file: String, text: String)]

    public init(version: Int64, files: [(file: String, text: String)]) {
        self.version = version
        self.files = files
    }
}

/// Where deployed Cloud Code lives when several hosts share the database (PostgreSQL): a stored
/// bundle wins over each host's local `functions/` folder, and every host is told of a new one.
/// With SQLite one host serves the database and its folder is the deployed code: nothing is
/// stored (`storesCodeBundles` false).
public protocol CodeBundleStore: Sendable {
    /// Whether deploys are stored here (true) or written to the host's folder (false).
    var storesCodeBundles: Bool { get }
    /// The stored bundle; nil when nothing was deployed yet.
    func codeBundle() throws(ParseError) -> CodeBundle?
    /// Replaces the bundle with `change(files)`, where `files` is the stored bundle's files or,
    /// when none is stored yet, `base`. Deploys run one at a time across hosts; when `change`
    /// throws nothing is stored. Every host is told once the new bundle is committed.
    @discardableResult
    func updateCodeBundle(base: [(file: String, text: String)],
                          _ change: ([(file: String, text: String)]) throws(ParseError) -> [(file: String, text: String)])
        throws(ParseError) -> CodeBundle
    /// Calls `onChange` when a host stored a new bundle, or when this host may have missed news
    /// of one. Called on a background thread.
    func observeCodeBundles(_ onChange: @escaping @Sendable () -> Void)
}

extension CodeBundleStore {
    public var storesCodeBundles: Bool { false }
    public func codeBundle() throws(ParseError) -> CodeBundle? { nil }
    @discardableResult
    public func updateCodeBundle(base: [(file: String, text: String)],
                                 _ change: ([(file: String, text: String)]) throws(ParseError) -> [(file: String, text: String)])
        throws(ParseError) -> CodeBundle {
        throw ParseError.internalError("this store keeps Cloud Code in the host's folder")
    }
    public func observeCodeBundles(_ onChange: @escaping @Sendable () -> Void) {}
}
