"""The change feed and Server-Sent Events through the real binary: resume after missed writes
(through /parse/changes, SSE Last-Event-ID and Lua db.changes), the visibility rule (owner,
stranger, master, afterFind, logout), expired history (160), query-string credentials, units
and usage, and a reader that never reads being dropped."""
import json
import queue
import socket
import threading
import time

import requests

from conftest import APP_ID, MASTER_KEY

FUNCTIONS = {"main.lua": """
cloud.afterFind("Secret", function(req)
  for _, o in ipairs(req.objects) do o.hidden = nil end
  return req.objects
end)

cloud.define("pullNotes", function(req)
  return db.changes("Note", req.params.since, {limit = 1000})
end)
"""}


def signup(s, name):
    r = s.req("POST", "/parse/users", {"username": name, "password": "pw-" + name})
    assert r.status_code == 201, r.text
    return r.json()["objectId"], r.json()["sessionToken"]


def changes(s, cls, since, session=None, master=False, **params):
    q = {"since": since, "limit": 1000}
    q.update(params)
    r = s.req("GET", f"/parse/changes/{cls}", params=q, session=session, master=master)
    assert r.status_code == 200, r.text
    return r.json()


class SSE:
    """A Server-Sent Events reader on a thread: events land in a queue as dicts."""

    def __init__(self, s, cls, session=None, master=False, last_id=None, params=None, headers=None):
        h = {"Accept": "text/event-stream"}
        if headers is None:
            h.update(s.headers(session=session, master=master))
        else:
            h.update(headers)
        if last_id is not None:
            h["Last-Event-ID"] = str(last_id)
        self.resp = requests.get(f"{s.url}/parse/live/{cls}", headers=h, params=params, stream=True, timeout=(10, 120))
        assert self.resp.status_code == 200, self.resp.text
        assert self.resp.headers["Content-Type"].startswith("text/event-stream")
        self.events = queue.Queue()
        self.comments = queue.Queue()
        self.closed = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        ev = {}
        try:
            for raw in self.resp.iter_lines(chunk_size=1):
                line = raw.decode()
                if line == "":
                    if ev:
                        if "data" in ev:
                            ev["data"] = json.loads(ev["data"])
                        self.events.put(ev)
                    ev = {}
                elif line.startswith(":"):
                    self.comments.put(line)
                else:
                    k, _, v = line.partition(": ")
                    ev[k] = v
        except Exception:
            pass
        self.closed.set()

    def take(self, n, timeout=20):
        out = []
        deadline = time.time() + timeout
        while len(out) < n and time.time() < deadline:
            try:
                out.append(self.events.get(timeout=max(0.01, deadline - time.time())))
            except queue.Empty:
                break
        return out

    def none_within(self, seconds):
        try:
            ev = self.events.get(timeout=seconds)
            return ev
        except queue.Empty:
            return None

    def close(self):
        # Shut the socket first: the reader thread may sit in a blocking read until the next
        # keep-alive, and close() would wait for it.
        try:
            self.resp.raw._fp.fp.raw._sock.shutdown(socket.SHUT_RDWR)
        except (AttributeError, OSError):
            pass
        self.resp.close()


def write_50(s, ids, rounds=3):
    """Writes to 50 objects (each several times) and one new object; returns nothing."""
    for r in range(rounds):
        reqs = [{"method": "PUT", "path": f"/parse/classes/Note/{i}", "body": {"round": r}} for i in ids]
        resp = s.req("POST", "/parse/batch", {"requests": reqs}, master=True)
        assert resp.status_code == 200, resp.text


