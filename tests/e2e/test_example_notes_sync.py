"""examples/notes: catch-up from a cursor (pullNotes on the change feed) and live sync over the
LiveQuery WebSocket, through the real binary and the example's own Lua."""
import asyncio
import json
import time

import pytest
import websockets

from conftest import APP_ID
from test_example_notes import app, note, push, signup  # noqa: F401 (app is a fixture)


def pull(s, token, since, limit=100):
    r = s.call("pullNotes", {"since": since, "limit": limit}, session=token)
    assert r.status_code == 200, r.text
    return r.json()["result"]


def test_pull_from_a_cursor_returns_each_changed_note_once_at_its_latest_state(app):
    ada, _ = signup(app, "ada")
    push(app, ada, [note(f"n{i}", 1000) for i in range(5)])
    first = pull(app, ada, 0)
    assert sorted(n["noteId"] for n in first["notes"]) == [f"n{i}" for i in range(5)]
    cursor = first["next"]
    assert pull(app, ada, cursor)["notes"] == []                 # nothing new
    # n1 edited twice, n2 deleted (a tombstone syncs too), n9 created
    push(app, ada, [note("n1", 2000, title="v2"), note("n1", 3000, title="v3"), note("n2", 2000, deleted=True),
                    note("n9", 1000)])
    page = pull(app, ada, cursor)
    got = {n["noteId"]: n for n in page["notes"]}
    assert set(got) == {"n1", "n2", "n9"}
    assert got["n1"]["title"] == "v3" and got["n2"]["deleted"] is True
    assert page["next"] > cursor and page["more"] is False
    # paging: limit 2 gives two, then the rest
    p1 = pull(app, ada, cursor, limit=2)
    assert len(p1["notes"]) == 2 and p1["more"] is True
    p2 = pull(app, ada, p1["next"], limit=2)
    assert {n["noteId"] for n in p1["notes"] + p2["notes"]} == {"n1", "n2", "n9"}
    # another user's cursor sees none of it; bad cursors are 142
    bob, _ = signup(app, "bob")
    assert pull(app, bob, 0)["notes"] == []
    assert app.call("pullNotes", {"since": -1}, session=ada).json()["code"] == 142
    assert app.call("pullNotes", {"since": "x"}, session=ada).json()["code"] == 142


def test_a_shared_note_syncs_to_the_collaborator_by_pull(app):
    ada, _ = signup(app, "ada")
    bob, _ = signup(app, "bob")
    cursor = pull(app, bob, 0)["next"]
    push(app, ada, [note("plan", 1000, title="trip")])
    assert pull(app, bob, cursor)["notes"] == []
    app.call("shareNote", {"noteId": "plan", "username": "bob"}, session=ada)
    got = pull(app, bob, cursor)["notes"]
    assert [n["title"] for n in got] == ["trip"]


async def _connect(s, token):
    ws = await websockets.connect(f"ws://127.0.0.1:{s.port}/parse", open_timeout=30)
    await ws.send(json.dumps({"op": "connect", "applicationId": APP_ID, "sessionToken": token}))
    assert json.loads(await asyncio.wait_for(ws.recv(), 20))["op"] == "connected"
    return ws


async def _subscribe(ws, since=None):
    msg = {"op": "subscribe", "requestId": 1, "query": {"className": "Note", "where": {}}}
    if since is not None:
        msg["since"] = since
    await ws.send(json.dumps(msg))


async def _events(ws, count, timeout=20):
    out = []
    deadline = time.time() + timeout
    while len(out) < count and time.time() < deadline:
        try:
            m = json.loads(await asyncio.wait_for(ws.recv(), max(0.1, deadline - time.time())))
        except asyncio.TimeoutError:
            break
        if m["op"] in ("create", "update", "enter", "leave", "delete"):
            out.append(m)
    return out


def test_live_sync_reaches_the_other_device_within_a_second_and_reconnect_misses_nothing(app):
    ada, _ = signup(app, "ada")
    stranger, _ = signup(app, "eve")

    async def scenario():
        laptop = await _connect(app, ada)
        await _subscribe(laptop)
        eve = await _connect(app, stranger)
        await _subscribe(eve)
        for ws in (laptop, eve):
            assert json.loads(await asyncio.wait_for(ws.recv(), 20))["op"] == "subscribed"
        # the phone pushes: the laptop hears it within a second, the stranger never
        t = time.time()
        await asyncio.to_thread(push, app, ada, [note("live", 1000, title="from phone")])
        ev = await _events(laptop, 1, timeout=5)
        assert ev and ev[0]["object"]["title"] == "from phone" and ev[0]["op"] == "create"
        assert time.time() - t < 1.5
        last_seq = ev[0]["seq"]
        # the laptop goes offline; five notes change meanwhile (one of them twice)
        await laptop.close()
        await asyncio.to_thread(push, app, ada, [note(f"off{i}", 2000) for i in range(4)])
        await asyncio.to_thread(push, app, ada, [note("live", 3000, title="edited offline")])
        await asyncio.to_thread(push, app, ada, [note("off0", 4000, title="twice")])
        # back online from its last seq: exactly the five changed notes, latest state, seq order
        laptop = await _connect(app, ada)
        await _subscribe(laptop, since=last_seq)
        replay = await _events(laptop, 5, timeout=10)
        ids = [e["object"]["noteId"] for e in replay]
        assert sorted(ids) == sorted(["off0", "off1", "off2", "off3", "live"]), ids
        byid = {e["object"]["noteId"]: e["object"] for e in replay}
        assert byid["off0"]["title"] == "twice" and byid["live"]["title"] == "edited offline"
        seqs = [e["seq"] for e in replay]
        assert seqs == sorted(seqs) and seqs[0] > last_seq
        # then live again, no duplicate
        await asyncio.to_thread(push, app, ada, [note("after", 1000)])
        nxt = await _events(laptop, 1, timeout=5)
        assert [e["object"]["noteId"] for e in nxt] == ["after"]
        assert await _events(eve, 1, timeout=0.5) == []
        await laptop.close()
        await eve.close()

    asyncio.run(asyncio.wait_for(scenario(), 120))
