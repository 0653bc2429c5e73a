"""Cloud Code limits end-to-end (issue 3 item 7): a spinning script is stopped by the
watchdog with 141 naming the limit while other requests keep being answered quickly; a memory
bomb, a pathological pattern, a deep recursion, too many DB operations and an instruction budget
each end their call with 141; the script's own pcall cannot catch a limit trip; and the VM that
tripped serves the next call correctly."""
import statistics
import threading
import time

import pytest
import requests

from conftest import APP_ID, Server

# Functions testing a limit other than time set their own generous timeoutMs: the one-worker
# server runs with MOONBASE_LUA_TIMEOUT_MS=1000, which a loaded CI machine could otherwise hit first.
LIMITS_LUA = r'''
local served = 0   -- module state: must survive every limit trip on this VM

cloud.define("hello", function(req)
  served = served + 1
  return {hello = "world", served = served}
end)

cloud.define("spin", {timeoutMs = 300}, function(req)
  while true do end
end)

cloud.define("spinCaught", {timeoutMs = 300}, function(req)
  while true do
    pcall(function() while true do end end)
  end
end)

cloud.define("spinXpcall", {timeoutMs = 300}, function(req)
  local ok = xpcall(function() while true do end end, function(e) return e end)
  return {caught = true, ok = ok}
end)

cloud.define("memoryBomb", {maxMemoryMB = 16, timeoutMs = 10000}, function(req)
  local t = {}
  for i = 1, 1e9 do t[i] = string.rep("x", 64) .. i end
end)

cloud.define("repBomb", {maxMemoryMB = 16, timeoutMs = 10000}, function(req)
  local ok, e = pcall(string.rep, "x", 1 << 30)
  return {caught = true, ok = ok}
end)

cloud.define("pattern", {timeoutMs = 2000}, function(req)
  return string.find(string.rep("a", 100000), ".-.-.-.-.-.-.-b")
end)

-- "pattern too complex" is an ordinary error a script may catch; retrying forever still ends
-- at the wall-time limit, which a kill delivered inside the matcher enforces.
cloud.define("patternLoop", {timeoutMs = 500}, function(req)
  local s = string.rep("a", 100000)
  while true do pcall(string.find, s, ".-.-.-.-.-.-.-b") end
end)

cloud.define("recurse", {timeoutMs = 10000}, function(req)
  local function f(n) return 1 + f(n + 1) end
  return f(1)
end)

cloud.define("dbOps", {maxDbOps = 5, timeoutMs = 10000}, function(req)
  for i = 1, 100 do db.count("Thing", {}) end
  return "all done"
end)

cloud.define("dbOpsCaught", {maxDbOps = 5, timeoutMs = 10000}, function(req)
  for i = 1, 100 do pcall(db.count, "Thing", {}) end
  return {caught = true}
end)

cloud.define("dbOpsUnder", {maxDbOps = 5}, function(req)
  local n = 0
  for i = 1, 5 do n = n + db.count("Thing", {}) end
  return n
end)

cloud.define("instructions", {maxInstructions = 100000, timeoutMs = 10000}, function(req)
  local x = 0
  while true do x = x + 1 end
end)

-- A trigger holding the writer is bounded by the (server-wide) timeout too.
cloud.beforeSave("Slow", function(req)
  if req.object.spin then while true do end end
end)

cloud.define("defaultTimeout", function(req)
  while true do end
end)

cloud.define("instructionsUnder", {maxInstructions = 1000000}, function(req)
  local x = 0
  for i = 1, 1000 do x = x + i end
  return x
end)
'''


def err(r):
    return r.status_code, r.json().get("code")


@pytest.fixture(scope="module")
def one_worker():
    """A server with a single Lua worker and a pool that does not grow: the call after a trip
    runs on the VM that tripped."""
    s = Server(functions={"limits.lua": LIMITS_LUA}, args=["--workers", "1", "--max-workers", "0"],
               env={"MOONBASE_LUA_TIMEOUT_MS": "1000"})
    try:
        s.start()
        yield s
    finally:
        s.stop()
        s.cleanup()


def assert_healthy(s, expect_served_above=0):
    """The next call answers correctly on the same VM (module state intact)."""
    r = s.call("hello")
    assert r.status_code == 200, r.text
    res = r.json()["result"]
    assert res["hello"] == "world" and res["served"] > expect_served_above
    return res["served"]


def assert_limit(s, name, *words, max_seconds=15):
    served = assert_healthy(s)
    t0 = time.monotonic()
    r = s.call(name)
    elapsed = time.monotonic() - t0
    assert err(r) == (400, 141), (name, r.status_code, r.text)
    msg = r.json()["error"]
    assert any(w in msg for w in words), (name, msg)
    assert elapsed < max_seconds, (name, elapsed)
    assert_healthy(s, served)
    return msg


def test_timeout_names_limit_and_location(one_worker):
    msg = assert_limit(one_worker, "spin", "timeout of 300 ms exceeded", max_seconds=5)
    assert "spin" in msg and "limits.lua:" in msg, msg