def test_changes_feed_resume_delivers_the_latest_state_once_in_seq_order(server):
    s = server
    ids = [s.req("POST", "/parse/classes/Note", {"i": i}).json()["objectId"] for i in range(60)]
    last = changes(s, "Note", 0)["next"]
    assert last > 0
    write_50(s, ids[:50])                     # the client is offline
    page = changes(s, "Note", last)
    res = page["results"]
    assert [r["object"]["objectId"] for r in res] == ids[:50]  # each object once, in seq order
    assert all(r["op"] == "save" and r["object"]["round"] == 2 and r["className"] == "Note" for r in res)
    seqs = [r["seq"] for r in res]
    assert seqs == sorted(seqs) and len(set(seqs)) == 50 and seqs[0] > last
    assert page["next"] == seqs[-1]
    # Then live writes: exactly the new ones, a delete as its tombstone.
    s.req("DELETE", f"/parse/classes/Note/{ids[55]}")
    new = s.req("POST", "/parse/classes/Note", {"i": 99}).json()["objectId"]
    page2 = changes(s, "Note", page["next"])
    assert [(r["op"], r.get("objectId") or r["object"]["objectId"]) for r in page2["results"]] == [("delete", ids[55]), ("save", new)]
    # Paging with limit and a where.
    small = changes(s, "Note", last, limit=10)
    assert [x["seq"] for x in small["results"]] == seqs[:10] and small["next"] == seqs[9]
    r = s.req("GET", "/parse/changes/Note", params={"since": last, "limit": 10, "where": json.dumps({"i": {"$lt": 5}})})
    # A where filters saves; a tombstone has no fields left to test, so it always comes.
    assert [x["object"]["i"] for x in r.json()["results"] if x["op"] == "save"] == [0, 1, 2, 3, 4]
    assert [x["objectId"] for x in r.json()["results"] if x["op"] == "delete"] == [ids[55]]
    # Bad input: 4xx with Parse's body.
    for params in [{"since": "-1"}, {"since": "x"}, {"limit": "-3"}, {"where": "{bad"}]:
        bad = s.req("GET", "/parse/changes/Note", params=params)
        assert bad.status_code == 400 and "code" in bad.json(), (params, bad.text)
    assert s.req("GET", "/parse/changes/Note", params={"where": json.dumps({"t": {"$inQuery": {}}})}).json()["code"] == 102


def test_sse_last_event_id_resumes_with_the_missed_objects_then_live(server):
    s = server
    ids = [s.req("POST", "/parse/classes/Note", {"i": i}).json()["objectId"] for i in range(50)]
    first = SSE(s, "Note")
    s.req("PUT", f"/parse/classes/Note/{ids[0]}", {"round": -1})
    ev = first.take(1)
    assert ev and ev[0]["event"] == "update" and ev[0]["data"]["object"]["round"] == -1
    last_id = int(ev[0]["id"])
    assert ev[0]["data"]["seq"] == last_id and ev[0]["data"]["original"]["objectId"] == ids[0]
    first.close()
    write_50(s, ids)                          # missed while disconnected
    again = SSE(s, "Note", last_id=last_id)
    got = again.take(50)
    assert [e["data"]["object"]["objectId"] for e in got] == ids
    assert all(e["data"]["object"]["round"] == 2 for e in got)
    assert [int(e["id"]) for e in got] == sorted(int(e["id"]) for e in got)
    live = s.req("POST", "/parse/classes/Note", {"i": 1000}).json()["objectId"]
    nxt = again.take(1)
    assert nxt and nxt[0]["event"] == "create" and nxt[0]["data"]["object"]["objectId"] == live
    assert int(nxt[0]["id"]) > int(got[-1]["id"])
    assert again.none_within(0.5) is None     # no duplicate
    again.close()


