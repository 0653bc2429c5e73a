"""Durability against the real binary (issue 2 Done-when): a concurrent write load,
`kill -9` in the middle of it, a restart on the same data directory, and every write the server
acknowledged is there, over several cycles; transactional batches are all-or-nothing across the
crash; an acknowledged increment is never lost and an unacknowledged one is applied at most once.
Also: SIGTERM under load drains and exits 0, and nothing acknowledged is lost either."""
import json
import os
import random
import signal
import threading
import time

import pytest
import requests

from conftest import APP_ID, BACKEND, MASTER_KEY

THREADS = 8
CYCLES = 5
HEADERS = {"X-Parse-Application-Id": APP_ID, "Content-Type": "application/json"}


class Load:
    """8 writer threads: 6 insert single objects, 1 posts transactional batches of 5, 1 increments
    a counter. Each records what the server acknowledged (and what it merely attempted)."""

    def __init__(self, url, cycle, counter_id):
        self.url = url
        self.cycle = cycle
        self.counter_id = counter_id
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.acked = {}            # objectId -> (worker, seq, payload length)
        self.unanswered = []       # (request id, body) of inserts that got no answer
        self.batches = []          # (batch tag, acknowledged?)
        self.inc_acked = 0
        self.inc_attempted = 0
        self.threads = [threading.Thread(target=self.insert, args=(w,), daemon=True) for w in range(THREADS - 2)]
        self.threads.append(threading.Thread(target=self.batch, daemon=True))
        self.threads.append(threading.Thread(target=self.increment, daemon=True))

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def join(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=20)
            assert not t.is_alive(), "a load thread did not stop"

    def insert(self, worker):
        s = requests.Session()
        seq = 0
        while not self.stop.is_set():
            seq += 1
            rid = f"c{self.cycle}w{worker}s{seq}"
            body = {"cycle": self.cycle, "worker": worker, "seq": seq, "rid": rid, "payload": "p" * random.randint(1, 300)}
            try:
                r = s.post(self.url + "/parse/classes/Durable", data=json.dumps(body),
                           headers=dict(HEADERS, **{"X-Parse-Request-Id": rid}), timeout=10)
            except requests.RequestException:
                with self.lock:
                    self.unanswered.append((rid, body))
                time.sleep(0.01)
                continue
            if r.status_code == 201:
                with self.lock:
                    self.acked[r.json()["objectId"]] = (worker, seq, len(body["payload"]))

    def batch(self):
        s = requests.Session()
        n = 0
        while not self.stop.is_set():
            n += 1
            tag = f"c{self.cycle}b{n}"
            reqs = [{"method": "POST", "path": "/parse/classes/DurableBatch", "body": {"tag": tag, "i": i}} for i in range(5)]
            ok = False
            try:
                r = s.post(self.url + "/parse/batch", data=json.dumps({"transaction": True, "requests": reqs}),
                           headers=HEADERS, timeout=10)
                ok = r.status_code == 200 and all("success" in x for x in r.json())
            except requests.RequestException:
                time.sleep(0.01)
            with self.lock:
                self.batches.append((tag, ok))

    def increment(self):
        s = requests.Session()
        body = json.dumps({"n": {"__op": "Increment", "amount": 1}})
        while not self.stop.is_set():
            with self.lock:
                self.inc_attempted += 1
            try:
                r = s.put(self.url + f"/parse/classes/DurableCounter/{self.counter_id}", data=body, headers=HEADERS, timeout=10)
            except requests.RequestException:
                time.sleep(0.01)
                continue
            if r.status_code == 200:
                with self.lock:
                    self.inc_acked += 1


def fetch_all(server, class_name, where):
    """Every object of a class matching `where`, paged by objectId (master key)."""
    out, last = {}, ""
    while True:
        w = dict(where)
        w["objectId"] = {"$gt": last}
        r = server.req("GET", f"/parse/classes/{class_name}", master=True,
                       params={"where": json.dumps(w), "order": "objectId", "limit": "1000"})
        assert r.status_code == 200, r.text
        page = r.json()["results"]
        for o in page:
            out[o["objectId"]] = o
        if len(page) < 1000:
            return out
        last = page[-1]["objectId"]


