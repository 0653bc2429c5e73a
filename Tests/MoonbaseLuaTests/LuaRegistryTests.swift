import MoonbaseCore
import MoonbaseJSON
import Testing
@testable import MoonbaseLua

@Suite(.timeLimit(.minutes(1))) struct LuaRegistryTests {
    @Test func declarationsAreCollected() throws {
        let vm = try makeVM("""
        cloud.index("Comment", {"post"})
        cloud.index("Reaction", {"post", "user"}, {unique = true})
        cloud.textIndex("Post", {"text"})
        cloud.classPermissions("Reaction", {create = {}, update = {}})
        cloud.define("stats", {requireUser = true, rateLimit = {perMinute = 10}, timeoutMs = 2000}, function(req) return 1 end)
        cloud.job("cleanup", function(req) end)
        cloud.route("GET", "/api/posts/:id/summary", function(req) return {status = 200, json = {id = req.path.id}} end)
        cloud.beforeSave("Post", function(req) end)
        """, file: "functions/app.lua")
        let r = vm.registry
        #expect(r.indexes.count == 3)
        #expect(r.indexes.contains { $0.className == "Reaction" && $0.unique && $0.fields == ["post", "user"] })
        #expect(r.indexes.contains { $0.className == "Post" && $0.text })
        #expect(r.classPermissions.first?.className == "Reaction")
        let stats = try #require(r.functions["stats"])
        #expect(stats.options.requireUser && stats.options.rateLimitPerMinute == 10 && stats.options.timeoutMs == 2000)
        #expect(stats.location == LuaLocation(file: "functions/app.lua", line: 5))
        #expect(r.jobs["cleanup"] != nil)
        #expect(r.trigger(.beforeSave, "Post") != nil)
        let (route, params) = try #require(r.matchRoute(method: "GET", path: "/api/posts/abc/summary"))
        #expect(route.path == "/api/posts/:id/summary" && params == ["id": "abc"])
        #expect(r.matchRoute(method: "POST", path: "/api/posts/abc/summary") == nil)
    }

    @Test(arguments: [
        ("cloud.define('a', function() end)\ncloud.define('a', function() end)", 2, "already defined"),
        ("cloud.define('', function() end)", 1, "name must be a non-empty string"),
        ("cloud.define('a', {bogus = true}, function() end)", 1, "unknown option 'bogus'"),
        ("cloud.define('a', {requireUser = 'yes'}, function() end)", 1, "must be a boolean"),
        ("cloud.route('FETCH', '/x', function() end)", 1, "unknown method"),
        ("local x = = 1", 1, "unexpected symbol"),
        ("\n\nerror('boom')", 3, "boom"),
        ("cloud.index('A', {})", 1, "non-empty list"),
    ])
    func loadErrorsCarryFileAndLine(source: String, line: Int, fragment: String) throws {
        let vm = try LuaVM()
        do {
            try vm.load(file: "functions/bad.lua", source: source)
            Issue.record("expected a load error")
        } catch {
            #expect(error.file == "functions/bad.lua")
            #expect(error.line == line, "\(error)")
            #expect(error.message.contains(fragment), "\(error)")
        }
    }

    @Test func declarationsOnlyAtLoadTime() throws {
        let e = failure { try run("cloud.define('late', function() end)") }
        #expect(e?.message.contains("only be called when the file loads") == true)
    }

    @Test func loadHasItsOwnTimeLimit() throws {
        let vm = try LuaVM()
        do {
            try vm.load(file: "functions/spin.lua", source: "while true do end", limits: .quick(timeoutMs: 100))
            Issue.record("expected a load error")
        } catch {
            #expect(error.message.contains("timeout of 100 ms exceeded"))
        }
    }

    @Test func validators() throws {
        let vm = try makeVM("""
        cloud.define("u", {requireUser = true}, function(req) return req.user.objectId end)
        cloud.define("m", {requireMaster = true}, function(req) return "ok" end)
        cloud.define("f", {fields = {text = {type = "string", required = true}, n = {type = "number", default = 3},
                                     kind = {options = {"a", "b"}}}}, function(req) return req.params end)
        cloud.define("vm", {validateMasterKey = true, fields = {x = {required = true}}}, function() return 1 end)
        """)
        let anon = CloudRequest()
        let user = CloudRequest(identity: .user("u1"), user: ["objectId": "u1"])
        let master = CloudRequest(identity: .master)
        #expect(failure { try vm.runFunction("u", params: [:], request: anon) }?.message == "login required")
        #expect(failure { try vm.runFunction("u", params: [:], request: anon) }?.code == .validationError)
        #expect(try vm.runFunction("u", params: [:], request: user) == "u1")
        #expect(failure { try vm.runFunction("m", params: [:], request: user) }?.code == .validationError)
        #expect(try vm.runFunction("m", params: [:], request: master) == "ok")
        #expect(failure { try vm.runFunction("f", params: [:], request: anon) }?.code == .validationError)
        #expect(failure { try vm.runFunction("f", params: ["text": 1], request: anon) }?.code == .validationError)
        #expect(failure { try vm.runFunction("f", params: ["text": "x", "kind": "c"], request: anon) }?.code == .validationError)
        #expect(try vm.runFunction("f", params: ["text": "x", "kind": "a"], request: anon) == ["text": "x", "kind": "a", "n": 3])
        // Validators are skipped for master calls unless validateMasterKey.
        #expect(try vm.runFunction("f", params: [:], request: master) == .object([:]))
        #expect(failure { try vm.runFunction("vm", params: [:], request: master) }?.code == .validationError)
    }
}

