"""Connections and answers at the HTTP edge, against the real binary: what libmicrohttpd would
refuse itself still gets a Parse `{code, error}` body with one response head; requests with
many query parameters or large heads are answered at once; reserved class names are 103; slow
senders are cut at the header deadline; one address cannot take every connection."""
import json
import socket
import time

import pytest

from conftest import Server


@pytest.fixture(scope="module")
def srv():
    s = Server(args=["--header-timeout", "1", "--max-connections", "64", "--max-connections-per-ip", "8"]).start()
    yield s
    s.stop()
    s.cleanup()


def exchange(port, raw, timeout=10, source="127.0.0.1"):
    """Sends raw bytes, reads until the server closes; returns (bytes, seconds)."""
    s = socket.socket()
    s.bind((source, 0))
    s.settimeout(timeout)
    s.connect(("127.0.0.1", port))
    t = time.time()
    data = b""
    try:
        s.sendall(raw)
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    except ConnectionResetError:
        pass
    finally:
        s.close()
    return data, time.time() - t


def one_response(data):
    """Parses exactly one HTTP response and asserts nothing follows it (no second head)."""
    head, sep, rest = data.partition(b"\r\n\r\n")
    assert sep, data[:200]
    lines = head.split(b"\r\n")
    status = int(lines[0].split()[1])
    headers = {}
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        headers[k.strip().lower().decode()] = v.strip().decode()
    n = int(headers["content-length"])
    body = rest[:n]
    assert rest[n:] == b"", f"bytes after the response: {rest[n:][:120]!r}"
    assert data.count(b"HTTP/1.1 ") == 1
    return status, headers, body


def parse_error(data, status):
    st, headers, body = one_response(data)
    assert st == status, data[:300]
    assert headers["content-type"].startswith("application/json")
    j = json.loads(body)
    assert set(j) == {"code", "error"} and isinstance(j["code"], int) and j["error"]
    return j


def get(path, extra=b""):
    return b"GET " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + extra + b"\r\n"


def test_many_query_parameters_are_answered_at_once(srv):
    q = b"&".join(b"p%d=1" % i for i in range(500))
    data, secs = exchange(srv.port, get(b"/parse/health?" + q))
    st, _, body = one_response(data)
    assert st == 200 and json.loads(body)["status"] == "ok"
    assert secs < 5
    data, secs = exchange(srv.port, get(b"/parse/health?" + b"&".join(b"a" for _ in range(6000))))
    assert one_response(data)[0] == 200 and secs < 5


@pytest.mark.parametrize("size", [17_000, 30_000, 32_700, 40_000, 200_000])
def test_large_heads_get_431_with_a_parse_body(srv, size):
    data, secs = exchange(srv.port, get(b"/parse/health", b"X-Big: " + b"a" * size + b"\r\n"))
    assert parse_error(data, 431)["code"] == 107
    assert secs < 5


def test_many_small_headers_get_431_with_a_parse_body(srv):
    extra = b"".join(b"h%d: v\r\n" % i for i in range(3000))
    data, _ = exchange(srv.port, get(b"/parse/health", extra))
    parse_error(data, 431)


def test_long_uri_gets_414_with_a_parse_body(srv):
    data, _ = exchange(srv.port, get(b"/" + b"a" * 60_000))
    assert parse_error(data, 414)["code"] == 107


def test_unsupported_version_gets_505_with_a_parse_body(srv):
    data, _ = exchange(srv.port, b"GET / HTTP/2.5\r\nHost: x\r\n\r\n")
    parse_error(data, 505)


def test_broken_chunked_body_gets_400_with_a_parse_body(srv):
    raw = b"POST /parse/classes/A HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n"
    data, _ = exchange(srv.port, raw)
    parse_error(data, 400)


@pytest.mark.parametrize("value", [b"abc", b"-1", b"18446744073709551616", b"99999999999999999999999", b""])
def test_unparseable_content_length_never_gets_a_doubled_head(srv, value):
    raw = b"POST /parse/classes/A HTTP/1.1\r\nHost: x\r\nContent-Length: " + value + b"\r\n\r\n{}"
    data, secs = exchange(srv.port, raw)
    # Closed without an answer (libmicrohttpd 0.9.75 would send its head twice), or a Parse 4xx.
    if data:
        assert 400 <= one_response(data)[0] < 500
    assert secs < 5


def test_content_length_over_the_limit_is_413_from_moonbase(srv):
    raw = b"POST /parse/classes/A HTTP/1.1\r\nHost: x\r\nContent-Length: 999999999999\r\n\r\n"
    data, _ = exchange(srv.port, raw)
    assert parse_error(data, 413)["code"] == 130


