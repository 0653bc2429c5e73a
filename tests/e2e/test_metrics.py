"""`/metrics` against the real binary (issue 6): the text is checked by a strict
Prometheus text-format 0.0.4 parser (below, itself tested on bad input), and holds requests by
route and status, a latency histogram, units and refusals matching the requests made, Lua CPU,
job runs by status and DB operations; `--metrics-require-master` binds it to the master key."""
import math
import re
import time

import pytest

NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}
FLOAT = re.compile(r"^[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|Inf|NaN)$")


class ExpositionError(ValueError):
    pass


def parse_value(text, line):
    if not FLOAT.match(text):
        raise ExpositionError(f"bad value {text!r} in {line!r}")
    return float(text.replace("Inf", "inf"))


def parse_labels(text, pos, line):
    """Parses `{a="x",b="y"}` starting at text[pos] == '{'; returns (dict, position after '}')."""
    labels = {}
    pos += 1
    while True:
        if text[pos:pos + 1] == "}":
            return labels, pos + 1
        m = LABEL.match(text, pos)
        if not m:
            raise ExpositionError(f"bad label name at {pos} in {line!r}")
        name = m.group(0)
        pos = m.end()
        if text[pos:pos + 2] != '="':
            raise ExpositionError(f"expected =\" after {name} in {line!r}")
        pos += 2
        value = []
        while True:
            if pos >= len(text):
                raise ExpositionError(f"unterminated label value in {line!r}")
            c = text[pos]
            if c == "\\":
                nxt = text[pos + 1:pos + 2]
                if nxt not in ('\\', '"', "n"):
                    raise ExpositionError(f"bad escape \\{nxt} in {line!r}")
                value.append("\n" if nxt == "n" else nxt)
                pos += 2
            elif c == '"':
                pos += 1
                break
            elif c == "\n":
                raise ExpositionError(f"raw newline in label value in {line!r}")
            else:
                value.append(c)
                pos += 1
        if name in labels:
            raise ExpositionError(f"duplicate label {name} in {line!r}")
        labels[name] = "".join(value)
        if text[pos:pos + 1] == ",":
            pos += 1
            if text[pos:pos + 1] == "}":   # a trailing comma is allowed by the format
                return labels, pos + 1
        elif text[pos:pos + 1] != "}":
            raise ExpositionError(f"expected , or }} at {pos} in {line!r}")


def parse_exposition(text):
    """Strict parser: returns {family: {"type", "help", "samples": [(name, labels, value)]}}.

    Rules: the text ends with a newline and has no blank lines; only `# HELP` and `# TYPE`
    comments, each at most once per family and before its samples; every sample belongs to the
    family most recently declared (families are contiguous) under the names its type allows;
    no series appears twice; counters are finite and non-negative; histogram buckets have
    increasing `le` ending at `+Inf`, cumulative counts, `_count` equal to the `+Inf` bucket, and
    a `_sum`."""
    if not text.endswith("\n"):
        raise ExpositionError("text must end with a newline")
    families, seen_series, current = {}, set(), None
    for line in text[:-1].split("\n"):
        if line == "":
            raise ExpositionError("blank line")
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) < 3 or parts[0] != "#" or parts[1] not in ("HELP", "TYPE"):
                raise ExpositionError(f"unexpected comment {line!r}")
            kind, name = parts[1], parts[2]
            if not NAME.fullmatch(name):
                raise ExpositionError(f"bad metric name {name!r}")
            fam = families.setdefault(name, {"type": None, "help": None, "samples": []})
            if fam["samples"]:
                raise ExpositionError(f"{kind} for {name} after its samples")
            if kind == "HELP":
                if fam["help"] is not None:
                    raise ExpositionError(f"second HELP for {name}")
                help_text = parts[3] if len(parts) == 4 else ""
                if re.search(r"\\[^\\n]", help_text.replace("\\\\", "")):
                    raise ExpositionError(f"bad escape in HELP of {name}")
                fam["help"] = help_text
            else:
                if fam["type"] is not None:
                    raise ExpositionError(f"second TYPE for {name}")
                if len(parts) != 4 or parts[3] not in TYPES:
                    raise ExpositionError(f"bad TYPE line {line!r}")
                fam["type"] = parts[3]
            current = name
            continue
        m = NAME.match(line)
        if not m:
            raise ExpositionError(f"bad sample line {line!r}")
        name, pos = m.group(0), m.end()
        labels = {}
        if line[pos:pos + 1] == "{":
            labels, pos = parse_labels(line, pos, line)
        if line[pos:pos + 1] != " ":
            raise ExpositionError(f"expected a space before the value in {line!r}")
        rest = line[pos + 1:].split(" ")
        if len(rest) not in (1, 2) or (len(rest) == 2 and not re.fullmatch(r"-?\d+", rest[1])):
            raise ExpositionError(f"bad value/timestamp in {line!r}")
        value = parse_value(rest[0], line)
        fam_name = current
        if fam_name is None:
            raise ExpositionError(f"sample before any TYPE: {line!r}")
        fam = families[fam_name]
        kind = fam["type"] or "untyped"
        allowed = {fam_name}
        if kind == "histogram":
            allowed = {fam_name + "_bucket", fam_name + "_sum", fam_name + "_count"}
        elif kind == "summary":
            allowed = {fam_name, fam_name + "_sum", fam_name + "_count"}
        if name not in allowed:
            raise ExpositionError(f"sample {name} does not belong to family {fam_name} ({kind})")
        if name.endswith("_bucket") and kind == "histogram" and "le" not in labels:
            raise ExpositionError(f"bucket without le: {line!r}")
        key = (name, tuple(sorted(labels.items())))
        if key in seen_series:
            raise ExpositionError(f"duplicate series {line!r}")
        seen_series.add(key)
        if kind == "counter" and (not math.isfinite(value) or value < 0):
            raise ExpositionError(f"bad counter value {line!r}")
        fam["samples"].append((name, labels, value))
    for fam_name, fam in families.items():
        if fam["type"] is None:
            raise ExpositionError(f"family {fam_name} has no TYPE")
        if fam["type"] == "histogram":
            check_histogram(fam_name, fam["samples"])
    return families


