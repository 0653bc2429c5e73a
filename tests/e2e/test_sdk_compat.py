"""Requests exactly as the official Parse SDKs send them (each answered 400/405 before):
health on POST, list parameters as JSON arrays, queries as POST with `_method`, the JavaScript
SDK's text/plain envelope, CORS for browsers, and `Cache-Control: no-store` on data."""
import json

import pytest
import requests

from conftest import APP_ID, MASTER_KEY


@pytest.fixture
def srv(server):
    s = server
    author = s.req("POST", "/parse/classes/Author", {"name": "Ann", "secret": "s1"}).json()["objectId"]
    ptr = {"__type": "Pointer", "className": "Author", "objectId": author}
    for n in [3, 1, 2]:
        assert s.req("POST", "/parse/classes/Score", {"count": n, "author": ptr, "note": f"n{n}"}).status_code == 201
    s.author = author
    return s


def test_health_answers_any_method(server):
    for method in ["GET", "POST", "PUT", "HEAD"]:
        r = requests.request(method, server.url + "/parse/health", timeout=30)
        assert r.status_code == 200, (method, r.text)
    # The Swift SDK's health check: POST with its headers and an empty JSON body.
    r = requests.post(server.url + "/parse/health", data="{}", timeout=30,
                      headers={"X-Parse-Application-Id": APP_ID, "Content-Type": "application/json"})
    assert r.json() == {"status": "ok"}


def test_list_parameters_as_json_arrays(srv):
    # What the Swift SDK puts in a URL: a Swift array's description.
    r = srv.req("GET", "/parse/classes/Score", params={"order": '["-count"]', "include": '["author"]',
                                                        "keys": '["count","author"]'})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [o["count"] for o in res] == [3, 2, 1]
    assert res[0]["author"]["name"] == "Ann" and "note" not in res[0]
    r = srv.req("GET", "/parse/classes/Score", params={"order": '["count", "-createdAt"]',
                                                        "excludeKeys": '["note"]'})
    res = r.json()["results"]
    assert [o["count"] for o in res] == [1, 2, 3] and all("note" not in o for o in res), res
    oid = res[0]["objectId"]
    r = srv.req("GET", f"/parse/classes/Score/{oid}", params={"include": '["author"]', "excludeKeys": '["note"]'})
    assert r.status_code == 200, r.text
    assert r.json()["author"]["name"] == "Ann" and "note" not in r.json()
    r = srv.req("GET", f"/parse/classes/Score/{oid}", params={"excludeKeys": "note,author"})
    assert set(r.json()) == {"objectId", "count", "createdAt", "updatedAt"}, r.json()
    r = srv.req("GET", "/parse/classes/Score", params={"excludeKeys": "bad-name"})
    assert r.status_code == 400 and r.json()["code"] == 105


def test_query_sent_as_post_with_method_get(srv):
    # The Swift SDK's query body (application/json).
    body = {"_method": "GET", "where": {"count": {"$gte": 2}}, "limit": 10, "order": ["-count"],
            "include": ["author"], "keys": ["count", "author"], "count": True}
    r = srv.req("POST", "/parse/classes/Score", body)
    assert r.status_code == 200, r.text
    j = r.json()
    assert [o["count"] for o in j["results"]] == [3, 2] and j["count"] == 2, j
    assert j["results"][0]["author"]["name"] == "Ann"
    # Nothing was created by the POST.
    assert len(srv.req("GET", "/parse/classes/Score").json()["results"]) == 3
    # Single-object GET, PUT and DELETE through _method.
    oid = j["results"][0]["objectId"]
    r = srv.req("POST", f"/parse/classes/Score/{oid}", {"_method": "GET", "include": "author"})
    assert r.status_code == 200 and r.json()["author"]["name"] == "Ann", r.text
    r = srv.req("POST", f"/parse/classes/Score/{oid}", {"_method": "PUT", "count": 30})
    assert r.status_code == 200 and "updatedAt" in r.json(), r.text
    assert srv.req("GET", f"/parse/classes/Score/{oid}").json()["count"] == 30
    r = srv.req("POST", f"/parse/classes/Score/{oid}", {"_method": "DELETE"})
    assert r.status_code == 200, r.text
    assert srv.req("GET", f"/parse/classes/Score/{oid}").status_code == 404


def js_sdk(s, path, payload, method_override=None, session=None, master=False, origin=None):
    """A request as the Parse JavaScript SDK's RESTController sends it: always POST, text/plain,
    keys in the body."""
    body = dict(payload)
    if method_override:
        body["_method"] = method_override
    body["_ApplicationId"] = APP_ID
    body["_ClientVersion"] = "js5.3.0"
    body["_InstallationId"] = "c0ffee00-0000-4000-8000-000000000000"
    if master:
        body["_MasterKey"] = MASTER_KEY
    if session:
        body["_SessionToken"] = session
    headers = {"Content-Type": "text/plain"}
    if origin:
        headers["Origin"] = origin
    return requests.post(s.url + "/parse/" + path, data=json.dumps(body), headers=headers, timeout=30)


