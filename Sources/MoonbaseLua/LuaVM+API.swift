import CLuaBridge

#if canImport(Glibc)
import Glibc
#endif

extension LuaVM {
    /// Every global and namespace function a script on this VM can reach, as sorted dotted names
    /// (`db.find`, `string.format`, `pcall`): what `moonbase check --list-api` prints for editor
    /// setups, and what the documentation check compares with the docs.
    public func apiNames() -> [String] {
        var len = 0
        guard let p = lb_api_names(handle, &len) else { return [] }
        defer { free(p) }
        let text = String(decoding: UnsafeRawBufferPointer(start: p, count: len), as: UTF8.self)
        return text.split(separator: "\n").map(String.init).sorted()
    }
}
