"""Bad input of every kind against the real binary (issue 2 Done-when): each
gets its 4xx with a Parse `{code, error}` body (or Parse's bare `{"error":"unauthorized"}`), and
the data is intact afterwards: the canary objects are unchanged, the row count is what the good
requests made, and no table was created or dropped by an injection attempt."""
import json
import os
import socket
import sqlite3
import urllib.parse

import pytest
import requests

from conftest import APP_ID, MASTER_KEY, Server

CLASS = "Canary"


@pytest.fixture(scope="module")
def srv():
    s = Server().start()
    yield s
    s.stop()
    s.cleanup()


@pytest.fixture(scope="module")
def canary(srv):
    ids = []
    for i in range(3):
        r = srv.req("POST", f"/parse/classes/{CLASS}", {"name": f"c{i}", "n": i, "tags": ["t"],
                                                          "when": {"__type": "Date", "iso": "2026-05-01T00:00:00.000Z"},
                                                          "loc": {"__type": "GeoPoint", "latitude": 1.5, "longitude": 2.5}})
        assert r.status_code == 201
        ids.append(r.json()["objectId"])
    snapshot = srv.req("GET", f"/parse/classes/{CLASS}", params={"order": "n"}).json()["results"]
    return ids, snapshot, schema_fields(srv)


def schema_fields(srv):
    r = srv.req("GET", f"/parse/schemas/{CLASS}", master=True)
    assert r.status_code == 200, r.text
    return r.json()["fields"]


def parse_error(r, status, code):
    """Asserts a Parse error answer: status, JSON body with exactly {code, error}."""
    assert r.status_code == status, (r.status_code, r.text)
    assert r.headers.get("Content-Type", "").startswith("application/json"), r.headers
    body = r.json()
    assert set(body) == {"code", "error"}, body
    assert body["code"] == code, body
    assert isinstance(body["error"], str) and body["error"]
    return body


def tables(srv):
    db = sqlite3.connect(f"file:{os.path.join(srv.data, 'moonbase.sqlite')}?mode=ro", uri=True, timeout=10)
    try:
        return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
    finally:
        db.close()


def assert_intact(srv, canary):
    _, snapshot, fields = canary
    now = srv.req("GET", f"/parse/classes/{CLASS}", params={"order": "n"}).json()["results"]
    assert now == snapshot
    # A refused write adds no field to the schema either (nothing half-written).
    assert schema_fields(srv) == fields