def test_javascript_sdk_text_plain_envelope(srv):
    r = js_sdk(srv, "users", {"username": "jo", "password": "pw-secret"})
    assert r.status_code == 201, r.text
    token = r.json()["sessionToken"]
    r = js_sdk(srv, "users/me", {}, "GET", session=token)
    assert r.status_code == 200 and r.json()["username"] == "jo", r.text
    r = js_sdk(srv, "classes/Note", {"text": "hi"}, session=token)
    assert r.status_code == 201, r.text
    oid = r.json()["objectId"]
    note = srv.req("GET", f"/parse/classes/Note/{oid}", master=True).json()
    assert set(note) == {"objectId", "text", "ACL", "createdAt", "updatedAt"}, note   # no envelope keys stored
    r = js_sdk(srv, "classes/Score", {"where": {"count": 1}, "order": "-count"}, "GET")
    assert [o["count"] for o in r.json()["results"]] == [1], r.text
    r = js_sdk(srv, f"classes/Note/{oid}", {"text": "edited"}, "PUT", session=token)
    assert r.status_code == 200, r.text
    r = js_sdk(srv, "login", {"username": "jo", "password": "pw-secret"}, "GET")
    assert r.status_code == 200 and r.json()["sessionToken"], r.text
    # Master-only endpoints honour _MasterKey; a wrong one is refused like the header.
    assert js_sdk(srv, "schemas/Score", {}, "GET", master=True).status_code == 200
    r = js_sdk(srv, "schemas/Score", {}, "GET")
    assert (r.status_code, r.json()["code"]) == (403, 119)
    r = requests.post(srv.url + "/parse/classes/Score", data=json.dumps({"_method": "GET"}),
                      headers={"Content-Type": "text/plain"}, timeout=30)
    assert (r.status_code, r.json()) == (403, {"error": "unauthorized"})
    r = js_sdk(srv, f"classes/Note/{oid}", {}, "DELETE", session=token)
    assert r.status_code == 200, r.text
    # _ContentType replaces the text/plain content type.
    r = js_sdk(srv, "functions/missing", {"_ContentType": "application/json"})
    assert r.json()["code"] == 141


def test_javascript_key_checked_against_the_rest_key(server_factory):
    s = server_factory(env={"MOONBASE_REST_KEY": "rk-1"}).start()
    body = {"_method": "GET", "_ApplicationId": APP_ID, "_JavaScriptKey": "rk-1"}
    r = requests.post(s.url + "/parse/classes/X", data=json.dumps(body), headers={"Content-Type": "text/plain"}, timeout=30)
    assert r.status_code == 200, r.text
    body["_JavaScriptKey"] = "wrong"
    r = requests.post(s.url + "/parse/classes/X", data=json.dumps(body), headers={"Content-Type": "text/plain"}, timeout=30)
    assert r.status_code == 403


