"""Cloud Code end-to-end (issue 3): functions and their errors, validators,
rate limits, the `req` members, per-call globals vs module state, the helper namespaces;
triggers through REST and `db.*` (beforeSave mutation and refusal, afterSave after commit,
a failing beforeDelete rolling back its cascade, afterDelete, afterFind on get/find/include but
not for master), `db.transaction`; and `cloud.route` endpoints. One server per module, with
the Lua files below written into its functions dir."""
import re
import time

import pytest
import requests

from conftest import Server

FUNCTIONS_LUA = r'''
-- Module state: a file-level local shared by the calls that run on one VM.
local calls = 0

cloud.define("echo", function(req)
  return {
    params = req.params,
    master = req.master,
    userId = req.user and req.user.objectId or json.null,
    username = req.user and req.user.username or json.null,
    ip = req.ip or json.null,
    probe = req.headers["x-probe"] or json.null,
  }
end)

cloud.define("notFound", function(req) cloud.error(101, "x") end)
cloud.define("boom", function(req) error("boom") end)
cloud.define("wrapped", function(req) error(cloud.error(137, "duplicate thing"), 0) end)

cloud.define("counter", function(req)
  calls = calls + 1
  return calls
end)

-- Globals assigned by a call live in that call's table only.
cloud.define("leak", function(req)
  local before = leakedGlobal
  leakedGlobal = req.params.value
  return {before = before or json.null, after = leakedGlobal}
end)

cloud.define("helpers", function(req)
  return {
    nothing = json.null,
    empty = json.array(),
    obj = {},
    list = {1, 2, 3},
    now = time.now(),
    id = crypto.randomId(12),
    defaultId = crypto.randomId(),
    roundTrip = json.decode(json.encode({a = 1, b = {true, "x"}})),
    nowType = math.type(time.now()),
  }
end)

-- Validators. Each function records that it ran, so a refused call can be shown not to have.
local function ran(name, req)
  db.create("Ran", {fn = name, params = req.params}, {master = true})
end

cloud.define("needUser", {requireUser = true}, function(req)
  ran("needUser", req)
  return {username = req.user and req.user.username or json.null, master = req.master}
end)

cloud.define("needMaster", {requireMaster = true}, function(req)
  ran("needMaster", req)
  return "master ok"
end)

cloud.define("typed", {fields = {
  text = {type = "string", required = true},
  n = {type = "number"},
  color = {options = {"red", "green"}, default = "red"},
  tags = {type = "array"},
}}, function(req)
  ran("typed", req)
  return req.params
end)

cloud.define("typedStrict", {validateMasterKey = true, fields = {text = {type = "string", required = true}}},
  function(req)
    ran("typedStrict", req)
    return req.params
  end)

cloud.define("limited", {rateLimit = {perMinute = 3}}, function(req) return "ok" end)
'''

