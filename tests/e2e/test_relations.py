"""Relations against the real binary: the Relation field type and its marker on reads,
`AddRelation` / `RemoveRelation` over REST (create and update), batch and Lua `db.update`,
`$relatedTo` (with the members' own ACLs applied) and `redirectClassNameForKey`; join rows
removed with their owner and with their member; type errors; reserved internal names and
injection attempts in names and ids."""
import json
import os
import sqlite3

import pytest

LUA = r"""
cloud.define("like", function(req)
  local o = db.update("Post", req.params.post, {likes = {__op = req.params.op or "AddRelation", objects = {
    {__type = "Pointer", className = "_User", objectId = req.params.user}}}}, {master = true})
  return o.likes
end)
cloud.define("likers", function(req)
  local out = json.array()
  for _, u in ipairs(db.find("_User", {["$relatedTo"] = {object = {__type = "Pointer", className = "Post", objectId = req.params.post}, key = "likes"}}, {order = "username"})) do
    out[#out + 1] = u.username
  end
  return out
end)
"""


def ptr(cls, oid):
    return {"__type": "Pointer", "className": cls, "objectId": oid}


def related_where(owner_cls, owner_id, key):
    return json.dumps({"$relatedTo": {"object": ptr(owner_cls, owner_id), "key": key}})


def join_rows(srv, table):
    db = sqlite3.connect(f"file:{os.path.join(srv.data, 'moonbase.sqlite')}?mode=ro", uri=True)
    try:
        return db.execute(f'SELECT owningId, relatedId FROM "{table}" ORDER BY 1, 2').fetchall()
    finally:
        db.close()


def signup(srv, name):
    r = srv.req("POST", "/parse/users", {"username": name, "password": "pw"})
    assert r.status_code == 201, r.text
    return r.json()["objectId"], r.json()["sessionToken"]


def usernames(srv, params, session=None, master=False, cls="_User"):
    r = srv.req("GET", f"/parse/classes/{cls}", session=session, master=master, params=params)
    assert r.status_code == 200, r.text
    return sorted(u["username"] for u in r.json()["results"])


def test_relation_round_trip(server_factory):
    srv = server_factory(functions={"main.lua": LUA}).start()
    a, ta = signup(srv, "ann")
    b, tb = signup(srv, "ben")
    c, _ = signup(srv, "cat")
    # create with AddRelation
    r = srv.req("POST", "/parse/classes/Post", {"title": "p1", "likes": {"__op": "AddRelation", "objects": [ptr("_User", a), ptr("_User", b)]}},
                master=True)
    assert r.status_code == 201, r.text
    post = r.json()["objectId"]
    got = srv.req("GET", f"/parse/classes/Post/{post}").json()
    assert got["likes"] == {"__type": "Relation", "className": "_User"}
    schema = srv.req("GET", "/parse/schemas/Post", master=True).json()
    assert schema["fields"]["likes"] == {"type": "Relation", "targetClass": "_User"}
    # a new object of the class shows the relation too
    other = srv.req("POST", "/parse/classes/Post", {"title": "p2"}, master=True).json()["objectId"]
    assert srv.req("GET", f"/parse/classes/Post/{other}").json()["likes"] == {"__type": "Relation", "className": "_User"}
    # $relatedTo, and redirectClassNameForKey on the owner class
    assert usernames(srv, {"where": related_where("Post", post, "likes")}) == ["ann", "ben"]
    assert usernames(srv, {"where": related_where("Post", post, "likes"), "redirectClassNameForKey": "likes"}, cls="Post") == ["ann", "ben"]
    assert usernames(srv, {"where": related_where("Post", other, "likes")}) == []
    # with other constraints and count
    r = srv.req("GET", "/parse/classes/_User", params={"where": json.dumps({"$relatedTo": {"object": ptr("Post", post), "key": "likes"},
                                                                               "username": "ben"}), "count": "1"})
    assert r.json()["count"] == 1
    # REST PUT: add and remove; duplicates ignored
    r = srv.req("PUT", f"/parse/classes/Post/{post}", {"likes": {"__op": "AddRelation", "objects": [ptr("_User", c), ptr("_User", a)]}}, master=True)
    assert r.status_code == 200, r.text
    assert usernames(srv, {"where": related_where("Post", post, "likes")}) == ["ann", "ben", "cat"]
    r = srv.req("PUT", f"/parse/classes/Post/{post}", {"likes": {"__op": "RemoveRelation", "objects": [ptr("_User", b)]}}, master=True)
    assert r.status_code == 200, r.text
    assert usernames(srv, {"where": related_where("Post", post, "likes")}) == ["ann", "cat"]
    # batch
    r = srv.req("POST", "/parse/batch", {"requests": [{"method": "PUT", "path": f"/classes/Post/{other}",
                                                       "body": {"likes": {"__op": "AddRelation", "objects": [ptr("_User", b)]}}}]}, master=True)
    assert "success" in r.json()[0], r.text
    assert usernames(srv, {"where": related_where("Post", other, "likes")}) == ["ben"]
    # Lua db.update and db.find with $relatedTo
    r = srv.call("like", {"post": other, "user": c})
    assert r.json()["result"] == {"__type": "Relation", "className": "_User"}, r.text
    assert srv.call("likers", {"post": other}).json()["result"] == ["ben", "cat"]
    srv.call("like", {"post": other, "user": b, "op": "RemoveRelation"})
    assert srv.call("likers", {"post": other}).json()["result"] == ["cat"]
    # the members' own ACLs still apply: a private member is invisible to others
    priv = srv.req("POST", "/parse/classes/Item", {"n": 1, "ACL": {a: {"read": True}}}, master=True).json()["objectId"]
    pub = srv.req("POST", "/parse/classes/Item", {"n": 2}, master=True).json()["objectId"]
    box = srv.req("POST", "/parse/classes/Box", {"items": {"__op": "AddRelation", "objects": [ptr("Item", priv), ptr("Item", pub)]}},
                  master=True).json()["objectId"]
    w = {"where": related_where("Box", box, "items")}
    assert sorted(o["n"] for o in srv.req("GET", "/parse/classes/Item", params=w, session=ta).json()["results"]) == [1, 2]
    assert sorted(o["n"] for o in srv.req("GET", "/parse/classes/Item", params=w, session=tb).json()["results"]) == [2]