def test_visibility_owner_stranger_master_afterfind_and_logout(server_factory):
    s = server_factory(functions=FUNCTIONS).start()
    alice, alice_tok = signup(s, "alice")
    bob, bob_tok = signup(s, "bob")
    a, b, m = SSE(s, "Secret", session=alice_tok), SSE(s, "Secret", session=bob_tok), SSE(s, "Secret", master=True)
    priv = {"ACL": {alice: {"read": True, "write": True}}, "v": 1, "hidden": "shh"}
    oid = s.req("POST", "/parse/classes/Secret", priv, session=alice_tok).json()["objectId"]
    ea, em = a.take(1), m.take(1)
    assert ea[0]["event"] == "create" and ea[0]["data"]["object"]["v"] == 1
    assert "hidden" not in ea[0]["data"]["object"]          # afterFind hides it from the owner
    assert em[0]["data"]["object"]["hidden"] == "shh"        # master reads skip afterFind
    assert b.none_within(1.0) is None                        # the stranger sees nothing
    # Shared with bob: he gets "enter"; unshared in a write that also changes v: "leave" with
    # the last state he could read, never the values of the write that removed his access.
    s.req("PUT", f"/parse/classes/Secret/{oid}", {"ACL": {alice: {"read": True, "write": True}, bob: {"read": True}}},
          session=alice_tok)
    entered = b.take(1)
    assert entered and entered[0]["event"] == "enter" and entered[0]["data"]["object"]["v"] == 1
    s.req("PUT", f"/parse/classes/Secret/{oid}", {"ACL": {alice: {"read": True, "write": True}}, "v": 7}, session=alice_tok)
    left = b.take(1)
    assert left and left[0]["event"] == "leave" and left[0]["data"]["object"]["v"] == 1
    assert [e["event"] for e in a.take(2)] == ["update", "update"]
    assert len(m.take(2)) == 2
    # Logout stops delivery at once: an error event with 209, then the stream ends.
    assert s.req("POST", "/parse/logout", {}, session=alice_tok).status_code == 200
    s.req("PUT", f"/parse/classes/Secret/{oid}", {"v": 2}, master=True)
    assert m.take(1)[0]["data"]["object"]["v"] == 2
    end = a.take(1)
    assert end and end[0]["event"] == "error" and end[0]["data"]["code"] == 209 and end[0]["data"]["reconnect"] is False
    assert a.closed.wait(10)
    # The logout itself is a committed write: its tombstone is in the (master-only) _Session feed.
    ops = [x["op"] for x in changes(s, "_Session", 0, master=True)["results"]]
    assert ops.count("delete") == 1 and ops.count("save") == 1, ops
    assert s.req("GET", "/parse/changes/_Session", session=bob_tok).json()["code"] == 119
    assert b.none_within(0.5) is None
    # A session that is no longer valid cannot open a stream.
    r = requests.get(f"{s.url}/parse/live/Secret", headers=s.headers(session=alice_tok), timeout=10)
    assert r.status_code == 400 and r.json()["code"] == 209
    # Protected fields and unsupported operators are refused at open.
    r = requests.get(f"{s.url}/parse/live/_User", headers=s.headers(session=bob_tok),
                     params={"where": json.dumps({"email": "x@y"})}, timeout=10)
    assert r.status_code == 403 and r.json()["code"] == 119
    r = requests.get(f"{s.url}/parse/live/Secret", headers=s.headers(session=bob_tok),
                     params={"where": json.dumps({"$relatedTo": {}})}, timeout=10)
    assert r.status_code == 400 and r.json()["code"] == 102
    for x in (b, m):
        x.close()


def test_query_string_credentials_and_units(server):
    s = server
    uid, tok = signup(s, "carol")
    # EventSource cannot send headers: the app id and session ride in the query string.
    sse = SSE(s, "Doc", headers={}, params={"_ApplicationId": APP_ID, "_SessionToken": tok})
    mine = s.req("POST", "/parse/classes/Doc", {"ACL": {uid: {"read": True}}, "x": 1}, session=tok).json()["objectId"]
    ev = sse.take(1)
    assert ev and ev[0]["data"]["object"]["objectId"] == mine   # the session was used: private object seen
    r = requests.get(f"{s.url}/parse/live/Doc", params={"_ApplicationId": "wrong"}, timeout=10)
    assert r.status_code == 403
    assert tok not in s.read_log()
    # Units: an SSE open and a changes read cost one unit each; events are counted, not charged.
    changes(s, "Doc", 0, session=tok)
    deadline = time.time() + 15
    row = {}
    while time.time() < deadline:
        rows = {x["key"]: x for x in s.req("GET", "/admin/usage", params={"by": "function"}, master=True).json()["rows"]}
        acct = {x["key"]: x for x in s.req("GET", "/admin/usage", params={"by": "account"}, master=True).json()["rows"]}
        row = acct.get(f"user:{uid}", {})
        if rows.get("class:Doc", {}).get("units", 0) >= 3 and row.get("events", 0) >= 1:
            break
        time.sleep(0.3)
    assert row.get("events", 0) >= 1 and row.get("bytesOut", 0) > 0, row
    # create + SSE open + changes read on class Doc
    assert rows["class:Doc"]["units"] == 3, rows["class:Doc"]
    metrics = requests.get(s.url + "/metrics", timeout=10).text
    assert "moonbase_realtime_events_total 1" in metrics
    assert 'moonbase_realtime_connections{transport="sse"} 1' in metrics
    sse.close()


