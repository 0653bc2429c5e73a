import MoonbaseJSON
import Testing

/// The API's fast paths through `Host.build` without sockets (see `InProcessHost`): each test
/// builds its own host on its own temporary directory.
@Suite("API in process")
struct APIInProcessTests {
    @Test func objectLifecycleAnswersAsParseDoes() throws {
        let h = try InProcessHost()
        let created = h.request("POST", "/parse/classes/Post", json: ["text": "hi", "likes": 1])
        #expect(created.status == 201)
        let id = try #require(created.json["objectId"]?.stringValue)
        #expect(created.json["createdAt"]?.stringValue?.hasSuffix("Z") == true)
        #expect(created.header("Location")?.hasSuffix("/parse/classes/Post/\(id)") == true)

        let updated = h.request("PUT", "/parse/classes/Post/\(id)",
                                json: ["likes": ["__op": "Increment", "amount": 2]])
        #expect(updated.status == 200)
        #expect(updated.json["updatedAt"]?.stringValue != nil)

        let got = h.request("GET", "/parse/classes/Post/\(id)")
        #expect(got.status == 200)
        #expect(got.json["likes"]?.intValue == 3)
        #expect(got.json["text"]?.stringValue == "hi")

        #expect(h.request("DELETE", "/parse/classes/Post/\(id)").status == 200)
        let gone = h.request("GET", "/parse/classes/Post/\(id)")
        #expect(gone.status == 404)
        #expect(gone.json["code"]?.intValue == 101)
    }

    /// Finds and gets of local data run on the CPU alone and wait for a CPU slot; what may
    /// sleep (Lua functions and routes, an `afterFind` trigger, writes) does not.
    @Test func onlyLocalReadsAreCPUBound() throws {
        let h = try InProcessHost(functions: ["t.lua": """
            cloud.afterFind("Hooked", function(req) return req.objects end)
            cloud.define("hello", function(req) return "hi" end)
            """])
        let api = h.host.api
        #expect(api.cpuBound(h.dispatched("GET", "/parse/classes/Post")))
        #expect(api.cpuBound(h.dispatched("GET", "/parse/classes/Post/abc123")))
        #expect(!api.cpuBound(h.dispatched("GET", "/parse/classes/Hooked")))
        #expect(!api.cpuBound(h.dispatched("GET", "/parse/classes/Hooked/abc123")))
        #expect(!api.cpuBound(h.dispatched("POST", "/parse/classes/Post")))
        #expect(!api.cpuBound(h.dispatched("PUT", "/parse/classes/Post/abc123")))
        #expect(!api.cpuBound(h.dispatched("POST", "/parse/functions/hello")))
        #expect(!api.cpuBound(h.dispatched("GET", "/parse/nope")))
    }

