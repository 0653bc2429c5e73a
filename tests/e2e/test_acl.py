"""ACLs and class-level permissions against the real binary (issue 4 item 4):
the matrix owner / other user / anonymous / master × read / write × REST get / query / include /
Lua `db.*` (as the caller and with `{master = true}`); default ACLs; `_User` email visible to the
user and master only and never searchable by others; passwords and hashes in no response; CLPs
set through `PUT /parse/schemas` (find/get/count/create/update/delete/addField, user ids, `*`,
`requiresAuthentication`) → 119; `_Session`, `_JobStatus`, `_Usage` master only."""
import json

import pytest
import requests

from conftest import APP_ID, MASTER_KEY, Server

LUA = r"""
local function opts(req, t)
  t = t or {}
  if req.params.master then t.master = true end
  return t
end

cloud.define("aclGet", function(req)
  local o = db.get(req.params.class, req.params.id, opts(req, {include = req.params.include}))
  if o == nil then return json.null end
  return o
end)

cloud.define("aclFind", function(req)
  local out = json.array()
  for _, o in ipairs(db.find(req.params.class, req.params.where or {}, opts(req, {limit = 1000, include = req.params.include}))) do
    out[#out + 1] = o
  end
  return out
end)

cloud.define("aclCount", function(req)
  return db.count(req.params.class, req.params.where or {}, opts(req))
end)

cloud.define("aclFirst", function(req)
  local o = db.first(req.params.class, req.params.where or {}, opts(req))
  if o == nil then return json.null end
  return o
end)

cloud.define("aclUpdate", function(req)
  return db.update(req.params.class, req.params.id, req.params.changes, opts(req))
end)

cloud.define("aclCreate", function(req)
  return db.create(req.params.class, req.params.fields, opts(req))
end)

cloud.define("aclDelete", function(req)
  return db.delete(req.params.class, req.params.id, opts(req))
end)

cloud.define("aclDistinct", function(req)
  local out = json.array()
  for _, v in ipairs(db.distinct(req.params.class, req.params.field, req.params.where or {}, opts(req))) do out[#out + 1] = v end
  return out
end)
"""

PASSWORDS = {"alice": "Alice-Secret-Pw-1", "bob": "Bob-Secret-Pw-2"}


class World:
    """Two users, objects with every interesting ACL, and a public holder of pointers to them."""

    def __init__(self, srv):
        self.srv = srv
        self.responses = []
        self.users = {}
        for name, pw in PASSWORDS.items():
            r = self.req("POST", "/parse/users", {"username": name, "password": pw, "email": f"{name}@mail.test"})
            assert r.status_code == 201, r.text
            self.users[name] = r.json()
        self.alice, self.bob = self.users["alice"]["objectId"], self.users["bob"]["objectId"]
        self.tokens = {"owner": self.users["alice"]["sessionToken"], "other": self.users["bob"]["sessionToken"],
                       "anon": None, "master": None}
        a, b = self.alice, self.bob
        self.objects = {
            "private": self.create("owner", {"name": "private", "ACL": {a: {"read": True, "write": True}}}),
            "default": self.create("owner", {"name": "default"}),
            "anonymous": self.create("anon", {"name": "anonymous"}),
            "readonly": self.create("master", {"name": "readonly", "ACL": {"*": {"read": True}}}),
            "otherwrite": self.create("master", {"name": "otherwrite", "ACL": {"*": {"read": True}, b: {"write": True}}}),
            "nobody": self.create("master", {"name": "nobody", "ACL": {}}),
        }
        everyone = {"owner", "other", "anon", "master"}
        self.readers = {"private": {"owner", "master"}, "default": everyone, "anonymous": everyone,
                        "readonly": everyone, "otherwrite": everyone, "nobody": {"master"}}
        self.writers = {"private": {"owner", "master"}, "default": {"owner", "master"}, "anonymous": everyone,
                        "readonly": {"master"}, "otherwrite": {"other", "master"}, "nobody": {"master"}}
        r = self.req("POST", "/parse/classes/Holder", {
            "name": "holder",
            **{k: {"__type": "Pointer", "className": "Doc", "objectId": v} for k, v in self.objects.items()}})
        assert r.status_code == 201, r.text
        self.holder = r.json()["objectId"]

    def req(self, method, path, body=None, who="anon", **kw):
        r = self.srv.req(method, path, body, session=self.tokens.get(who) if hasattr(self, "tokens") else None,
                         master=(who == "master"), **kw)
        self.responses.append(r.text)
        return r

    def call(self, name, params, who):
        r = self.srv.req("POST", f"/parse/functions/{name}", params, session=self.tokens.get(who), master=(who == "master"))
        self.responses.append(r.text)
        return r

    def create(self, who, body):
        r = self.req("POST", "/parse/classes/Doc", body, who=who)
        assert r.status_code == 201, r.text
        return r.json()["objectId"]


