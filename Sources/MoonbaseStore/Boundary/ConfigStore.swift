import MoonbaseCore
import MoonbaseJSON

/// One Parse Config parameter as stored.
public struct ConfigParameter: Sendable, Equatable {
    public var name: String
    public var value: JSONValue
    /// Only the master key (and Cloud Code) may read it.
    public var masterKeyOnly: Bool

    public init(name: String, value: JSONValue, masterKeyOnly: Bool) {
        self.name = name
        self.value = value
        self.masterKeyOnly = masterKeyOnly
    }
}

/// One change to the Parse Config parameters.
public enum ConfigChange: Sendable, Equatable {
    /// Sets a parameter's value (its master-only flag is kept, false for a new one).
    case set(String, JSONValue)
    /// Removes a parameter.
    case remove(String)
    /// Sets or clears the master-only flag of an existing parameter (nothing when it is unset).
    case masterKeyOnly(String, Bool)
}

/// Parse Config parameters (`/parse/config`, Lua `config.get`).
public protocol ConfigStore: Sendable {
    /// Every parameter, by name.
    func configParameters() throws(ParseError) -> [ConfigParameter]
    /// Applies `changes` in order, in one transaction.
    func updateConfig(_ changes: [ConfigChange]) throws(ParseError)
    /// Calls `onChange` whenever the parameters may have changed other than through this
    /// process's `updateConfig` (another host sharing the database wrote them, or this host
    /// missed such news): a cache of them must be dropped then. Called on a background thread.
    func observeConfigChanges(_ onChange: @escaping @Sendable () -> Void)
}

extension ConfigStore {
    /// One process alone writes the parameters: nothing else changes them.
    public func observeConfigChanges(_ onChange: @escaping @Sendable () -> Void) {}
}
