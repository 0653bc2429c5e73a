"""Class-level pointer permissions (Parse's `pointerFields`, `readUserFields`,
`writeUserFields`) against the real binary: a user reaches only the objects whose listed fields
point to it (a Pointer or an array of Pointers), over REST get/find/count/update/delete, batch,
include and Lua `db.*` as the caller; others get 101 / fewer results; create is never granted by
pointer permissions; public or role grants still open the class; malformed forms → 107."""
import json

import pytest

LUA = r"""
cloud.define("ids", function(req)
  local out = json.array()
  for _, o in ipairs(db.find("Doc", {}, {order = "t"})) do out[#out + 1] = o.t end
  return out
end)
cloud.define("upd", function(req)
  local ok, err = pcall(db.update, "Doc", req.params.id, {n = 1})
  return ok and "ok" or tostring(err)
end)
cloud.define("cnt", function(req) return db.count("Doc", {}) end)
"""


def ptr(cls, oid):
    return {"__type": "Pointer", "className": cls, "objectId": oid}


@pytest.fixture
def world(server_factory):
    srv = server_factory(functions={"main.lua": LUA}).start()
    w = {"srv": srv, "tok": {}, "id": {}}
    for name in ["ann", "ben", "cy"]:
        r = srv.req("POST", "/parse/users", {"username": name, "password": "pw"}).json()
        w["tok"][name], w["id"][name] = r["sessionToken"], r["objectId"]
    ids = w["id"]
    docs = {}
    for t, body in [("a", {"owner": ptr("_User", ids["ann"])}), ("b", {"owner": ptr("_User", ids["ben"])}),
                    ("ab", {"editors": [ptr("_User", ids["ann"]), ptr("_User", ids["ben"])]}), ("none", {})]:
        docs[t] = srv.req("POST", "/parse/classes/Doc", {"t": t, **body}, master=True).json()["objectId"]
    w["docs"] = docs
    return w


def titles(w, who, **params):
    r = w["srv"].req("GET", "/parse/classes/Doc", session=w["tok"].get(who), params=params)
    assert r.status_code == 200, r.text
    return sorted(o["t"] for o in r.json()["results"])


@pytest.mark.parametrize("form", ["pointerFields", "userFields"])
def test_pointer_permissions(world, form):
    srv, tok, docs = world["srv"], world["tok"], world["docs"]
    if form == "pointerFields":
        clp = {op: {"pointerFields": ["owner", "editors"]} for op in ["get", "find", "count", "update", "delete"]}
        clp["create"] = {"pointerFields": ["owner"]}
    else:
        clp = {op: {} for op in ["get", "find", "count", "update", "delete", "create"]}
        clp["readUserFields"] = ["owner", "editors"]
        clp["writeUserFields"] = ["owner", "editors"]
    r = srv.req("PUT", "/parse/schemas/Doc", {"classLevelPermissions": clp}, master=True)
    assert r.status_code == 200, r.text
    got = srv.req("GET", "/parse/schemas/Doc", master=True).json()["classLevelPermissions"]
    if form == "userFields":
        assert got["readUserFields"] == ["owner", "editors"]
    # find / count / get
    assert titles(world, "ann") == ["a", "ab"]
    assert titles(world, "ben") == ["ab", "b"]
    assert titles(world, "cy") == []
    assert srv.req("GET", "/parse/classes/Doc", params={"count": "1", "limit": "0"}, session=tok["ann"]).json()["count"] == 2
    assert srv.req("GET", f"/parse/classes/Doc/{docs['a']}", session=tok["ann"]).status_code == 200
    assert srv.req("GET", f"/parse/classes/Doc/{docs['a']}", session=tok["ben"]).json()["code"] == 101
    assert srv.req("GET", "/parse/classes/Doc").json()["code"] == 119  # anonymous: no pointer to match
    # update / delete
    assert srv.req("PUT", f"/parse/classes/Doc/{docs['b']}", {"n": 1}, session=tok["ann"]).json()["code"] == 101
    assert srv.req("PUT", f"/parse/classes/Doc/{docs['ab']}", {"n": 1}, session=tok["ann"]).status_code == 200
    assert srv.req("DELETE", f"/parse/classes/Doc/{docs['none']}", session=tok["ann"]).json()["code"] == 101
    # create: pointer permissions never grant it
    assert srv.req("POST", "/parse/classes/Doc", {"owner": ptr("_User", world["id"]["ann"])}, session=tok["ann"]).json()["code"] == 119
    # batch
    b = srv.req("POST", "/parse/batch", {"requests": [{"method": "GET", "path": f"/classes/Doc/{docs['a']}"},
                                                     {"method": "PUT", "path": f"/classes/Doc/{docs['a']}", "body": {"n": 2}}]},
                session=tok["ben"]).json()
    assert b[0]["error"]["code"] == 101 and b[1]["error"]["code"] == 101
    # include: a pointer to a Doc the reader may not get stays a Pointer
    h = srv.req("POST", "/parse/classes/Holder", {"doc": ptr("Doc", docs["a"])}, master=True).json()["objectId"]
    assert srv.req("GET", f"/parse/classes/Holder/{h}", params={"include": "doc"}, session=tok["ann"]).json()["doc"]["t"] == "a"
    assert srv.req("GET", f"/parse/classes/Holder/{h}", params={"include": "doc"}, session=tok["ben"]).json()["doc"]["__type"] == "Pointer"
    # Lua as the caller
    assert srv.call("ids", session=tok["ben"]).json()["result"] == ["ab", "b"]
    assert srv.call("cnt", session=tok["cy"]).json()["result"] == 0
    assert "101" in srv.call("upd", {"id": docs["a"]}, session=tok["ben"]).json()["result"]
    assert srv.call("upd", {"id": docs["b"]}, session=tok["ben"]).json()["result"] == "ok"
    # $inQuery into the class applies them too
    for t in ["a", "b"]:
        srv.req("POST", "/parse/classes/Note", {"t": t, "doc": ptr("Doc", docs[t])}, master=True)
    r = srv.req("GET", "/parse/classes/Note", session=tok["ann"],
                params={"where": json.dumps({"doc": {"$inQuery": {"className": "Doc", "where": {}}}})})
    assert [o["t"] for o in r.json()["results"]] == ["a"]
    # master sees everything; deleting through the pointer works
    assert len(srv.req("GET", "/parse/classes/Doc", master=True).json()["results"]) == 4
    assert srv.req("DELETE", f"/parse/classes/Doc/{docs['a']}", session=tok["ann"]).status_code == 200


def test_public_and_role_grants_win_and_bad_forms(world):
    srv, tok = world["srv"], world["tok"]
    r = srv.req("PUT", "/parse/schemas/Doc", {"classLevelPermissions": {"find": {"*": True}, "readUserFields": ["owner"]}}, master=True)
    assert r.status_code == 200
    assert titles(world, "cy") == ["a", "ab", "b", "none"]  # public find: pointer permissions do not narrow it
    for bad in [{"readUserFields": "owner"}, {"readUserFields": ["own er"]}, {"find": {"pointerFields": [1]}},
                {"find": {"pointerFields": "owner"}}, {"find": {"role:a|b": True}}]:
        r = srv.req("PUT", "/parse/schemas/Doc", {"classLevelPermissions": bad}, master=True)
        assert r.status_code == 400 and r.json()["code"] == 107, bad