def check_histogram(name, samples):
    series = {}
    for sname, labels, value in samples:
        base = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        s = series.setdefault(base, {"buckets": [], "sum": None, "count": None})
        if sname == name + "_bucket":
            s["buckets"].append((parse_value(labels["le"], sname), value))
        elif sname == name + "_sum":
            s["sum"] = value
        else:
            s["count"] = value
    for base, s in series.items():
        b = s["buckets"]
        if not b or b[-1][0] != math.inf:
            raise ExpositionError(f"{name}{base}: buckets must end with le=+Inf")
        if any(b[i][0] >= b[i + 1][0] for i in range(len(b) - 1)):
            raise ExpositionError(f"{name}{base}: le must increase")
        if any(b[i][1] > b[i + 1][1] for i in range(len(b) - 1)):
            raise ExpositionError(f"{name}{base}: bucket counts must be cumulative")
        if s["sum"] is None or s["count"] is None or s["count"] != b[-1][1]:
            raise ExpositionError(f"{name}{base}: _sum/_count missing or _count != +Inf bucket")


def value(families, fam, **labels):
    """The value of the series of `fam` with exactly `labels` (0 if absent)."""
    for name, ls, v in families[fam]["samples"]:
        if name == fam and ls == labels:
            return v
    return 0


def hist(families, fam, **labels):
    """(count, sum, [(le, cumulative)]) of one histogram series."""
    buckets, total, count = [], None, None
    for name, ls, v in families[fam]["samples"]:
        base = {k: x for k, x in ls.items() if k != "le"}
        if base != labels:
            continue
        if name == fam + "_bucket":
            buckets.append((ls["le"], v))
        elif name == fam + "_sum":
            total = v
        elif name == fam + "_count":
            count = v
    return count, total, buckets


# --- the parser itself --------------------------------------------------------------------

GOOD = """# HELP a_total Things, with \\\\ and \\n escapes.
# TYPE a_total counter
a_total{x="1",y="q\\"uote\\\\ \\n"} 3
a_total{x="2"} 0 1700000000000
# TYPE h histogram
h_bucket{le="0.5"} 1
h_bucket{le="+Inf"} 2
h_sum 0.75
h_count 2
# TYPE g gauge
g -1.5e-3
g{k="v",} NaN
"""


