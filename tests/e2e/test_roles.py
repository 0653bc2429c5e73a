"""Roles against the real binary: `_Role` rules (name format, unique, immutable, ACL required),
`role:NAME` in object ACLs and class-level permissions honoured over REST get/find/count/update/
delete, batch, include and Lua `db.*` as the caller; membership gained and lost as the role's
`users` relation changes (the per-user cache is invalidated by `_Role` writes); the hierarchy as
Parse has it (a role listed in another role's `roles` relation gets that role's rights)."""
import pytest

LUA = r"""
cloud.define("luaGet", function(req)
  local o = db.get(req.params.class, req.params.id)
  if o == nil then return json.null end
  return o
end)
cloud.define("luaFind", function(req)
  local out = json.array()
  for _, o in ipairs(db.find(req.params.class, req.params.where or {}, {include = req.params.include})) do
    out[#out + 1] = o
  end
  return out
end)
cloud.define("luaCount", function(req) return db.count(req.params.class, req.params.where or {}) end)
cloud.define("luaUpdate", function(req)
  local ok, err = pcall(db.update, req.params.class, req.params.id, req.params.changes)
  if ok then return "ok" end
  return tostring(err)
end)
cloud.define("luaDeleteWhere", function(req)
  return db.deleteWhere(req.params.class, req.params.where or {})
end)
cloud.define("luaRelate", function(req)
  return db.update("_Role", req.params.role, {users = {__op = req.params.op, objects = {
    {__type = "Pointer", className = "_User", objectId = req.params.user}}}}, {master = true})
end)
"""


def ptr(cls, oid):
    return {"__type": "Pointer", "className": cls, "objectId": oid}


class World:
    def __init__(self, srv):
        self.srv = srv
        self.tokens = {}
        self.ids = {}
        for name in ["alice", "bob", "carol"]:
            r = srv.req("POST", "/parse/users", {"username": name, "password": "pw-" + name})
            assert r.status_code == 201, r.text
            self.tokens[name] = r.json()["sessionToken"]
            self.ids[name] = r.json()["objectId"]

    def req(self, method, path, body=None, who=None, **kw):
        if who == "master":
            return self.srv.req(method, path, body, master=True, **kw)
        return self.srv.req(method, path, body, session=self.tokens.get(who), **kw)

    def role(self, name, users=(), roles=(), acl=None):
        body = {"name": name, "ACL": acl or {"*": {"read": True}}}
        if users:
            body["users"] = {"__op": "AddRelation", "objects": [ptr("_User", self.ids[u]) for u in users]}
        if roles:
            body["roles"] = {"__op": "AddRelation", "objects": [ptr("_Role", r) for r in roles]}
        r = self.req("POST", "/parse/classes/_Role", body, who="master")
        assert r.status_code == 201, r.text
        return r.json()["objectId"]

    def members(self, role_id, op, users):
        r = self.req("PUT", f"/parse/classes/_Role/{role_id}",
                     {"users": {"__op": op, "objects": [ptr("_User", self.ids[u]) for u in users]}}, who="master")
        assert r.status_code == 200, r.text

    def call(self, name, params, who):
        r = self.srv.call(name, params, session=self.tokens.get(who))
        assert r.status_code == 200, r.text
        return r.json()["result"]


@pytest.fixture
def world(server_factory):
    return World(server_factory(functions={"main.lua": LUA}).start())


def test_role_rules(world):
    # name required, format checked, ACL required.
    assert world.req("POST", "/parse/classes/_Role", {"ACL": {"*": {"read": True}}}, who="master").json()["code"] == 142
    r = world.req("POST", "/parse/classes/_Role", {"name": "bad|name", "ACL": {}}, who="master")
    assert r.status_code == 400 and r.json()["code"] == 142
    r = world.req("POST", "/parse/classes/_Role", {"name": "Admins"}, who="master")
    assert r.json()["code"] == 142
    rid = world.role("Admins")
    # unique
    r = world.req("POST", "/parse/classes/_Role", {"name": "Admins", "ACL": {}}, who="master")
    assert r.status_code == 400 and r.json()["code"] == 137
    # a name never changes
    r = world.req("PUT", f"/parse/classes/_Role/{rid}", {"name": "Other"}, who="master")
    assert r.json()["code"] == 142
    # a role key in an ACL must be a valid role name (no `|` that could forge another entry)
    r = world.req("POST", "/parse/classes/Doc", {"ACL": {"role:x|" + world.ids["bob"]: {"read": True}}}, who="alice")
    assert r.status_code == 400 and r.json()["code"] == 123
    # GET shows the relation fields as Parse does
    got = world.req("GET", f"/parse/classes/_Role/{rid}", who="master").json()
    assert got["name"] == "Admins"
    assert got["users"] == {"__type": "Relation", "className": "_User"}
    assert got["roles"] == {"__type": "Relation", "className": "_Role"}
    schema = world.req("GET", "/parse/schemas/_Role", who="master").json()
    assert schema["fields"]["name"]["type"] == "String"