def test_lua_db_changes_reads_the_feed_as_the_caller(server_factory):
    s = server_factory(functions=FUNCTIONS).start()
    uid, tok = signup(s, "dave")
    other, otok = signup(s, "erin")
    s.req("POST", "/parse/classes/Note", {"ACL": {uid: {"read": True, "write": True}}, "t": "mine"}, session=tok)
    s.req("POST", "/parse/classes/Note", {"ACL": {other: {"read": True}}, "t": "theirs"}, session=otok)
    r = s.call("pullNotes", {"since": 0}, session=tok)
    assert r.status_code == 200, r.text
    res = r.json()["result"]
    assert [x["object"]["t"] for x in res["results"]] == ["mine"] and res["next"] >= res["results"][0]["seq"]
    r = s.call("pullNotes", {"since": -4}, session=tok)
    assert r.status_code == 400 and r.json()["code"] == 102


def test_history_older_than_the_retention_answers_160(server_factory):
    s = server_factory(env={"MOONBASE_CHANGES_RETENTION_DAYS": "0.00001", "MOONBASE_CHANGES_PURGE_SECONDS": "0.2"}).start()
    a = s.req("POST", "/parse/classes/Note", {"t": 1}).json()["objectId"]
    s.req("DELETE", f"/parse/classes/Note/{a}")
    keep = s.req("POST", "/parse/classes/Note", {"t": 2}).json()["objectId"]
    deadline = time.time() + 20
    r = None
    while time.time() < deadline:
        r = s.req("GET", "/parse/changes/Note", params={"since": 1})
        if r.status_code == 400:
            break
        time.sleep(0.2)
    assert r.status_code == 400 and r.json() == {"code": 160, "error": "history expired: resynchronise"}
    full = changes(s, "Note", 0)   # since=0 never expires
    assert [x["object"]["objectId"] for x in full["results"]] == [keep]
    r = requests.get(f"{s.url}/parse/live/Note", headers=dict(s.headers(), **{"Last-Event-ID": "1"}), timeout=10)
    assert r.status_code == 400 and r.json()["code"] == 160


def test_a_reader_that_never_reads_is_dropped_and_rest_stays_fast(server_factory):
    s = server_factory(env={"MOONBASE_SSE_BUFFER_BYTES": "65536"}).start()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", s.port))
    sock.sendall(f"GET /parse/live/Blob HTTP/1.1\r\nHost: x\r\nX-Parse-Application-Id: {APP_ID}\r\n"
                 f"X-Parse-Master-Key: {MASTER_KEY}\r\nAccept: text/event-stream\r\n\r\n".encode())
    time.sleep(0.5)  # never read from here on
    payload = "x" * 20000
    dropped = 0
    for batch in range(40):
        reqs = [{"method": "POST", "path": "/parse/classes/Blob", "body": {"p": payload}} for _ in range(25)]
        assert s.req("POST", "/parse/batch", {"requests": reqs}, master=True).status_code == 200
        metrics = requests.get(s.url + "/metrics", timeout=10).text
        dropped = int(next(l for l in metrics.splitlines() if l.startswith("moonbase_realtime_dropped_total")).split()[1])
        if dropped:
            break
    assert dropped == 1
    metrics = requests.get(s.url + "/metrics", timeout=10).text
    assert "moonbase_realtime_subscriptions 0" in metrics
    t0 = time.time()
    assert s.req("GET", "/parse/classes/Blob", params={"limit": 1, "keys": "objectId"}).status_code == 200
    assert time.time() - t0 < 2
    sock.close()


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime + stime, in clock ticks of 1/100 s