@pytest.fixture(scope="module")
def world():
    s = Server(functions={"acl.lua": LUA}).start()
    w = World(s)
    yield w
    s.stop()
    s.cleanup()


WHO = ["owner", "other", "anon", "master"]


def test_default_acls(world):
    a = world.alice
    acl = lambda k: world.req("GET", f"/parse/classes/Doc/{world.objects[k]}", who="master").json().get("ACL")
    assert acl("default") == {"*": {"read": True}, a: {"read": True, "write": True}}
    assert acl("anonymous") is None
    # Created with the master key and no ACL: public as well.
    oid = world.create("master", {"name": "m"})
    r = world.req("GET", f"/parse/classes/Doc/{oid}", who="anon")
    assert r.status_code == 200 and "ACL" not in r.json()
    assert world.req("PUT", f"/parse/classes/Doc/{oid}", {"x": 1}, who="other").status_code == 200
    assert world.req("DELETE", f"/parse/classes/Doc/{oid}", who="anon").status_code == 200
    # A user's object with an explicit ACL keeps exactly that ACL.
    r = world.req("GET", f"/parse/classes/Doc/{world.objects['private']}", who="master")
    assert r.json()["ACL"] == {a: {"read": True, "write": True}}
    # _User rows: public read, self write.
    r = world.req("GET", f"/parse/users/{a}", who="master")
    assert r.json()["ACL"] == {"*": {"read": True}, a: {"read": True, "write": True}}


@pytest.mark.parametrize("who", WHO)
def test_rest_read_matrix(world, who):
    ids = world.objects
    for key, oid in ids.items():
        r = world.req("GET", f"/parse/classes/Doc/{oid}", who=who)
        if who in world.readers[key]:
            assert r.status_code == 200 and r.json()["name"] == key, (who, key, r.text)
        else:
            assert (r.status_code, r.json()["code"]) == (404, 101), (who, key, r.text)
    r = world.req("GET", "/parse/classes/Doc", who=who, params={"limit": "1000", "where": json.dumps({"objectId": {"$in": list(ids.values())}})})
    seen = {o["name"] for o in r.json()["results"]}
    assert seen == {k for k in ids if who in world.readers[k]}, who
    r = world.req("GET", "/parse/classes/Doc", who=who, params={"count": "1", "limit": "0", "where": json.dumps({"objectId": {"$in": list(ids.values())}})})
    assert r.json()["count"] == len(seen)
    # include: readable pointers are expanded, the others stay Pointers.
    inc = ",".join(ids)
    for r in [world.req("GET", f"/parse/classes/Holder/{world.holder}", who=who, params={"include": inc}),
              world.req("GET", "/parse/classes/Holder", who=who, params={"include": inc})]:
        assert r.status_code == 200, r.text
        h = r.json() if "results" not in r.json() else r.json()["results"][0]
        for key, oid in ids.items():
            if who in world.readers[key]:
                assert h[key]["__type"] == "Object" and h[key]["name"] == key, (who, key, h[key])
            else:
                assert h[key] == {"__type": "Pointer", "className": "Doc", "objectId": oid}, (who, key, h[key])


@pytest.mark.parametrize("who", WHO)
def test_lua_read_matrix(world, who):
    ids = world.objects
    for as_master in (False, True):
        expect = {k for k in ids if who in world.readers[k] or as_master}
        for key, oid in ids.items():
            r = world.call("aclGet", {"class": "Doc", "id": oid, "master": as_master}, who)
            assert r.status_code == 200, r.text
            if key in expect:
                assert r.json()["result"]["name"] == key, (who, as_master, key)
            else:
                assert r.json()["result"] is None, (who, as_master, key, r.text)
        where = {"objectId": {"$in": list(ids.values())}}
        r = world.call("aclFind", {"class": "Doc", "where": where, "master": as_master}, who)
        assert {o["name"] for o in r.json()["result"]} == expect, (who, as_master)
        r = world.call("aclCount", {"class": "Doc", "where": where, "master": as_master}, who)
        assert r.json()["result"] == len(expect)
        r = world.call("aclFirst", {"class": "Doc", "where": {"objectId": ids["private"]}, "master": as_master}, who)
        assert (r.json()["result"] is not None) == ("private" in expect)
        # include through Lua applies the caller's ACLs as well.
        r = world.call("aclGet", {"class": "Holder", "id": world.holder, "include": ",".join(ids), "master": as_master}, who)
        h = r.json()["result"]
        for key in ids:
            assert (h[key]["__type"] == "Object") == (key in expect), (who, as_master, key)


