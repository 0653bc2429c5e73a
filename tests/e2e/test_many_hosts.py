"""Several hosts on one PostgreSQL database: what one host writes, does or is told, the others
see. Run by the PostgreSQL pass of `make test` only (each test starts its own hosts)."""
import pytest
pytestmark = pytest.mark.postgres_only("two hosts share one PostgreSQL database")

def test_read_your_write_across_hosts(host_factory):
    a = host_factory().start()
    b = host_factory(like=a).start()
    r = a.req("POST", "/parse/classes/Note", {"text": "hi"})
    assert r.status_code == 201, r.text
    oid = r.json()["objectId"]
    got = b.req("GET", f"/parse/classes/Note/{oid}")
    assert got.status_code == 200 and got.json()["text"] == "hi"


# ---------------------------------------------------------------- realtime, caches, deploys
import asyncio
import json
import os
import subprocess
import time

from conftest import APP_ID, BIN, MASTER_KEY, PGCluster
from test_livequery_events import drain, subscribe
from test_livequery_ws import connected, recv_json, run
from test_realtime_feed import SSE


def live_events(ws_messages):
    return [(m["op"], m["object"]["objectId"], m["object"].get("n")) for m in ws_messages
            if m.get("op") in ("create", "enter", "update", "leave", "delete")]


def write_sequence(a):
    """create (n=1, matches), update (n=2), leave (kind changes), enter (back), delete — on a."""
    r = a.req("POST", "/parse/classes/Note", {"kind": "memo", "n": 1})
    assert r.status_code == 201, r.text
    oid = r.json()["objectId"]
    for change in ({"n": 2}, {"kind": "done", "n": 3}, {"kind": "memo", "n": 4}):
        assert a.req("PUT", f"/parse/classes/Note/{oid}", change).status_code == 200
    assert a.req("DELETE", f"/parse/classes/Note/{oid}").status_code == 200
    return oid


EXPECTED_KINDS = ["create", "update", "leave", "enter", "delete"]


def test_livequery_subscriber_on_b_gets_writes_made_on_a_in_order(host_factory):
    a = host_factory().start()
    b = host_factory(like=a).start()

    async def go():
        ws = await connected(b)
        await subscribe(ws, 1, {"className": "Note", "where": {"kind": "memo"}})
        oid = write_sequence(a)
        got = []
        deadline = time.time() + 20
        while len(got) < 5 and time.time() < deadline:
            m = await recv_json(ws)
            if m.get("op") in EXPECTED_KINDS:
                got.append(m)
        extra = await drain(ws, 0.5)
        await ws.close()
        return oid, got, extra

    oid, got, extra = run(go())
    assert [m["op"] for m in got] == EXPECTED_KINDS, got
    assert all(m["object"]["objectId"] == oid for m in got)
    assert [m["object"].get("n") for m in got] == [1, 2, 3, 4, 4]
    assert got[1]["original"]["n"] == 1
    seqs = [m["seq"] for m in got]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    assert not [m for m in extra if m.get("op") in EXPECTED_KINDS], extra   # each event once


def test_sse_subscriber_on_b_gets_writes_made_on_a(host_factory):
    a = host_factory().start()
    b = host_factory(like=a).start()
    sse = SSE(b, "Note", master=True, params={"where": json.dumps({"kind": "memo"})})
    try:
        oid = write_sequence(a)
        got = sse.take(5)
        assert [e["event"] for e in got] == EXPECTED_KINDS, got
        assert all(e["data"]["object"]["objectId"] == oid for e in got)
        ids = [int(e["id"]) for e in got]
        assert ids == sorted(ids) and len(set(ids)) == 5
        assert sse.none_within(0.5) is None
    finally:
        sse.close()