def raw_request(srv, data, timeout=10):
    """Sends raw bytes and returns the whole answer (the server closes after an error)."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not chunk:
                break
            out += chunk
            if b"\r\n\r\n" in out:
                head, _, rest = out.partition(b"\r\n\r\n")
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:") and len(rest) >= int(line.split(b":")[1]):
                        return out
    return out


def test_malformed_json_and_non_object_bodies(srv, canary):
    for raw in ['{"a":', "{bad}", "[1,2]", '"text"', "nul", '{"a":1}}', '{"a":"\udc00"}'.encode("utf-8", "surrogatepass")]:
        parse_error(srv.req("POST", f"/parse/classes/{CLASS}", raw=raw), 400, 107)
        parse_error(srv.req("PUT", f"/parse/classes/{CLASS}/{canary[0][0]}", raw=raw), 400, 107)
    parse_error(srv.req("POST", "/parse/batch", raw="{not json"), 400, 107)
    parse_error(srv.req("POST", "/parse/batch", {"requests": {}}), 400, 107)
    # A sub-request whose body is not an object is refused, not applied as an empty object.
    r = srv.req("POST", "/parse/batch", {"requests": [{"method": "POST", "path": f"/classes/{CLASS}", "body": b}
                                                      for b in ["garbage", [1], 5, True]] + ["notobj", {"method": 5, "path": "/classes/X"}]})
    assert r.status_code == 200 and [x["error"]["code"] for x in r.json()] == [107] * 6, r.text
    parse_error(srv.req("GET", f"/parse/classes/{CLASS}", params={"where": "{bad"}), 400, 107)
    parse_error(srv.req("GET", f"/parse/classes/{CLASS}", params={"where": "[1]"}), 400, 102)
    assert_intact(srv, canary)


def test_unknown_operators(srv, canary):
    for where in [{"n": {"$foo": 1}}, {"$nor": "x"}, {"n": {"$regex": "a", "$options": "z"}},
                  {"$or": "x"}, {"n": {"$in": 5}}]:
        parse_error(srv.req("GET", f"/parse/classes/{CLASS}", params={"where": json.dumps(where)}), 400, 102)
    r = srv.req("PUT", f"/parse/classes/{CLASS}/{canary[0][0]}", {"n": {"__op": "Frobnicate"}})
    parse_error(r, 400, 111)
    # A regex pattern over 256 bytes is refused.
    parse_error(srv.req("GET", f"/parse/classes/{CLASS}", params={"where": json.dumps({"name": {"$regex": "a" * 300}})}), 400, 102)
    assert_intact(srv, canary)


@pytest.mark.sqlite_only("compares the SQLite file's table list")
def test_bad_class_and_field_names_including_injection(srv, canary):
    before = tables(srv)
    bad_classes = ['Post"; DROP TABLE Canary; --', "Post'", "_Foo", "1abc", "a-b", "a.b", "x" * 200]
    for c in bad_classes:
        q = urllib.parse.quote(c, safe="")
        parse_error(srv.req("POST", f"/parse/classes/{q}", {"a": 1}), 400, 103)
        parse_error(srv.req("GET", f"/parse/classes/{q}"), 400, 103)
        parse_error(srv.req("PUT", f"/parse/classes/{q}/abcdefghij", {"a": 1}), 400, 103)
    bad_fields = ['a.b"', 'x"); DROP TABLE Canary; --', "$where", "a b", "", "1a", "a..b", "ok.", "é"]
    for f in bad_fields:
        parse_error(srv.req("POST", f"/parse/classes/{CLASS}", {"good": 1, f: 1}), 400, 105)
        parse_error(srv.req("PUT", f"/parse/classes/{CLASS}/{canary[0][0]}", {f: 1}), 400, 105)
        if f:
            # A top-level `$` key in `where` is an operator (unknown → 102); other bad names → 105.
            code = 102 if f.startswith("$") else 105
            parse_error(srv.req("GET", f"/parse/classes/{CLASS}", params={"where": json.dumps({f: 1})}), 400, code)
            parse_error(srv.req("GET", f"/parse/classes/{CLASS}", params={"order": f}), 400, 105)
            parse_error(srv.req("GET", f"/parse/classes/{CLASS}", params={"keys": f}), 400, 105)
            parse_error(srv.req("GET", f"/parse/classes/{CLASS}/{canary[0][0]}", params={"include": f}), 400, 105)
    # Reserved names.
    parse_error(srv.req("POST", f"/parse/classes/{CLASS}", {"objectId": "abcdefghij"}), 400, 105)
    # Values are data, never SQL.
    evil = "x'); DROP TABLE Canary; --"
    r = srv.req("GET", f"/parse/classes/{CLASS}", params={"where": json.dumps({"name": evil})})
    assert r.status_code == 200 and r.json()["results"] == []
    r = srv.req("GET", f"/parse/classes/{CLASS}", params={"where": json.dumps({"name": {"$regex": "' OR 1=1 --"}})})
    assert r.status_code == 200 and r.json()["results"] == []
    assert tables(srv) == before
    assert_intact(srv, canary)


def test_wrong_types(srv, canary):
    oid = canary[0][0]
    for body in [{"n": "one"}, {"name": 5}, {"tags": {"a": 1}}, {"when": "yesterday"}, {"loc": [1, 2]},
                 {"when": {"__type": "Date", "iso": "not a date"}},
                 {"loc": {"__type": "GeoPoint", "latitude": 91, "longitude": 0}},
                 {"loc": {"__type": "GeoPoint", "latitude": 0, "longitude": 181}},
                 {"x": {"__type": "Mystery"}},
                 {"n": {"__op": "Increment", "amount": "x"}},
                 {"name": {"__op": "Increment", "amount": 1}},
                 {"n": {"__op": "Add", "objects": [1]}}]:
        parse_error(srv.req("PUT", f"/parse/classes/{CLASS}/{oid}", body), 400, 111)
        parse_error(srv.req("POST", f"/parse/classes/{CLASS}", body), 400, 111)
    # Queries comparing a typed field with a value of another type.
    for where in [{"n": {"$lt": "5"}}, {"when": {"$gt": "2026"}}, {"n": {"$in": [1, "a"]}}, {"name": {"$gte": 3}}]:
        parse_error(srv.req("GET", f"/parse/classes/{CLASS}", params={"where": json.dumps(where)}), 400, 111)
    # Malformed geo constraints.
    pt = {"__type": "GeoPoint", "latitude": 1, "longitude": 1}
    for where in [{"loc": {"$nearSphere": "x"}}, {"loc": {"$nearSphere": pt, "$maxDistanceInMiles": -1}},
                  {"loc": {"$within": {"$box": [1, 2]}}}, {"loc": {"$geoWithin": {"$centerSphere": [pt, "x"]}}},
                  {"loc": {"$nearSphere": {"__type": "GeoPoint", "latitude": 95, "longitude": 0}}}]:
        parse_error(srv.req("GET", f"/parse/classes/{CLASS}", params={"where": json.dumps(where)}), 400, 102)
    for acl in ["everyone", [], {"*": True}, {"*": {"read": "yes"}}, {"*": {"fly": True}}, {"bad id!": {"read": True}}]:
        parse_error(srv.req("POST", f"/parse/classes/{CLASS}", {"name": "acl", "ACL": acl}), 400, 123)
        parse_error(srv.req("PUT", f"/parse/classes/{CLASS}/{oid}", {"ACL": acl}), 400, 123)
    assert_intact(srv, canary)


def test_body_over_one_mib_is_413(srv, canary):
    big = json.dumps({"name": "x" * (1 << 20)})
    parse_error(srv.req("POST", f"/parse/classes/{CLASS}", raw=big), 413, 130)

    def chunks():
        for _ in range(1100):
            yield b"x" * 1024

    r = requests.post(srv.url + f"/parse/classes/{CLASS}", data=chunks(), timeout=30,
                      headers={"X-Parse-Application-Id": APP_ID, "Content-Type": "application/json"})
    parse_error(r, 413, 130)
    # Just under the limit is fine.
    ok = json.dumps({"blob": "y" * ((1 << 20) - 64)})
    r = srv.req("POST", f"/parse/classes/{CLASS}Big", raw=ok)
    assert r.status_code == 201, r.text
    assert_intact(srv, canary)


def test_headers_over_16_kib_are_431_with_a_parse_body(srv, canary):
    head = f"GET /parse/classes/{CLASS} HTTP/1.1\r\nHost: x\r\nX-Parse-Application-Id: {APP_ID}\r\n".encode()
    answer = raw_request(srv, head + b"X-Big: " + b"a" * (17 << 10) + b"\r\n\r\n")
    status_line, _, rest = answer.partition(b"\r\n")
    assert status_line.startswith(b"HTTP/1.1 431"), answer[:200]
    body = json.loads(answer.partition(b"\r\n\r\n")[2])
    assert body["code"] == 107 and body["error"]
    # Many fields adding up past the limit count too.
    answer = raw_request(srv, head + b"".join(b"X-H%d: %s\r\n" % (i, b"b" * 1000) for i in range(18)) + b"\r\n")
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["code"] == 107
    # Far beyond the limit libmicrohttpd's own pool overflows first: still 431, never a crash.
    answer = raw_request(srv, head + b"X-Huge: " + b"c" * (200 << 10) + b"\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    # Under the limit is fine.
    r = srv.req("GET", f"/parse/classes/{CLASS}", headers={"X-Ok": "d" * (12 << 10)})
    assert r.status_code == 200
    assert_intact(srv, canary)


def test_application_id_and_keys(srv, canary):
    url = srv.url + f"/parse/classes/{CLASS}"
    for headers in [{}, {"X-Parse-Application-Id": "wrong"}, {"X-Parse-Application-Id": ""},
                    {"X-Parse-Application-Id": APP_ID, "X-Parse-Master-Key": "wrong-master"}]:
        for method, body in [("GET", None), ("POST", '{"name":"intruder"}')]:
            r = requests.request(method, url, data=body, headers=headers, timeout=10)
            assert r.status_code == 403 and r.json() == {"error": "unauthorized"}, (headers, r.text)
    # Master-only routes and classes without the master key.
    master_only = [("GET", "/parse/schemas/Canary"), ("PUT", "/parse/schemas/Canary"), ("POST", "/parse/jobs/anything"),
                   ("GET", "/admin/usage"), ("GET", "/admin/functions"), ("GET", "/admin/jobs"),
                   ("DELETE", "/parse/files/0123456789abcdef0123456789abcdef_a.txt"),
                   ("GET", "/parse/classes/_Session"), ("GET", "/parse/classes/_JobStatus"), ("GET", "/parse/classes/_Usage"),
                   ("POST", "/parse/classes/_JobStatus")]
    for method, path in master_only:
        r = srv.req(method, path, {} if method in ("PUT", "POST") else None)
        assert r.status_code == 403, (path, r.text)
        assert r.json() == {"code": 119, "error": "unauthorized: master key is required"}, (path, r.text)
    # With the master key they work.
    assert srv.req("GET", "/parse/schemas/Canary", master=True).status_code == 200
    assert srv.req("GET", "/parse/classes/_Session", master=True).status_code == 200
    # Health needs no keys.
    assert requests.get(srv.url + "/parse/health", timeout=10).json() == {"status": "ok"}
    assert_intact(srv, canary)


def test_limit_skip_validation(srv, canary):
    for name in ["limit", "skip"]:
        for bad in ["-1", "abc", "1.5", "", "1e3", "0x10", " 5"]:
            parse_error(srv.req("GET", f"/parse/classes/{CLASS}", params={name: bad}), 400, 102)
    # Digits beyond 64 bits are still a number: a limit is capped, a skip is above its maximum.
    assert len(srv.req("GET", f"/parse/classes/{CLASS}", params={"limit": "99999999999999999999"}).json()["results"]) == 3
    parse_error(srv.req("GET", f"/parse/classes/{CLASS}", params={"skip": "99999999999999999999"}), 400, 102)
    parse_error(srv.req("GET", f"/parse/classes/{CLASS}", params={"skip": "99999999999"}), 400, 102)
    # In a batch GET the same rules hold.
    r = srv.req("POST", "/parse/batch", {"requests": [{"method": "GET", "path": f"/classes/{CLASS}", "body": {"limit": -1}}]})
    assert r.json()[0]["error"]["code"] == 102
    # A huge limit is capped, not refused.
    assert len(srv.req("GET", f"/parse/classes/{CLASS}", params={"limit": "2000000"}).json()["results"]) == 3
    r = srv.req("GET", f"/parse/classes/{CLASS}", params={"limit": "2", "skip": "1", "order": "n"})
    assert [o["n"] for o in r.json()["results"]] == [1, 2]


def test_unknown_endpoints_and_methods(srv, canary):
    for path in ["/parse/nothing", "/parse/classes", "/nowhere", "/parse/classes/Canary/abc/extra"]:
        r = srv.req("GET", path)
        assert r.status_code == 404, (path, r.status_code)
        assert r.json()["code"] == 101
    r = srv.req("PATCH", f"/parse/classes/{CLASS}/{canary[0][0]}", {"n": 1})
    assert r.status_code == 405 and "PUT" in r.headers.get("Allow", "")
    assert_intact(srv, canary)


def test_session_tokens(srv, canary):
    for token in ["r:bogus", "x" * 64, "'; DROP TABLE _Session; --"]:
        parse_error(srv.req("GET", f"/parse/classes/{CLASS}", session=token), 400, 209)
        parse_error(srv.req("POST", f"/parse/classes/{CLASS}", {"name": "no"}, session=token), 400, 209)
        r = requests.get(srv.url + f"/parse/classes/{CLASS}", timeout=10,
                         headers={"X-Parse-Application-Id": APP_ID, "Authorization": "Bearer " + token})
        parse_error(r, 400, 209)
    # After logout the token is invalid too.
    r = srv.req("POST", "/parse/users", {"username": "erruser", "password": "pw-123456"})
    token = r.json()["sessionToken"]
    assert srv.req("GET", "/parse/users/me", session=token).status_code == 200
    assert srv.req("POST", "/parse/logout", {}, session=token).status_code == 200
    parse_error(srv.req("GET", "/parse/users/me", session=token), 400, 209)
    assert_intact(srv, canary)


def test_everything_still_works_afterwards(srv, canary):
    """The final check: every good path still answers and the canaries are untouched."""
    assert_intact(srv, canary)
    r = srv.req("GET", f"/parse/classes/{CLASS}", params={"limit": "0", "count": "1"})
    assert r.json() == {"results": [], "count": 3}
    r = srv.req("POST", f"/parse/classes/{CLASS}", {"name": "after", "n": 10})
    assert r.status_code == 201
    assert srv.req("DELETE", f"/parse/classes/{CLASS}/{r.json()['objectId']}").status_code == 200
    assert srv.proc.poll() is None
    assert "panic" not in srv.read_log().lower() and "fatal error" not in srv.read_log().lower()
