"""Group commit: REST creates, updates and deletes of app classes (no save or delete triggers)
that arrive while other writes are under way run together in one write transaction, each in a
savepoint of its own, and are answered after its commit.

What must hold: each request gets its own answer; a request that fails (a bad type, a unique
index, an ACL refusal, an unknown object, a duplicate request id) fails alone and leaves nothing,
while the others of its batch are kept; nothing is answered before it is committed (the kill -9
test in test_durability.py covers that for creates under load); the metrics count the batches."""
import re
import threading
import time

import pytest
import requests

from conftest import APP_ID
from writer_hold import HOLD_WRITER_LUA, WriterHold, run_together

HEADERS = {"X-Parse-Application-Id": APP_ID, "Content-Type": "application/json"}

def metric(s, name):
    text = requests.get(s.url + "/metrics", timeout=10).text
    m = re.search(r"^" + name + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


@pytest.mark.sqlite_only("group commit batches the writes of the single SQLite writer")
def test_writes_arriving_together_share_a_commit_and_fail_alone(server_factory):
    s = server_factory(functions={"a.lua": HOLD_WRITER_LUA}, args=["--workers", "8"]).start()
    c = "Item"
    assert s.req("POST", f"/parse/classes/{c}", {"n": -1, "slug": "first"}).status_code == 201
    r = s.req("PUT", f"/parse/schemas/{c}", {"indexes": {"u": {"fields": {"slug": 1}, "unique": True}}}, master=True)
    assert r.status_code == 200, r.text
    keep = s.req("POST", f"/parse/classes/{c}", {"n": 0, "slug": "keep"}).json()["objectId"]
    gone = s.req("POST", f"/parse/classes/{c}", {"n": 0, "slug": "gone"}).json()["objectId"]
    locked = s.req("POST", f"/parse/classes/{c}", {"n": 0, "slug": "locked", "ACL": {}}).json()["objectId"]
    batches0 = metric(s, "moonbase_write_batches_total")
    batched0 = metric(s, "moonbase_write_batched_requests_total")
    assert batches0 is not None and batched0 is not None

    hold = WriterHold(s).start()

    writes = [("POST", f"/parse/classes/{c}", {"n": k, "slug": f"good{k}"}, {}) for k in range(10)]
    writes += [("POST", f"/parse/classes/{c}", {"n": "not a number", "slug": "badtype"}, {}),
               ("POST", f"/parse/classes/{c}", {"n": 1, "slug": "keep"}, {}),  # the unique index
               ("PUT", f"/parse/classes/{c}/{keep}", {"n": 100}, {}),
               ("PUT", f"/parse/classes/{c}/{locked}", {"n": 100}, {}),  # no one may write it
               ("PUT", f"/parse/classes/{c}/nosuchobj1", {"n": 100}, {}),
               ("DELETE", f"/parse/classes/{c}/{gone}", None, {}),
               ("POST", f"/parse/classes/{c}", {"n": 50, "slug": "retried"}, {"X-Parse-Request-Id": "rid-1"}),
               ("POST", f"/parse/classes/{c}", {"n": 50, "slug": "retried2"}, {"X-Parse-Request-Id": "rid-1"})]
    answers = [None] * len(writes)

    def send(i):
        method, path, body, extra = writes[i]
        with requests.Session() as sess:
            t0 = time.perf_counter()
            r = sess.request(method, s.url + path, json=body, headers={**HEADERS, **extra}, timeout=30)
            answers[i] = (r.status_code, r.json(), time.perf_counter() - t0)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(writes))]
    run_together(threads)
    hold.join()
    assert all(a is not None for a in answers), answers
    # Every write waited for the transaction (started 0.3 s into its 1.5 s).
    assert min(a[2] for a in answers) > 0.7, answers

    ids = []
    for k in range(10):
        code, body, _ = answers[k]
        assert code == 201 and "objectId" in body, answers[k]
        ids.append(body["objectId"])
    assert answers[10][0] == 400 and answers[10][1]["code"] == 111, answers[10]
    assert answers[11][0] == 400 and answers[11][1]["code"] == 137, answers[11]
    assert answers[12][0] == 200 and "updatedAt" in answers[12][1], answers[12]
    assert answers[13][0] == 404 and answers[13][1]["code"] == 101, answers[13]
    assert answers[14][0] == 404 and answers[14][1]["code"] == 101, answers[14]
    assert answers[15][0] == 200, answers[15]
    retried = sorted([answers[16][:2], answers[17][:2]], key=lambda a: a[0])
    assert retried[0][0] == 201 and retried[1][0] == 400 and retried[1][1]["code"] == 159, retried

    # The writes that waited went through the batch lane, several to a batch.
    batches = metric(s, "moonbase_write_batches_total") - batches0
    batched = metric(s, "moonbase_write_batched_requests_total") - batched0
    assert batched == len(writes), (batches, batched)
    assert batches < batched, (batches, batched)

    # What the database holds: the kept writes, nothing of the failed ones.
    rows = s.req("GET", f"/parse/classes/{c}", params={"limit": 100}, master=True).json()["results"]
    by_slug = {o["slug"]: o for o in rows}
    expected = {f"good{k}" for k in range(10)} | {"first", "keep", "locked"}
    expected.add("retried" if "retried" in by_slug else "retried2")
    assert set(by_slug) == expected, sorted(by_slug)
    assert by_slug["keep"]["n"] == 100 and by_slug["locked"]["n"] == 0
    assert sorted(by_slug[f"good{k}"]["objectId"] for k in range(10)) == sorted(ids)
    assert s.req("GET", f"/parse/classes/{c}/{gone}").status_code == 404


@pytest.mark.sqlite_only("group commit batches the writes of the single SQLite writer")
def test_concurrent_creates_are_each_stored_once(server_factory):
    """Sixteen clients creating at once, with a bad create now and then: every 201 names an object
    that exists, once; no failed create left anything."""
    s = server_factory().start()
    per_client, clients = 40, 16
    acked, failed, lock = [], [], threading.Lock()

    def client(k):
        with requests.Session() as sess:
            for i in range(per_client):
                bad = i % 10 == 7
                body = {"k": k, "i": i, "n": "x" if bad else i,
                        "at": {"__type": "GeoPoint", "latitude": 40 + i / 100, "longitude": -74 + k / 10}}
                r = sess.post(s.url + "/parse/classes/Load", json=body, headers=HEADERS, timeout=60)
                with lock:
                    if bad:
                        failed.append((r.status_code, r.json().get("code")))
                    else:
                        assert r.status_code == 201, r.text
                        acked.append(r.json()["objectId"])

    # The schema first, so that "n" is a Number.
    assert s.req("POST", "/parse/classes/Load", {"k": -1, "i": -1, "n": 0}).status_code == 201
    frames0, writes0 = metric(s, "moonbase_wal_frames_total"), metric(s, "moonbase_wal_writes_total")
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    good = per_client * clients - clients * (per_client // 10)
    assert len(acked) == good and len(set(acked)) == good
    assert failed and all(f == (400, 111) for f in failed), failed[:5]
    count = s.req("GET", "/parse/classes/Load", params={"limit": 0, "count": 1}, master=True).json()["count"]
    assert count == good + 1
    # Each commit's log pages went to the file together, not two system calls per page.
    frames = metric(s, "moonbase_wal_frames_total") - frames0
    writes = metric(s, "moonbase_wal_writes_total") - writes0
    assert frames > 0 and 0 < writes * 3 < frames, (frames, writes)
