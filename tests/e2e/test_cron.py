"""Cron and jobs against the real binary (issue 5): `POST /parse/jobs/NAME`,
`_JobStatus` rows through the REST API (fields, progress while running, returned tables,
overlap → skipped, timeouts, crash recovery), `moonbase jobs` / `--json` / `jobs run`,
`GET /admin/jobs`, `moonbase check` on cron files, and one `* * * * *` schedule firing for real."""
import datetime
import json
import os
import re
import subprocess
import tempfile
import time
from zoneinfo import ZoneInfo

from croniter import croniter

from conftest import BACKEND, BIN, MASTER_KEY, ROOT, database_args
from test_app_support import shipped_functions

ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

JOBS_LUA = r"""
cloud.job("quick", function(req)
  req.message("working")
  return {ok = true, n = req.params.n}
end)

cloud.job("textjob", function(req)
  return "done " .. tostring(req.params.x)
end)

-- Busy-waits on time.now() for params.ms (bounded), reporting progress on every turn.
cloud.job("slow", function(req)
  local ms = req.params.ms or 3000
  local start = time.now()
  local turns = 0
  while time.now() - start < ms do
    turns = turns + 1
    req.progress((time.now() - start) / ms, "turn " .. turns)
  end
  return "slept"
end)

-- Reports twice at once, then works for params.ms without reporting.
cloud.job("quiet", function(req)
  req.progress(0.1, "first")
  req.progress(0.2, "second")
  local start = time.now()
  while time.now() - start < (req.params.ms or 4000) do end
  return "quiet done"
end)

cloud.job("tooslow", {timeoutMs = 300}, function(req)
  local n = 0
  while true do n = n + 1 end
end)

cloud.job("boom", function(req)
  error("kaboom")
end)

cloud.job("tick", function(req)
  db.create("Tick", {from = req.params.from})
  return "ticked"
end)
"""


def iso_ms(s):
    assert ISO_MS.match(s), s
    return datetime.datetime.strptime(s, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=datetime.timezone.utc)


def start_job(s, name, params=None):
    r = s.req("POST", f"/parse/jobs/{name}", params or {}, master=True)
    assert r.status_code == 200, r.text
    assert r.json() == {}
    rid = r.headers.get("X-Parse-Job-Status-Id")
    assert rid and re.match(r"^[A-Za-z0-9]{10}$", rid), r.headers
    return rid


def job_row(s, rid):
    r = s.req("GET", f"/parse/classes/_JobStatus/{rid}", master=True)
    assert r.status_code == 200, r.text
    return r.json()


def wait_row(s, rid, pred, timeout=30):
    deadline = time.time() + timeout
    row = None
    while time.time() < deadline:
        row = job_row(s, rid)
        if pred(row):
            return row
        time.sleep(0.05)
    raise AssertionError(f"row {rid} never matched; last: {row}")


def finished(row):
    return row["status"] != "running"


def jobs_server(server_factory, **kw):
    return server_factory(functions={"jobs.lua": JOBS_LUA}, **kw).start()


def test_job_run_row_fields(server_factory):
    s = jobs_server(server_factory)
    before = datetime.datetime.now(datetime.timezone.utc)
    rid = start_job(s, "quick", {"n": 3})
    row = wait_row(s, rid, finished)
    assert row["objectId"] == rid
    assert row["jobName"] == "quick" and row["source"] == "api" and row["params"] == {"n": 3}
    assert row["status"] == "succeeded", row
    # A returned table is stored JSON-encoded: the message is a string holding that JSON.
    assert isinstance(row["message"], str) and json.loads(row["message"]) == {"ok": True, "n": 3}
    assert row["progress"] == 1
    for k in ("startedAt", "finishedAt"):
        assert set(row[k]) == {"__type", "iso"} and row[k]["__type"] == "Date", row[k]
    started, ended = iso_ms(row["startedAt"]["iso"]), iso_ms(row["finishedAt"]["iso"])
    assert before - datetime.timedelta(seconds=2) <= started <= ended
    assert isinstance(row["durationMs"], int) and row["durationMs"] >= 0
    assert abs((ended - started).total_seconds() * 1000 - row["durationMs"]) <= 1
    iso_ms(row["createdAt"]), iso_ms(row["updatedAt"])

    # A returned string is the message as is.
    row = wait_row(s, start_job(s, "textjob", {"x": 5}), finished)
    assert row["status"] == "succeeded" and row["message"] == "done 5", row

    # The rows are a class that can be queried (master only).
    r = s.req("GET", "/parse/classes/_JobStatus", params={"where": json.dumps({"jobName": "quick"})}, master=True)
    assert r.status_code == 200 and [x["objectId"] for x in r.json()["results"]] == [rid]
    for path in (f"/parse/classes/_JobStatus/{rid}", "/parse/classes/_JobStatus"):
        r = s.req("GET", path)
        assert r.status_code == 403 and r.json() == {"code": 119, "error": "unauthorized: master key is required"}


