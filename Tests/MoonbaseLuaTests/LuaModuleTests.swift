import MoonbaseCore
import MoonbaseJSON
import Testing
@testable import MoonbaseLua

/// `require` of `functions/lib/` modules, per-file globals, and the `crypto.*` byte functions.
@Suite(.timeLimit(.minutes(1))) struct LuaModuleTests {
    func loaded(_ sources: [(file: String, text: String)], checkModules: Bool = true) throws -> (LuaVM, [LuaLoadError]) {
        let vm = try LuaVM(host: FakeHost())
        return (vm, vm.loadAll(sources, checkModules: checkModules))
    }

    @Test func requireLoadsAModuleOncePerVM() throws {
        let (vm, errors) = try loaded([
            ("lib/geo.lua", "loads = (loads or 0) + 1\nlocal M = {}\nfunction M.double(x) return 2 * x end\nM.loads = function() return loads end\nreturn M"),
            ("a.lua", "local geo = require('lib.geo')\ncloud.define('a', function() return geo.double(21) end)"),
            ("b.lua", "local geo = require('lib.geo')\ncloud.define('b', function() return {same = geo == require('lib.geo'), loads = geo.loads()} end)"),
        ])
        #expect(errors.isEmpty)
        #expect(try vm.runFunction("a", params: [:], request: CloudRequest()) == .int(42))
        #expect(try vm.runFunction("b", params: [:], request: CloudRequest()) == ["same": true, "loads": 1])
    }

    @Test func topLevelGlobalsStayInTheirFile() throws {
        let (vm, errors) = try loaded([
            ("a.lua", "function helper() return 'a' end\ncloud.define('a', function() return helper() end)"),
            ("b.lua", "cloud.define('b', function() return helper == nil end)"),
        ])
        #expect(errors.isEmpty)
        #expect(try vm.runFunction("a", params: [:], request: CloudRequest()) == "a")
        #expect(try vm.runFunction("b", params: [:], request: CloudRequest()) == true)
    }

    @Test func cycleNamesBothFiles() throws {
        let (_, errors) = try loaded([
            ("lib/a.lua", "local b = require('lib.b')\nreturn {}"),
            ("lib/b.lua", "local a = require('lib.a')\nreturn {}"),
            ("main.lua", "local a = require('lib.a')"),
        ])
        let e = try #require(errors.first)
        #expect(e.description.contains("require cycle"))
        #expect(e.description.contains("lib/a.lua") && e.description.contains("lib/b.lua"))
    }

    @Test func badModulesReportTheirFile() throws {
        let (_, errors) = try loaded([("lib/broken.lua", "return {\n  x = ")])
        #expect(errors.map(\.file) == ["lib/broken.lua"])
        let (_, notTable) = try loaded([("lib/n.lua", "return 42")])
        #expect(notTable.first?.message.contains("must return a table") == true)
        let (_, missing) = try loaded([("main.lua", "require('lib.nope')")])
        #expect(missing.first?.description.contains("functions/lib/nope.lua") == true)
        let (_, outside) = try loaded([("main.lua", "require('os')")])
        #expect(outside.first?.description.contains("not a module name") == true)
    }

    @Test func modulesAreNotTopLevelFiles() throws {
        // Not required by anyone and not checked: its top level never runs.
        let (vm, errors) = try loaded([("lib/x.lua", "cloud.define('fromLib', function() return 1 end) return {}")],
                                      checkModules: false)
        #expect(errors.isEmpty)
        #expect(vm.registry.functions["fromLib"] == nil)
    }

    @Test func cryptoVectors() throws {
        #expect(try run("return crypto.sha256('abc')") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        // RFC 4231 test case 2.
        #expect(try run("return crypto.hmacSha256('Jefe', 'what do ya want for nothing?')")
                == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        #expect(try run("return crypto.base64.encode(crypto.sha256('abc', 'raw')) == crypto.sha256('abc', 'base64')") == true)
        #expect(try run("return crypto.base64.encode('\\0\\255\\254')") == "AP/+")
        #expect(try run("return crypto.base64url.encode('\\0\\255\\254')") == "AP_-")
        #expect(try run("return crypto.base64.decode('AP/+') == '\\0\\255\\254'") == true)
        #expect(try run("return crypto.base64url.decode('AP_-') == '\\0\\255\\254'") == true)
        #expect(try run("return crypto.base64.decode('***') == nil") == true)
        #expect(failure { try run("return crypto.sign('HS256', 'x', 'y')") }?.message.contains("RS256") == true)
        #expect(failure { try run("return crypto.sign('ES256', 'not a key', 'y')") }?.message.contains("PEM") == true)
    }
}