def test_write_matrix_rest_and_lua(world):
    """Each caller tries REST PUT, Lua db.update as itself and Lua with master on every object;
    afterwards exactly the allowed writes have landed."""
    for who in WHO:
        for key, oid in world.objects.items():
            allowed = who in world.writers[key]
            r = world.req("PUT", f"/parse/classes/Doc/{oid}", {"touch": {"__op": "Increment", "amount": 1}}, who=who)
            if allowed:
                assert r.status_code == 200, (who, key, r.text)
            else:
                assert (r.status_code, r.json()["code"]) == (404, 101), (who, key, r.text)
            r = world.call("aclUpdate", {"class": "Doc", "id": oid, "changes": {"luaTouch": {"__op": "Increment", "amount": 1}}}, who)
            if allowed:
                assert r.status_code == 200 and r.json()["result"]["objectId"] == oid, (who, key, r.text)
            else:
                assert (r.status_code, r.json()["code"]) == (404, 101), (who, key, r.text)
            r = world.call("aclUpdate", {"class": "Doc", "id": oid, "master": True,
                                         "changes": {"masterTouch": {"__op": "Increment", "amount": 1}}}, who)
            assert r.status_code == 200, (who, key, r.text)
            # A refused DELETE (REST or Lua) changes nothing.
            if not allowed:
                assert world.req("DELETE", f"/parse/classes/Doc/{oid}", who=who).status_code == 404
                assert world.call("aclDelete", {"class": "Doc", "id": oid}, who).status_code == 404
    for key, oid in world.objects.items():
        o = world.req("GET", f"/parse/classes/Doc/{oid}", who="master").json()
        n = len(world.writers[key])
        assert o.get("touch", 0) == n and o.get("luaTouch", 0) == n, (key, o)
        assert o["masterTouch"] == 4, (key, o)


def test_delete_matrix(world):
    for key in world.objects:
        for who in WHO:
            oid = world.create("master", {"name": "del-" + key, "ACL": world.req(
                "GET", f"/parse/classes/Doc/{world.objects[key]}", who="master").json().get("ACL", {"*": {"read": True, "write": True}})})
            r = world.req("DELETE", f"/parse/classes/Doc/{oid}", who=who)
            if who in world.writers[key]:
                assert r.status_code == 200, (who, key, r.text)
            else:
                assert (r.status_code, r.json()["code"]) == (404, 101), (who, key)
                assert world.req("GET", f"/parse/classes/Doc/{oid}", who="master").status_code == 200


