"""LiveQuery events through the real binary: visibility per subscriber (owner, stranger,
master), afterFind, logout, `since` resume, slow readers, and `update`/`keys`/`watch`."""
import asyncio
import json
import socket
import time

import websockets

from conftest import APP_ID, MASTER_KEY, recv_until_close
from test_livequery_ws import connected, raw_handshake, masked_frame, recv_json, rss_anon_kib, run, signup, ws_url


async def subscribe(ws, rid, query, **extra):
    await ws.send(json.dumps({"op": "subscribe", "requestId": rid, "query": query, **extra}))
    m = await recv_json(ws)
    assert m["op"] == "subscribed" and m["requestId"] == rid, m
    return m


async def drain(ws, seconds=1.0):
    """Messages that arrive within `seconds`."""
    out = []
    end = time.time() + seconds
    while True:
        left = end - time.time()
        if left <= 0:
            return out
        try:
            out.append(json.loads(await asyncio.wait_for(ws.recv(), left)))
        except asyncio.TimeoutError:
            return out


AFTER_FIND = r'''
cloud.afterFind("Note", function(req)
  for _, o in ipairs(req.objects) do o.secret = nil end
  return req.objects
end)
'''


def test_owner_stranger_master_afterfind_logout(server_factory):
    server = server_factory(functions={"notes.lua": AFTER_FIND}).start()
    alice_id, alice = signup(server, "alice")
    _, bob = signup(server, "bob")

    async def go():
        a = await connected(server, sessionToken=alice)
        b = await connected(server, sessionToken=bob)
        m = await connected(server, masterKey=MASTER_KEY)
        for ws in (a, b, m):
            await subscribe(ws, 1, {"className": "Note", "where": {"kind": "memo"}})
        # A private note of alice's (created with her session: the default ACL is hers + public
        # read, so set it explicitly private).
        r = server.req("POST", "/parse/classes/Note", {"kind": "memo", "text": "private", "secret": "s1",
                                                       "ACL": {alice_id: {"read": True, "write": True}}},
                       session=alice)
        assert r.status_code == 201, r.text
        private_id = r.json()["objectId"]
        ev = await recv_json(a)
        assert (ev["op"], ev["requestId"], ev["object"]["objectId"], ev["object"]["className"]) == \
            ("create", 1, private_id, "Note")
        assert "secret" not in ev["object"] and ev["object"]["text"] == "private"
        assert isinstance(ev["seq"], int) and ev["seq"] > 0
        evm = await recv_json(m)
        assert evm["op"] == "create" and evm["object"]["secret"] == "s1"
        assert await drain(b, 1.0) == []
        # A non-matching write reaches nobody; an update reaches the owner with `original`.
        server.req("POST", "/parse/classes/Note", {"kind": "other"}, master=True)
        r = server.req("PUT", f"/parse/classes/Note/{private_id}", {"text": "edited"}, session=alice)
        assert r.status_code == 200, r.text
        ev = await recv_json(a)
        assert ev["op"] == "update" and ev["object"]["text"] == "edited" and ev["original"]["text"] == "private"
        assert ev["seq"] > 0
        assert (await recv_json(m))["op"] == "update"
        assert await drain(b, 0.5) == []
        # Made public: bob sees it enter.
        r = server.req("PUT", f"/parse/classes/Note/{private_id}",
                       {"ACL": {"*": {"read": True}, alice_id: {"read": True, "write": True}}}, session=alice)
        assert r.status_code == 200
        ev = await recv_json(b)
        assert ev["op"] == "enter" and ev["object"]["objectId"] == private_id and "secret" not in ev["object"]
        assert (await recv_json(a))["op"] == "update"
        # Logout stops alice's delivery at once.
        assert server.req("POST", "/parse/logout", {}, session=alice).status_code == 200
        server.req("PUT", f"/parse/classes/Note/{private_id}", {"text": "after logout"}, master=True)
        got = await drain(a, 1.5)
        assert all(x["op"] == "error" for x in got), got
        assert any(x["code"] == 209 for x in got), got
        assert (await recv_json(b))["op"] == "update"
        # Deleted: bob hears it.
        server.req("DELETE", f"/parse/classes/Note/{private_id}", master=True)
        ev = await recv_json(b)
        assert ev["op"] == "delete" and ev["object"]["objectId"] == private_id
        for ws in (a, b, m):
            await ws.close()
    run(go())


