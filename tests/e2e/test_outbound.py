"""Cloud Code's `http.request` through the real binary against a local HTTP server: JSON in and
out, non-2xx answers, the address guard (without the allow list, and on a redirect), the
request's own timeout, the call's wall-time limit cutting a slow server while other requests
keep answering, the per-call cap, the response cap, header injection and the writer rule."""
import concurrent.futures
import time

from outbound_support import LocalServer

LUA = r'''
cloud.define("fetch", function(req)
  local p = req.params
  return http.request{method = p.method, url = p.url, headers = p.headers, json = p.json,
                      body = p.body, timeoutMs = p.timeoutMs}
end)

cloud.define("tryFetch", function(req)
  local ok, err = pcall(http.request, {url = req.params.url, timeoutMs = req.params.timeoutMs,
                                       headers = req.params.headers})
  if ok then return {ok = true, status = err.status} end
  return {ok = false, code = err.code, message = err.message}
end)

cloud.define("slowCall", {timeoutMs = 1000}, function(req)
  -- pcall cannot swallow the call's own limit
  local ok, err = pcall(http.request, {url = req.params.url, headers = {["X-Sleep"] = "5"}})
  return {escaped = true}
end)

cloud.define("many", function(req)
  local n = 0
  for i = 1, req.params.n do
    local ok, err = pcall(http.request, {url = req.params.url})
    if not ok then return {made = n, message = err.message} end
    n = n + 1
  end
  return {made = n}
end)

cloud.define("inTransaction", function(req)
  return db.transaction(function()
    local ok, err = pcall(http.request, {url = req.params.url})
    return {ok = ok, message = (not ok) and err.message or nil}
  end)
end)

cloud.define("ping", function(req) return "pong" end)

cloud.beforeSave("Hook", function(req)
  local ok, err = pcall(http.request, {url = req.object.url})
  req.object.outcome = ok and "sent" or err.message
end)
'''

ALLOW = {"MOONBASE_HTTP_ALLOW": "127.0.0.1", "MOONBASE_HTTP_MAX_REQUESTS": "3"}


def result(r):
    assert r.status_code == 200, r.text
    return r.json()["result"]


def test_json_in_json_out_and_non_2xx(server_factory):
    with LocalServer() as web:
        s = server_factory(functions={"main.lua": LUA}, env=ALLOW).start()
        out = result(s.call("fetch", {"method": "POST", "url": web.url + "/echo", "json": {"a": 1, "b": [1, 2]},
                                      "headers": {"X-Test": "hello"}}))
        assert out["status"] == 200
        assert out["json"] == {"method": "POST", "json": {"a": 1, "b": [1, 2]}, "x": "hello"}
        assert out["headers"]["x-reply"] == "yes"
        assert web.seen[-1]["headers"]["content-type"] == "application/json"
        # A non-2xx answer is returned, not raised.
        out = result(s.call("fetch", {"url": web.url + "/status/418"}))
        assert out["status"] == 418 and out["json"] == {"teapot": True}
        # Plain text bodies come back as text.
        out = result(s.call("fetch", {"method": "PUT", "url": web.url + "/echo", "body": "not json"}))
        assert out["json"]["method"] == "PUT" and out["json"]["json"] is None


def test_loopback_refused_without_allow_list(server_factory):
    with LocalServer() as web:
        s = server_factory(functions={"main.lua": LUA}).start()
        out = result(s.call("tryFetch", {"url": web.url + "/echo"}))
        assert out["ok"] is False
        assert "refused to connect to 127.0.0.1" in out["message"] and "loopback" in out["message"]
        assert web.seen == []   # nothing reached the server
        # Uncaught, the function answers 141 with the same message.
        r = s.call("fetch", {"url": web.url + "/echo"})
        assert r.status_code == 400 and r.json()["code"] == 141 and "refused" in r.json()["error"]
        # A name that resolves to loopback is refused on the address actually connected to.
        out = result(s.call("tryFetch", {"url": f"http://localhost:{web.port}/echo"}))
        assert out["ok"] is False and "refused to connect" in out["message"]
        # Only http and https.
        out = result(s.call("tryFetch", {"url": "file:///etc/passwd"}))
        assert out["ok"] is False and "only http and https" in out["message"]