def test_b_catches_up_after_its_listening_connection_is_killed(host_factory):
    a = host_factory().start()
    b = host_factory(like=a).start()
    url = a.env["MOONBASE_DATABASE_URL"]

    async def go():
        ws = await connected(b)
        await subscribe(ws, 1, {"className": "Note"})
        first = a.req("POST", "/parse/classes/Note", {"n": 1}).json()["objectId"]
        m = await recv_json(ws)
        assert (m["op"], m["object"]["objectId"]) == ("create", first), m
        # Every listening connection on the database (both hosts') is ended by the server,
        # then A writes at once, before the listeners are back: B must read it from the feed.
        killed = PGCluster.get().psql(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()", url=url)
        assert int(killed.strip()) >= 1, killed
        second = a.req("POST", "/parse/classes/Note", {"n": 2}).json()["objectId"]
        m = await recv_json(ws, timeout=20)
        assert (m["op"], m["object"]["objectId"]) == ("create", second), m
        # And later writes flow as before.
        third = a.req("POST", "/parse/classes/Note", {"n": 3}).json()["objectId"]
        m = await recv_json(ws, timeout=20)
        assert (m["op"], m["object"]["objectId"]) == ("create", third), m
        await ws.close()

    run(go())


def test_config_changed_on_a_is_read_on_b_at_once(host_factory):
    a = host_factory().start()
    b = host_factory(like=a).start()
    assert a.req("PUT", "/parse/config", {"params": {"motd": "one"}}, master=True).status_code == 200
    assert b.req("GET", "/parse/config").json()["params"] == {"motd": "one"}   # now cached on B
    assert a.req("PUT", "/parse/config", {"params": {"motd": "two"}}, master=True).status_code == 200
    deadline = time.time() + 2
    while time.time() < deadline and b.req("GET", "/parse/config").json()["params"] != {"motd": "two"}:
        time.sleep(0.05)
    assert b.req("GET", "/parse/config").json()["params"] == {"motd": "two"}


HELLO_LOCAL = 'cloud.define("hello", function() return "local" end)\n'
HELLO_DEPLOYED = 'cloud.define("hello", function() return "deployed" end)\n'


def test_deploy_to_a_is_served_by_b_and_by_a_host_started_later(host_factory, tmp_path):
    a = host_factory(functions={"hello.lua": HELLO_LOCAL}).start()
    b = host_factory(like=a, functions={"hello.lua": HELLO_LOCAL}).start()
    assert b.call("hello").json()["result"] == "local"
    src = tmp_path / "src"
    src.mkdir()
    (src / "hello.lua").write_text(HELLO_DEPLOYED)
    (src / "more.lua").write_text('cloud.define("more", function() return "more" end)\n')
    env = dict(os.environ, MOONBASE_MASTER_KEY=MASTER_KEY, MOONBASE_APP_ID=APP_ID)
    p = subprocess.run([BIN, "deploy", str(src), "--server", a.url], capture_output=True, text=True, timeout=60, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert a.call("hello").json()["result"] == "deployed"
    deadline = time.time() + 5
    while time.time() < deadline and b.call("more").json().get("result") != "more":
        time.sleep(0.05)
    assert b.call("hello").json()["result"] == "deployed" and b.call("more").json()["result"] == "more"
    assert b.req("GET", "/admin/functions/more.lua", master=True).text.startswith('cloud.define("more"')
    # B's own folder no longer decides what it serves: an edit there is ignored.
    with open(os.path.join(b.functions, "hello.lua"), "w") as f:
        f.write('cloud.define("hello", function() return "edited" end)\n')
    time.sleep(1.5)
    assert b.call("hello").json()["result"] == "deployed"
    # A host started later, with its own (stale) folder, serves the stored bundle.
    c = host_factory(like=a, functions={"hello.lua": HELLO_LOCAL}).start()
    assert c.call("hello").json()["result"] == "deployed" and c.call("more").json()["result"] == "more"
    # A refused deploy (does not load) changes nothing anywhere.
    (tmp_path / "bad.lua").write_text('cloud.define("bad", function()\nend\nend\n')
    p = subprocess.run([BIN, "deploy", str(tmp_path / "bad.lua"), "--server", b.url], capture_output=True, text=True,
                       timeout=60, env=env)
    assert p.returncode == 1 and "bad.lua:3" in p.stderr, p.stderr
    assert a.call("bad").json()["code"] == 141 and b.call("hello").json()["result"] == "deployed"


def test_role_membership_changed_on_a_governs_events_on_b(host_factory):
    from test_livequery_roles import members, role
    from test_livequery_ws import signup
    a = host_factory().start()
    b = host_factory(like=a).start()
    bob_id, bob = signup(a, "bob")
    crew = role(a, "Crew")

    async def go():
        ws = await connected(b, sessionToken=bob)
        await subscribe(ws, 1, {"className": "Log"})
        acl = {"role:Crew": {"read": True}}
        a.req("POST", "/parse/classes/Log", {"text": "before", "ACL": acl}, master=True)
        assert await drain(ws, 1.0) == []                  # not in the role yet
        members(a, crew, "AddRelation", bob_id)            # on A
        r = a.req("POST", "/parse/classes/Log", {"text": "after", "ACL": acl}, master=True)
        ev = await recv_json(ws)
        assert (ev["op"], ev["object"]["objectId"], ev["object"]["text"]) == ("create", r.json()["objectId"], "after"), ev
        members(a, crew, "RemoveRelation", bob_id)
        a.req("POST", "/parse/classes/Log", {"text": "gone", "ACL": acl}, master=True)
        assert await drain(ws, 1.0) == []
        await ws.close()

    run(go())
