"""Quotas and accounting against the real binary (issue 6): the monthly
quota (429/155 + Retry-After, refused counted apart, master never refused, health and metrics
free, the month counter surviving a graceful restart), `RateLimit-*` headers only while a limit
applies, per-user vs per-IP minute limits and a function's own `rateLimit`, 1 unit per function
call or batch whatever it does, 159 retries free, exact totals under concurrency, the
`/admin/usage` report shapes and `MOONBASE_ACCOUNTING=off`."""
import datetime
import json
import os
import re
import subprocess
import threading
import time

from conftest import BIN, MASTER_KEY, database_args

ROW_KEYS = {"key", "units", "refused", "dbReads", "dbWrites", "luaCpuMs", "wallMs", "bytesIn", "bytesOut", "events"}
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
RATE_HEADERS = ("RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset")

FUNCTIONS = r"""
-- 200 DB operations in one call: 100 creates and 100 reads.
cloud.define("heavy", function(req)
  local ids = {}
  for i = 1, 100 do ids[i] = db.create("Heavy", {i = i}).objectId end
  local sum = 0
  for i = 1, 100 do sum = sum + db.get("Heavy", ids[i]).i end
  return sum
end)

cloud.define("echo", function(req) return req.params.v end)

cloud.define("limited", {rateLimit = {perMinute = 2}}, function(req) return "ok" end)
"""


def usage_cli(data, *args, by="account"):
    """The JSON report; by=None asks for the default (accounts and functions)."""
    if by and "--by" not in args:
        args = (*args, "--by", by)
    r = subprocess.run([BIN, "usage", "--json", *database_args(data), *args], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, MOONBASE_MASTER_KEY=MASTER_KEY))
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout)


def admin_usage(s, **params):
    r = s.req("GET", "/admin/usage", params=params, master=True)
    assert r.status_code == 200, r.text
    return r.json()


def rows_by_key(report):
    return {row["key"]: row for row in report["rows"]}


def signup(s, name):
    r = s.req("POST", "/parse/users", {"username": name, "password": "pw-" + name})
    assert r.status_code == 201, r.text
    return r.json()["objectId"], r.json()["sessionToken"]


def no_rate_headers(r):
    return not any(h in r.headers for h in RATE_HEADERS)


def away_from_minute_edge(margin=20):
    """Per-minute windows are UTC minutes: start a minute-limited scenario with `margin` seconds
    of the current minute left (waits at most `margin` seconds)."""
    left = 60 - time.time() % 60
    if left < margin:
        time.sleep(left + 0.2)