def test_redirect_to_refused_address_is_refused(server_factory):
    with LocalServer() as web:
        s = server_factory(functions={"main.lua": LUA}, env=ALLOW).start()
        # 127.0.0.2 is loopback too but not on the allow list: the hop is checked again.
        out = result(s.call("tryFetch", {"url": web.url + f"/redirect-to/http://127.0.0.2:{web.port}/echo"}))
        assert out["ok"] is False and "refused to connect to 127.0.0.2" in out["message"]
        # A redirect to an allowed address is followed.
        out = result(s.call("fetch", {"url": web.url + f"/redirect-to/{web.url}/echo"}))
        assert out["status"] == 200 and out["json"]["method"] == "GET"
        # Redirects are bounded.
        out = result(s.call("tryFetch", {"url": web.url + "/loop"}))
        assert out["ok"] is False and "too many redirects" in out["message"]
        assert sum(1 for x in web.seen if x["path"] == "/loop") == 6   # the request and 5 redirects
        # A redirect to another scheme is refused.
        out = result(s.call("tryFetch", {"url": web.url + "/redirect-to/ftp://127.0.0.1/x"}))
        assert out["ok"] is False and "only http and https" in out["message"]


def test_request_timeout_is_catchable(server_factory):
    with LocalServer() as web:
        s = server_factory(functions={"main.lua": LUA}, env=ALLOW).start()
        t0 = time.time()
        out = result(s.call("tryFetch", {"url": web.url + "/slow", "timeoutMs": 300}))
        assert out["ok"] is False and "timed out" in out["message"]
        assert time.time() - t0 < 4


def test_slow_server_cut_by_call_timeout_while_others_answer(server_factory):
    with LocalServer() as web:
        s = server_factory(functions={"main.lua": LUA}, env=ALLOW).start()
        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            t0 = time.time()
            slow = pool.submit(s.call, "slowCall", {"url": web.url + "/slow"})
            time.sleep(0.2)
            # Other requests keep answering while the slow call waits on the network.
            for _ in range(5):
                t1 = time.time()
                assert result(s.call("ping")) == "pong"
                assert s.req("GET", "/parse/health").status_code == 200
                assert time.time() - t1 < 1.0
            r = slow.result(timeout=30)
            elapsed = time.time() - t0
        assert r.status_code == 400, r.text
        body = r.json()
        assert body["code"] == 141 and "timeout of 1000 ms exceeded" in body["error"]
        assert elapsed < 4, elapsed   # cut at about 1 s, not after the server's 5 s


def test_caps_headers_and_writer(server_factory):
    with LocalServer() as web:
        s = server_factory(functions={"main.lua": LUA}, env=ALLOW).start()
        out = result(s.call("many", {"n": 5, "url": web.url + "/echo"}))
        assert out["made"] == 3 and "at most 3 requests per call" in out["message"]
        out = result(s.call("tryFetch", {"url": web.url + "/huge"}))
        assert out["ok"] is False and "larger than 10485760 bytes" in out["message"]
        out = result(s.call("tryFetch", {"url": web.url + "/echo", "headers": {"X-Test": "a\r\nInjected: 1"}}))
        assert out["ok"] is False and "CR, LF" in out["message"]
        out = result(s.call("inTransaction", {"url": web.url + "/echo"}))
        assert out["ok"] is False and "holding the writer" in out["message"]
        # Nor inside a before-trigger (it runs inside the write's transaction).
        r = s.req("POST", "/parse/classes/Hook", {"url": web.url + "/echo"})
        assert r.status_code == 201, r.text
        got = s.req("GET", "/parse/classes/Hook/" + r.json()["objectId"]).json()
        assert "holding the writer" in got["outcome"]
        # The refused header and the call holding the writer sent nothing.
        assert [x["path"] for x in web.seen] == ["/echo"] * 3 + ["/huge"]


def test_proxy_variables_ignored_and_tls_verified(server_factory, tmp_path):
    import ssl
    import subprocess
    import threading
    from http.server import ThreadingHTTPServer

    from outbound_support import Handler

    env = dict(ALLOW, http_proxy="http://127.0.0.1:9", HTTP_PROXY="http://127.0.0.1:9",
               https_proxy="http://127.0.0.1:9", ALL_PROXY="http://127.0.0.1:9")
    with LocalServer() as web:
        s = server_factory(functions={"main.lua": LUA}, env=env).start()
        # Direct, whatever the proxy variables say.
        assert result(s.call("fetch", {"url": web.url + "/echo"}))["status"] == 200
        # A self-signed certificate is not trusted.
        key, cert = tmp_path / "k.pem", tmp_path / "c.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                        str(cert), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                       check=True, capture_output=True)
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        httpd.seen, httpd.mails = [], []
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(cert), str(key))
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        try:
            out = result(s.call("tryFetch", {"url": f"https://127.0.0.1:{httpd.server_address[1]}/echo"}))
            assert out["ok"] is False
            assert "certificate" in out["message"].lower() or "ssl" in out["message"].lower(), out["message"]
            assert httpd.seen == []
        finally:
            httpd.shutdown()
            httpd.server_close()