def test_job_start_errors(server_factory):
    s = jobs_server(server_factory)
    r = s.req("POST", "/parse/jobs/nope", {}, master=True)
    assert r.status_code == 400 and r.json() == {"code": 141, "error": 'Invalid job: "nope"'}
    assert "X-Parse-Job-Status-Id" not in r.headers
    r = s.req("POST", "/parse/jobs/quick", {})
    assert r.status_code == 403 and r.json()["code"] == 119, r.text
    r = s.req("POST", "/parse/jobs/quick", {}, headers={"X-Parse-Master-Key": "wrong"})
    assert r.status_code == 403, r.text
    r = s.req("POST", "/parse/jobs/quick", raw="[1,", master=True)
    assert r.status_code == 400 and r.json()["code"] == 107, r.text
    # None of these started anything.
    r = s.req("GET", "/parse/classes/_JobStatus", master=True)
    assert r.status_code == 200 and r.json()["results"] == [], r.text


def test_progress_visible_while_running_and_overlap_skipped(server_factory):
    s = jobs_server(server_factory)
    first = start_job(s, "slow", {"ms": 4000})
    # Progress is throttled to about one write a second; the loop reports on every turn.
    row = wait_row(s, first, lambda r: r["status"] != "running" or (r["progress"] > 0 and r["message"].startswith("turn ")),
                   timeout=10)
    assert row["status"] == "running", row
    assert 0 < row["progress"] < 1 and "finishedAt" not in row, row
    first_progress = row["progress"]

    second = start_job(s, "slow", {"ms": 10})
    assert second != first
    skipped = job_row(s, second)
    assert skipped["status"] == "skipped" and skipped["source"] == "api" and skipped["jobName"] == "slow", skipped
    assert first in skipped["message"], skipped
    assert skipped["params"] == {"ms": 10}
    assert skipped["startedAt"]["iso"] == skipped["finishedAt"]["iso"] and skipped["durationMs"] == 0

    r = s.req("GET", "/admin/jobs", master=True)
    assert r.status_code == 200 and "slow" in r.json()["jobs"]

    row = wait_row(s, first, lambda r: r["progress"] > first_progress or finished(r), timeout=10)
    row = wait_row(s, first, finished, timeout=20)
    assert row["status"] == "succeeded" and row["message"] == "slept" and row["progress"] == 1, row
    assert row["durationMs"] >= 3900, row
    # Once it is done, a new start runs again.
    row = wait_row(s, start_job(s, "slow", {"ms": 10}), finished)
    assert row["status"] == "succeeded", row


def test_last_progress_is_written_while_the_job_keeps_working(server_factory):
    """Progress writes are throttled (about one a second), but the latest report must not wait
    for the job's next report or its end to become visible."""
    s = jobs_server(server_factory)
    rid = start_job(s, "quiet", {"ms": 4000})
    row = wait_row(s, rid, lambda r: r["message"] == "second" or finished(r), timeout=3.5)
    assert row["status"] == "running" and row["progress"] == 0.2, row
    row = wait_row(s, rid, finished, timeout=20)
    assert row["status"] == "succeeded" and row["message"] == "quiet done", row