def test_monthly_quota_refuses_the_21st_and_survives_restart(server_factory):
    env = {"MOONBASE_QUOTA_MONTHLY_REQUESTS": "20"}
    s = server_factory(env=env).start()
    for i in range(20):
        r = s.req("GET", "/parse/classes/Thing")
        assert r.status_code == 200, (i, r.text)
        assert r.headers["RateLimit-Limit"] == "20" and r.headers["RateLimit-Remaining"] == str(19 - i), r.headers
        assert int(r.headers["RateLimit-Reset"]) > 0 and "Retry-After" not in r.headers
    for _ in range(2):
        r = s.req("GET", "/parse/classes/Thing")
        assert r.status_code == 429, r.text
        assert r.json()["code"] == 155 and r.json()["error"], r.text
        now = datetime.datetime.now(datetime.timezone.utc)
        first = datetime.datetime(now.year + now.month // 12, now.month % 12 + 1, 1, tzinfo=datetime.timezone.utc)
        retry = int(r.headers["Retry-After"])
        assert abs(retry - (first - now).total_seconds()) <= 5, (retry, first)
        assert r.headers["RateLimit-Remaining"] == "0" and r.headers["RateLimit-Limit"] == "20"
    # Health and metrics are free and never refused.
    for path in ("/parse/health", "/metrics"):
        r = s.req("GET", path)
        assert r.status_code == 200 and no_rate_headers(r), (path, r.status_code)
    assert s.stop() == 0

    both = usage_cli(s.data, by=None)   # without --by: the accounts and the functions
    assert set(both) == {"accounts", "functions"} and both["functions"]["by"] == "function"
    report = usage_cli(s.data, "--by", "account")
    assert both["accounts"] == report
    assert set(report) == {"from", "to", "by", "rows"} and report["by"] == "account"
    # `app` holds every charged request; the caller's account (here the IP) the same ones.
    assert [row["key"] for row in report["rows"]] == ["app", "ip:127.0.0.1"], report
    for row in report["rows"]:
        assert row["units"] == 20 and row["refused"] == 2, row
    [month] = usage_cli(s.data, "--by", "month")["rows"]
    assert month["units"] == 20 and month["refused"] == 2, month

    # A graceful restart keeps the month's count: still refused; the master key is counted but
    # never refused, and carries no RateLimit headers.
    s2 = server_factory(env=env, data=s.data).start()
    r = s2.req("GET", "/parse/classes/Thing")
    assert r.status_code == 429 and r.json()["code"] == 155 and "Retry-After" in r.headers, r.text
    for _ in range(3):
        r = s2.req("GET", "/parse/classes/Thing", master=True)
        assert r.status_code == 200 and no_rate_headers(r), r.headers
    assert s2.stop() == 0
    for row in usage_cli(s.data)["rows"]:
        assert row["units"] == 23 and row["refused"] == 3, row

    # Text output lists the same account.
    r = subprocess.run([BIN, "usage", *database_args(s.data)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "ip:127.0.0.1" in r.stdout and "23" in r.stdout, r.stdout + r.stderr


def test_no_rate_limit_headers_without_limits(server_factory):
    s = server_factory().start()
    for method, path, body in (("GET", "/parse/classes/Thing", None), ("POST", "/parse/classes/Thing", {"a": 1}),
                               ("GET", "/parse/classes/Thing/nope", None)):
        r = s.req(method, path, body)
        assert r.status_code in (200, 201, 404) and no_rate_headers(r) and "Retry-After" not in r.headers, r.headers


def test_per_minute_limit_per_user_and_per_ip(server_factory):
    s = server_factory(functions={"f.lua": FUNCTIONS}, env={"MOONBASE_RATE_LIMIT_PER_MINUTE": "5"}).start()
    away_from_minute_edge()
    ana_id, ana = signup(s, "ana")     # 2 requests from the IP
    bea_id, bea = signup(s, "bea")
    for i in range(3):                  # 3 more anonymous requests: the IP's 5
        r = s.req("GET", "/parse/classes/Thing")
        assert r.status_code == 200 and r.headers["RateLimit-Remaining"] == str(2 - i), r.headers
        assert r.headers["RateLimit-Limit"] == "5" and 0 < int(r.headers["RateLimit-Reset"]) <= 60
    r = s.req("GET", "/parse/classes/Thing")
    assert r.status_code == 429 and r.json()["code"] == 155, r.text
    assert 0 < int(r.headers["Retry-After"]) <= 60, r.headers
    # Users have windows of their own, apart from their IP's.
    for i in range(5):
        r = s.req("GET", "/parse/classes/Thing", session=ana)
        assert r.status_code == 200 and r.headers["RateLimit-Remaining"] == str(4 - i), (i, r.text)
    r = s.req("GET", "/parse/classes/Thing", session=ana)
    assert r.status_code == 429 and r.json()["code"] == 155 and "Retry-After" in r.headers
    r = s.req("GET", "/parse/classes/Thing", session=bea)
    assert r.status_code == 200 and r.headers["RateLimit-Remaining"] == "4", r.headers
    # Master: counted, never refused, no headers.
    r = s.req("GET", "/parse/classes/Thing", master=True)
    assert r.status_code == 200 and no_rate_headers(r)

    # A function's own rateLimit is per caller and the tighter limit shows in the headers.
    for i in range(2):
        r = s.call("limited", session=bea)
        assert r.status_code == 200 and r.headers["RateLimit-Limit"] == "2", r.headers
        assert r.headers["RateLimit-Remaining"] == str(1 - i)
    r = s.call("limited", session=bea)
    assert r.status_code == 429 and r.json()["code"] == 155, r.text

    rows = rows_by_key(admin_usage(s))
    assert rows[f"user:{ana_id}"]["units"] == 5 and rows[f"user:{ana_id}"]["refused"] == 1
    assert rows[f"user:{bea_id}"]["units"] == 3 and rows[f"user:{bea_id}"]["refused"] == 1
    # The IP: 2 sign-ups, 3 reads and the master read (the report is recorded after it answers).
    assert rows["ip:127.0.0.1"]["units"] == 6 and rows["ip:127.0.0.1"]["refused"] == 1, rows
    assert rows["app"]["units"] == 6 + 5 + 3 and rows["app"]["refused"] == 3, rows["app"]


def test_one_unit_per_function_call_and_batch_and_free_retries(server_factory):
    s = server_factory(functions={"f.lua": FUNCTIONS}).start()
    uid, tok = signup(s, "ana")
    r = s.call("heavy", session=tok)
    assert r.status_code == 200 and r.json() == {"result": 5050}, r.text
    batch = {"requests": [{"method": "POST", "path": "/parse/classes/Item", "body": {"n": i}} for i in range(10)]}
    r = s.req("POST", "/parse/batch", batch, session=tok)
    assert r.status_code == 200 and all("success" in x for x in r.json()), r.text
    rid = {"X-Parse-Request-Id": "retry-0001"}
    r = s.req("POST", "/parse/classes/Item", {"n": 99}, session=tok, headers=rid)
    assert r.status_code == 201, r.text
    for _ in range(2):
        r = s.req("POST", "/parse/classes/Item", {"n": 99}, session=tok, headers=rid)
        assert r.status_code == 400 and r.json()["code"] == 159, r.text
    r = s.req("GET", "/parse/classes/Item", params={"where": json.dumps({"n": 99}), "count": "1", "limit": "0"},
              master=True)
    assert r.json()["count"] == 1

    rows = rows_by_key(admin_usage(s, by="account"))
    assert rows[f"user:{uid}"]["units"] == 3 and rows[f"user:{uid}"]["refused"] == 0, rows
    fn = rows_by_key(admin_usage(s, by="function"))
    heavy = fn["function:heavy"]
    assert heavy["units"] == 1 and heavy["dbWrites"] >= 100 and heavy["dbReads"] >= 100, heavy
    assert heavy["dbReads"] + heavy["dbWrites"] >= 200 and heavy["luaCpuMs"] > 0 and heavy["wallMs"] > 0, heavy
    assert heavy["bytesIn"] == 2 and heavy["bytesOut"] == len('{"result":5050}'), heavy
    assert fn["api:batch"]["units"] == 1 and fn["api:batch"]["dbWrites"] >= 10, fn["api:batch"]
    assert fn["class:Item"]["units"] == 2, fn["class:Item"]   # the create and the master count, not the retries


def test_concurrent_requests_are_counted_exactly(server_factory):
    n, m = 8, 25
    s = server_factory(functions={"f.lua": FUNCTIONS}).start()
    users = [signup(s, f"user{i}") for i in range(n)]
    errors = []

    def client(tok, i):
        try:
            for j in range(m):
                kind = j % 3
                if kind == 0:
                    r = s.req("POST", "/parse/classes/Load", {"c": i, "j": j}, session=tok)
                elif kind == 1:
                    r = s.req("GET", "/parse/classes/Load", params={"limit": "5"}, session=tok)
                else:
                    r = s.call("echo", {"v": j}, session=tok)
                if r.status_code not in (200, 201):
                    errors.append(r.text)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(tok, i)) for i, (_, tok) in enumerate(users)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads) and not errors, errors[:3]
    assert s.stop() == 0

    rows = rows_by_key(usage_cli(s.data))
    for uid, _ in users:
        assert rows[f"user:{uid}"]["units"] == m, rows[f"user:{uid}"]
    assert sum(r["units"] for k, r in rows.items() if k.startswith("user:")) == n * m
    assert rows["ip:127.0.0.1"]["units"] == n
    assert rows["app"]["units"] == n * m + n and rows["app"]["refused"] == 0
    hours = usage_cli(s.data, "--by", "hour")["rows"]   # one row, or two if the run straddled an hour
    assert 1 <= len(hours) <= 2 and sum(h["units"] for h in hours) == n * m + n, hours
    fn = rows_by_key(usage_cli(s.data, "--by", "function"))
    assert fn["function:echo"]["units"] == n * len(range(2, m, 3))
    assert fn["class:Load"]["units"] == n * (len(range(0, m, 3)) + len(range(1, m, 3)))


def test_usage_report_shapes(server_factory):
    s = server_factory(functions={"f.lua": FUNCTIONS}).start()
    uid, tok = signup(s, "ana")
    assert s.call("echo", {"v": 1}, session=tok).status_code == 200
    assert s.req("POST", "/parse/classes/Thing", {"a": 1}).status_code == 201
    for by in ("account", "function", "hour"):
        rep = admin_usage(s, by=by)
        assert set(rep) == {"from", "to", "by", "rows"} and rep["by"] == by, rep
        assert ISO_MS.match(rep["from"]) and ISO_MS.match(rep["to"]) and rep["from"] < rep["to"]
        assert rep["from"].endswith("-01T00:00:00.000Z"), rep["from"]   # default: the current month
        assert rep["rows"], rep
        for row in rep["rows"]:
            assert set(row) == ROW_KEYS, row
            assert isinstance(row["key"], str)
            for k in ROW_KEYS - {"key", "luaCpuMs", "wallMs"}:
                assert isinstance(row[k], int) and row[k] >= 0, (k, row)
            for k in ("luaCpuMs", "wallMs"):
                assert isinstance(row[k], (int, float)) and row[k] >= 0, (k, row)
        if by == "account":
            assert {f"user:{uid}", "ip:127.0.0.1"} <= set(rows_by_key(rep)), rep
        elif by == "function":
            assert {"function:echo", "class:Thing", "class:_User"} <= set(rows_by_key(rep)), rep
        else:
            for row in rep["rows"]:
                assert ISO_MS.match(row["key"]) and row["key"].endswith(":00:00.000Z"), row
            assert sum(r["units"] for r in rep["rows"]) >= 3
    # An explicit range in the past is empty; a bad grouping or range is 102; master only.
    rep = admin_usage(s, **{"from": "2020-01-01", "to": "2020-02-01"})
    assert rep["rows"] == [] and rep["from"] == "2020-01-01T00:00:00.000Z" and rep["to"] == "2020-02-01T00:00:00.000Z"
    for params in ({"by": "planet"}, {"from": "yesterday"}, {"from": "2020-02-01", "to": "2020-01-01"}):
        r = s.req("GET", "/admin/usage", params=params, master=True)
        assert r.status_code == 400 and r.json()["code"] == 102, (params, r.text)
    r = s.req("GET", "/admin/usage")
    assert r.status_code == 403 and r.json()["code"] == 119


def test_accounting_off_records_nothing(server_factory):
    s = server_factory(functions={"f.lua": FUNCTIONS}, env={"MOONBASE_ACCOUNTING": "off"}).start()
    uid, tok = signup(s, "ana")
    assert s.call("echo", {"v": 1}, session=tok).status_code == 200
    assert s.req("POST", "/parse/classes/Thing", {"a": 1}).status_code == 201
    for by in ("account", "function", "hour"):
        assert admin_usage(s, by=by)["rows"] == []
    assert s.stop() == 0
    assert usage_cli(s.data)["rows"] == []


def test_month_counter_is_the_same_after_restart_whatever_was_answered(server_factory):
    """The month's count in memory and the one rebuilt from the usage rows after a restart agree,
    whatever the requests were answered (refused at the door, not found, a bad body)."""
    env = {"MOONBASE_QUOTA_MONTHLY_REQUESTS": "50"}
    s = server_factory(env=env).start()
    assert s.req("GET", "/parse/classes/Thing", headers={"X-Parse-Application-Id": "wrong"}).status_code == 403
    assert s.req("GET", "/parse/classes/_JobStatus").status_code == 403
    assert s.req("GET", "/parse/classes/Thing", headers={"X-Parse-Session-Token": "r:nope"}).status_code == 400
    assert s.req("GET", "/parse/classes/Thing/nothing123").status_code == 404
    assert s.req("POST", "/parse/classes/Thing", raw="{").status_code == 400
    r = s.req("GET", "/parse/classes/Thing")
    assert r.status_code == 200
    remaining = int(r.headers["RateLimit-Remaining"])
    assert s.stop() == 0
    units = {row["key"]: row["units"] for row in usage_cli(s.data)["rows"]}["app"]
    assert units == 50 - remaining, (units, remaining)

    s2 = server_factory(env=env, data=s.data).start()
    r = s2.req("GET", "/parse/classes/Thing")
    assert r.status_code == 200 and int(r.headers["RateLimit-Remaining"]) == remaining - 1, r.headers


def test_serve_flags_set_the_limits(server_factory):
    s = server_factory(args=["--quota-monthly-requests", "3", "--rate-limit-per-minute", "100"]).start()
    away_from_minute_edge(margin=5)
    for i in range(3):
        r = s.req("GET", "/parse/classes/Thing")
        assert r.status_code == 200, r.text
        # The tightest limit is described: the month's 3, not the minute's 100.
        assert r.headers["RateLimit-Limit"] == "3" and r.headers["RateLimit-Remaining"] == str(2 - i), r.headers
    r = s.req("GET", "/parse/classes/Thing")
    assert r.status_code == 429 and r.json()["code"] == 155 and int(r.headers["Retry-After"]) > 60, r.headers

    s = server_factory(args=["--rate-limit-per-minute", "2"]).start()
    away_from_minute_edge(margin=5)
    codes = [s.req("GET", "/parse/classes/Thing").status_code for _ in range(3)]
    assert codes == [200, 200, 429]


def test_usage_range_by_instants(server_factory):
    def this_hour():
        return datetime.datetime.now(datetime.timezone.utc).replace(minute=0, second=0, microsecond=0)

    s = server_factory().start()
    hour = this_hour()
    assert s.req("GET", "/parse/classes/Thing").status_code == 200
    frm, to = hour.strftime("%Y-%m-%dT%H:%M:%S.000Z"), (hour + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    rep = admin_usage(s, by="hour", **{"from": frm, "to": to})
    assert rep["from"] == frm and rep["to"].startswith(to[:-1]), rep
    if this_hour() == hour:   # the request and the report fell in the same hour
        assert [r["key"] for r in rep["rows"]] == [frm] and rep["rows"][0]["units"] == 1, rep
    earlier = admin_usage(s, by="hour", **{"from": (hour - datetime.timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                            "to": frm})
    assert earlier["rows"] == [], earlier


def test_usage_is_flushed_to_sqlite_while_serving(server_factory):
    """Counters are flushed at least every second: `moonbase usage` on the live data dir sees
    them without a stop (WAL lets the CLI read beside the server)."""
    s = server_factory().start()
    for _ in range(5):
        assert s.req("GET", "/parse/classes/Thing").status_code == 200
    t0 = time.time()
    rows = {}
    while time.time() - t0 < 10:
        rows = rows_by_key(usage_cli(s.data))
        if rows.get("app", {}).get("units") == 5:
            break
        time.sleep(0.1)
    assert rows["app"]["units"] == 5, rows
    assert time.time() - t0 < 5, "usage took more than a few seconds to reach SQLite"