def test_parser_accepts_valid_text():
    fams = parse_exposition(GOOD)
    assert value(fams, "a_total", x="1", y='q"uote\\ \n') == 3
    assert hist(fams, "h") == (2, 0.75, [("0.5", 1), ("+Inf", 2)])
    assert math.isnan(value(fams, "g", k="v")) and value(fams, "g") == -0.0015


@pytest.mark.parametrize("bad", [
    GOOD.rstrip("\n"),                                            # no final newline
    GOOD.replace("# TYPE g gauge\n", "# TYPE g gauge\n\n"),       # blank line
    GOOD.replace("g -1.5e-3", "g 1,5"),                           # bad value
    GOOD.replace('a_total{x="2"}', 'a_total{x="1",y="q\\"uote\\\\ \\n"}'),   # duplicate series
    GOOD.replace('h_bucket{le="+Inf"} 2', 'h_bucket{le="10"} 2'),  # no +Inf bucket
    GOOD.replace("h_count 2", "h_count 3"),                       # count != +Inf bucket
    GOOD.replace('h_bucket{le="0.5"} 1', 'h_bucket{le="0.5"} 5'), # not cumulative
    GOOD.replace("a_total{x=\"2\"} 0", "a_total{x=\"2\"} -1"),    # negative counter
    GOOD.replace("# TYPE g gauge\n", ""),                         # g samples under family h
    GOOD + "a_total{x=\"3\"} 1\n",                                # family not contiguous
    GOOD.replace('{x="2"}', '{x="2",x="3"}'),                     # duplicate label
    GOOD.replace('{x="2"}', '{2x="2"}'),                          # bad label name
    GOOD.replace('{x="2"}', '{x="2\\t"}'),                        # bad escape
    GOOD.replace('{x="2"}', '{x="2}'),                            # unterminated value
    GOOD.replace("# TYPE g gauge", "# TYPE g sometimes"),         # bad type
    GOOD + "# TYPE a_total counter\n",                            # second TYPE
    GOOD + "# just a comment\n",                                  # stray comment
    GOOD.replace("g -1.5e-3", "g  -1.5e-3"),                      # double space
])
def test_parser_rejects_bad_text(bad):
    with pytest.raises(ExpositionError):
        parse_exposition(bad)


# --- the server's /metrics ----------------------------------------------------------------

FUNCTIONS = r"""
-- Burns about 30 ms of CPU in Lua, then reads and writes.
cloud.define("burn", function(req)
  local start, x = os.clock(), 0
  while os.clock() - start < 0.03 do x = x + 1 end
  db.create("Burn", {x = x})
  return db.count("Burn", {})
end)

cloud.job("okJob", function(req) return "fine" end)
cloud.job("badJob", function(req) error("nope") end)
cloud.job("longJob", function(req)
  local start = time.now()
  while time.now() - start < (req.params.ms or 1500) do end
  return "long"
end)
"""


class Counting:
    """Sends requests and counts the charged ones (everything but health and metrics)."""

    def __init__(self, server):
        self.s, self.charged = server, 0

    def req(self, method, path, body=None, **kw):
        if path not in ("/parse/health", "/metrics"):
            self.charged += 1
        return self.s.req(method, path, body, **kw)

    def job(self, name, params=None):
        r = self.req("POST", f"/parse/jobs/{name}", params or {}, master=True)
        assert r.status_code == 200, r.text
        return r.headers["X-Parse-Job-Status-Id"]

    def wait_job(self, rid, timeout=20):
        deadline = time.time() + timeout
        while time.time() < deadline:
            row = self.req("GET", f"/parse/classes/_JobStatus/{rid}", master=True).json()
            if row["status"] != "running":
                return row
            time.sleep(0.05)
        raise AssertionError(f"job {rid} still running")


def metrics(s, **kw):
    r = s.req("GET", "/metrics", **kw)
    assert r.status_code == 200, r.text
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), r.headers
    return parse_exposition(r.text)