TRIGGERS_LUA = r'''
local function fail(code, message) cloud.error(code, message) end
local function ptr(cls, id) return {__type = "Pointer", className = cls, objectId = id} end

-- beforeSave mutates (slug, edit count) and validates (an empty name is refused).
cloud.beforeSave("Item", function(req)
  local o = req.object
  if type(o.name) ~= "string" or o.name == "" then fail(142, "name required") end
  o.slug = string.lower(o.name)
  if req.original then o.edits = (req.original.edits or 0) + 1 else o.edits = 0 end
end)

-- afterSave runs after the write committed; its error is logged, never returned.
cloud.afterSave("Item", function(req)
  db.create("Audit", {item = req.object.objectId, name = req.object.name}, {master = true})
  if req.object.name == "Explode" then error("afterSave exploded on purpose") end
end)

-- An after-trigger's own writes fire their after-triggers too.
cloud.afterSave("Audit", function(req)
  db.create("AuditTrail", {audit = req.object.objectId, item = req.object.item}, {master = true})
end)

cloud.define("createInTransaction", function(req)
  local item
  db.transaction(function() item = db.create("Item", {name = req.params.name}) end)
  return item
end)

-- A cascade in beforeDelete that fails after deleting: everything must be rolled back.
cloud.beforeDelete("Parent", function(req)
  local n = db.deleteWhere("Child", {parent = ptr("Parent", req.object.objectId)}, {master = true})
  if req.object.locked then fail(142, "parent is locked (" .. n .. " children would go)") end
end)

cloud.afterDelete("Parent", function(req)
  db.create("Tombstone", {of = req.object.objectId}, {master = true})
end)

-- afterFind drops hidden secrets and marks the ones it lets through.
cloud.afterFind("Secret", function(req)
  local out = {}
  for _, o in ipairs(req.objects) do
    if not o.hidden then
      o.seen = true
      out[#out + 1] = o
    end
  end
  return out
end)

cloud.define("createItem", function(req)
  return db.create("Item", {name = req.params.name})
end)

cloud.define("readSecrets", function(req)
  local mine = db.find("Secret", {}, {order = "label"})
  local all = db.find("Secret", {}, {order = "label", master = true})
  return {mine = #mine, all = #all, firstSeen = mine[1] and mine[1].seen or false}
end)

cloud.define("txFail", function(req)
  db.transaction(function()
    db.create("TxItem", {n = 1})
    db.create("TxItem", {n = 2})
    fail(142, "abort the transaction")
  end)
  return "unreachable"
end)

cloud.define("txOk", function(req)
  local seen
  db.transaction(function()
    db.create("TxItem", {n = 10})
    db.create("TxItem", {n = 11})
    seen = db.count("TxItem", {n = {["$gte"] = 10}})
  end)
  return {seenInside = seen, after = db.count("TxItem", {})}
end)

cloud.define("txCaught", function(req)
  -- An error caught by pcall inside the transaction function does not abort the transaction;
  -- one that escapes it does, even when the caller catches it afterwards.
  local ok, err = pcall(db.transaction, function()
    db.create("TxItem", {n = 20})
    error("escape")
  end)
  return {ok = ok, count = db.count("TxItem", {n = 20})}
end)
'''

ROUTES_LUA = r'''
cloud.route("GET", "/api/items/:id", function(req)
  return {status = 200, json = {
    id = req.path.id, q = req.query.q or json.null, n = req.query.n or json.null,
    method = req.method, user = req.user and req.user.username or json.null, ip = req.ip or json.null,
  }}
end)

cloud.route("GET", "/api/items/:id/tags/:tag", function(req)
  return {json = {id = req.path.id, tag = req.path.tag}}
end)

cloud.route("POST", "/api/items", function(req)
  return {status = 201, json = {raw = req.body, decoded = req.json or json.null},
          headers = {["X-Custom"] = "yes", ["Cache-Control"] = "no-store"}}
end)

cloud.route("GET", "/api/text", function(req)
  return {status = 202, body = "plain text here", headers = {["Content-Type"] = "text/plain; charset=utf-8"}}
end)

cloud.route("GET", "/api/crash", function(req) error("kaboom") end)
cloud.route("GET", "/api/denied", function(req) cloud.error(142, "nope") end)
cloud.route("GET", "/api/gone", function(req) cloud.error(101, "no such thing") end)
'''


@pytest.fixture(scope="module")
def srv():
    s = Server(functions={"functions.lua": FUNCTIONS_LUA, "triggers.lua": TRIGGERS_LUA,
                          "routes.lua": ROUTES_LUA})
    try:
        s.start()
        yield s
    finally:
        s.stop()
        s.cleanup()


def err(r):
    """(status, Parse code) of an error answer."""
    return r.status_code, r.json().get("code")


def signup(s, username):
    r = s.req("POST", "/parse/users", {"username": username, "password": "pw-" + username})
    assert r.status_code == 201, r.text
    return r.json()["objectId"], r.json()["sessionToken"]