    @Test func queryWithWhereOrderLimitAndCount() throws {
        let h = try InProcessHost()
        for i in 0..<5 {
            #expect(h.request("POST", "/parse/classes/Item", json: ["n": .int(Int64(i)), "even": .bool(i % 2 == 0)]).status == 201)
        }
        let r = h.request("GET", "/parse/classes/Item",
                          query: [("where", #"{"even":true}"#), ("order", "-n"), ("limit", "2"), ("count", "1")])
        #expect(r.status == 200)
        let ns = r.json["results"]?.arrayValue?.compactMap { $0["n"]?.intValue }
        #expect(ns == [4, 2])
        #expect(r.json["count"]?.intValue == 3)

        let bad = h.request("GET", "/parse/classes/Item", query: [("limit", "-1")])
        #expect(bad.status == 400)
        #expect(bad.json["code"]?.intValue == 102)
    }

    @Test func errorsHaveParseShapes() throws {
        let h = try InProcessHost()
        let noApp = h.request("GET", "/parse/classes/Post", auth: .none)
        #expect(noApp.status == 403)
        #expect(noApp.json == ["error": "unauthorized"])

        let badJSON = h.request("POST", "/parse/classes/Post", raw: Array(#"{"text": "#.utf8),
                                headers: [("content-type", "application/json")])
        #expect(badJSON.status == 400)
        #expect(badJSON.json["code"]?.intValue == 107)

        let badClass = h.request("POST", "/parse/classes/1abc", json: ["a": 1])
        #expect(badClass.status == 400)
        #expect(badClass.json["code"]?.intValue == 103)

        let typeClash = h.request("POST", "/parse/classes/T", json: ["a": 1])
        #expect(typeClash.status == 201)
        let clash = h.request("POST", "/parse/classes/T", json: ["a": "text"])
        #expect(clash.json["code"]?.intValue == 111)

        let masterOnly = h.request("GET", "/parse/schemas/T")
        #expect(masterOnly.status == 403)
        #expect(masterOnly.json["code"]?.intValue == 119)
        #expect(h.request("GET", "/parse/schemas/T", auth: .master).status == 200)

        let unknown = h.request("GET", "/parse/nowhere")
        #expect(unknown.status == 404)
        #expect(unknown.json["code"]?.intValue == 101)
    }

    @Test func cloudFunctionRouteAndTriggerRunInProcess() throws {
        let h = try InProcessHost(functions: ["main.lua": #"""
            cloud.define("double", function(req) return req.params.n * 2 end)
            cloud.route("GET", "/ping/:who", function(req) return {status = 200, json = {pong = req.path.who}} end)
            cloud.beforeSave("Note", function(req)
              if not req.object.text then error(cloud.error(142, "text required")) end
              req.object.len = #req.object.text
            end)
            """#])
        let f = h.request("POST", "/parse/functions/double", json: ["n": 21])
        #expect(f.status == 200)
        #expect(f.json["result"]?.intValue == 42)

        let route = h.request("GET", "/ping/ada", auth: .none)
        #expect(route.status == 200)
        #expect(route.json["pong"]?.stringValue == "ada")

        let refused = h.request("POST", "/parse/classes/Note", json: ["title": "x"])
        #expect(refused.status == 400)
        #expect(refused.json["code"]?.intValue == 142)
        let ok = h.request("POST", "/parse/classes/Note", json: ["text": "four"])
        let id = try #require(ok.json["objectId"]?.stringValue)
        #expect(h.request("GET", "/parse/classes/Note/\(id)").json["len"]?.intValue == 4)
    }

    @Test func batchAppliesInOrderAndTransactionRollsBack() throws {
        let h = try InProcessHost()
        let r = h.request("POST", "/parse/batch", json: ["requests": [
            ["method": "POST", "path": "/parse/classes/B", "body": ["v": 1]],
            ["method": "POST", "path": "/classes/B", "body": ["v": 2]],
        ]])
        #expect(r.status == 200)
        #expect(r.json.arrayValue?.count == 2)
        #expect(r.json.arrayValue?.allSatisfy { $0["success"] != nil } == true)

        let failing = h.request("POST", "/parse/batch", json: ["transaction": true, "requests": [
            ["method": "POST", "path": "/parse/classes/B", "body": ["v": 3]],
            ["method": "POST", "path": "/parse/classes/B", "body": ["v": "not a number"]],
        ]])
        #expect(failing.status == 400)
        let count = h.request("GET", "/parse/classes/B", query: [("limit", "0"), ("count", "1")])
        #expect(count.json["count"]?.intValue == 2)
    }

    @Test func signUpLoginAndACLs() throws {
        let h = try InProcessHost()
        let ada = h.request("POST", "/parse/users", json: ["username": "ada", "password": "correct horse"])
        #expect(ada.status == 201)
        let token = try #require(ada.json["sessionToken"]?.stringValue)
        let me = h.request("GET", "/parse/users/me", auth: .session(token))
        #expect(me.json["username"]?.stringValue == "ada")
        #expect(me.json["password"] == nil)

        let secret = h.request("POST", "/parse/classes/Diary", json: ["text": "mine", "ACL": [:]], auth: .session(token))
        let id = try #require(secret.json["objectId"]?.stringValue)
        #expect(h.request("GET", "/parse/classes/Diary/\(id)").status == 404)
        #expect(h.request("GET", "/parse/classes/Diary/\(id)", auth: .master).status == 200)

        let wrong = h.request("POST", "/parse/login", json: ["username": "ada", "password": "nope"])
        #expect(wrong.status == 404)
        #expect(wrong.json["code"]?.intValue == 101)
    }
}
