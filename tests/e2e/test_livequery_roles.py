"""LiveQuery honours roles: an object readable through `role:NAME` reaches the role's users (and
users of roles that inherit it), a user taken out of the role stops receiving at the next write,
and one added starts; a stranger receives nothing."""
import json

from test_livequery_events import drain, subscribe
from test_livequery_ws import connected, recv_json, run, signup

PTR = lambda cls, oid: {"__type": "Pointer", "className": cls, "objectId": oid}


def role(server, name, users=(), roles=()):
    body = {"name": name, "ACL": {"*": {"read": True}}}
    if users:
        body["users"] = {"__op": "AddRelation", "objects": [PTR("_User", u) for u in users]}
    if roles:
        body["roles"] = {"__op": "AddRelation", "objects": [PTR("_Role", r) for r in roles]}
    r = server.req("POST", "/parse/roles", body, master=True)
    assert r.status_code == 201, r.text
    return r.json()["objectId"]


def members(server, role_id, op, user_id):
    r = server.req("PUT", f"/parse/roles/{role_id}", {"users": {"__op": op, "objects": [PTR("_User", user_id)]}},
                   master=True)
    assert r.status_code == 200, r.text


def test_role_acl_reaches_members_and_follows_membership(server):
    alice_id, alice = signup(server, "alice")
    bob_id, bob = signup(server, "bob")
    carol_id, carol = signup(server, "carol")
    _, dave = signup(server, "dave")
    captains = role(server, "Captains", users=[carol_id])
    crew = role(server, "Crew", users=[alice_id, bob_id], roles=[captains])

    async def go():
        socks = {}
        for name, token in [("alice", alice), ("bob", bob), ("carol", carol), ("dave", dave)]:
            socks[name] = await connected(server, sessionToken=token)
            await subscribe(socks[name], 1, {"className": "Log", "where": {}})
        r = server.req("POST", "/parse/classes/Log", {"text": "one", "ACL": {"role:Crew": {"read": True}}}, master=True)
        assert r.status_code == 201, r.text
        oid = r.json()["objectId"]
        for name in ("alice", "bob", "carol"):   # carol through Captains, which inherits Crew
            ev = await recv_json(socks[name])
            assert (ev["op"], ev["object"]["objectId"], ev["object"]["text"]) == ("create", oid, "one"), (name, ev)
        # Bob leaves the role: the next write reaches alice and carol, not him.
        members(server, crew, "RemoveRelation", bob_id)
        server.req("PUT", f"/parse/classes/Log/{oid}", {"text": "two"}, master=True)
        for name in ("alice", "carol"):
            ev = await recv_json(socks[name])
            assert (ev["op"], ev["object"]["text"]) == ("update", "two"), (name, ev)
        assert await drain(socks["bob"], 1.0) == []
        # Back in the role: he receives again.
        members(server, crew, "AddRelation", bob_id)
        server.req("PUT", f"/parse/classes/Log/{oid}", {"text": "three"}, master=True)
        ev = await recv_json(socks["bob"])
        assert (ev["op"], ev["object"]["text"]) == ("update", "three"), ev
        assert await drain(socks["dave"], 0.5) == []
        for ws in socks.values():
            await ws.close()
    run(go())


def test_a_create_carrying_a_relation_reaches_subscribers_as_itself(server):
    """The feed records the created row, not one of the relation rows written with it."""
    uid, _ = signup(server, "member")

    async def go():
        from conftest import MASTER_KEY
        ws = await connected(server, masterKey=MASTER_KEY)
        await subscribe(ws, 1, {"className": "Team", "where": {}})
        r = server.req("POST", "/parse/classes/Team", {"name": "crew", "members": {
            "__op": "AddRelation", "objects": [PTR("_User", uid)]}}, master=True)
        assert r.status_code == 201, r.text
        ev = await recv_json(ws)
        assert (ev["op"], ev["object"]["objectId"], ev["object"]["name"]) == ("create", r.json()["objectId"], "crew"), ev
        await ws.close()
    run(go())
    feed = server.req("GET", "/parse/changes/Team", master=True, params={"since": 0})
    assert feed.status_code == 200, feed.text
    assert [(o["op"], o["object"]["name"]) for o in feed.json()["results"]] == [("save", "crew")], feed.text