def test_failed_runs(server_factory):
    s = jobs_server(server_factory)
    t0 = time.time()
    row = wait_row(s, start_job(s, "tooslow"), finished, timeout=20)
    assert row["status"] == "failed", row
    assert "timeout" in row["message"] and "300 ms" in row["message"], row
    assert "jobs.lua" in row["message"], row
    assert 250 <= row["durationMs"] < 10_000 and time.time() - t0 < 15
    assert "progress" not in row or row["progress"] < 1

    row = wait_row(s, start_job(s, "boom"), finished)
    assert row["status"] == "failed" and "kaboom" in row["message"], row
    assert "jobs.lua:" in row["message"], row
    # The host goes on: a job that fails does not hold its slot.
    row = wait_row(s, start_job(s, "boom"), finished)
    assert row["status"] == "failed", row


def test_crash_during_run_is_marked_failed_on_restart(server_factory):
    s = jobs_server(server_factory)
    rid = start_job(s, "slow", {"ms": 60_000})
    wait_row(s, rid, lambda r: r["progress"] > 0, timeout=10)
    s.kill9()

    s2 = jobs_server(server_factory, data=s.data)
    if BACKEND == "postgres":
        # Other hosts may share the database and be running it: the run is failed once it has
        # sent no heartbeat for 15 s (the restarted host sweeps every 5 s).
        row = wait_row(s2, rid, lambda r: r["status"] != "running", timeout=45)
    else:
        row = job_row(s2, rid)
    assert row["status"] == "failed", row
    assert "stopped" in row["message"], row
    assert iso_ms(row["finishedAt"]["iso"]) >= iso_ms(row["startedAt"]["iso"])
    # The job is free to run again.
    row = wait_row(s2, start_job(s2, "slow", {"ms": 10}), finished)
    assert row["status"] == "succeeded", row


# --- moonbase jobs / check / admin -------------------------------------------------------

def run_cli(*args, timeout=120):
    env = dict(os.environ, MOONBASE_MASTER_KEY=MASTER_KEY)
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout, env=env)


def expected_next(expr, t):
    it = croniter(expr, datetime.datetime.fromtimestamp(t, datetime.timezone.utc))
    return [it.get_next(datetime.datetime).strftime("%Y-%m-%dT%H:%M:%S.000Z") for _ in range(3)]


def check_listing(listing, t0, t1):
    """`moonbase jobs --json` / `GET /admin/jobs` for the shipped cron/cleanup.cron."""
    assert "cleanupExpiredPosts" in listing["jobs"] and "seedDemo" in listing["jobs"], listing
    [sch] = listing["schedules"]
    assert sch["job"] == "cleanupExpiredPosts" and sch["schedule"] == "*/5 * * * *", sch
    assert sch["params"] == {"graceMinutes": 0} and sch["timeZone"] == "UTC"
    assert sch["location"].endswith("cleanup.cron:3"), sch
    assert sch["next"] in (expected_next("*/5 * * * *", t0), expected_next("*/5 * * * *", t1)), sch
    for a, b in zip(sch["next"], sch["next"][1:]):
        assert (iso_ms(b) - iso_ms(a)).total_seconds() == 300
    return sch