def test_role_acl_gain_and_loss_everywhere(world):
    rid = world.role("Editors", users=["alice"])
    doc = world.req("POST", "/parse/classes/Doc", {"title": "secret", "ACL": {"role:Editors": {"read": True, "write": True}}},
                    who="master").json()["objectId"]
    holder = world.req("POST", "/parse/classes/Holder", {"doc": ptr("Doc", doc)}, who="master").json()["objectId"]

    def sees(who):
        got = world.req("GET", f"/parse/classes/Doc/{doc}", who=who)
        found = world.req("GET", "/parse/classes/Doc", who=who).json()["results"]
        count = world.req("GET", "/parse/classes/Doc", who=who, params={"count": "1", "limit": "0"}).json()["count"]
        batch = world.req("POST", "/parse/batch", {"requests": [{"method": "GET", "path": f"/classes/Doc/{doc}"}]}, who=who).json()
        inc = world.req("GET", f"/parse/classes/Holder/{holder}", who=who, params={"include": "doc"}).json()["doc"]
        lua_get = world.call("luaGet", {"class": "Doc", "id": doc}, who)
        lua_find = world.call("luaFind", {"class": "Doc"}, who)
        lua_count = world.call("luaCount", {"class": "Doc"}, who)
        lua_inc = world.call("luaFind", {"class": "Holder", "include": "doc"}, who)[0]["doc"]
        views = [got.status_code == 200, len(found) == 1, count == 1, "success" in batch[0],
                 inc.get("title") == "secret", lua_get is not None, len(lua_find) == 1, lua_count == 1,
                 lua_inc.get("title") == "secret"]
        assert len(set(views)) == 1, (who, views)
        return views[0]

    assert sees("alice")
    assert not sees("bob")
    assert not sees(None)
    # bob joins: reads at once (cache invalidated by the _Role write) ...
    world.members(rid, "AddRelation", ["bob"])
    assert sees("bob")
    # ... and may write through the role
    r = world.req("PUT", f"/parse/classes/Doc/{doc}", {"title": "secret"}, who="bob")
    assert r.status_code == 200, r.text
    assert world.call("luaUpdate", {"class": "Doc", "id": doc, "changes": {"n": 1}}, "bob") == "ok"
    # bob leaves (through Lua db.update with master): loses read and write everywhere
    world.call("luaRelate", {"role": rid, "user": world.ids["bob"], "op": "RemoveRelation"}, "alice")
    assert not sees("bob")
    assert world.req("PUT", f"/parse/classes/Doc/{doc}", {"n": 2}, who="bob").json()["code"] == 101
    assert "101" in world.call("luaUpdate", {"class": "Doc", "id": doc, "changes": {"n": 3}}, "bob")
    assert world.req("DELETE", f"/parse/classes/Doc/{doc}", who="bob").json()["code"] == 101
    assert world.call("luaDeleteWhere", {"class": "Doc"}, "bob") == 0
    batch = world.req("POST", "/parse/batch", {"requests": [{"method": "PUT", "path": f"/classes/Doc/{doc}", "body": {"n": 4}}]},
                      who="bob").json()
    assert batch[0]["error"]["code"] == 101
    # alice still writes and finally deletes through the role
    assert sees("alice")
    assert world.call("luaDeleteWhere", {"class": "Doc"}, "alice") == 1
    # deleting the role removes the grant for everyone
    doc2 = world.req("POST", "/parse/classes/Doc", {"title": "secret", "ACL": {"role:Editors": {"read": True}}},
                     who="master").json()["objectId"]
    assert world.req("GET", f"/parse/classes/Doc/{doc2}", who="alice").status_code == 200
    assert world.req("DELETE", f"/parse/classes/_Role/{rid}", who="master").status_code == 200
    assert world.req("GET", f"/parse/classes/Doc/{doc2}", who="alice").status_code == 404


def test_role_hierarchy_as_parse(world):
    # As in Parse, a role listed in another role's `roles` relation inherits that role's rights:
    # Staff.roles = [Managers] → Managers' users get Staff's rights, not the other way round.
    managers = world.role("Managers", users=["alice"])
    staff = world.role("Staff", users=["bob"], roles=[managers])
    staff_doc = world.req("POST", "/parse/classes/Doc", {"t": "staff", "ACL": {"role:Staff": {"read": True}}}, who="master").json()["objectId"]
    mgr_doc = world.req("POST", "/parse/classes/Doc", {"t": "mgr", "ACL": {"role:Managers": {"read": True}}}, who="master").json()["objectId"]

    def titles(who):
        return sorted(o["t"] for o in world.req("GET", "/parse/classes/Doc", who=who).json()["results"])

    assert titles("alice") == ["mgr", "staff"]  # a manager inherits Staff's rights
    assert titles("bob") == ["staff"]  # staff do not get Managers' rights
    assert titles("carol") == []
    # a chain of three: Execs in Managers' roles → Execs' users get Managers' and Staff's rights
    execs = world.role("Execs", users=["carol"])
    r = world.req("PUT", f"/parse/classes/_Role/{managers}", {"roles": {"__op": "AddRelation", "objects": [ptr("_Role", execs)]}}, who="master")
    assert r.status_code == 200, r.text
    assert titles("carol") == ["mgr", "staff"]
    # $relatedTo lists the role's members
    r = world.req("GET", "/parse/classes/_User", who="master",
                  params={"where": '{"$relatedTo":{"object":{"__type":"Pointer","className":"_Role","objectId":"%s"},"key":"users"}}' % staff})
    assert [u["username"] for u in r.json()["results"]] == ["bob"]
    # removing the link removes the inherited rights
    r = world.req("PUT", f"/parse/classes/_Role/{staff}", {"roles": {"__op": "RemoveRelation", "objects": [ptr("_Role", managers)]}}, who="master")
    assert r.status_code == 200, r.text
    assert titles("alice") == ["mgr"]
    assert titles("carol") == ["mgr"]
    # deleting a user's role removes what it granted
    world.req("DELETE", f"/parse/classes/_Role/{managers}", who="master")
    assert titles("alice") == []