def count(s, cls, where=None):
    params = {"count": "1", "limit": "0"}
    if where is not None:
        import json as _json
        params["where"] = _json.dumps(where)
    r = s.req("GET", f"/parse/classes/{cls}", master=True, params=params)
    assert r.status_code == 200, r.text
    return r.json()["count"]


def ran_count(s, fn):
    return count(s, "Ran", {"fn": fn})


# --- functions ------------------------------------------------------------------------------

def test_function_result_and_errors(srv):
    r = srv.call("echo", {"a": 1, "nested": {"b": [1, "two", None]}})
    assert r.status_code == 200, r.text
    res = r.json()["result"]
    assert res["params"]["a"] == 1 and res["params"]["nested"]["b"][:2] == [1, "two"]
    assert res["master"] is False and res["userId"] is None

    r = srv.call("doesNotExist")
    assert err(r) == (400, 141)
    assert r.json()["error"] == 'Invalid function: "doesNotExist"'

    r = srv.call("notFound")
    assert err(r) == (404, 101)
    assert r.json()["error"] == "x"

    r = srv.call("boom")
    assert err(r) == (400, 141)
    assert "boom" in r.json()["error"]

    # error(cloud.error(...)) works as well as a bare cloud.error(...).
    assert err(srv.call("wrapped")) == (400, 137)

    # Bad JSON body → 107.
    r = srv.req("POST", "/parse/functions/echo", raw="{not json")
    assert err(r) == (400, 107)


def test_req_members(srv):
    uid, token = signup(srv, "reqprobe")
    r = srv.req("POST", "/parse/functions/echo", {"x": True}, session=token, headers={"X-Probe": "hello"})
    assert r.status_code == 200, r.text
    res = r.json()["result"]
    assert res["userId"] == uid and res["username"] == "reqprobe"
    assert res["master"] is False
    assert res["probe"] == "hello"
    assert res["ip"] == "127.0.0.1"
    assert res["params"] == {"x": True}

    r = srv.call("echo", {}, master=True)
    assert r.json()["result"]["master"] is True and r.json()["result"]["userId"] is None

    # The user is resolved from the token: another token, another user.
    uid2, token2 = signup(srv, "reqprobe2")
    assert srv.call("echo", {}, session=token2).json()["result"]["userId"] == uid2


def test_globals_do_not_leak_and_module_locals_persist(srv):
    for v in range(8):
        r = srv.call("leak", {"value": v})
        assert r.status_code == 200, r.text
        assert r.json()["result"] == {"before": None, "after": v}
    # Module state: each VM's counter only grows; with several calls, at least one VM saw two.
    seen = [srv.call("counter").json()["result"] for _ in range(12)]
    assert all(isinstance(n, int) and n >= 1 for n in seen)
    assert max(seen) >= 2, seen


def test_module_state_on_one_worker(server_factory):
    # One worker in a pool that does not grow: every call runs on the same VM.
    s = server_factory(functions={"f.lua": FUNCTIONS_LUA}, args=["--workers", "1", "--max-workers", "0"]).start()
    got = [s.call("counter").json()["result"] for _ in range(5)]
    assert got == [1, 2, 3, 4, 5]


def test_helper_namespaces(srv):
    before = int(time.time() * 1000)
    r = srv.call("helpers")
    after = int(time.time() * 1000)
    assert r.status_code == 200, r.text
    res = r.json()["result"]
    assert "nothing" in res and res["nothing"] is None
    assert res["empty"] == [] and res["obj"] == {} and res["list"] == [1, 2, 3]
    assert res["nowType"] == "integer"
    assert before - 1000 <= res["now"] <= after + 1000
    assert re.fullmatch(r"[A-Za-z0-9]{12}", res["id"]), res["id"]
    assert re.fullmatch(r"[A-Za-z0-9]{10}", res["defaultId"]), res["defaultId"]
    assert res["roundTrip"] == {"a": 1, "b": [True, "x"]}
    assert srv.call("helpers").json()["result"]["id"] != res["id"]