def test_cors_default_allows_any_origin(srv):
    o = "https://app.example.com"
    r = requests.options(srv.url + "/parse/classes/Score", timeout=30, headers={
        "Origin": o, "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "x-parse-application-id, x-parse-session-token, content-type"})
    assert r.status_code == 200
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    allowed = {h.strip().lower() for h in r.headers["Access-Control-Allow-Headers"].split(",")}
    assert {"x-parse-application-id", "x-parse-session-token", "x-parse-master-key", "x-parse-rest-api-key",
            "x-parse-installation-id", "x-parse-client-version", "content-type"} <= allowed
    assert "PUT" in r.headers["Access-Control-Allow-Methods"]
    r = js_sdk(srv, "classes/Score", {}, "GET", origin=o)
    assert r.headers["Access-Control-Allow-Origin"] == "*"
    exposed = {h.strip().lower() for h in r.headers["Access-Control-Expose-Headers"].split(",")}
    assert {"x-parse-job-status-id", "ratelimit-limit", "ratelimit-remaining", "ratelimit-reset", "x-request-id"} <= exposed
    # Errors carry the headers too, so the browser can read the Parse error.
    r = requests.get(srv.url + "/parse/classes/Score", headers={"Origin": o}, timeout=30)
    assert r.status_code == 403 and r.headers["Access-Control-Allow-Origin"] == "*"
    # Never on the dashboard's paths.
    for path in ["/dashboard", "/dashboard/apps"]:
        r = requests.options(srv.url + path, headers={"Origin": o, "Access-Control-Request-Method": "GET"}, timeout=30)
        assert "Access-Control-Allow-Origin" not in r.headers, path
        r = requests.get(srv.url + path, headers={"Origin": o}, timeout=30)
        assert "Access-Control-Allow-Origin" not in r.headers, path


@pytest.mark.parametrize("how", ["env", "flag"])
def test_cors_origins_configured(server_factory, how):
    origins = "https://a.example.com, https://b.example.com"
    kw = {"env": {"MOONBASE_CORS_ORIGINS": origins}} if how == "env" else {"args": ["--cors-origins", origins]}
    s = server_factory(**kw).start()
    for o in ["https://a.example.com", "https://b.example.com"]:
        r = requests.options(s.url + "/parse/classes/X", headers={"Origin": o, "Access-Control-Request-Method": "GET"}, timeout=30)
        assert r.headers["Access-Control-Allow-Origin"] == o and "Origin" in r.headers["Vary"]
        r = s.req("GET", "/parse/classes/X", headers={"Origin": o})
        assert r.headers["Access-Control-Allow-Origin"] == o
    r = s.req("GET", "/parse/classes/X", headers={"Origin": "https://evil.example.com"})
    assert r.status_code == 200 and "Access-Control-Allow-Origin" not in r.headers
    r = requests.options(s.url + "/parse/classes/X", headers={"Origin": "https://evil.example.com"}, timeout=30)
    assert "Access-Control-Allow-Origin" not in r.headers


def test_cache_control_no_store_on_data(srv):
    for method, path, kw in [("GET", "/parse/classes/Score", {}), ("GET", "/parse/classes/Score/nope", {}),
                             ("POST", "/parse/classes/Score", {"body": {"count": 9}}), ("GET", "/parse/users/me", {}),
                             ("POST", "/parse/functions/none", {}), ("GET", "/admin/jobs", {"master": True})]:
        r = srv.req(method, path, **kw)
        assert r.headers.get("Cache-Control") == "no-store", (method, path, r.status_code, r.headers)
    up = srv.req("POST", "/parse/files/a.txt", raw=b"hello", headers={"Content-Type": "text/plain"})
    assert up.headers.get("Cache-Control") == "no-store"
    assert "no-store" not in requests.get(up.json()["url"], timeout=30).headers.get("Cache-Control", "")


def test_javascript_sdk_file_upload(server):
    """The JavaScript SDK's saveBase64: text/plain JSON with base64 and _ContentType."""
    import base64
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(40))
    body = {"base64": base64.b64encode(png).decode(), "_ContentType": "image/png", "fileData": {"metadata": {}, "tags": {}},
            "_ApplicationId": APP_ID, "_ClientVersion": "js5.3.0", "_InstallationId": "i-1"}
    r = requests.post(server.url + "/parse/files/pic.png", data=json.dumps(body), headers={"Content-Type": "text/plain"}, timeout=30)
    assert r.status_code == 201, r.text
    got = requests.get(r.json()["url"], timeout=30)
    assert got.content == png and got.headers["Content-Type"] == "image/png"
    # Without the application id (in a header or the envelope) the upload is refused.
    del body["_ApplicationId"]
    r = requests.post(server.url + "/parse/files/pic.png", data=json.dumps(body), headers={"Content-Type": "text/plain"}, timeout=30)
    assert r.status_code == 403
    # A plain text file that happens to be JSON is stored as it is.
    r = server.req("POST", "/parse/files/notes.txt", raw=b'{"a":1}', headers={"Content-Type": "text/plain"})
    assert requests.get(r.json()["url"], timeout=30).content == b'{"a":1}'


def test_cors_on_lua_routes(server_factory):
    lua = '''
cloud.route("GET", "/api/open", function(req) return {json = {ok = true}} end)
cloud.route("GET", "/api/own", function(req)
  return {json = {ok = true}, headers = {["Access-Control-Allow-Origin"] = "https://mine.example.com"}}
end)
'''
    s = server_factory(functions={"r.lua": lua}).start()
    o = {"Origin": "https://app.example.com"}
    assert requests.get(s.url + "/api/open", headers=o, timeout=30).headers["Access-Control-Allow-Origin"] == "*"
    r = requests.get(s.url + "/api/own", headers=o, timeout=30)
    assert r.headers["Access-Control-Allow-Origin"] == "https://mine.example.com"   # the route's own, not doubled
    r = requests.options(s.url + "/api/open", headers={**o, "Access-Control-Request-Method": "GET"}, timeout=30)
    assert r.status_code == 200 and r.headers["Access-Control-Allow-Origin"] == "*"


def test_javascript_sdk_file_delete(server):
    """Parse.File.destroy(): POST text/plain {"_method":"DELETE","_MasterKey":…} to the file's name."""
    up = server.req("POST", "/parse/files/gone.txt", raw=b"bye", headers={"Content-Type": "text/plain"}).json()
    body = {"_method": "DELETE", "_ApplicationId": APP_ID, "_MasterKey": MASTER_KEY, "_ClientVersion": "js5.3.0"}
    r = requests.post(server.url + "/parse/files/" + up["name"], data=json.dumps(body),
                      headers={"Content-Type": "text/plain"}, timeout=30)
    assert r.status_code == 200, r.text
    assert requests.get(up["url"], timeout=30).status_code == 404
