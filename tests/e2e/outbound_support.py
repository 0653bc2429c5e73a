"""A local HTTP test server for Cloud Code's outbound requests: JSON echo, redirects, slow and
huge answers, and a mailbox that records what a mail hook posts."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _send(self, status, body, ctype="application/json", headers=()):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        try:
            self.wfile.write(data)
        except ConnectionError:
            pass   # the client stopped reading (the response cap)

    def _body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def handle_any(self):
        path = self.path.split("?")[0]
        body = self._body()
        self.server.seen.append({"method": self.command, "path": self.path,
                                 "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body})
        if path == "/echo":
            try:
                parsed = json.loads(body) if body else None
            except ValueError:
                parsed = None
            self._send(200, {"method": self.command, "json": parsed, "x": self.headers.get("X-Test")},
                       headers=[("X-Reply", "yes")])
        elif path == "/status/418":
            self._send(418, {"teapot": True})
        elif path.startswith("/redirect-to/"):
            target = self.path[len("/redirect-to/"):]
            self._send(302, b"", ctype="text/plain", headers=[("Location", target)])
        elif path == "/loop":
            self._send(302, b"", ctype="text/plain", headers=[("Location", "/loop")])
        elif path == "/slow":
            time.sleep(float(self.headers.get("X-Sleep", "5")))
            self._send(200, {"slow": True})
        elif path == "/huge":
            self._send(200, b"x" * (11 << 20), ctype="text/plain")
        elif path == "/mail":
            self.server.mails.append(json.loads(body))
            self._send(200, {"ok": True})
        else:
            self._send(404, {"error": "not found"})

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = handle_any


class LocalServer:
    """`with LocalServer() as web:` — `web.url`, `web.mails`, `web.seen`."""

    def __enter__(self):
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.mails = []
        self.httpd.seen = []
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def url(self):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    @property
    def port(self):
        return self.httpd.server_address[1]

    @property
    def mails(self):
        return self.httpd.mails

    @property
    def seen(self):
        return self.httpd.seen

    def wait_mail(self, n=1, timeout=15):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if len(self.mails) >= n:
                return self.mails[n - 1]
            time.sleep(0.05)
        raise AssertionError(f"no mail #{n} within {timeout}s (got {len(self.mails)})")