def test_user_email_privacy_and_no_password_anywhere(world):
    a, b = world.alice, world.bob
    # GET /users/ID and /classes/_User/ID: email for self and master only.
    for path in [f"/parse/users/{a}", f"/parse/classes/_User/{a}"]:
        assert world.req("GET", path, who="owner").json()["email"] == "alice@mail.test"
        assert world.req("GET", path, who="master").json()["email"] == "alice@mail.test"
        for who in ("other", "anon"):
            o = world.req("GET", path, who=who).json()
            assert o["username"] == "alice" and "email" not in o, (who, o)
    assert world.req("GET", "/parse/users/me", who="owner").json()["email"] == "alice@mail.test"
    # Queries.
    for who in WHO:
        res = world.req("GET", "/parse/users", who=who).json()["results"]
        mails = {o["username"]: o.get("email") for o in res}
        expect_a = "alice@mail.test" if who in ("owner", "master") else None
        expect_b = "bob@mail.test" if who in ("other", "master") else None
        assert mails == {"alice": expect_a, "bob": expect_b}, (who, mails)
    # include of a _User pointer: no email for others, never a password.
    pid = world.create("anon", {"name": "byalice", "author": {"__type": "Pointer", "className": "_User", "objectId": a}})
    for who in WHO:
        o = world.req("GET", f"/parse/classes/Doc/{pid}", who=who, params={"include": "author"}).json()
        assert o["author"]["username"] == "alice"
        assert ("email" in o["author"]) == (who in ("owner", "master")), (who, o)
    # Lua: the same rules for db.get / db.find as the caller; master sees the email.
    for who in WHO:
        for as_master in (False, True):
            o = world.call("aclGet", {"class": "_User", "id": a, "master": as_master}, who).json()["result"]
            assert ("email" in o) == (as_master or who in ("owner", "master")), (who, as_master, o)
            res = world.call("aclFind", {"class": "_User", "master": as_master}, who).json()["result"]
            assert {x["username"] for x in res} == {"alice", "bob"}
    # Others cannot search, sort or list by a hidden field: that would reveal it.
    for who in ("other", "anon"):
        for where in [{"email": "alice@mail.test"}, {"email": {"$regex": "^ali"}}, {"email": {"$exists": True}},
                      {"$or": [{"username": "zzz"}, {"email": {"$gt": "a"}}]}, {"authData": {"$exists": True}},
                      {"password": {"$exists": True}}]:
            for path in ("/parse/users", "/parse/classes/_User"):
                r = world.req("GET", path, who=who, params={"where": json.dumps(where)})
                assert (r.status_code, r.json().get("code")) == (403, 119), (who, where, r.text)
            r = world.req("GET", "/parse/classes/_User", who=who, params={"where": json.dumps(where), "count": "1", "limit": "0"})
            assert r.status_code == 403, (who, where, r.text)
            r = world.call("aclFind", {"class": "_User", "where": where}, who)
            assert r.status_code == 403, (who, where, r.text)
            r = world.call("aclCount", {"class": "_User", "where": where}, who)
            assert r.status_code == 403, (who, where, r.text)
        r = world.req("GET", "/parse/users", who=who, params={"order": "email"})
        assert r.status_code == 403, r.text
        r = world.call("aclDistinct", {"class": "_User", "field": "email"}, who)
        assert r.status_code == 403, r.text
    # The master key may, and Lua with master = true may.
    r = world.req("GET", "/parse/users", who="master", params={"where": json.dumps({"email": "alice@mail.test"})})
    assert [o["objectId"] for o in r.json()["results"]] == [a]
    r = world.call("aclDistinct", {"class": "_User", "field": "email", "master": True}, "other")
    assert sorted(r.json()["result"]) == ["alice@mail.test", "bob@mail.test"]
    # Nothing ever carried a password or its hash.
    r = world.req("GET", "/parse/classes/_User", who="master", params={"keys": "password,username"})
    world.responses.append(r.text)
    for text in world.responses:
        for secret in list(PASSWORDS.values()) + ["_hashed_password", "$argon2", "argon2id"]:
            assert secret not in text, (secret, text[:300])
        assert '"password"' not in text, text[:300]