@pytest.mark.parametrize("name", ["sqlite_master", "sqlite_sequence", "SQLite_stat1", "sqlite_x", "_mb_schema", "_mb_usage"])
def test_reserved_class_names_are_103(srv, name):
    for method, path, body in [("POST", f"/parse/classes/{name}", {"a": 1}), ("GET", f"/parse/classes/{name}", None),
                               ("POST", f"/parse/schemas/{name}", {"className": name})]:
        r = srv.req(method, path, body, master=True)
        assert r.status_code == 400, (method, path, r.text)
        assert r.json()["code"] == 103


def test_slow_sender_is_cut_at_the_header_deadline(srv):
    s = socket.create_connection(("127.0.0.1", srv.port))
    s.setblocking(False)
    head = b"GET /parse/health HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 200
    t0 = time.time()
    cut = None
    for i in range(len(head)):
        if time.time() - t0 > 15:
            break
        try:
            s.send(head[i:i + 1])
            if s.recv(1) == b"":
                cut = time.time() - t0
                break
        except BlockingIOError:
            pass
        except OSError:
            cut = time.time() - t0
            break
        time.sleep(0.2)
    s.close()
    assert cut is not None and 0.8 < cut < 6
    r = srv.req("GET", "/parse/health")
    assert r.status_code == 200


def test_one_address_cannot_take_every_connection(srv):
    held = []
    try:
        for _ in range(20):
            s = socket.socket()
            s.bind(("127.0.0.2", 0))
            s.connect(("127.0.0.1", srv.port))
            held.append(s)
        time.sleep(0.3)
        alive = 0
        for s in held:
            s.setblocking(False)
            try:
                alive += 0 if s.recv(1) == b"" else 1
            except BlockingIOError:
                alive += 1
            except OSError:
                pass
        assert alive <= 8
        data, secs = exchange(srv.port, get(b"/parse/health"), source="127.0.0.1")
        assert one_response(data)[0] == 200 and secs < 2
    finally:
        for s in held:
            s.close()


BUSY_LUA = """
cloud.define("busy", {timeoutMs = 5000}, function(req)
  local t = time.now()
  while time.now() - t < 2500 do end
  return "done"
end)
"""


def test_health_reports_saturation_while_every_worker_is_busy(server_factory):
    import threading
    srv = server_factory(functions={"main.lua": BUSY_LUA}, args=["--workers", "1"]).start()
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("r", srv.call("busy")))
    t.start()
    saw = None
    deadline = time.time() + 2.4
    while time.time() < deadline:
        h = srv.req("GET", "/parse/health")
        if h.status_code == 503:
            saw = h.json()
            break
        time.sleep(0.05)
    t.join()
    assert out["r"].status_code == 200 and out["r"].json()["result"] == "done"
    assert saw is not None and saw["status"] == "saturated"
    assert saw["workers"] == 1 and saw["busy"] == 1 and saw["problems"] == ["saturated"]
    # The worker hands the answer over before it leaves the job, so a check sent the instant the
    # answer arrives may still find it busy: healthy again within a moment.
    health = None
    for _ in range(40):
        health = srv.req("GET", "/parse/health").json()
        if health == {"status": "ok"}:
            break
        time.sleep(0.05)
    assert health == {"status": "ok"}


def test_metrics_count_the_edge_refusals(srv):
    exchange(srv.port, b"GET / HTTP/2.5\r\nHost: x\r\n\r\n")
    exchange(srv.port, b"POST /parse/classes/A HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n")
    text = srv.req("GET", "/metrics").text
    values = {}
    for line in text.splitlines():
        if line.startswith("moonbase_") and " " in line:
            name, value = line.rsplit(" ", 1)
            values[name] = float(value)
    assert values["moonbase_http_library_errors_total"] >= 1
    assert values["moonbase_http_bad_content_length_total"] >= 1
    assert values["moonbase_http_header_deadline_cuts_total"] >= 1  # the slow sender above
    assert values["moonbase_workers_stuck"] == 0 and "moonbase_workers_replaced_total" in values


def test_connect_is_never_answered_with_a_tunnel(srv):
    """CONNECT to any path (even the any-method health check) gets a 405 with a Parse body and a
    Content-Length, never a 2xx that would turn the connection into a tunnel."""
    data, _ = exchange(srv.port, b"CONNECT /parse/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 405"), data[:200]
    assert b"content-length" in head.lower()
    assert json.loads(body)["code"] == 108
    assert data.count(b"HTTP/1.1") == 1