def test_require_user_and_master(srv):
    base = ran_count(srv, "needUser")
    r = srv.call("needUser")
    assert err(r) == (400, 142)
    assert r.json()["error"] == "login required"
    r = srv.call("needUser", session="r:not-a-real-token")
    assert err(r) == (400, 209)
    assert ran_count(srv, "needUser") == base

    _, token = signup(srv, "validator")
    r = srv.call("needUser", session=token)
    assert r.status_code == 200, r.text
    assert r.json()["result"] == {"username": "validator", "master": False}
    # Validators are skipped for the master key.
    r = srv.call("needUser", master=True)
    assert r.status_code == 200 and r.json()["result"]["master"] is True
    assert ran_count(srv, "needUser") == base + 2

    m0 = ran_count(srv, "needMaster")
    assert err(srv.call("needMaster")) == (400, 142)
    assert err(srv.call("needMaster", session=token)) == (400, 142)
    assert ran_count(srv, "needMaster") == m0
    r = srv.call("needMaster", master=True)
    assert r.status_code == 200 and r.json()["result"] == "master ok"


def test_field_validators(srv):
    base = ran_count(srv, "typed")
    refused = [
        {},                                    # required text missing
        {"text": None},                        # null counts as missing
        {"text": 5},                           # wrong type
        {"text": "a", "n": "five"},            # number expected
        {"text": "a", "color": "blue"},        # not one of the options
        {"text": "a", "tags": "x"},            # array expected
    ]
    for params in refused:
        r = srv.call("typed", params)
        assert err(r) == (400, 142), (params, r.text)
        assert r.json()["error"].startswith("Validation failed"), r.text
    assert ran_count(srv, "typed") == base, "the function ran although its validator failed"

    r = srv.call("typed", {"text": "hi", "n": 2.5, "tags": ["a"]})
    assert r.status_code == 200, r.text
    assert r.json()["result"] == {"text": "hi", "n": 2.5, "tags": ["a"], "color": "red"}   # default applied
    assert srv.call("typed", {"text": "hi", "color": "green"}).json()["result"]["color"] == "green"
    assert ran_count(srv, "typed") == base + 2

    # Master skips validators unless validateMasterKey is set.
    r = srv.call("typed", {"text": 5}, master=True)
    assert r.status_code == 200 and r.json()["result"] == {"text": 5}
    s0 = ran_count(srv, "typedStrict")
    assert err(srv.call("typedStrict", {}, master=True)) == (400, 142)
    assert err(srv.call("typedStrict", {"text": 1}, master=True)) == (400, 142)
    assert ran_count(srv, "typedStrict") == s0
    assert srv.call("typedStrict", {"text": "ok"}, master=True).json()["result"] == {"text": "ok"}


def test_rate_limit_per_caller(srv):
    for i in range(3):
        r = srv.call("limited")
        assert r.status_code == 200, (i, r.text)
    r = srv.call("limited")
    assert err(r) == (429, 155)
    retry = int(r.headers["Retry-After"])
    assert 0 < retry <= 60
    # Another caller (a user account, not this IP) has its own budget.
    _, token = signup(srv, "ratelimited")
    assert srv.call("limited", session=token).status_code == 200
    # Other functions are not limited by it.
    assert srv.call("echo").status_code == 200
    # The master key is never refused.
    assert srv.call("limited", master=True).status_code == 200


# --- triggers -------------------------------------------------------------------------------