def test_class_level_permissions(world):
    a, b = world.alice, world.bob
    r = world.req("POST", "/parse/classes/Guarded", {"text": "seed", "n": 0, "ACL": {"*": {"read": True, "write": True}}}, who="master")
    seed = r.json()["objectId"]
    clp = {"find": {"requiresAuthentication": True}, "get": {"*": True}, "count": {},
           "create": {a: True}, "update": {b: True}, "delete": {}, "addField": {}}
    assert world.req("PUT", "/parse/schemas/Guarded", {"classLevelPermissions": clp}, who="owner").status_code == 403
    r = world.req("PUT", "/parse/schemas/Guarded", {"classLevelPermissions": clp}, who="master")
    assert r.status_code == 200, r.text
    assert world.req("GET", "/parse/schemas/Guarded", who="master").json()["classLevelPermissions"]["create"] == {a: True}

    def code(r):
        return r.status_code, (r.json().get("code") if r.status_code != 200 and r.status_code != 201 else None)

    denied = (403, 119)
    # find: any logged-in user.
    assert code(world.req("GET", "/parse/classes/Guarded", who="anon")) == denied
    assert code(world.req("GET", "/parse/classes/Guarded", who="other")) == (200, None)
    # get: everyone.
    assert code(world.req("GET", f"/parse/classes/Guarded/{seed}", who="anon")) == (200, None)
    # count: master only.
    for who in ("owner", "other", "anon"):
        assert code(world.req("GET", "/parse/classes/Guarded", who=who, params={"count": "1", "limit": "0"})) == denied
        assert code(world.call("aclCount", {"class": "Guarded"}, who)) == denied
    assert world.req("GET", "/parse/classes/Guarded", who="master", params={"count": "1", "limit": "0"}).json()["count"] == 1
    assert world.call("aclCount", {"class": "Guarded", "master": True}, "anon").json()["result"] == 1
    # create: alice only (REST, batch and Lua as the caller); master and Lua master bypass.
    r = world.req("POST", "/parse/classes/Guarded", {"text": "by alice", "ACL": {"*": {"read": True, "write": True}}}, who="owner")
    assert r.status_code == 201, r.text
    by_alice = r.json()["objectId"]
    for who in ("other", "anon"):
        assert code(world.req("POST", "/parse/classes/Guarded", {"text": "no"}, who=who)) == denied
        assert code(world.call("aclCreate", {"class": "Guarded", "fields": {"text": "no"}}, who)) == denied
        r = world.req("POST", "/parse/batch", {"requests": [{"method": "POST", "path": "/classes/Guarded", "body": {"text": "no"}}]}, who=who)
        assert r.json()[0]["error"]["code"] == 119
    assert world.call("aclCreate", {"class": "Guarded", "fields": {"text": "lua master"}, "master": True}, "anon").status_code == 200
    # addField: nobody but master; alice's create with a new field is refused.
    assert code(world.req("POST", "/parse/classes/Guarded", {"text": "x", "brandNew": 1}, who="owner")) == denied
    assert code(world.req("PUT", f"/parse/classes/Guarded/{seed}", {"otherNew": 1}, who="other")) == denied
    assert world.req("POST", "/parse/classes/Guarded", {"text": "x", "brandNew": 1}, who="master").status_code == 201
    # update: bob only (alice owns an object but the class says no).
    assert code(world.req("PUT", f"/parse/classes/Guarded/{by_alice}", {"text": "edit"}, who="owner")) == denied
    assert code(world.call("aclUpdate", {"class": "Guarded", "id": by_alice, "changes": {"text": "edit"}}, "owner")) == denied
    assert code(world.req("PUT", f"/parse/classes/Guarded/{by_alice}", {"text": "edit"}, who="anon")) == denied
    assert code(world.req("PUT", f"/parse/classes/Guarded/{by_alice}", {"text": "bob edit"}, who="other")) == (200, None)
    # delete: master only.
    for who in ("owner", "other", "anon"):
        assert code(world.req("DELETE", f"/parse/classes/Guarded/{by_alice}", who=who)) == denied
        assert code(world.call("aclDelete", {"class": "Guarded", "id": by_alice}, who)) == denied
    assert world.req("GET", f"/parse/classes/Guarded/{by_alice}", who="master").json()["text"] == "bob edit"
    assert world.call("aclDelete", {"class": "Guarded", "id": by_alice, "master": True}, "anon").status_code == 200
    # `*` and a per-user get.
    r = world.req("PUT", "/parse/schemas/Guarded", {"classLevelPermissions": {"get": {b: True}, "find": {"*": True}}}, who="master")
    assert r.status_code == 200
    assert code(world.req("GET", f"/parse/classes/Guarded/{seed}", who="owner")) == denied
    assert code(world.call("aclGet", {"class": "Guarded", "id": seed}, "owner")) == denied
    assert code(world.req("GET", f"/parse/classes/Guarded/{seed}", who="other")) == (200, None)
    assert code(world.req("GET", "/parse/classes/Guarded", who="anon")) == (200, None)
    # Cleared CLPs make the class public again.
    assert world.req("PUT", "/parse/schemas/Guarded", {"classLevelPermissions": {}}, who="master").status_code == 200
    assert code(world.req("GET", f"/parse/classes/Guarded/{seed}", who="anon")) == (200, None)
    assert code(world.req("DELETE", f"/parse/classes/Guarded/{seed}", who="anon")) == (200, None)