def test_pcall_cannot_catch_a_limit_trip(one_worker):
    assert_limit(one_worker, "spinCaught", "timeout of 300 ms", max_seconds=5)
    assert_limit(one_worker, "spinXpcall", "timeout of 300 ms", max_seconds=5)
    assert_limit(one_worker, "repBomb", "memory limit of 16 MB")
    assert_limit(one_worker, "dbOpsCaught", "database operation limit of 5")
    assert_limit(one_worker, "patternLoop", "timeout of 500 ms", max_seconds=5)


def test_memory_bomb(one_worker):
    assert_limit(one_worker, "memoryBomb", "memory limit of 16 MB")
    # Twice in a row: the heap went back to its baseline after the first.
    assert_limit(one_worker, "memoryBomb", "memory limit of 16 MB")


def test_pathological_pattern(one_worker):
    assert_limit(one_worker, "pattern", "pattern too complex", "timeout of 2000 ms")


def test_deep_recursion(one_worker):
    assert_limit(one_worker, "recurse", "stack overflow", "memory limit")


def test_server_wide_timeout_and_a_spinning_trigger(one_worker):
    # MOONBASE_LUA_TIMEOUT_MS applies to functions without their own timeoutMs ...
    assert_limit(one_worker, "defaultTimeout", "timeout of 1000 ms exceeded", max_seconds=8)
    # ... and to triggers: the write is refused, nothing is stored, the writer is free again.
    s = one_worker
    t0 = time.monotonic()
    r = s.req("POST", "/parse/classes/Slow", {"spin": True})
    assert err(r) == (400, 141), r.text
    assert "timeout of 1000 ms exceeded" in r.json()["error"] and "beforeSave Slow" in r.json()["error"], r.text
    assert time.monotonic() - t0 < 8
    r = s.req("POST", "/parse/classes/Slow", {"spin": False})
    assert r.status_code == 201, r.text
    assert s.req("POST", "/parse/classes/Other", {"x": 1}).status_code == 201
    r = s.req("GET", "/parse/classes/Slow", master=True)
    assert [o["spin"] for o in r.json()["results"]] == [False]
    assert_healthy(s)


def test_db_ops_and_instructions(one_worker):
    assert_limit(one_worker, "dbOps", "database operation limit of 5 exceeded")
    r = one_worker.call("dbOpsUnder")
    assert r.status_code == 200 and r.json()["result"] == 0, r.text
    assert_limit(one_worker, "instructions", "instruction limit of 100000 exceeded")
    r = one_worker.call("instructionsUnder")
    assert r.status_code == 200 and r.json()["result"] == 500500, r.text


def measure_window(s, headers, seconds, max_requests=1500):
    """Alternating /parse/health and a cheap function for `seconds`: (sorted latencies, all correct)."""
    latencies, answers = [], []
    deadline = time.monotonic() + seconds
    with requests.Session() as sess:
        i = 0
        while time.monotonic() < deadline and i < max_requests:
            t0 = time.perf_counter()
            if i % 2 == 0:
                r = sess.get(s.url + "/parse/health", timeout=30)
                answers.append(r.status_code == 200 and r.json() == {"status": "ok"})
            else:
                r = sess.post(s.url + "/parse/functions/hello", data="{}", headers=headers, timeout=30)
                answers.append(r.status_code == 200 and r.json()["result"]["hello"] == "world")
            latencies.append(time.perf_counter() - t0)
            i += 1
    return sorted(latencies), all(answers)


def test_spinning_script_does_not_stall_others(server_factory):
    """p99 under 50 ms while one script spins. The machine is two shared cores: a
    window disturbed by a neighbour process (a build, a benchmark) is measured again, at most
    three windows of 2 s; every answer in every window must be right."""
    s = server_factory(functions={"limits.lua": LIMITS_LUA}).start()
    headers = {"X-Parse-Application-Id": APP_ID, "Content-Type": "application/json"}
    spin_results = []
    stop = threading.Event()

    def spinner():
        # Back-to-back spinning calls: a worker is always busy spinning while we measure.
        deadline = time.monotonic() + 30
        with requests.Session() as sess:
            while not stop.is_set() and time.monotonic() < deadline:
                r = sess.post(s.url + "/parse/functions/spin", data="{}", headers=headers, timeout=30)
                spin_results.append((r.status_code, r.json().get("code")))

    t = threading.Thread(target=spinner, daemon=True)
    t.start()
    windows = []
    try:
        time.sleep(0.1)   # let the first spin start
        for _ in range(3):
            latencies, correct = measure_window(s, headers, 2.0)
            assert correct, "a request answered wrongly while a script was spinning"
            assert len(latencies) >= 50, len(latencies)
            p99 = latencies[int(len(latencies) * 0.99) - 1]
            windows.append((len(latencies), statistics.median(latencies), p99, latencies[-1]))
            if p99 < 0.050:
                break
    finally:
        stop.set()
        t.join(timeout=35)
    assert not t.is_alive()
    for n, med, p99, mx in windows:
        print(f"\nduring spin: {n} requests, median {med * 1000:.2f} ms, p99 {p99 * 1000:.2f} ms, "
              f"max {mx * 1000:.2f} ms")
    print(f"{len(spin_results)} spins")
    best = min(w[2] for w in windows)
    assert best < 0.050, f"p99 {best * 1000:.1f} ms while a script spins (windows: {windows})"
    # The spins themselves were each stopped by their limit.
    assert len(spin_results) >= 3 and all(x == (400, 141) for x in spin_results), spin_results