def test_role_in_class_level_permissions(world):
    rid = world.role("Writers", users=["alice"])
    r = world.req("PUT", "/parse/schemas/Note", {"classLevelPermissions": {
        "create": {"role:Writers": True}, "find": {"role:Writers": True}, "get": {"role:Writers": True},
        "count": {"role:Writers": True}}}, who="master")
    assert r.status_code == 200, r.text
    assert world.req("POST", "/parse/classes/Note", {"t": 1}, who="alice").status_code == 201
    assert world.req("POST", "/parse/classes/Note", {"t": 1}, who="bob").json()["code"] == 119
    assert world.req("GET", "/parse/classes/Note", who="bob").json()["code"] == 119
    assert world.req("GET", "/parse/classes/Note", who="alice").status_code == 200
    world.members(rid, "AddRelation", ["bob"])
    assert world.req("POST", "/parse/classes/Note", {"t": 2}, who="bob").status_code == 201
    assert len(world.req("GET", "/parse/classes/Note", who="bob").json()["results"]) == 2
    world.members(rid, "RemoveRelation", ["bob"])
    assert world.req("GET", "/parse/classes/Note", who="bob").json()["code"] == 119
    assert world.req("POST", "/parse/batch", {"requests": [{"method": "POST", "path": "/classes/Note", "body": {}}]},
                     who="bob").json()[0]["error"]["code"] == 119


def test_roles_rest_paths(world):
    # Parse's /parse/roles paths are _Role under another name, batch included.
    r = world.req("POST", "/parse/roles", {"name": "Ops", "ACL": {"*": {"read": True}},
                                           "users": {"__op": "AddRelation", "objects": [ptr("_User", world.ids["alice"])]}}, who="master")
    assert r.status_code == 201, r.text
    rid = r.json()["objectId"]
    assert world.req("GET", f"/parse/roles/{rid}", who="bob").json()["name"] == "Ops"
    assert [o["name"] for o in world.req("GET", "/parse/roles", who="bob", params={"where": '{"name":"Ops"}'}).json()["results"]] == ["Ops"]
    doc = world.req("POST", "/parse/classes/Doc", {"ACL": {"role:Ops": {"read": True}}}, who="master").json()["objectId"]
    assert world.req("GET", f"/parse/classes/Doc/{doc}", who="bob").status_code == 404
    b = world.req("POST", "/parse/batch", {"requests": [{"method": "PUT", "path": f"/parse/roles/{rid}", "body": {
        "users": {"__op": "AddRelation", "objects": [ptr("_User", world.ids["bob"])]}}}]}, who="master").json()
    assert "success" in b[0], b
    assert world.req("GET", f"/parse/classes/Doc/{doc}", who="bob").status_code == 200
    # the role's own ACL guards it: bob (public read only) cannot add himself elsewhere
    r = world.req("PUT", f"/parse/roles/{rid}", {"users": {"__op": "AddRelation", "objects": [ptr("_User", world.ids["carol"])]}}, who="bob")
    assert r.json()["code"] == 101
    # the SDKs' Batch op (add and remove in one save)
    r = world.req("PUT", f"/parse/roles/{rid}", {"users": {"__op": "Batch", "ops": [
        {"__op": "AddRelation", "objects": [ptr("_User", world.ids["carol"])]},
        {"__op": "RemoveRelation", "objects": [ptr("_User", world.ids["bob"])]}]}}, who="master")
    assert r.status_code == 200, r.text
    assert world.req("GET", f"/parse/classes/Doc/{doc}", who="bob").status_code == 404
    assert world.req("GET", f"/parse/classes/Doc/{doc}", who="carol").status_code == 200
    assert world.req("DELETE", f"/parse/roles/{rid}", who="master").status_code == 200
    assert world.req("GET", f"/parse/classes/Doc/{doc}", who="carol").status_code == 404
    assert world.req("GET", f"/parse/roles/{rid}", who="master").status_code == 404
