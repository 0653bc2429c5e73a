"""A job's final `_JobStatus` row is never overwritten by a progress report written late.

The scheduler throttles progress writes (one per second) and its timer flushes a held-back report
on its own. When the job holds the single writer (a long `db.transaction`, as bulk jobs such as
cleanupExpiredPosts do), the timer's write waits for the writer; it must not land after the run's
final row and replace its message and progress (found by the W6 benchmark: a succeeded run showed
"deleted 91000 of 100000" and progress 0.91)."""
import time

JOBS_LUA = r"""
-- Reports twice (the second report is held back by the throttle), then holds the writer for
-- params.ms while the scheduler's timer tries to flush the held-back report.
cloud.job("holdsWriter", function(req)
  req.progress(0.1, "first")
  req.progress(0.5, "held back")
  db.transaction(function()
    db.create("Busy", {n = 1})
    local start = time.now()
    while time.now() - start < (req.params.ms or 1800) do end
  end)
  return "finished"
end)
"""


def run(s, name, params, timeout=30):
    r = s.req("POST", f"/parse/jobs/{name}", params, master=True)
    assert r.status_code == 200, r.text
    rid = r.headers["X-Parse-Job-Status-Id"]
    deadline = time.time() + timeout
    while time.time() < deadline:
        row = s.req("GET", f"/parse/classes/_JobStatus/{rid}", master=True).json()
        if row["status"] != "running":
            return rid, row
        time.sleep(0.05)
    raise AssertionError(f"job {name} still running after {timeout}s")


def test_final_row_survives_a_progress_write_waiting_for_the_writer(server_factory):
    s = server_factory(functions={"jobs.lua": JOBS_LUA}).start()
    for _ in range(2):
        rid, row = run(s, "holdsWriter", {"ms": 1800})
        assert row["status"] == "succeeded", row
        # Give a late progress write time to land, then read the row again.
        time.sleep(0.5)
        row = s.req("GET", f"/parse/classes/_JobStatus/{rid}", master=True).json()
        assert row["message"] == "finished" and row["progress"] == 1, row
    assert s.req("GET", "/parse/classes/Busy", master=True, params={"count": "1", "limit": "0"}).json()["count"] == 2