def test_idle_streams_do_not_spin_keepalives_flow_and_caps_apply(server_factory):
    s = server_factory(env={"MOONBASE_SSE_KEEPALIVE_SECONDS": "0.5", "MOONBASE_SSE_MAX_STREAMS_PER_IP": "3"}).start()
    streams = [SSE(s, "Idle") for _ in range(3)]
    # A fourth stream from the same address is over the cap.
    r = requests.get(f"{s.url}/parse/live/Idle", headers=s.headers(), timeout=10)
    assert r.status_code == 429 and r.json()["code"] == 155
    # Suspended while empty: three open streams cost (almost) no CPU over two seconds.
    before = cpu_seconds(s.proc.pid)
    time.sleep(2.0)
    used = cpu_seconds(s.proc.pid) - before
    assert used < 0.3, f"server used {used:.2f} s of CPU with idle streams"
    # Keep-alive comments arrive, and a client that went away is noticed by the next one.
    assert streams[0].comments.get(timeout=10) in (": connected", ": keep-alive")
    assert streams[0].comments.get(timeout=10) == ": keep-alive"
    for x in streams:
        x.close()
    deadline = time.time() + 15
    metrics = ""
    while time.time() < deadline:
        metrics = requests.get(s.url + "/metrics", timeout=10).text
        if 'moonbase_realtime_connections{transport="sse"} 0' in metrics:
            break
        time.sleep(0.2)
    assert 'moonbase_realtime_connections{transport="sse"} 0' in metrics
    assert "moonbase_realtime_subscriptions 0" in metrics
    # The cap frees up with them.
    again = SSE(s, "Idle")
    again.close()


def test_role_membership_governs_the_feed_and_live_events(server):
    """An object ACL'd to a role reaches a subscriber once they join the role, and stops at once
    when they leave it: over /parse/changes and over SSE."""
    s = server
    ada, ada_token = signup(s, "ada")
    r = s.req("POST", "/parse/roles", {"name": "staff", "ACL": {"*": {"read": True}}}, master=True)
    assert r.status_code == 201, r.text
    role_id = r.json()["objectId"]
    secret = s.req("POST", "/parse/classes/Memo", {"text": "staff only", "ACL": {"role:staff": {"read": True}}},
                   master=True).json()["objectId"]
    assert changes(s, "Memo", 0, session=ada_token)["results"] == []
    members = lambda op: s.req("PUT", f"/parse/roles/{role_id}", {"users": {
        "__op": op, "objects": [{"__type": "Pointer", "className": "_User", "objectId": ada}]}}, master=True)
    assert members("AddRelation").status_code == 200
    rows = changes(s, "Memo", 0, session=ada_token)["results"]
    assert [row["object"]["objectId"] for row in rows] == [secret]
    live = SSE(s, "Memo", session=ada_token)
    s.req("PUT", f"/parse/classes/Memo/{secret}", {"text": "v2"}, master=True)
    ev = live.take(1)
    assert ev and ev[0]["event"] == "update" and ev[0]["data"]["object"]["text"] == "v2"
    assert members("RemoveRelation").status_code == 200
    s.req("PUT", f"/parse/classes/Memo/{secret}", {"text": "v3"}, master=True)
    after = live.none_within(1.0)                 # no update carrying v3: at most a leave
    assert after is None or (after["event"] == "leave" and after["data"]["object"].get("text") != "v3"), after
    assert changes(s, "Memo", 0, session=ada_token)["results"] == []
    live.close()