def test_moonbase_jobs_cli_and_admin(server_factory):
    functions, cron = os.path.join(ROOT, "functions"), os.path.join(ROOT, "cron")
    with tempfile.TemporaryDirectory() as data:
        common = [*database_args(data), "--functions", functions, "--cron", cron]
        t0 = time.time()
        r = run_cli("jobs", "--json", *common)
        t1 = time.time()
        assert r.returncode == 0, r.stdout + r.stderr
        sch = check_listing(json.loads(r.stdout), t0, t1)
        assert sch["lastRun"] is None and sch["running"] is None

        r = run_cli("jobs", *common)
        assert r.returncode == 0, r.stderr
        assert "*/5 * * * *" in r.stdout and "cleanupExpiredPosts" in r.stdout and "never" in r.stdout, r.stdout

        r = run_cli("jobs", "run", "cleanupExpiredPosts", '{"graceMinutes": 0}', *common)
        assert r.returncode == 0, r.stdout + r.stderr
        ran = json.loads(r.stdout)
        assert ran["status"] == "succeeded" and ran["message"] == '{"deleted":0}' and ran["source"] == "api", ran
        assert ran["params"] == {"graceMinutes": 0}

        r = run_cli("jobs", "run", "nope", "{}", *common)
        assert r.returncode == 1 and 'Invalid job: "nope"' in r.stderr, r.stdout + r.stderr
        r = run_cli("jobs", "run", *common)
        assert r.returncode == 2, r.stdout + r.stderr
        r = run_cli("jobs", "run", "cleanupExpiredPosts", "[1]", *common)
        assert r.returncode == 2, r.stdout + r.stderr

        t0 = time.time()
        r = run_cli("jobs", "--json", *common)
        t1 = time.time()
        assert r.returncode == 0, r.stderr
        cli = json.loads(r.stdout)
        sch = check_listing(cli, t0, t1)
        assert sch["lastRun"]["objectId"] == ran["objectId"] and sch["lastRun"]["status"] == "succeeded", sch
        r = run_cli("jobs", *common)
        assert "succeeded " + ran["startedAt"]["iso"] in r.stdout, r.stdout

        # The same listing over HTTP from a server on that data dir with the shipped folders.
        with open(os.path.join(cron, "cleanup.cron")) as f:
            cron_text = f.read()
        fns = shipped_functions()   # the files and their lib/ modules
        s = server_factory(functions=fns, cron={"cleanup.cron": cron_text}, data=data).start()
        t0 = time.time()
        r = s.req("GET", "/admin/jobs", master=True)
        t1 = time.time()
        assert r.status_code == 200, r.text
        http = r.json()
        check_listing(http, t0, t1)
        for x in (http, cli):
            x["schedules"][0].pop("next")
            x["schedules"][0].pop("location")   # the server reads its own copy of the cron folder
        assert http == cli
        assert s.req("GET", "/admin/jobs").status_code == 403


def test_check_rejects_cron_naming_an_undefined_job():
    with tempfile.TemporaryDirectory() as tmp:
        fdir, cdir, data = (os.path.join(tmp, d) for d in ("functions", "cron", "data"))
        os.makedirs(fdir), os.makedirs(cdir)
        with open(os.path.join(fdir, "jobs.lua"), "w") as f:
            f.write('cloud.job("known", function(req) return "ok" end)\n')
        with open(os.path.join(cdir, "a.cron"), "w") as f:
            f.write("# fine\n0 3 * * * known\n")
        r = run_cli("check", fdir, "--cron", cdir, "--data", data)
        assert r.returncode == 0, r.stdout + r.stderr

        with open(os.path.join(cdir, "b.cron"), "w") as f:
            f.write("\n*/10 * * * * unknownJob {\"a\": 1}\n")
        r = run_cli("check", fdir, "--cron", cdir, "--data", data)
        assert r.returncode == 1, r.stdout + r.stderr
        assert "b.cron:2" in r.stderr and "unknownJob" in r.stderr, r.stderr

        with open(os.path.join(cdir, "b.cron"), "w") as f:
            f.write("61 * * * * known\n")
        r = run_cli("check", fdir, "--cron", cdir, "--data", data)
        assert r.returncode == 1 and "b.cron:1:" in r.stderr, r.stdout + r.stderr