def test_resume_with_since_gets_exactly_the_missed_objects(server):
    async def go():
        ws = await connected(server)
        await subscribe(ws, 1, {"className": "Pos", "where": {"group": "g1"}})
        r = server.req("POST", "/parse/classes/Pos", {"group": "g1", "n": -1}, master=True)
        first = await recv_json(ws)
        last_seq = first["seq"]
        await ws.close()
        ids = []
        for i in range(50):
            r = server.req("POST", "/parse/classes/Pos", {"group": "g1", "n": i}, master=True)
            ids.append(r.json()["objectId"])
        server.req("POST", "/parse/classes/Pos", {"group": "g2", "n": 99}, master=True)
        # Some objects change twice: they are replayed once, in their latest state.
        for oid in ids[:5]:
            server.req("PUT", f"/parse/classes/Pos/{oid}", {"moved": True}, master=True)
        ws = await connected(server)
        await subscribe(ws, 7, {"className": "Pos", "where": {"group": "g1"}}, since=last_seq)
        replay = [await recv_json(ws) for _ in range(50)]
        assert [e["requestId"] for e in replay] == [7] * 50
        assert sorted(e["object"]["objectId"] for e in replay) == sorted(ids)
        seqs = [e["seq"] for e in replay]
        assert seqs == sorted(seqs) and len(set(seqs)) == 50 and seqs[0] > last_seq
        assert all(e["object"].get("moved") for e in replay if e["object"]["objectId"] in ids[:5])
        assert await drain(ws, 0.7) == []
        r = server.req("POST", "/parse/classes/Pos", {"group": "g1", "n": 100}, master=True)
        live = await recv_json(ws)
        assert live["op"] == "create" and live["object"]["n"] == 100 and live["seq"] > seqs[-1]
        await ws.close()
    run(go())


def test_subscribers_of_one_query_each_get_their_own_view(server):
    """An event is chosen and encoded once for the subscribers who see the same bytes: the same
    query and the same viewer. Each still gets its own requestId; a different viewer or `keys`
    gets its own view; an object only one user may read reaches only that user."""
    carol_id, carol = signup(server, "carol")

    async def go():
        anon1 = await connected(server)
        anon2 = await connected(server)
        user = await connected(server, sessionToken=carol)
        narrow = await connected(server)
        q = {"className": "Fan", "where": {"room": "r"}}
        await subscribe(anon1, 1, q)
        await subscribe(anon1, 2, q)
        await subscribe(anon2, 7, q)
        await subscribe(user, 3, q)
        await subscribe(narrow, 4, {**q, "keys": ["room"]})
        r = server.req("POST", "/parse/classes/Fan", {"room": "r", "text": "public"}, master=True)
        pub = r.json()["objectId"]
        got = sorted([(await recv_json(anon1))["requestId"], (await recv_json(anon1))["requestId"]])
        assert got == [1, 2]
        for ws, rid in ((anon2, 7), (user, 3)):
            ev = await recv_json(ws)
            assert (ev["op"], ev["requestId"], ev["object"]["objectId"], ev["object"]["text"]) == \
                ("create", rid, pub, "public"), ev
        ev = await recv_json(narrow)
        assert ev["requestId"] == 4 and ev["object"]["room"] == "r" and "text" not in ev["object"], ev
        # Readable by carol only: the anonymous subscribers of the same query hear nothing.
        r = server.req("POST", "/parse/classes/Fan", {"room": "r", "text": "mine",
                                                      "ACL": {carol_id: {"read": True}}}, master=True)
        mine = r.json()["objectId"]
        ev = await recv_json(user)
        assert (ev["requestId"], ev["object"]["objectId"], ev["object"]["text"]) == (3, mine, "mine"), ev
        for ws in (anon1, anon2, narrow):
            assert await drain(ws, 0.8) == []
        for ws in (anon1, anon2, user, narrow):
            await ws.close()
    run(go())


def test_events_of_every_frame_size_arrive_whole_and_in_order(server):
    """Event frames are built by the server itself: payloads under 126 bytes, up to 64 KiB (16-bit
    length) and above (64-bit length) arrive intact, and a burst of events for one socket (the
    server writes whatever frames wait for a socket with one send) arrives whole and in seq order."""
    async def go():
        ws = await websockets.connect(ws_url(server), open_timeout=30, max_size=4 << 20)
        await ws.send(json.dumps({"op": "connect", "applicationId": APP_ID}))
        assert (await recv_json(ws))["op"] == "connected"
        await subscribe(ws, 1, {"className": "Big", "where": {"k": "x"}, "keys": ["t"]})
        for n in (1, 300, 70_000, 200_000):
            text = "".join(chr(ord("a") + i % 26) for i in range(n))
            r = server.req("POST", "/parse/classes/Big", {"k": "x", "t": text}, master=True)
            assert r.status_code == 201, r.text
            ev = await recv_json(ws)
            assert ev["op"] == "create" and ev["object"]["t"] == text, (n, len(ev["object"].get("t", "")))
        for i in range(300):
            server.req("POST", "/parse/classes/Big", {"k": "x", "t": str(i)}, master=True)
        got = [await recv_json(ws) for _ in range(300)]
        assert [e["object"]["t"] for e in got] == [str(i) for i in range(300)]
        seqs = [e["seq"] for e in got]
        assert seqs == sorted(seqs) and len(set(seqs)) == 300
        await ws.close()
    run(go())


