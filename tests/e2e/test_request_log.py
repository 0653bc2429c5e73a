"""The request log against the real binary: one line per answered request (method, path, status,
microseconds, account, request id) on by default, in text and JSON, written by the background
flusher while serving and flushed at shutdown; `--log-level` / `MOONBASE_LOG_LEVEL` filter."""
import json
import re
import subprocess
import time

from conftest import BIN

FUNCS = {"main.lua": """
cloud.define("chatty", function(req)
  log.debug("debug-line " .. req.params.tag)
  log.info("info-line " .. req.params.tag)
  return "ok"
end)
"""}

TEXT_LINE = re.compile(r"^\S+Z INFO \[(?P<rid>[^\]]*)\] (?P<method>[A-Z]+) (?P<path>\S+) (?P<status>\d{3}) "
                       r"(?P<us>\d+)us account=(?P<account>\S+)$")


def request_lines_text(log):
    return [m.groupdict() for m in (TEXT_LINE.match(l) for l in log.splitlines()) if m]


def wait_for(server, needle, timeout=10):
    """The flusher writes buffered lines within about 100 ms; wait (bounded) for one to appear."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        if needle in server.read_log():
            return True
        time.sleep(0.05)
    return False


def test_one_text_line_per_request_with_its_fields(server_factory):
    server = server_factory().start()
    r = server.req("POST", "/parse/classes/Logged", {"a": 1}, headers={"X-Request-Id": "create-req-1"})
    assert r.status_code == 201
    oid = r.json()["objectId"]
    assert server.req("GET", f"/parse/classes/Logged/{oid}", headers={"X-Request-Id": "get-req-2"}).status_code == 200
    assert server.req("GET", "/parse/nothing-here", headers={"X-Request-Id": "missing-req-3"}).status_code == 404
    # A space in the (decoded) path would split the line's fields: it is written as %20.
    assert server.req("GET", "/parse/no%20such", headers={"X-Request-Id": "space-req-4"}).status_code == 404
    # Lines reach stderr while the server runs (background flush), not only at shutdown.
    assert wait_for(server, "[space-req-4]"), server.read_log()[-2000:]
    lines = {l["rid"]: l for l in request_lines_text(server.read_log())}
    c = lines["create-req-1"]
    assert (c["method"], c["path"], c["status"]) == ("POST", "/parse/classes/Logged", "201")
    assert c["account"] == "ip:127.0.0.1"
    assert int(c["us"]) > 0
    g = lines["get-req-2"]
    assert (g["method"], g["path"], g["status"]) == ("GET", f"/parse/classes/Logged/{oid}", "200")
    assert lines["missing-req-3"]["status"] == "404"
    assert (lines["space-req-4"]["path"], lines["space-req-4"]["status"]) == ("/parse/no%20such", "404")


def test_a_signed_in_caller_is_logged_as_its_user(server_factory):
    server = server_factory().start()
    r = server.req("POST", "/parse/users", {"username": "loggy", "password": "pw-123456"})
    assert r.status_code == 201, r.text
    uid, token = r.json()["objectId"], r.json()["sessionToken"]
    assert server.req("GET", "/parse/users/me", session=token, headers={"X-Request-Id": "me-req"}).status_code == 200
    assert wait_for(server, "[me-req]")
    me = [l for l in request_lines_text(server.read_log()) if l["rid"] == "me-req"]
    assert me and me[0]["account"] == f"user:{uid}"


def test_json_lines_parse_and_everything_is_flushed_at_shutdown(server_factory):
    server = server_factory(args=["--log-format", "json"]).start()
    n = 300
    for i in range(n):
        assert server.req("GET", "/parse/health", headers={"X-Request-Id": f"h{i}"}).status_code == 200
    assert server.stop() == 0
    records = [json.loads(l) for l in server.read_log().splitlines() if l.strip()]
    reqs = [r for r in records if r.get("msg") == "request"]
    got = {r["requestId"] for r in reqs}
    assert {f"h{i}" for i in range(n)} <= got, "request lines lost at shutdown"
    h = next(r for r in reqs if r["requestId"] == "h7")
    assert h["level"] == "info" and h["method"] == "GET" and h["path"] == "/parse/health"
    assert h["status"] == 200 and isinstance(h["us"], int) and h["us"] >= 0
    assert h["account"] == "ip:127.0.0.1" and h["time"].endswith("Z")


def test_log_level_warn_drops_request_lines_and_debug_adds_lua_debug(server_factory):
    quiet = server_factory(functions=FUNCS, args=["--log-level", "warn"]).start()
    assert quiet.call("chatty", {"tag": "q1"}).status_code == 200
    assert quiet.stop() == 0
    log = quiet.read_log()
    assert not request_lines_text(log) and "info-line q1" not in log and "debug-line q1" not in log

    default = server_factory(functions=FUNCS).start()
    assert default.call("chatty", {"tag": "d1"}).status_code == 200
    assert default.stop() == 0
    log = default.read_log()
    assert "info-line d1" in log and "debug-line d1" not in log
    assert any(l["path"] == "/parse/functions/chatty" for l in request_lines_text(log))

    verbose = server_factory(functions=FUNCS, env={"MOONBASE_LOG_LEVEL": "debug"}).start()
    assert verbose.call("chatty", {"tag": "v1"}).status_code == 200
    assert verbose.stop() == 0
    log = verbose.read_log()
    assert "debug-line v1" in log and "info-line v1" in log
    assert any(l["path"] == "/parse/functions/chatty" for l in request_lines_text(log))


def test_a_bad_log_level_is_a_usage_error(tmp_path):
    for args, env in ((["--log-level", "loud"], {}), ([], {"MOONBASE_LOG_LEVEL": "loud"})):
        p = subprocess.run([BIN, "serve", "--port", "0", "--data", str(tmp_path / "d")] + args,
                           env=dict(env, PATH="/usr/bin:/bin", MOONBASE_MASTER_KEY="k" * 32),
                           capture_output=True, timeout=30)
        assert p.returncode == 2, (p.returncode, p.stderr[-500:])
        assert b"debug, info or warn" in p.stderr
