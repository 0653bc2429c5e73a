"""Creates started on the HTTP I/O thread: an anonymous `POST /parse/classes/X` on a class
without save triggers runs on the I/O thread that read it and takes the database writer there
only if no write batch is under way and the writer is free; otherwise it waits, its connection
suspended, for the next batch (test_group_commit.py). Checkpoints run on a thread of their own.

What must hold: a create waiting for a long write transaction never holds up the other
connections of its I/O thread; checkpoints still happen under a load of such creates (the WAL
stays bounded); every acknowledged create is stored exactly once; creates on classes with
triggers and failing creates answer as before."""
import glob
import json
import os
import threading
import time

import pytest
import requests

from conftest import APP_ID
from writer_hold import HOLD_WRITER_LUA, WriterHold, run_together

HEADERS = {"X-Parse-Application-Id": APP_ID, "Content-Type": "application/json"}

LUA = HOLD_WRITER_LUA + r'''
cloud.beforeSave("Stamped", function(req)
  req.object.stamp = "by trigger"
end)
'''


@pytest.mark.sqlite_only("the single writer: PostgreSQL lets other creates commit beside the transaction")
def test_a_create_waiting_for_the_writer_holds_up_no_other_connection(server_factory):
    # Workers to spare: the holder and the four waiting creates must not make the health check
    # report the pool saturated.
    s = server_factory(functions={"a.lua": LUA}, args=["--workers", "8"]).start()
    assert s.req("POST", "/parse/classes/Note", {"n": -1}).status_code == 201
    hold = WriterHold(s).start()
    creates, health = [], []

    def create(k):
        with requests.Session() as sess:
            t0 = time.perf_counter()
            r = sess.post(s.url + "/parse/classes/Note", json={"n": k}, headers=HEADERS, timeout=30)
            creates.append((r.status_code, time.perf_counter() - t0, r.json()))

    def ping():
        with requests.Session() as sess:
            deadline = time.monotonic() + 0.8
            while time.monotonic() < deadline:
                t0 = time.perf_counter()
                r = sess.get(s.url + "/parse/health", timeout=30)
                health.append((r.status_code, time.perf_counter() - t0))

    threads = [threading.Thread(target=create, args=(k,)) for k in range(4)]
    threads += [threading.Thread(target=ping) for _ in range(4)]
    run_together(threads)
    hold.join()
    assert len(creates) == 4 and all(code == 201 and "objectId" in body for code, _, body in creates), creates
    # The creates had to wait for the transaction (started 0.3 s into its 1.5 s).
    assert min(t for _, t, _ in creates) > 0.7, creates
    # Meanwhile both I/O threads kept answering: had a create waited on one of them, the health
    # checks of its connections would have waited about a second too.
    assert health and all(code == 200 for code, _ in health)
    assert max(t for _, t in health) < 0.6, sorted(t for _, t in health)[-5:]
    rows = s.req("GET", "/parse/classes/Note", params={"limit": 100}, master=True).json()["results"]
    assert sorted(o["n"] for o in rows) == [-1, 0, 1, 2, 3]


@pytest.mark.sqlite_only("the WAL file and its checkpoints")
def test_checkpoints_keep_up_with_creates_on_the_io_threads(server_factory):
    """No commit checkpoints any more: once the WAL is due for one, the checkpoint thread copies
    it into the database file and the WAL starts over. Without that it would grow by ~40 KB per
    create."""
    s = server_factory(args=["--workers", "2"]).start()
    per_thread, threads_n = 1500, 8
    acked, lock = [], threading.Lock()

    def client(k):
        with requests.Session() as sess:
            for i in range(per_thread):
                body = {"k": k, "i": i, "text": "x" * 200,
                        "at": {"__type": "GeoPoint", "latitude": 40 + (i % 90) / 100, "longitude": -74 + k / 10}}
                r = sess.post(s.url + "/parse/classes/Load", json=body, headers=HEADERS, timeout=60)
                assert r.status_code == 201, r.text
                with lock:
                    acked.append(r.json()["objectId"])

    threads = [threading.Thread(target=client, args=(k,)) for k in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert len(acked) == per_thread * threads_n and len(set(acked)) == len(acked)
    wal = [p for p in glob.glob(os.path.join(s.data, "**", "*-wal"), recursive=True)]
    assert wal, os.listdir(s.data)
    size = max(os.path.getsize(p) for p in wal)
    # 12,000 creates of ~10 pages each would make a WAL of ~490 MB without checkpoints; with one
    # round every 40,000 frames (~165 MB) it stays near that, plus what comes during a round.
    assert size < 300 * 1024 * 1024, size
    r = s.req("GET", "/parse/classes/Load", params={"limit": 0, "count": 1}, master=True)
    assert r.json()["count"] == per_thread * threads_n


def test_creates_with_triggers_and_failing_creates_answer_as_before(server_factory):
    s = server_factory(functions={"a.lua": LUA}).start()
    r = s.req("POST", "/parse/classes/Stamped", {"n": 1})
    assert r.status_code == 201, r.text
    got = s.req("GET", f"/parse/classes/Stamped/{r.json()['objectId']}").json()
    assert got["stamp"] == "by trigger" and got["n"] == 1
    assert s.req("POST", "/parse/classes/Typed", {"v": 1}).status_code == 201
    r = s.req("POST", "/parse/classes/Typed", {"v": "not a number"})
    assert r.status_code == 400 and r.json()["code"] == 111, r.text
    r = s.req("POST", "/parse/classes/Typed", {"objectId": "abc"})
    assert r.status_code == 400 and r.json()["code"] == 105, r.text
    r = s.req("POST", "/parse/classes/Typed", raw="{not json")
    assert r.status_code == 400 and r.json()["code"] == 107, r.text
    rows = s.req("GET", "/parse/classes/Typed", master=True).json()["results"]
    assert [o["v"] for o in rows] == [1]
    # A create bringing a new field (here a GeoPoint, whose index is built over the class's rows)
    # changes the schema on a worker; the object is stored and found through the new index.
    point = {"__type": "GeoPoint", "latitude": 40.5, "longitude": -74.0}
    r = s.req("POST", "/parse/classes/Typed", {"v": 2, "at": point})
    assert r.status_code == 201, r.text
    near = {"at": {"$nearSphere": point, "$maxDistanceInMiles": 1}}
    found = s.req("GET", "/parse/classes/Typed", params={"where": json.dumps(near)}).json()["results"]
    assert [o["v"] for o in found] == [2]