def verify(server, load, counter_before):
    stored = fetch_all(server, "Durable", {"cycle": load.cycle})
    missing = [oid for oid in load.acked if oid not in stored]
    assert not missing, f"cycle {load.cycle}: {len(missing)} acknowledged objects lost, e.g. {missing[:5]}"
    for oid, (worker, seq, plen) in load.acked.items():
        o = stored[oid]
        assert (o["worker"], o["seq"], len(o["payload"])) == (worker, seq, plen), o
    # A client retrying an insert that got no answer, with the same X-Parse-Request-Id, finds it
    # applied exactly once: 159 if it had committed (and then it is there), else 201 now.
    for rid, body in load.unanswered:
        r = server.req("POST", "/parse/classes/Durable", body, headers={"X-Parse-Request-Id": rid})
        assert r.status_code in (201, 400) and (r.status_code == 201 or r.json()["code"] == 159), r.text
        n = server.req("GET", "/parse/classes/Durable", master=True,
                       params={"where": json.dumps({"rid": rid}), "count": "1", "limit": "0"}).json()["count"]
        assert n == 1, f"retried insert {rid} ({r.status_code}) is there {n} times"
    # Nothing half-written: every stored row (acknowledged or not) is whole.
    for o in stored.values():
        assert {"cycle", "worker", "seq", "payload"} <= set(o), o
    # Transactional batches: all five rows or none; acknowledged ones all five.
    rows = fetch_all(server, "DurableBatch", {"tag": {"$regex": f"^c{load.cycle}b"}})
    per_tag = {}
    for o in rows.values():
        per_tag.setdefault(o["tag"], set()).add(o["i"])
    for tag, ok in load.batches:
        got = per_tag.get(tag, set())
        assert got in (set(), set(range(5))), f"batch {tag} half-applied: {got}"
        if ok:
            assert got == set(range(5)), f"acknowledged batch {tag} lost"
    # The counter: every acknowledged increment is there, no attempt applied twice.
    n = server.req("GET", f"/parse/classes/DurableCounter/{load.counter_id}", master=True).json()["n"]
    assert counter_before + load.inc_acked <= n <= counter_before + load.inc_attempted, \
        (counter_before, load.inc_acked, load.inc_attempted, n)
    return n, len(stored)


def run_cycle(server, cycle, counter_id, counter_before, stop_how, load_seconds):
    load = Load(server.url, cycle, counter_id).start()
    deadline = time.time() + load_seconds + 10
    time.sleep(load_seconds)
    # Wait until the load has really written something this cycle (bounded).
    while len(load.acked) < 20 and time.time() < deadline:
        time.sleep(0.05)
    assert len(load.acked) >= 20, "the load made no progress"
    if stop_how == "kill":
        server.kill9()
        rc = None
    else:
        rc = server.stop(sig=signal.SIGTERM, timeout=30)
    load.join()
    server.start()
    n, stored = verify(server, load, counter_before)
    return load, n, stored, rc


def test_kill9_mid_load_loses_no_acknowledged_write(server_factory):
    started = time.time()
    server = server_factory().start()
    r = server.req("POST", "/parse/classes/DurableCounter", {"n": 0})
    counter_id = r.json()["objectId"]
    counter = 0
    total_acked = 0
    for cycle in range(CYCLES):
        load, counter, stored, _ = run_cycle(server, cycle, counter_id, counter, "kill", random.uniform(0.8, 1.6))
        total_acked += len(load.acked)
        print(f"cycle {cycle}: acked {len(load.acked)} unanswered {len(load.unanswered)} stored {stored} batches {sum(ok for _, ok in load.batches)}/{len(load.batches)} inc {load.inc_acked}/{load.inc_attempted} counter {counter}")
        assert stored >= len(load.acked)
    assert total_acked > 100
    # Earlier cycles are still whole after the later crashes.
    r = server.req("GET", "/parse/classes/Durable", master=True, params={"limit": "0", "count": "1"})
    assert r.json()["count"] >= total_acked
    assert time.time() - started < 60, "durability cycles took too long"


def test_sigterm_under_load_exits_zero_and_keeps_acknowledged_writes(server_factory):
    server = server_factory().start()
    counter_id = server.req("POST", "/parse/classes/DurableCounter", {"n": 0}).json()["objectId"]
    counter = 0
    for cycle in range(2):
        load, counter, _, rc = run_cycle(server, 100 + cycle, counter_id, counter, "term", 1.0)
        assert rc == 0, f"graceful shutdown exited with {rc}: {server.read_log()[-2000:]}"
        assert load.acked
    rc = server.stop(sig=signal.SIGTERM, timeout=30)
    assert rc == 0
    # On SQLite the WAL was checkpointed at shutdown: nothing is left in it.
    if BACKEND == "sqlite":
        wal = os.path.join(server.data, "moonbase.sqlite-wal")
        assert not os.path.exists(wal) or os.path.getsize(wal) == 0
