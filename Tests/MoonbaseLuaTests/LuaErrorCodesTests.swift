import MoonbaseCore
import MoonbaseJSON
import Testing
@testable import MoonbaseLua

/// `cloud.codes`: Parse's error codes by their SDK names, read-only, from the host's one list.
@Suite struct LuaErrorCodesTests {
    @Test func everyNamedCodeIsThere() throws {
        for (name, code) in ParseErrorCode.named {
            #expect(try run("return cloud.codes.\(name)") == .int(Int64(code.rawValue)), "\(name)")
        }
        #expect(try run("return cloud.codes.NO_SUCH_CODE") == .null)
    }

    @Test func codesAreReadOnly() throws {
        #expect(failure { try run("cloud.codes.OBJECT_NOT_FOUND = 1") }?.code == .scriptFailed)
        #expect(try run("return cloud.codes.OBJECT_NOT_FOUND") == .int(101))
    }

    @Test func aNamedCodeReachesTheCaller() throws {
        let e = failure { try run("error(cloud.error(cloud.codes.VALIDATION_ERROR, 'title is required'))") }
        #expect(e?.code == .validationError)
        #expect(e?.message.contains("title is required") == true)
    }
}
