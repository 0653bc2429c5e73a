import MoonbaseAPI
import MoonbaseCore
import MoonbaseCrypto

/// The master key: from the config, else `DATA/master.key` (mode 0600), else generated on first
/// start, stored there and printed once.
public enum MasterKey {
    /// - Parameter create: false for the verbs that only read (`jobs`, `usage`, `call`): they
    ///   never write a key; without one they use a random key of their own, valid for no one.
    public static func resolve(_ config: HostConfig, create: Bool = true) throws(ParseError) -> String {
        if let k = config.masterKey { return k }
        if let bytes = FileSystem.readFile(config.masterKeyPath) {
            let key = String(decoding: bytes, as: UTF8.self).trimmingWhitespace()
            if !key.isEmpty { return key }
        }
        let key = Random.alphanumeric(40)
        guard create else { return key }
        try FileSystem.writeFile(config.masterKeyPath, Array((key + "\n").utf8), mode: 0o600)
        Log.info("generated a master key in \(config.masterKeyPath) (mode 0600): \(key)")
        return key
    }
}