def test_before_save_mutates_and_validates(srv):
    r = srv.req("POST", "/parse/classes/Item", {"name": "Hello World"})
    assert r.status_code == 201, r.text
    oid = r.json()["objectId"]
    got = srv.req("GET", f"/parse/classes/Item/{oid}").json()
    assert got["slug"] == "hello world" and got["edits"] == 0

    # On update the trigger sees the merged object and the stored original.
    r = srv.req("PUT", f"/parse/classes/Item/{oid}", {"name": "Renamed"})
    assert r.status_code == 200, r.text
    got = srv.req("GET", f"/parse/classes/Item/{oid}").json()
    assert got["slug"] == "renamed" and got["edits"] == 1 and got["name"] == "Renamed"

    # Atomic operators still apply with a beforeSave in the way.
    r = srv.req("PUT", f"/parse/classes/Item/{oid}", {"n": {"__op": "Increment", "amount": 2}})
    assert r.status_code == 200, r.text
    r = srv.req("PUT", f"/parse/classes/Item/{oid}", {"n": {"__op": "Increment", "amount": 3}})
    got = srv.req("GET", f"/parse/classes/Item/{oid}").json()
    assert got["n"] == 5 and got["edits"] == 3 and got["slug"] == "renamed"

    # Refused: nothing written, neither the object nor its afterSave audit.
    items, audits = count(srv, "Item"), count(srv, "Audit")
    r = srv.req("POST", "/parse/classes/Item", {"name": ""})
    assert err(r) == (400, 142) and r.json()["error"] == "name required"
    r = srv.req("PUT", f"/parse/classes/Item/{oid}", {"name": ""})
    assert err(r) == (400, 142)
    assert srv.req("GET", f"/parse/classes/Item/{oid}").json()["name"] == "Renamed"
    assert count(srv, "Item") == items and count(srv, "Audit") == audits

    # The same trigger runs for db.* writes in Cloud Code.
    r = srv.call("createItem", {"name": "From Lua"})
    assert r.status_code == 200, r.text
    assert r.json()["result"]["slug"] == "from lua"
    assert err(srv.call("createItem", {"name": ""})) == (400, 142)
    assert count(srv, "Item") == items + 1


def test_after_save_runs_after_commit_and_its_error_is_logged(srv):
    r = srv.req("POST", "/parse/classes/Item", {"name": "Audited"})
    assert r.status_code == 201
    oid = r.json()["objectId"]
    assert count(srv, "Audit", {"item": oid}) == 1

    # afterSave fails: the save still succeeded (it had committed), the error is only logged.
    r = srv.req("POST", "/parse/classes/Item", {"name": "Explode"})
    assert r.status_code == 201, r.text
    oid = r.json()["objectId"]
    assert srv.req("GET", f"/parse/classes/Item/{oid}").status_code == 200
    # Its own transaction rolled back the audit it wrote before failing.
    assert count(srv, "Audit", {"item": oid}) == 0
    deadline = time.time() + 5
    while "afterSave exploded on purpose" not in srv.read_log() and time.time() < deadline:
        time.sleep(0.05)
    assert "afterSave exploded on purpose" in srv.read_log()


def test_after_triggers_chain_inside_and_outside_transactions(srv):
    r = srv.req("POST", "/parse/classes/Item", {"name": "Chain one"})
    assert r.status_code == 201
    oid = r.json()["objectId"]
    assert count(srv, "Audit", {"item": oid}) == 1
    assert count(srv, "AuditTrail", {"item": oid}) == 1

    # In db.transaction the after-triggers wait for the commit, and so do the ones they fire.
    r = srv.call("createInTransaction", {"name": "Chain two"})
    assert r.status_code == 200, r.text
    oid = r.json()["result"]["objectId"]
    assert count(srv, "Audit", {"item": oid}) == 1
    assert count(srv, "AuditTrail", {"item": oid}) == 1

    # The same through a transactional batch.
    r = srv.req("POST", "/parse/batch", {"transaction": True, "requests": [
        {"method": "POST", "path": "/parse/classes/Item", "body": {"name": "Chain three"}}]})
    assert r.status_code == 200, r.text
    oid = r.json()[0]["success"]["objectId"]
    assert count(srv, "Audit", {"item": oid}) == 1
    assert count(srv, "AuditTrail", {"item": oid}) == 1


