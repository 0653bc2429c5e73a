import MoonbaseCore
import MoonbaseJSON
import Testing
@testable import MoonbaseLua

#if canImport(Glibc)
import Glibc
#endif

/// Standard-library calls whose stock C loops ran without end (no hook, no allocation) now end
/// at the call's limit with 141, cannot be swallowed by the script's pcall, and still behave as
/// the manual says on ordinary input.
@Suite(.timeLimit(.minutes(2))) struct LuaEscapeTests {
    /// A table whose length (`#t`, through `__len`) is 2^62 although it is empty.
    static let farBorder = "local far = setmetatable({}, {__len = function() return 1 << 62 end})"

    static let source = """
    \(farBorder)
    cloud.define('move', function() table.move({}, 1, 1 << 62, 2) end)
    cloud.define('moveBack', function() table.move({}, 1, 1 << 62, 0) end)
    cloud.define('insertFar', function() table.insert(far, 1, 'x') end)
    cloud.define('removeFar', function() table.remove(far, 1) end)
    cloud.define('sortFar', function() table.sort(setmetatable({}, {__len = function() return (1 << 31) - 2 end, __index = function() return 1 end, __newindex = function() end})) end)
    cloud.define('moveCaught', function() while true do pcall(table.move, {}, 1, 1 << 62, 2) end end)
    cloud.define('sortBig', function()
      local t = {}
      for i = 1, 1 << 21 do t[i] = (i * 7919) % 1000003 end
      table.sort(t)
      return t[1]
    end)
    cloud.define('repEmpty', function() return {#string.rep('', 1 << 62), #string.rep('', 1 << 62, ''), #('') :rep(2^62)} end)
    cloud.define('repHuge', function() return #string.rep('x', 1 << 62) end)
    cloud.define('ok', function() return 'still here' end)
    """

    func expectKill(_ vm: LuaVM, _ name: String, _ limits: LuaLimits, contains: String, within seconds: Double = 20) {
        let t0 = monotonicSeconds()
        let e = failure { try vm.runFunction(name, params: [:], request: CloudRequest(), limits: limits) }
        let elapsed = monotonicSeconds() - t0
        #expect(e?.code == .scriptFailed, "\(name): \(String(describing: e))")
        #expect(e?.message.contains(contains) == true, "\(name): \(e?.message ?? "no error")")
        #expect(elapsed < seconds, "\(name) took \(elapsed) s")
        #expect((try? vm.runFunction("ok", params: [:], request: CloudRequest())) == "still here")
        #expect(vm.stackTop == 0)
    }

    @Test func cLoopsEndAtTheTimeout() throws {
        let vm = try makeVM(Self.source)
        for name in ["move", "moveBack", "insertFar", "removeFar", "moveCaught", "sortFar"] {
            expectKill(vm, name, .quick(timeoutMs: 200), contains: "timeout of 200 ms exceeded in function '\(name)'")
        }
    }

    @Test func cLoopsCountAgainstTheInstructionBudget() throws {
        let vm = try makeVM(Self.source)
        for name in ["move", "insertFar", "removeFar"] {
            expectKill(vm, name, .quick(instructions: 1_000_000), contains: "instruction limit of 1000000 exceeded")
        }
    }

    @Test func aLongSortEndsAtTheTimeout() throws {
        let vm = try makeVM(Self.source)
        expectKill(vm, "sortBig", .quick(timeoutMs: 400, memoryMB: 256), contains: "timeout of 400 ms exceeded")
    }

    @Test func emptyRepIsImmediateAndHugeRepHitsTheMemoryLimit() throws {
        let vm = try makeVM(Self.source)
        let t0 = monotonicSeconds()
        #expect(try vm.runFunction("repEmpty", params: [:], request: CloudRequest(), limits: .quick(timeoutMs: 2000)) == [0, 0, 0])
        #expect(monotonicSeconds() - t0 < 2)
        let e = failure { try vm.runFunction("repHuge", params: [:], request: CloudRequest(), limits: .quick(memoryMB: 16)) }
        #expect(e?.message.contains("resulting string too large") == true || e?.message.contains("memory limit") == true,
                "\(String(describing: e))")
    }

    @Test func replacementsKeepTheirSemantics() throws {
        let v = try run("""
        local t = {1, 2, 3}
        table.insert(t, 4); table.insert(t, 1, 0)
        local r1 = table.concat(t, ',')
        local removed = table.remove(t, 1); local last = table.remove(t)
        local r2 = table.concat(t, ',')
        local empty = {}; local none = table.remove(empty)
        local m = table.move({1, 2, 3, 4, 5}, 2, 4, 1)
        local m2 = table.move({1, 2, 3}, 1, 3, 3)
        local dst = table.move({7, 8}, 1, 2, 5, {})
        local s = {5, 2, 9, 1, 5, 6, 3}
        table.sort(s)
        local d = {'b', 'c', 'a'}
        table.sort(d, function(a, b) return a > b end)
        local okIns, errIns = pcall(table.insert, {1}, 5, 'x')
        local okRem, errRem = pcall(table.remove, {1}, 5)
        local okSort = pcall(table.sort, {3, 'a', 1})
        local okArgs = pcall(table.insert, {}, 1, 2, 3)
        return {r1 = r1, removed = removed, last = last, r2 = r2, none = none == nil,
                m = table.concat(m, ','), m2 = table.concat(m2, ','), dst = dst[5] .. dst[6],
                s = table.concat(s, ','), d = table.concat(d, ','),
                rep = string.rep('ab', 3, '-'), rep1 = ('x'):rep(3), rep0 = ('x'):rep(0),
                errIns = not okIns and errIns:find('position out of bounds') ~= nil,
                errRem = not okRem and errRem:find('position out of bounds') ~= nil,
                errSort = not okSort, errArgs = not okArgs}
        """)
        #expect(v["r1"] == "0,1,2,3,4")
        #expect(v["removed"] == 0 && v["last"] == 4 && v["r2"] == "1,2,3" && v["none"] == true)
        #expect(v["m"] == "2,3,4,4,5" && v["m2"] == "1,2,1,2,3" && v["dst"] == "78")
        #expect(v["s"] == "1,2,3,5,5,6,9" && v["d"] == "c,b,a")
        #expect(v["rep"] == "ab-ab-ab" && v["rep1"] == "xxx" && v["rep0"] == "")
        #expect(v["errIns"] == true && v["errRem"] == true && v["errSort"] == true && v["errArgs"] == true)
    }

    @Test func sortMatchesAReferenceOnManyInputs() throws {
        // Random arrays of several sizes, with and without a comparator, against a selection sort.
        let v = try run("""
        local seed = 12345
        local function rnd() seed = (seed * 1103515245 + 12345) % 2147483648 return seed % 1000 end
        for n = 0, 60 do
          local a, b = {}, {}
          for i = 1, n do a[i] = rnd(); b[i] = a[i] end
          table.sort(a)
          for i = 1, n do for j = i + 1, n do if b[j] < b[i] then b[i], b[j] = b[j], b[i] end end end
          for i = 1, n do if a[i] ~= b[i] then return 'mismatch at n=' .. n end end
          local c = {}
          for i = 1, n do c[i] = b[i] end
          table.sort(c, function(x, y) return x > y end)
          for i = 1, n do if c[i] ~= b[n + 1 - i] then return 'mismatch (desc) at n=' .. n end end
        end
        return 'ok'
        """)
        #expect(v == "ok")
    }

    /// The audited functions that needed no replacement end at once on huge ranges: with an
    /// argument error, at the stack or memory limit, or (Lua callbacks) at the timeout.
    @Test func auditedFunctionsEndOnHugeRanges() throws {
        let probes = [
            "string.byte('abc', 1, 1 << 62)", "string.sub('abc', 1, 1 << 62)", "utf8.codepoint('abc', 1, 1 << 62)",
            "utf8.len('abc', 1, 1 << 62)", "utf8.offset('abc', 1 << 62)", "table.unpack({}, 1, 1 << 62)",
            "table.concat({}, '', 1, 1 << 62)", "string.format('%0999d', 1)", "string.pack('c2147483647', '')",
            "select(1 << 62, 1, 2)", "string.rep('ab', 1 << 62, '')", "tostring(1 << 62)",
            "table.concat(setmetatable({}, {__index = function() return '' end}), '', 1, 1 << 62)",
            "table.unpack(setmetatable({}, {__index = function() return 1 end}), 1, 999000)",
            "os.date(string.rep('%c', 100000))", "string.char(table.unpack({}, 1, 1000000))",
        ]
        var source = "local probes = {\n"
        for p in probes { source += "  function() return \(p) end,\n" }
        source += "}\ncloud.define('probe', function(req) return (select('#', probes[req.params.i]())) end)"
        let vm = try makeVM(source)
        for (i, p) in probes.enumerated() {
            let clock = ContinuousClock()
            let t0 = clock.now
            _ = try? vm.runFunction("probe", params: ["i": .int(Int64(i + 1))], request: CloudRequest(),
                                    limits: .quick(timeoutMs: 300, memoryMB: 16))
            let elapsed = clock.now - t0
            #expect(elapsed < .seconds(5), "\(p) took \(elapsed)")
            #expect(vm.stackTop == 0)
        }
    }

    func monotonicSeconds() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
}