def test_every_minute_schedule_fires(server_factory):
    """The one slow test: a `* * * * *` schedule fires against the real binary (≤ 70 s)."""
    s = server_factory(functions={"jobs.lua": JOBS_LUA},
                       cron={"tick.cron": '* * * * * tick {"from": "cron"}\n'}).start()
    r = s.req("GET", "/admin/jobs", master=True)
    [sch] = r.json()["schedules"]
    assert sch["job"] == "tick" and sch["schedule"] == "* * * * *" and sch["params"] == {"from": "cron"}
    first = iso_ms(sch["next"][0])
    where = json.dumps({"jobName": "tick", "source": "cron"})
    deadline = time.time() + 75
    rows = []
    while time.time() < deadline:
        r = s.req("GET", "/parse/classes/_JobStatus", params={"where": where}, master=True)
        if r.status_code == 200:
            rows = [x for x in r.json()["results"] if x["status"] != "running"]
            if rows:
                break
        time.sleep(0.5)
    assert rows, "the * * * * * schedule did not fire within 75 s: " + s.read_log()[-2000:]
    row = rows[0]
    assert row["status"] == "succeeded" and row["message"] == "ticked" and row["params"] == {"from": "cron"}, row
    started = iso_ms(row["startedAt"]["iso"])
    assert first <= started < first + datetime.timedelta(seconds=10), (first, started)
    r = s.req("GET", "/parse/classes/Tick", master=True)
    assert [t["from"] for t in r.json()["results"]] == ["cron"]
    r = s.req("GET", "/admin/jobs", master=True)
    assert r.json()["schedules"][0]["lastRun"]["objectId"] == row["objectId"]


def test_reboot_schedule_and_hot_reload_of_the_cron_folder(server_factory):
    s = server_factory(functions={"jobs.lua": JOBS_LUA}, cron={"boot.cron": '@reboot tick {"from": "reboot"}\n'}).start()
    where = json.dumps({"jobName": "tick", "source": "cron"})

    def reboot_rows(server, n):
        deadline = time.time() + 20
        rows = []
        while time.time() < deadline:
            rows = server.req("GET", "/parse/classes/_JobStatus", params={"where": where}, master=True).json()["results"]
            if len(rows) >= n and all(r["status"] != "running" for r in rows):
                return rows
            time.sleep(0.05)
        raise AssertionError(f"expected {n} @reboot runs, got {rows}")

    [row] = reboot_rows(s, 1)
    assert row["status"] == "succeeded" and row["params"] == {"from": "reboot"}, row
    [sch] = s.req("GET", "/admin/jobs", master=True).json()["schedules"]
    assert sch["schedule"] == "@reboot" and sch["next"] == [], sch

    def schedules():
        return [x["schedule"] for x in s.req("GET", "/admin/jobs", master=True).json()["schedules"]]

    def wait_for(pred, what):
        deadline = time.time() + 15
        while time.time() < deadline:
            if pred():
                return
            time.sleep(0.1)
        raise AssertionError(what + ": " + s.read_log()[-1500:])

    # A file naming an undefined job is refused as a whole; the loaded schedules stay.
    with open(os.path.join(s.cron, "bad.cron"), "w") as f:
        f.write("0 * * * * nosuchjob\n")
    wait_for(lambda: "nosuchjob" in s.read_log(), "the bad cron file was not reported")
    assert "bad.cron:1" in s.read_log()
    assert schedules() == ["@reboot"]
    os.remove(os.path.join(s.cron, "bad.cron"))
    with open(os.path.join(s.cron, "more.cron"), "w") as f:
        f.write("CRON_TZ=Europe/Paris\n30 4 * * 1-5 quick {\"n\": 1}\n")
    wait_for(lambda: len(schedules()) == 2, "the new cron file was not loaded")
    sch = [x for x in s.req("GET", "/admin/jobs", master=True).json()["schedules"] if x["job"] == "quick"][0]
    assert sch["timeZone"] == "Europe/Paris" and sch["schedule"] == "30 4 * * 1-5", sch
    for t in sch["next"]:
        local = iso_ms(t).astimezone(ZoneInfo("Europe/Paris"))
        assert (local.hour, local.minute) == (4, 30) and local.weekday() < 5, t

    # @reboot runs once per start.
    assert s.stop() == 0
    s2 = server_factory(functions={"jobs.lua": JOBS_LUA}, cron={"boot.cron": '@reboot tick {"from": "reboot"}\n'},
                        data=s.data).start()
    assert len(reboot_rows(s2, 2)) == 2