def make_parent(srv, locked, children):
    r = srv.req("POST", "/parse/classes/Parent", {"locked": locked})
    assert r.status_code == 201, r.text
    pid = r.json()["objectId"]
    for i in range(children):
        r = srv.req("POST", "/parse/classes/Child", {"i": i, "parent": {"__type": "Pointer", "className": "Parent",
                                                                         "objectId": pid}})
        assert r.status_code == 201, r.text
    return pid


def children_of(srv, pid):
    return count(srv, "Child", {"parent": {"__type": "Pointer", "className": "Parent", "objectId": pid}})


def test_before_delete_cascade_and_rollback(srv):
    free = make_parent(srv, False, 3)
    locked = make_parent(srv, True, 4)
    assert children_of(srv, free) == 3 and children_of(srv, locked) == 4

    r = srv.req("DELETE", f"/parse/classes/Parent/{locked}")
    assert err(r) == (400, 142), r.text
    assert "4 children would go" in r.json()["error"]
    # The trigger had deleted the children before failing: all of it rolled back.
    assert children_of(srv, locked) == 4
    assert srv.req("GET", f"/parse/classes/Parent/{locked}").status_code == 200
    assert count(srv, "Tombstone", {"of": locked}) == 0

    r = srv.req("DELETE", f"/parse/classes/Parent/{free}")
    assert r.status_code == 200, r.text
    assert children_of(srv, free) == 0
    assert err(srv.req("GET", f"/parse/classes/Parent/{free}")) == (404, 101)
    # afterDelete ran.
    assert count(srv, "Tombstone", {"of": free}) == 1
    # The other cascade is untouched.
    assert children_of(srv, locked) == 4


def test_after_find_on_get_find_include_not_master(srv):
    ids = {}
    for label, hidden in (("a", False), ("b", True), ("c", False)):
        r = srv.req("POST", "/parse/classes/Secret", {"label": label, "hidden": hidden})
        assert r.status_code == 201, r.text
        ids[label] = r.json()["objectId"]

    r = srv.req("GET", "/parse/classes/Secret", params={"order": "label"})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [o["label"] for o in res] == ["a", "c"] and all(o["seen"] is True for o in res)

    got = srv.req("GET", f"/parse/classes/Secret/{ids['a']}")
    assert got.status_code == 200 and got.json()["seen"] is True
    assert err(srv.req("GET", f"/parse/classes/Secret/{ids['b']}")) == (404, 101)

    # Master reads see everything, unmarked.
    r = srv.req("GET", "/parse/classes/Secret", params={"order": "label"}, master=True)
    assert [o["label"] for o in r.json()["results"]] == ["a", "b", "c"]
    assert all("seen" not in o for o in r.json()["results"])
    assert "seen" not in srv.req("GET", f"/parse/classes/Secret/{ids['b']}", master=True).json()

    # include applies afterFind to the included objects.
    r = srv.req("POST", "/parse/classes/Holder", {"secret": {"__type": "Pointer", "className": "Secret",
                                                              "objectId": ids["a"]}})
    assert r.status_code == 201
    hid = r.json()["objectId"]
    got = srv.req("GET", f"/parse/classes/Holder/{hid}", params={"include": "secret"}).json()
    assert got["secret"]["__type"] == "Object" and got["secret"]["seen"] is True
    got = srv.req("GET", f"/parse/classes/Holder/{hid}", params={"include": "secret"}, master=True).json()
    assert got["secret"]["__type"] == "Object" and "seen" not in got["secret"]
    # A pointer to an object afterFind drops stays a Pointer.
    r = srv.req("POST", "/parse/classes/Holder", {"secret": {"__type": "Pointer", "className": "Secret",
                                                              "objectId": ids["b"]}})
    got = srv.req("GET", f"/parse/classes/Holder/{r.json()['objectId']}", params={"include": "secret"}).json()
    assert got["secret"] == {"__type": "Pointer", "className": "Secret", "objectId": ids["b"]}

    # db.* reads by a non-master caller run it; {master = true} reads do not.
    r = srv.call("readSecrets")
    assert r.status_code == 200, r.text
    assert r.json()["result"] == {"mine": 2, "all": 3, "firstSeen": True}

    # An afterFind that drops everything answers an empty list.
    for label in ("a", "c"):
        srv.req("PUT", f"/parse/classes/Secret/{ids[label]}", {"hidden": True}, master=True)
    r = srv.req("GET", "/parse/classes/Secret")
    assert r.status_code == 200 and r.json()["results"] == []