def test_update_keys_watch(server):
    async def go():
        ws = await connected(server)
        await subscribe(ws, 1, {"className": "Pin", "where": {"room": "a"}, "keys": ["room", "lat"], "watch": ["lat"]})
        r = server.req("POST", "/parse/classes/Pin", {"room": "a", "lat": 1, "note": "x"}, master=True)
        oid = r.json()["objectId"]
        ev = await recv_json(ws)
        assert ev["op"] == "create" and ev["object"]["lat"] == 1 and "note" not in ev["object"]
        server.req("PUT", f"/parse/classes/Pin/{oid}", {"note": "y"}, master=True)     # unwatched field
        server.req("PUT", f"/parse/classes/Pin/{oid}", {"lat": 2}, master=True)
        ev = await recv_json(ws)
        assert ev["op"] == "update" and ev["object"]["lat"] == 2
        # `update` moves the subscription to another where.
        await ws.send(json.dumps({"op": "update", "requestId": 1, "query": {"className": "Pin", "where": {"room": "b"}}}))
        assert (await recv_json(ws))["op"] == "subscribed"
        server.req("PUT", f"/parse/classes/Pin/{oid}", {"room": "b"}, master=True)
        ev = await recv_json(ws)
        assert ev["op"] == "enter" and ev["object"]["room"] == "b"
        # Operators that cannot be evaluated on one object are refused at subscribe.
        await ws.send(json.dumps({"op": "subscribe", "requestId": 2,
                                  "query": {"className": "Pin", "where": {"$text": {"$search": {"$term": "x"}}}}}))
        m = await recv_json(ws)
        assert m["op"] == "error" and m["requestId"] == 2
        await ws.close()
    run(go())


def test_reader_that_never_reads_is_dropped(server_factory):
    server = server_factory(env={"MOONBASE_LIVEQUERY_SEND_QUEUE_BYTES": str(256 * 1024)}).start()
    base = rss_anon_kib(server.proc.pid)
    s, status, _, _ = raw_handshake(server.port)
    assert "101" in status
    s.sendall(masked_frame(json.dumps({"op": "connect", "applicationId": APP_ID}).encode()))
    s.sendall(masked_frame(json.dumps({"op": "subscribe", "requestId": 1, "query": {"className": "Big"}}).encode()))
    time.sleep(0.5)
    blob = "x" * 60_000
    n = 300
    for i in range(n):
        assert server.req("POST", "/parse/classes/Big", {"i": i, "blob": blob}, master=True).status_code == 201
    # REST is unaffected and the server's memory stays bounded while the reader sleeps.
    assert server.req("GET", "/parse/health").status_code == 200
    assert rss_anon_kib(server.proc.pid) < base + 64 * 1024
    # Now read everything: the stream ends with an error asking to reconnect, long before
    # all the events.
    data = recv_until_close(s, 20)
    s.close()
    texts = [p.decode(errors="replace") for op, p in frames_of(data) if op == 1]
    events = [t for t in texts if '"op":"create"' in t]
    assert len(events) < n
    # The drop sends an `error` with `reconnect: true` after what was already queued; when the
    # reader's socket buffer is still full at that moment the error cannot be written and the
    # server closes the connection anyway (it never grows its queue): either way the reader
    # was dropped, which the EOF above shows.
    last = json.loads(texts[-1])
    if last["op"] == "error":
        assert last["reconnect"] is True, last


def frames_of(data):
    import struct
    out = []
    while len(data) >= 2:
        op, n = data[0] & 0x0F, data[1] & 0x7F
        i = 2
        if n == 126:
            n, i = struct.unpack("!H", data[2:4])[0], 4
        elif n == 127:
            n, i = struct.unpack("!Q", data[2:10])[0], 10
        if len(data) < i + n:
            break
        out.append((op, data[i:i + n]))
        data = data[i + n:]
    return out


def test_events_counted_in_usage_and_metrics(server):
    async def go():
        ws = await connected(server)
        await subscribe(ws, 1, {"className": "Count"})
        for i in range(3):
            server.req("POST", "/parse/classes/Count", {"i": i}, master=True)
        for _ in range(3):
            assert (await recv_json(ws))["op"] == "create"
        text = server.req("GET", "/metrics").text
        assert 'moonbase_realtime_connections{transport="websocket"} 1' in text, text[-3000:]
        await ws.close()
    run(go())
    deadline = time.time() + 20
    rows = []
    while time.time() < deadline:
        r = server.req("GET", "/admin/usage", params={"by": "account"}, master=True)
        rows = [row for row in r.json()["rows"] if row["key"] == "ip:127.0.0.1"]
        if rows and rows[0].get("events", 0) >= 3:
            break
        time.sleep(0.5)
    assert rows and rows[0]["events"] == 3, rows
    assert rows[0]["bytesOut"] > 0