@Suite(.timeLimit(.minutes(1))) struct LuaHostAPITests {
    @Test func errorsCarryParseCodes() throws {
        #expect(failure { try run("cloud.error(101, 'nope')") }.map { ($0.code, $0.message) }! == (.objectNotFound, "nope"))
        #expect(failure { try run("error(cloud.error(142, 'text required'))") }?.code == .validationError)
        #expect(failure { try run("error({code = 119, message = 'no'})") }?.code == .operationForbidden)
        let bare = failure { try run("error('bad')") }
        #expect(bare?.code == .scriptFailed && bare?.message == "functions/test.lua:2: bad")
        #expect(failure { try run("local x = nil; return x.y") }?.code == .scriptFailed)
        #expect(try run("local ok, e = pcall(cloud.error, 137, 'dup') return {ok, e.code, e.message, tostring(e)}") == [false, 137, "dup", "dup (code 137)"])
    }

    @Test func dbCallsReachHostWithCodes() throws {
        #expect(try run("return db.get('Post', 'abc')") == ["objectId": "abc", "className": "Post"])
        #expect(try run("return db.get('Post', 'missing') == nil") == true)
        #expect(try run("return db.count('Post', {author = req.user}, {master = true})") == .int(42))
        #expect(failure { try run("return db.get('Post', 'forbidden')") }?.code == .objectNotFound)
        #expect(try run("local ok, e = pcall(db.get, 'Post', 'forbidden') return e.code") == .int(101))
        #expect(try run("return auth.verifyPassword({objectId = 'u'}, 'secret')") == true)
        #expect(failure { try run("db.get('P', function() end, io)") } != nil)
    }

    @Test func transactionCallsBackIntoLuaWithSameGlobals() throws {
        #expect(try run("count = 1; local r = db.transaction(function() count = count + 1; return db.count('X') end) return {r, count}") == [42, 2])
        #expect(failure { try run("db.transaction(function() cloud.error(101, 'inner') end)") }?.code == .objectNotFound)
    }

    @Test func nestedTriggerFiresOnSameVMAndSharesBudget() throws {
        let vm = try makeVM("""
        cloud.beforeSave("Post", function(req) req.object.title = string.upper(req.object.title); db.count('X') end)
        cloud.define("create", function(req) return db.create("Post", {title = "hi"}) end)
        cloud.define("many", function(req) for i = 1, 3 do db.create("Post", {title = "x"}) end end)
        """)
        #expect(try vm.runFunction("create", params: [:], request: CloudRequest()) == ["title": "HI", "objectId": "new1"])
        // 3 creates + 3 trigger counts = 6 > 5: the shared budget trips inside the nested trigger.
        let e = failure { try vm.runFunction("many", params: [:], request: CloudRequest(), limits: .quick(dbOps: 5)) }
        #expect(e?.message.hasPrefix("database operation limit of 5 exceeded in function 'many'") == true)
    }

    @Test func jsonNullArraysAndIntegers() throws {
        #expect(try run("return json.encode({a = json.null})") == #"{"a":null}"#)
        #expect(try run("return json.encode(json.array())") == "[]")
        #expect(try run("return json.encode({})") == "{}")
        #expect(try run("return json.encode({1, 2, 3})") == "[1,2,3]")
        #expect(try run("return json.encode(3.0)") == "3.0")
        #expect(try run("return math.type(json.decode('3'))") == "integer")
        #expect(try run("return json.decode('[]')") == .array([]))
        #expect(try run("return json.decode('{\"a\":null}').a == json.null") == true)
        #expect(try run("return req.params", params: ["x": .null, "l": []]) == ["x": .null, "l": []])
        #expect(failure { try run("return json.decode('{')") } != nil)
        #expect(failure { try run("local t = {} t.t = t return json.encode(t)") } != nil)
        #expect(failure { try run("return 0/0") } != nil)
    }

    @Test func timeCryptoLog() throws {
        let vm = try makeVM("cloud.define('t', function() log.info('hello', 1, {a = 1}) return {time.now(), crypto.randomId(), crypto.randomId(4)} end)",
                            clock: ManualClock(millis: 1234))
        #expect(try vm.runFunction("t", params: [:], request: CloudRequest()) == [1234, "xxxxxxxxxx", "xxxx"])
        #expect(failure { try run("return crypto.randomId(0)") } != nil)
    }

    /// `req` as a handler sees it: header names lower-cased (a name that differs only in case
    /// keeps its last value; a name outside printable ASCII is lower-cased too, and a quote in a
    /// value stays a quote), `user`, `master`, `ip`, and the handler's own members.
    @Test func requestTableMembers() throws {
        let vm = try makeVM("""
        cloud.define('req', function(req)
          local names = {}
          for k in pairs(req.headers) do names[#names + 1] = k end
          table.sort(names)
          return {names = names, headers = req.headers, user = req.user, master = req.master,
                  ip = req.ip, params = req.params}
        end)
        cloud.route("GET", "/r/:id", function(req)
          return {json = {id = req.path.id, method = req.method, host = req.headers.host, master = req.master,
                          ip = req.ip == nil, user = req.user == nil}}
        end)
        """)
        let request = CloudRequest(identity: .master, user: ["objectId": "u1", "name": "Ann"], requestId: "r1",
                                   headers: [("Host", "h"), ("X-Parse-Application-Id", "app"), ("x-dup", "1"),
                                             ("X-DUP", "2"), ("X-Ünï", "q\"uote")], ip: "10.0.0.1")
        let v = try vm.runFunction("req", params: ["a": 1], request: request)
        #expect(v == ["names": ["host", "x-dup", "x-parse-application-id", "x-ünï"],
                      "headers": ["host": "h", "x-parse-application-id": "app", "x-dup": "2", "x-ünï": "q\"uote"],
                      "user": ["objectId": "u1", "name": "Ann"], "master": true, "ip": "10.0.0.1", "params": ["a": 1]])
        let r = try #require(try vm.runRoute(CloudRouteRequest(method: "get", path: "/r/7",
                                                               request: CloudRequest(headers: [("HOST", "x")]))))
        #expect(try JSON.parse(r.body) == ["id": "7", "method": "GET", "host": "x", "master": false, "ip": true, "user": true])
    }

    @Test func triggersRoutesJobs() throws {
        let vm = try makeVM("""
        cloud.beforeSave("Post", function(req) req.object.n = (req.object.n or 0) + 1 end)
        cloud.afterFind("Post", function(req) local out = {} for _, o in ipairs(req.objects) do if o.visible then out[#out+1] = o end end return json.array(out) end)
        cloud.route("POST", "/echo/:id", function(req)
          return {status = 201, json = {id = req.path.id, q = req.query.q, body = req.body, parsed = req.json}, headers = {["X-Test"] = "1"}}
        end)
        cloud.route("GET", "/text", function(req) return {body = "plain"} end)
        cloud.route("GET", "/boom", function(req) error("boom") end)
        cloud.job("work", function(req) req.progress(0.5, "half") req.message("note") return {done = true} end)
        """)
        #expect(try vm.runTrigger(.beforeSave, className: "Post", object: ["n": 1], request: CloudRequest()) == ["n": 2])
        #expect(try vm.runTrigger(.afterFind, className: "Post", objects: [["visible": true], ["visible": false]], request: CloudRequest()) == [["visible": true]])
        #expect(try vm.runTrigger(.afterSave, className: "Other", object: [:], request: CloudRequest()) == nil)
        let r = try #require(try vm.runRoute(CloudRouteRequest(method: "POST", path: "/echo/7", query: [("q", "s")], body: Array(#"{"k":1}"#.utf8))))
        #expect(r.status == 201)
        #expect(try JSON.parse(r.body) == ["id": "7", "q": "s", "body": #"{"k":1}"#, "parsed": ["k": 1]])
        #expect(r.headers.contains { $0 == ("X-Test", "1") })
        let t = try #require(try vm.runRoute(CloudRouteRequest(method: "GET", path: "/text")))
        #expect(t.status == 200 && t.body == Array("plain".utf8))
        #expect(try vm.runRoute(CloudRouteRequest(method: "GET", path: "/none")) == nil)
        #expect(failure { try vm.runRoute(CloudRouteRequest(method: "GET", path: "/boom")) }?.code == .scriptFailed)
        var progress: [String] = []
        let final = try vm.runJob("work", params: [:], callbacks: LuaJobCallbacks(
            progress: { f, t in progress.append("\(f ?? -1) \(t ?? "")") }, message: { progress.append($0) }))
        #expect(progress == ["0.5 half", "note"])
        #expect(final == #"{"done":true}"#)
        #expect(failure { try vm.runJob("nope", params: [:], callbacks: LuaJobCallbacks(progress: { _, _ in }, message: { _ in })) }?.message == "Invalid job: \"nope\"")
    }

    /// What a route answers for each shape of return value. A `json` member is sent as the
    /// bridge's text for it (not parsed and written again), wherever it sits in the table.
    @Test func routeReturnValues() throws {
        let vm = try makeVM("""
        cloud.route("GET", "/s", function() return "hi" end)
        cloud.route("GET", "/n", function() return nil end)
        cloud.route("GET", "/t", function() return {a = 1, b = {true, json.null}} end)
        cloud.route("GET", "/a", function() return {1, "two"} end)
        cloud.route("GET", "/js", function() return {status = 202, json = 'a "quoted" }, string'} end)
        cloud.route("GET", "/jf", function() return {json = 3.5} end)
        cloud.route("GET", "/jb", function() return {json = false, headers = {["X-A"] = "1"}} end)
        cloud.route("GET", "/jt", function()
          return {headers = {["Content-Type"] = "application/vnd.x+json"}, status = 201,
                  json = {list = {1, {deep = "}]"}}, empty = json.array()}}
        end)
        cloud.route("GET", "/bad", function() return {status = 99, json = {}} end)
        local cached = {status = 200, json = {n = 1}}
        cloud.route("GET", "/cached", function() return cached end)
        cloud.route("GET", "/nested", function() return {data = {json = 1, status = 7}} end)
        cloud.route("GET", "/big", function()
          local list = {}
          for i = 1, 5000 do list[i] = {i = i, s = "x" .. i} end
          return {json = list, headers = {["X-N"] = 5000}}
        end)
        cloud.route("GET", "/jnull", function() return {json = json.null, status = 200} end)
        """)
        func get(_ path: String) throws -> CloudRouteResponse {
            try #require(try vm.runRoute(CloudRouteRequest(method: "GET", path: path)))
        }
        func contentType(_ r: CloudRouteResponse) -> String? { r.headers.first { $0.0.lowercased() == "content-type" }?.1 }
        var r = try get("/s")
        #expect(r.status == 200 && r.body == Array("hi".utf8) && contentType(r) == "text/plain; charset=utf-8")
        r = try get("/n")
        #expect(r.status == 204 && r.body.isEmpty)
        r = try get("/t")
        #expect(r.status == 200 && contentType(r) == "application/json")
        #expect(try JSON.parse(r.body) == ["a": 1, "b": [true, .null]])
        r = try get("/a")
        #expect(try JSON.parse(r.body) == [1, "two"])
        r = try get("/js")
        #expect(r.status == 202 && r.body == Array(#""a \"quoted\" }, string""#.utf8))
        #expect(contentType(r) == "application/json")
        r = try get("/jf")
        #expect(r.status == 200 && r.body == Array("3.5".utf8))
        r = try get("/jb")
        #expect(r.body == Array("false".utf8) && r.headers.contains { $0 == ("X-A", "1") })
        r = try get("/jt")
        #expect(r.status == 201 && contentType(r) == "application/vnd.x+json")
        #expect(try JSON.parse(r.body) == ["list": [1, ["deep": "}]"]], "empty": []])
        #expect(failure { try vm.runRoute(CloudRouteRequest(method: "GET", path: "/bad")) }?.message
                == "route: status must be an integer from 100 to 599")
        // A table answered twice keeps its `json` (the bridge notes where it is; nothing is
        // removed from the table).
        for _ in 0..<2 {
            r = try get("/cached")
            #expect(r.status == 200 && r.body == Array(#"{"n":1}"#.utf8))
        }
        // Only the top level's members make an answer: a nested `json` is part of the body.
        r = try get("/nested")
        #expect(try r.status == 200 && JSON.parse(r.body) == ["data": ["json": 1, "status": 7]])
        r = try get("/big")
        #expect(r.headers.contains { $0 == ("X-N", "5000") })
        let list = try #require(try JSON.parse(r.body).arrayValue)
        #expect(list.count == 5000 && list[4999] == ["i": 5000, "s": "x5000"])
        r = try get("/jnull")
        #expect(r.status == 200 && r.body == Array("null".utf8) && contentType(r) == "application/json")
    }

    @Test func warmHelloCallCost() throws {
        let vm = try makeVM("cloud.define('hello', function(req) return 'hi' end)")
        let req = CloudRequest()
        for _ in 0..<1000 { _ = try vm.runFunction("hello", params: [:], request: req) }
        let n = 20_000
        let t0 = threadCPUNanos()
        for _ in 0..<n { _ = try vm.runFunction("hello", params: [:], request: req) }
        let us = Double(threadCPUNanos() - t0) / Double(n) / 1000
        print("warm hello call (debug build, strict allocator): \(us) µs CPU")
        #expect(us > 0)
    }
}