def test_metrics_reflect_the_traffic(server_factory):
    s = server_factory(functions={"f.lua": FUNCTIONS}).start()
    c = Counting(s)
    before = metrics(s)
    for fam in ("moonbase_http_requests_total", "moonbase_http_request_duration_seconds",
                "moonbase_usage_units_total", "moonbase_usage_refused_total", "moonbase_lua_cpu_seconds_total",
                "moonbase_job_runs_total", "moonbase_db_operations_total", "moonbase_http_bytes_total"):
        assert fam in before, fam
    assert before["moonbase_http_request_duration_seconds"]["type"] == "histogram"
    assert value(before, "moonbase_usage_units_total") == 0

    for i in range(3):
        assert c.req("POST", "/parse/classes/Item", {"i": i}).status_code == 201
    for _ in range(2):
        assert c.req("GET", "/parse/classes/Item/missing000").status_code == 404
    assert c.req("GET", "/parse/classes/Item").status_code == 200
    r = c.req("POST", "/parse/functions/burn", {})
    assert r.status_code == 200 and r.json() == {"result": 1}, r.text
    for _ in range(4):
        assert s.req("GET", "/parse/health").status_code == 200

    assert c.wait_job(c.job("okJob"))["status"] == "succeeded"
    assert c.wait_job(c.job("badJob"))["status"] == "failed"
    long_id = c.job("longJob")
    assert c.req("GET", f"/parse/classes/_JobStatus/{c.job('longJob')}", master=True).json()["status"] == "skipped"
    assert c.wait_job(long_id)["status"] == "succeeded"

    m = metrics(s)
    req = "moonbase_http_requests_total"
    assert value(m, req, route="classes.create", status="201") == 3
    assert value(m, req, route="classes.get", status="404") == 2
    assert value(m, req, route="classes.find", status="200") == 1
    assert value(m, req, route="functions.call", status="200") == 1
    assert value(m, req, route="health", status="200") >= 4
    count, total, buckets = hist(m, "moonbase_http_request_duration_seconds", route="functions.call", status="200")
    assert count == 1 and total >= 0.03 and buckets[-1] == ("+Inf", 1), (count, total, buckets)
    assert [b for b in buckets if float(b[0]) < 0.03 and b[1] > 0] == [], buckets   # 30 ms of CPU is ≥ 30 ms
    count, _, _ = hist(m, "moonbase_http_request_duration_seconds", route="classes.create", status="201")
    assert count == 3

    # Units: exactly the charged requests sent (health and metrics are free).
    assert value(m, "moonbase_usage_units_total") == c.charged
    assert value(m, "moonbase_usage_refused_total") == 0
    assert value(m, "moonbase_lua_cpu_seconds_total") >= 0.02
    assert value(m, "moonbase_db_operations_total", op="write") >= 4     # 3 creates + the function's
    assert value(m, "moonbase_db_operations_total", op="read") >= 4
    assert value(m, "moonbase_http_bytes_total", direction="in") > 0
    assert value(m, "moonbase_http_bytes_total", direction="out") > 0

    runs = "moonbase_job_runs_total"
    assert value(m, runs, job="okJob", status="succeeded") == 1
    assert value(m, runs, job="badJob", status="failed") == 1
    assert value(m, runs, job="longJob", status="succeeded") == 1
    assert value(m, runs, job="longJob", status="skipped") == 1

    # Counters only grow; /metrics itself is not charged.
    again = metrics(s)
    assert value(again, "moonbase_usage_units_total") == c.charged
    for name, labels, v in m[req]["samples"]:
        assert value(again, req, **labels) >= v


def test_refused_requests_in_metrics(server_factory):
    s = server_factory(env={"MOONBASE_QUOTA_MONTHLY_REQUESTS": "2"}).start()
    codes = [s.req("GET", "/parse/classes/Item").status_code for _ in range(4)]
    assert codes == [200, 200, 429, 429]
    m = metrics(s)
    assert value(m, "moonbase_usage_units_total") == 2
    assert value(m, "moonbase_usage_refused_total") == 2
    assert value(m, "moonbase_http_requests_total", route="classes.find", status="429") == 2


def test_metrics_require_master(server_factory):
    s = server_factory(args=["--metrics-require-master"]).start()
    for headers in ({}, {"X-Parse-Master-Key": "wrong"}):
        r = s.req("GET", "/metrics", headers=headers)
        assert r.status_code == 403 and r.json()["code"] == 119, r.text
    fams = metrics(s, master=True)
    assert "moonbase_http_requests_total" in fams
    assert s.req("GET", "/parse/health").status_code == 200

    open_server = server_factory().start()
    r = open_server.req("GET", "/metrics", headers={"X-Parse-Application-Id": "anything"})
    assert r.status_code == 200
    parse_exposition(r.text)
