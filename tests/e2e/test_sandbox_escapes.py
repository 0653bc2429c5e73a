"""Sandbox escapes and memory through the real binary: standard-library calls whose stock C loops
never returned (`table.move({}, 1, 2^62, 2)`, `string.rep("", 2^62)`, a shift over a `__len` of
2^62) end with 141 at their limit, ten of them at once leave reads, writes and other Lua calls
answering; a spinning `db.transaction` is stopped at the writer hold limit and rolled back;
module state is capped per VM (the VM is rebuilt); large results are capped; and the server's
private memory (RssAnon) comes back under 60 MiB after the abuse."""
import threading
import time

import pytest
import requests

from conftest import APP_ID, Server, rss_anon_kib

N = 1 << 62

ESCAPES_LUA = r'''
local hoard = {}   -- module state

cloud.define("hello", function(req) return "hi" end)

cloud.define("move", {timeoutMs = 500}, function(req)
  table.move({}, 1, req.params.n, 2)
  return "moved"
end)

cloud.define("repEmpty", {timeoutMs = 500}, function(req)
  return #string.rep("", req.params.n) + #string.rep("", req.params.n, "")
end)

cloud.define("insertFar", {timeoutMs = 500}, function(req)
  table.insert(setmetatable({}, {__len = function() return req.params.n end}), 1, "x")
end)

cloud.define("removeFar", {timeoutMs = 500}, function(req)
  table.remove(setmetatable({}, {__len = function() return req.params.n end}), 1)
end)

cloud.define("moveCaught", {timeoutMs = 500}, function(req)
  while true do pcall(table.move, {}, 1, req.params.n, 2) end
end)

cloud.define("spinTx", function(req)
  db.transaction(function()
    db.create("TxItem", {n = 1})
    while true do end
  end)
end)

cloud.define("quickTx", function(req)
  return db.transaction(function() return db.create("TxItem", {n = 2}).objectId end)
end)

cloud.beforeSave("Held", function(req)
  if req.object.spin then while true do end end
end)

cloud.define("grow", function(req)
  hoard[#hoard + 1] = string.rep("x", 8 << 20) .. #hoard
  return #hoard
end)

cloud.define("numbers", {maxMemoryMB = 80}, function(req)
  local t = {}
  for i = 1, req.params.n do t[i] = i * req.params.mult end
  return t
end)

cloud.define("memoryBomb", {maxMemoryMB = 48}, function(req)
  local t = {}
  for i = 1, 1e9 do t[i] = i end
end)
'''

C_LOOPS = ["move", "insertFar", "removeFar", "moveCaught"]


def err(r):
    return r.status_code, r.json().get("code"), r.json().get("error", "")


@pytest.fixture(scope="module")
def srv():
    s = Server(functions={"escapes.lua": ESCAPES_LUA}, args=["--workers", "4"],
               env={"MOONBASE_LUA_MAX_VM_MEMORY_MB": "64"})
    try:
        s.start()
        yield s
    finally:
        s.stop()
        s.cleanup()


def test_each_c_loop_ends_at_its_timeout(srv):
    for name in C_LOOPS:
        t0 = time.monotonic()
        r = srv.call(name, {"n": N})
        elapsed = time.monotonic() - t0
        status, code, msg = err(r)
        assert (status, code) == (400, 141), (name, r.text)
        assert f"timeout of 500 ms exceeded in function '{name}'" in msg and "escapes.lua:" in msg, msg
        assert elapsed < 10, (name, elapsed)
        assert srv.call("hello").json() == {"result": "hi"}
    # Empty pieces: an empty result at once, not 2^62 empty copies.
    t0 = time.monotonic()
    r = srv.call("repEmpty", {"n": N})
    assert r.status_code == 200 and r.json() == {"result": 0}, r.text
    assert time.monotonic() - t0 < 5