def test_db_transaction(srv):
    r = srv.call("txFail")
    assert err(r) == (400, 142) and r.json()["error"] == "abort the transaction"
    assert count(srv, "TxItem") == 0

    r = srv.call("txOk")
    assert r.status_code == 200, r.text
    assert r.json()["result"] == {"seenInside": 2, "after": 2}

    r = srv.call("txCaught")
    assert r.status_code == 200, r.text
    assert r.json()["result"] == {"ok": False, "count": 0}
    assert count(srv, "TxItem") == 2


# --- routes ---------------------------------------------------------------------------------

def test_routes(srv):
    # No application id needed.
    r = requests.get(srv.url + "/api/items/abc123", params={"q": "hello world", "n": "5"}, timeout=30)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("application/json")
    assert r.json() == {"id": "abc123", "q": "hello world", "n": "5", "method": "GET", "user": None,
                        "ip": "127.0.0.1"}
    r = requests.get(srv.url + "/api/items/x1/tags/blue", timeout=30)
    assert r.json() == {"id": "x1", "tag": "blue"}

    # req.user from the session token or a Bearer token.
    _, token = signup(srv, "routeuser")
    r = requests.get(srv.url + "/api/items/1", headers={"X-Parse-Session-Token": token}, timeout=30)
    assert r.json()["user"] == "routeuser"
    r = requests.get(srv.url + "/api/items/1", headers={"Authorization": "Bearer " + token}, timeout=30)
    assert r.json()["user"] == "routeuser"

    # POST with a JSON body, custom status and headers.
    body = '{"name":"thing","n":[1,2]}'
    r = requests.post(srv.url + "/api/items", data=body, headers={"Content-Type": "application/json"}, timeout=30)
    assert r.status_code == 201, r.text
    assert r.headers["X-Custom"] == "yes" and r.headers["Cache-Control"] == "no-store"
    assert r.json() == {"raw": body, "decoded": {"name": "thing", "n": [1, 2]}}
    # A body that is not JSON: req.json is nil, req.body is the raw text.
    r = requests.post(srv.url + "/api/items", data="just text", timeout=30)
    assert r.status_code == 201 and r.json() == {"raw": "just text", "decoded": None}

    r = requests.get(srv.url + "/api/text", timeout=30)
    assert r.status_code == 202 and r.text == "plain text here"
    assert r.headers["Content-Type"].startswith("text/plain")

    r = requests.get(srv.url + "/api/crash", timeout=30)
    assert r.status_code == 500
    assert r.json()["code"] == 141 and "kaboom" in r.json()["error"]
    r = requests.get(srv.url + "/api/denied", timeout=30)
    assert (r.status_code, r.json()["code"], r.json()["error"]) == (400, 142, "nope")
    r = requests.get(srv.url + "/api/gone", timeout=30)
    assert (r.status_code, r.json()["code"]) == (404, 101)

    # Unknown path or method: 404 / no route.
    assert requests.get(srv.url + "/api/nothing/here", timeout=30).status_code == 404
    assert requests.delete(srv.url + "/api/items/abc", timeout=30).status_code in (404, 405)
    # The server is fine afterwards.
    assert srv.call("echo").status_code == 200