def test_system_classes_are_master_only(world):
    # Make sure _JobStatus and _Usage exist (a usage flush and a job status come from the host);
    # the answer must be 119 whether or not they have rows yet.
    for cls in ("_Session", "_JobStatus", "_Usage"):
        for who in ("owner", "other", "anon"):
            for method, path, body in [("GET", f"/parse/classes/{cls}", None), ("GET", f"/parse/classes/{cls}/abcdefghij", None),
                                       ("POST", f"/parse/classes/{cls}", {"x": 1}), ("PUT", f"/parse/classes/{cls}/abcdefghij", {"x": 1}),
                                       ("DELETE", f"/parse/classes/{cls}/abcdefghij", None)]:
                r = world.req(method, path, body, who=who)
                assert r.status_code == 403 and r.json() == {"code": 119, "error": "unauthorized: master key is required"}, \
                    (cls, who, method, r.text)
            r = world.req("POST", "/parse/batch", {"requests": [{"method": "GET", "path": f"/classes/{cls}"}]}, who=who)
            assert r.json()[0]["error"]["code"] == 119
            for fn, params in [("aclFind", {"class": cls}), ("aclCount", {"class": cls}),
                               ("aclCreate", {"class": cls, "fields": {"x": 1}})]:
                r = world.call(fn, params, who)
                assert (r.status_code, r.json()["code"]) == (403, 119), (cls, who, fn, r.text)
        assert world.req("GET", f"/parse/classes/{cls}", who="master").status_code == 200
        assert world.call("aclFind", {"class": cls, "master": True}, "anon").status_code == 200
    # The master sees sessions, but never a token in clear.
    r = world.req("GET", "/parse/classes/_Session", who="master")
    sessions = r.json()["results"]
    assert {s["user"]["objectId"] for s in sessions} >= {world.alice, world.bob}
    for t in (world.tokens["owner"], world.tokens["other"]):
        assert t not in r.text and t.split(":", 1)[-1] not in r.text


def test_include_respects_class_permissions_and_system_classes(world):
    """A pointer into a class the reader may not `get` (CLP, or a master-only system class)
    stays a Pointer, even when the row's ACL would let the reader see it."""
    session_id = next(s["objectId"] for s in world.req("GET", "/parse/classes/_Session", who="master").json()["results"]
                      if s["user"]["objectId"] == world.alice)
    assert world.req("PUT", "/parse/schemas/Vault", {"classLevelPermissions": {"get": {world.bob: True}, "find": {}}},
                     who="master").status_code == 200
    r = world.req("POST", "/parse/classes/Vault", {"secret": "in the vault"}, who="master")
    vault = r.json()["objectId"]
    ptr = lambda c, i: {"__type": "Pointer", "className": c, "objectId": i}
    holder = world.create("anon", {"name": "sys", "session": ptr("_Session", session_id), "vault": ptr("Vault", vault)})
    for who in WHO:
        for r in [world.req("GET", f"/parse/classes/Doc/{holder}", who=who, params={"include": "session,vault"}),
                  world.call("aclGet", {"class": "Doc", "id": holder, "include": "session,vault"}, who)]:
            o = r.json().get("result", r.json())
            assert (o["session"]["__type"] == "Object") == (who == "master"), (who, o["session"])
            assert (o["vault"]["__type"] == "Object") == (who in ("master", "other")), (who, o["vault"])
            if who not in ("master", "other"):
                assert "in the vault" not in r.text
            if who != "master":
                assert "sessionTokenHash" not in r.text


def test_user_rows_are_writable_by_their_user_only(world):
    a = world.alice
    for who in ("other", "anon"):
        for path in (f"/parse/classes/_User/{a}", f"/parse/users/{a}"):
            r = world.req("PUT", path, {"displayName": "hacked"}, who=who)
            assert (r.status_code, r.json()["code"]) == (404, 101), (who, path, r.text)
            r = world.req("DELETE", path, who=who)
            assert (r.status_code, r.json()["code"]) == (404, 101), (who, path, r.text)
        r = world.call("aclUpdate", {"class": "_User", "id": a, "changes": {"displayName": "hacked"}}, who)
        assert (r.status_code, r.json()["code"]) == (404, 101), (who, r.text)
        r = world.call("aclDelete", {"class": "_User", "id": a}, who)
        assert (r.status_code, r.json()["code"]) == (404, 101), (who, r.text)
    assert world.req("PUT", f"/parse/classes/_User/{a}", {"displayName": "Alice"}, who="owner").status_code == 200
    r = world.call("aclUpdate", {"class": "_User", "id": a, "changes": {"displayName": "Alice L"}}, "owner")
    assert r.status_code == 200, r.text
    assert "_hashed_password" not in r.text and PASSWORDS["alice"] not in r.text
    assert world.req("PUT", f"/parse/users/{a}", {"displayName": "Alice M"}, who="master").status_code == 200
    o = world.req("GET", f"/parse/users/{a}", who="anon").json()
    assert o["displayName"] == "Alice M"
    # Nobody but the user can slip a password in through the generic class path.
    r = world.req("PUT", f"/parse/classes/_User/{a}", {"password": "new-pw-x"}, who="other")
    assert r.status_code == 404
    r = world.req("POST", "/parse/login", {"username": "alice", "password": PASSWORDS["alice"]})
    assert r.status_code == 200, r.text