def test_ten_at_once_leave_the_server_answering(srv):
    """Ten C-loop calls (more than the 4 workers) at once: each ends with 141, and REST reads,
    REST writes and other Lua calls made meanwhile are all answered correctly."""
    loops, others = [], []

    def loop(i):
        with requests.Session() as sess:
            r = sess.post(srv.url + f"/parse/functions/{C_LOOPS[i % len(C_LOOPS)]}", json={"n": N},
                          headers=srv.headers(), timeout=60)
            loops.append((r.status_code, r.json().get("code")))

    threads = [threading.Thread(target=loop, args=(i,)) for i in range(10)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    time.sleep(0.2)
    with requests.Session() as sess:
        deadline = time.monotonic() + 3
        i = 0
        while time.monotonic() < deadline:
            a = time.monotonic()
            if i % 3 == 0:
                r = sess.get(srv.url + "/parse/health", timeout=30)
                ok = r.status_code == 200
            elif i % 3 == 1:
                r = sess.post(srv.url + "/parse/classes/Note", json={"i": i}, headers=srv.headers(), timeout=30)
                ok = r.status_code == 201
            else:
                r = sess.post(srv.url + "/parse/functions/hello", json={}, headers=srv.headers(), timeout=30)
                ok = r.status_code == 200 and r.json() == {"result": "hi"}
            others.append((ok, time.monotonic() - a))
            i += 1
    for t in threads:
        t.join(timeout=60)
    total = time.monotonic() - t0
    print(f"\n10 C loops: all done after {total:.2f} s; {len(others)} other requests, "
          f"max {max(x[1] for x in others) * 1000:.0f} ms")
    assert not any(t.is_alive() for t in threads)
    assert loops == [(400, 141)] * 10, loops
    assert others and all(ok for ok, _ in others), others
    # Every request was answered; none waited more than the calls queued ahead of it
    # (10 calls of 0.5 s on 4 workers), with generous slack for a noisy machine.
    assert max(x[1] for x in others) < 10, others
    assert total < 20
    r = srv.req("GET", "/parse/classes/Note", params={"count": 1, "limit": 0})
    assert r.json()["count"] == sum(1 for k in range(len(others)) if k % 3 == 1)


def test_spinning_transaction_stops_at_the_writer_hold_limit(srv):
    result = {}

    def spin():
        t0 = time.monotonic()
        r = srv.call("spinTx")
        result["r"], result["t"] = r, time.monotonic() - t0

    t = threading.Thread(target=spin)
    t.start()
    time.sleep(0.5)
    # A REST write started while the script holds the writer waits for it, then succeeds.
    t0 = time.monotonic()
    w = srv.req("POST", "/parse/classes/Other", {"x": 1})
    waited = time.monotonic() - t0
    t.join(timeout=30)
    r = result["r"]
    status, code, msg = err(r)
    assert (status, code) == (400, 141), r.text
    assert msg.startswith("writer hold limit of 2000 ms exceeded in function 'spinTx' (escapes.lua:"), msg
    # Stopped at the hold limit, well before the call's 10 s timeout.
    assert result["t"] < 8, result["t"]
    assert w.status_code == 201 and waited < 8, (w.text, waited)
    # The transaction was rolled back; the writer is free.
    rows = srv.req("GET", "/parse/classes/TxItem", master=True).json()["results"]
    assert [o["n"] for o in rows] == []
    r = srv.call("quickTx")
    assert r.status_code == 200, r.text
    rows = srv.req("GET", "/parse/classes/TxItem", master=True).json()["results"]
    assert [o["n"] for o in rows] == [2]


def test_spinning_before_trigger_stops_at_the_writer_hold_limit(srv):
    t0 = time.monotonic()
    r = srv.req("POST", "/parse/classes/Held", {"spin": True})
    elapsed = time.monotonic() - t0
    status, code, msg = err(r)
    assert (status, code) == (400, 141), r.text
    assert msg.startswith("writer hold limit of 2000 ms exceeded in function 'beforeSave Held'"), msg
    assert elapsed < 8, elapsed
    assert srv.req("POST", "/parse/classes/Held", {"spin": False}).status_code == 201
    rows = srv.req("GET", "/parse/classes/Held", master=True).json()["results"]
    assert [o["spin"] for o in rows] == [False]


def test_module_state_is_capped_and_the_vm_rebuilt(server_factory):
    # One worker in a pool that does not grow: every call runs on the same VM.
    s = server_factory(functions={"escapes.lua": ESCAPES_LUA}, args=["--workers", "1", "--max-workers", "0"],
                       env={"MOONBASE_LUA_MAX_VM_MEMORY_MB": "64"}).start()
    counts, stopped = [], None
    for _ in range(20):
        r = s.call("grow")
        if r.status_code != 200:
            stopped = r
            break
        counts.append(r.json()["result"])
    assert stopped is not None, counts
    status, code, msg = err(stopped)
    assert (status, code) == (400, 141), stopped.text
    assert msg.startswith("VM memory limit of 64 MB (module state included) exceeded in function 'grow'"), msg
    assert counts == list(range(1, len(counts) + 1)) and len(counts) >= 4, counts
    # The VM was rebuilt: fresh module state, and the server answers.
    r = s.call("grow")
    assert r.status_code == 200 and r.json()["result"] == 1, r.text
    assert s.call("hello").json() == {"result": "hi"}
    assert s.req("POST", "/parse/classes/Note", {"i": 1}).status_code == 201


def test_results_are_capped(server_factory):
    s = server_factory(functions={"escapes.lua": ESCAPES_LUA}, env={"MOONBASE_MAX_RESPONSE_MB": "4"}).start()
    r = s.call("numbers", {"n": 1_000_000, "mult": 1})
    status, code, msg = err(r)
    assert (status, code) == (400, 141), r.text
    assert msg.startswith("response size limit of 4 MB exceeded in function 'numbers'"), msg
    r = s.call("numbers", {"n": 100_000, "mult": 1})
    assert r.status_code == 200 and len(r.json()["result"]) == 100_000


def test_memory_returns_after_abuse(server_factory):
    """Four workers each run memory bombs and large results at once (every worker thread's
    malloc arena sees large blocks); once idle, RssAnon goes back under 60 MiB within seconds
    (it used to stay at 80-100 MiB)."""
    s = server_factory(functions={"escapes.lua": ESCAPES_LUA}, args=["--workers", "4"]).start()
    pid = s.proc.pid
    for _ in range(20):
        assert s.call("hello").status_code == 200
    base = rss_anon_kib(pid)
    samples, stop = [base], threading.Event()

    def sample():
        while not stop.is_set():
            samples.append(rss_anon_kib(pid))
            time.sleep(0.01)

    answers = []

    def abuse():
        for _ in range(2):
            answers.append(err(s.call("memoryBomb"))[:2] == (400, 141))
            # 1,000,000 numbers: under the default 16 MB response cap, answered whole.
            r = s.call("numbers", {"n": 1_000_000, "mult": 1})
            answers.append(r.status_code == 200 and len(r.json()["result"]) == 1_000_000)
            # 2,000,000 numbers of 7-10 digits: over the cap.
            r = s.call("numbers", {"n": 2_000_000, "mult": 1000})
            answers.append(err(r)[:2] == (400, 141) and "response size limit of 16 MB" in err(r)[2])
        for name in C_LOOPS:
            answers.append(err(s.call(name, {"n": N}))[:2] == (400, 141))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    threads = [threading.Thread(target=abuse) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    stop.set()
    sampler.join()
    assert len(answers) == 4 * (6 + len(C_LOOPS)) and all(answers), answers
    peak = max(samples)
    # Idle: the freed memory goes back to the system within seconds.
    deadline = time.monotonic() + 10
    now = rss_anon_kib(pid)
    while now >= 60 * 1024 and time.monotonic() < deadline:
        time.sleep(0.5)
        now = rss_anon_kib(pid)
    print(f"\nRssAnon: before {base / 1024:.1f} MiB, peak seen {peak / 1024:.1f} MiB, after idle {now / 1024:.1f} MiB")
    # Even if a busy machine ran the four abusers one after another, the peak is above the budget.
    assert peak > 60 * 1024, "the abuse did not allocate: the test proves nothing"
    assert now < 60 * 1024, f"RssAnon {now / 1024:.1f} MiB after abuse"
    assert s.call("hello").json() == {"result": "hi"}
