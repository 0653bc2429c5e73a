import MoonbaseCore
import MoonbaseJSON
import Testing
@testable import MoonbaseLua

/// Each test tries a real escape and asserts it fails cleanly (Redis's scripting.tcl spirit).
@Suite(.timeLimit(.minutes(1))) struct LuaSandboxTests {
    @Test(arguments: ["io", "package", "dofile", "loadfile", "debug", "coroutine", "_G"])
    func removedGlobalsAreAbsent(name: String) throws {
        #expect(try run("return \(name) == nil") == true)
    }

    /// `print` is the host's: it writes to the server log (and its ring), never to stdout, and
    /// cannot be replaced for a later call.
    @Test func printGoesToTheLogRing() throws {
        let marker = "print-marker-" + String(Int.random(in: 0..<1_000_000_000))
        #expect(try run("print('\(marker)', 42, {a = 1}) return type(print)") == "function")
        let line = try #require(Log.ring.lines().lines.last { $0.message.hasPrefix(marker) })
        #expect(line.message == marker + "\t42\t{\"a\":1}")
        #expect(line.level == .info && line.source == "lua")
        #expect(try run("print = nil return 1") == .int(1))
        #expect(try run("return type(print)") == "function")
    }

    @Test func osIsReduced() throws {
        #expect(try run("return os.exit == nil and os.execute == nil and os.getenv == nil and os.remove == nil") == true)
        #expect(try run("return type(os.time()) == 'number' and type(os.clock()) == 'number'") == true)
        #expect(failure { try run("os.exit(1)") }?.code == .scriptFailed)
        #expect(failure { try run("io.open('/etc/passwd')") }?.code == .scriptFailed)
    }

    @Test func stringDumpAndBinaryChunksRefused() throws {
        #expect(try run("return string.dump == nil") == true)
        // A binary chunk header: refused whatever the mode says.
        #expect(try run(#"local f, e = load("\27Lua\84\0", "x", "b") return e"#) == "load: binary chunks are not allowed")
        #expect(try run(#"local f, e = load("\27Lua\84\0") return f == nil"#) == true)
        #expect(try run("local f = load('return 1 + 1') return f()") == .int(2))
    }

    @Test func loadUsesCallersEnvironmentNotRealGlobals() throws {
        #expect(try run("x = 5 return load('return x')()") == .int(5))
        #expect(try run("return load('return io')() == nil") == true)
        #expect(try run("return load('return y', 'c', 't', {y = 3})()") == .int(3))
    }

    @Test func libraryTablesCannotBeModified() throws {
        let vm = try makeVM("""
        cloud.define('poison', function() string.upper = function() return 'pwned' end end)
        cloud.define('rawpoison', function() rawset(string, 'upper', nil) end)
        cloud.define('mt', function() return getmetatable(string) end)
        cloud.define('use', function() return string.upper('a') end)
        """)
        #expect(failure { try vm.runFunction("poison", params: [:], request: CloudRequest()) }?.message.contains("read-only") == true)
        #expect(failure { try vm.runFunction("rawpoison", params: [:], request: CloudRequest()) } != nil)
        #expect(try vm.runFunction("mt", params: [:], request: CloudRequest()) == false)
        #expect(try vm.runFunction("use", params: [:], request: CloudRequest()) == "A")
    }

    @Test func stringMetatableIsLocked() throws {
        #expect(try run("return getmetatable('')") == false)
        #expect(failure { try run("getmetatable('').__index.upper = nil") } != nil)
        #expect(failure { try run("setmetatable('', {})") } != nil)
        #expect(try run("return ('abc'):upper()") == "ABC")
    }

    @Test func environmentCannotBeReachedOrRawset() throws {
        #expect(failure { try run("rawset(_ENV, 'x', 1)") } != nil)
        #expect(try run("return getmetatable(_ENV)") == false)
        #expect(failure { try run("for k in pairs(_ENV) do end") } != nil)
        #expect(failure { try run("setmetatable(_ENV, {})") } != nil)
        // A local _ENV only changes this function's view.
        #expect(try run("local _ENV = {x = 1} return x") == .int(1))
    }

    @Test func gcMetamethodsRefused() throws {
        #expect(failure { try run("setmetatable({}, {__gc = function() end})") }?.message.contains("__gc") == true)
        #expect(try run("local t = setmetatable({}, {__index = function() return 7 end}) return t.x") == .int(7))
    }

    @Test func collectgarbageCountOnly() throws {
        #expect(try run("return type(collectgarbage('count'))") == "number")
        #expect(failure { try run("collectgarbage()") } != nil)
        #expect(failure { try run("collectgarbage('stop')") } != nil)
    }

    @Test func globalsDoNotLeakBetweenCalls() throws {
        let vm = try makeVM("""
        local counter = 0
        helper = function() return 'module global' end
        cloud.define('set', function() leaked = 'yes'; counter = counter + 1; return counter end)
        cloud.define('get', function() return {leaked = leaked, helper = helper()} end)
        """)
        #expect(try vm.runFunction("set", params: [:], request: CloudRequest()) == .int(1))
        #expect(try vm.runFunction("get", params: [:], request: CloudRequest()) == ["helper": "module global"])
        // File-level locals are module state.
        #expect(try vm.runFunction("set", params: [:], request: CloudRequest()) == .int(2))
    }

    @Test func moduleGlobalsCannotBeReplacedByACall() throws {
        let vm = try makeVM("""
        helper = function() return 1 end
        cloud.define('shadow', function() helper = function() return 2 end return helper() end)
        cloud.define('use', function() return helper() end)
        """)
        #expect(try vm.runFunction("shadow", params: [:], request: CloudRequest()) == .int(2))
        #expect(try vm.runFunction("use", params: [:], request: CloudRequest()) == .int(1))
    }

    @Test func deepRecursionFailsCleanly() throws {
        let vm = try makeVM("""
        local function f(n) return f(n + 1) + 1 end
        cloud.define('lua', function() return f(1) end)
        cloud.define('c', function() local function g() return pcall(g) end return g() end)
        cloud.define('meta', function() local t = setmetatable({}, {}) getmetatable(t).__index = function(s, k) return s[k] end return t.x end)
        cloud.define('ok', function() return 'fine' end)
        """)
        for name in ["lua", "meta"] {
            let e = failure { try vm.runFunction(name, params: [:], request: CloudRequest()) }
            #expect(e?.code == .scriptFailed, "\(name)")
        }
        _ = failure { try vm.runFunction("c", params: [:], request: CloudRequest()) }
        #expect(try vm.runFunction("ok", params: [:], request: CloudRequest()) == "fine")
    }

    @Test func pathologicalPatternsAreBounded() throws {
        let vm = try makeVM("""
        cloud.define('p1', function() return string.rep('a', 1e5):find('.-.-.-.-.-.-b') end)
        cloud.define('p2', function() return ('a'):rep(40):match('^a*a*a*a*a*a*a*a*a*a*b') end)
        cloud.define('p3', function() return string.rep('a', 5e4):gsub('a*a*a*a*b', 'x') end)
        cloud.define('ok', function() return {('  hi  '):match('^%s*(.-)%s*$'), (('a,b,c'):gsub(',', ';'))} end)
        """)
        for name in ["p1", "p2", "p3"] {
            let start = monotonicNanos()
            let e = failure { try vm.runFunction(name, params: [:], request: CloudRequest(), limits: .quick(timeoutMs: 2000)) }
            #expect(e?.code == .scriptFailed, "\(name)")
            #expect(monotonicNanos() - start < 20_000_000_000)
        }
        #expect(try vm.runFunction("ok", params: [:], request: CloudRequest()) == ["hi", "a;b;c"])
    }

    @Test func patternSemantics() throws {
        #expect(try run("return {string.find('hello world', 'o w')}") == [5, 7])
        #expect(try run("return {string.find('hello', 'l+')}") == [3, 4])
        #expect(try run("return {string.match('key=val', '(%w+)=(%w+)')}") == ["key", "val"])
        #expect(try run("return {string.match('hello', '()ll()')}") == [3, 5])
        #expect(try run("local t = {} for w in ('one two  three'):gmatch('%a+') do t[#t+1] = w end return t") == ["one", "two", "three"])
        #expect(try run("return {('hello world'):gsub('o', {o = '0'})}") == ["hell0 w0rld", 2])
        #expect(try run("return {('abc'):gsub('%w', '%0%0')}") == ["aabbcc", 3])
        #expect(try run("return {('abc'):gsub('', '-')}") == ["-a-b-c-", 4])
        #expect(try run("return ('THE (quick) fox'):find('%((%a+)%)') ") == 5)
        #expect(try run("return ('[[x]]'):match('%b[]')") == "[[x]]")
        #expect(try run("return ('THE quick'):match('%f[%a]%a+', 4)") == "quick")
        #expect(try run("return ('aXb'):match('[%u]')") == "X")
        #expect(try run("return ('a]b'):match('[]]')") == "]")
        #expect(try run("return ('abab'):match('(ab)%1')") == "ab")
        #expect(try run("return ('x.y'):find('.', 1, true)") == 2)
        #expect(failure { try run("return ('x'):find('%')") } != nil)
        #expect(failure { try run("return ('x'):find('[a')") } != nil)
    }
}