@pytest.mark.sqlite_only("reads the join tables from the SQLite file")
def test_join_rows_follow_deletes(server_factory):
    srv = server_factory().start()
    t1 = srv.req("POST", "/parse/classes/Tag", {"n": 1}, master=True).json()["objectId"]
    t2 = srv.req("POST", "/parse/classes/Tag", {"n": 2}, master=True).json()["objectId"]
    a = srv.req("POST", "/parse/classes/Article", {"tags": {"__op": "AddRelation", "objects": [ptr("Tag", t1), ptr("Tag", t2)]}},
                master=True).json()["objectId"]
    b = srv.req("POST", "/parse/classes/Article", {"tags": {"__op": "AddRelation", "objects": [ptr("Tag", t1)]}}, master=True).json()["objectId"]
    assert join_rows(srv, "_mb_join:Article:tags") == sorted([(a, t1), (a, t2), (b, t1)])
    # deleting a member removes its rows
    assert srv.req("DELETE", f"/parse/classes/Tag/{t1}", master=True).status_code == 200
    assert join_rows(srv, "_mb_join:Article:tags") == [(a, t2)]
    # deleting the owner removes its rows
    assert srv.req("DELETE", f"/parse/classes/Article/{a}", master=True).status_code == 200
    assert join_rows(srv, "_mb_join:Article:tags") == []


def test_relation_errors_and_injection(server_factory):
    srv = server_factory().start()
    t = srv.req("POST", "/parse/classes/Tag", {"n": 1}, master=True).json()["objectId"]
    a = srv.req("POST", "/parse/classes/Article", {"tags": {"__op": "AddRelation", "objects": [ptr("Tag", t)]}}, master=True).json()["objectId"]
    # a Relation field keeps its type and target class
    assert srv.req("PUT", f"/parse/classes/Article/{a}", {"tags": "x"}, master=True).json()["code"] == 111
    r = srv.req("PUT", f"/parse/classes/Article/{a}", {"tags": {"__op": "AddRelation", "objects": [ptr("Other", "abc")]}}, master=True)
    assert r.json()["code"] == 111
    r = srv.req("PUT", f"/parse/classes/Article/{a}", {"tags": {"__op": "AddRelation", "objects": [ptr("Tag", "a"), ptr("Other", "b")]}}, master=True)
    assert r.json()["code"] == 111
    assert srv.req("PUT", f"/parse/classes/Article/{a}", {"tags": {"__op": "AddRelation", "objects": ["x"]}}, master=True).json()["code"] == 111
    # internal join tables are not classes
    for name in ["_mb_join:Article:tags", "_mb_join", "_mb_schema"]:
        r = srv.req("GET", f"/parse/classes/{name}", master=True)
        assert r.status_code == 400 and r.json()["code"] == 103, (name, r.text)
        r = srv.req("POST", f"/parse/classes/{name}", {"x": 1}, master=True)
        assert r.status_code == 400 and r.json()["code"] == 103
    # $relatedTo with hostile names is refused before any SQL; hostile ids just match nothing
    bad = [
        ({"$relatedTo": {"object": ptr("Article", a), "key": "tags\"; DROP TABLE \"Tag\"; --"}}, 105),
        ({"$relatedTo": {"object": ptr("Article\"--", a), "key": "tags"}}, 103),
        ({"$relatedTo": {"object": ptr("_mb_schema", a), "key": "tags"}}, 103),
        ({"$relatedTo": {"object": "x", "key": "tags"}}, 102),
        ({"$relatedTo": {"object": ptr("Article", a), "key": "n"}}, None),
    ]
    for where, code in bad:
        r = srv.req("GET", "/parse/classes/Tag", params={"where": json.dumps(where)}, master=True)
        if code is None:
            assert r.status_code == 200 and r.json()["results"] == []
        else:
            assert r.json().get("code") == code, (where, r.text)
    r = srv.req("GET", "/parse/classes/Tag", params={"where": json.dumps({"$relatedTo": {"object": ptr("Article", "' OR 1=1 --"), "key": "tags"}})})
    assert r.json()["results"] == []
    r = srv.req("PUT", f"/parse/classes/Article/{a}", {"tags": {"__op": "AddRelation", "objects": [ptr("Tag", "x'); DROP TABLE \"Tag\"; --")]}}, master=True)
    assert r.status_code == 200
    assert srv.req("GET", f"/parse/classes/Tag/{t}").status_code == 200
    # a non-master caller without write access cannot add to the relation
    r = srv.req("POST", "/parse/users", {"username": "u", "password": "p"})
    tok = r.json()["sessionToken"]
    locked = srv.req("POST", "/parse/classes/Article", {"ACL": {}}, master=True).json()["objectId"]
    r = srv.req("PUT", f"/parse/classes/Article/{locked}", {"tags": {"__op": "AddRelation", "objects": [ptr("Tag", t)]}}, session=tok)
    assert r.json()["code"] == 101
    assert srv.req("GET", "/parse/classes/Tag", params={"where": related_where("Article", locked, "tags")}, master=True).json()["results"] == []
