"""End-to-end harness: starts the real `moonbase` binary on 127.0.0.1 with a free port and a
temporary data directory, speaks HTTP to it, and stops it (by its PID) afterwards."""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest
import requests

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("MOONBASE_BIN", os.path.join(ROOT, ".build", "debug", "moonbase"))
APP_ID = "moonbase"
MASTER_KEY = "test-master-key-0123456789"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One running `moonbase serve` process."""

    def __init__(self, functions=None, cron=None, env=None, args=None, data=None):
        self.tmp = tempfile.mkdtemp(prefix="moonbase-e2e-")
        self.data = data or os.path.join(self.tmp, "data")
        self.functions = os.path.join(self.tmp, "functions")
        self.cron = os.path.join(self.tmp, "cron")
        os.makedirs(self.functions, exist_ok=True)
        os.makedirs(self.cron, exist_ok=True)
        for name, text in (functions or {}).items():
            path = os.path.join(self.functions, name)   # "lib/geo.lua" makes functions/lib/
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        for name, text in (cron or {}).items():
            with open(os.path.join(self.cron, name), "w") as f:
                f.write(text)
        self.env = dict(os.environ)
        self.env.update({"MOONBASE_MASTER_KEY": MASTER_KEY, "MOONBASE_APP_ID": APP_ID})
        self.env.update(env or {})
        self.args = args or []
        self.proc = None
        self.port = None
        self.log_path = os.path.join(self.tmp, "server.log")

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout=30):
        self.port = free_port()
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [BIN, "serve", "--host", "127.0.0.1", "--port", str(self.port), "--data", self.data,
             "--functions", self.functions, "--cron", self.cron] + self.args,
            env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}: {self.read_log()[-3000:]}")
            try:
                if requests.get(self.url + "/parse/health", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.05)
        raise RuntimeError("server did not become healthy: " + self.read_log()[-3000:])

    def stop(self, sig=signal.SIGTERM, timeout=30):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if getattr(self, "log", None):
            self.log.close()
        return self.proc.returncode if self.proc else None

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()

    def read_log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def cleanup(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    # --- HTTP helpers -------------------------------------------------------------------
    def headers(self, session=None, master=False, extra=None):
        h = {"X-Parse-Application-Id": APP_ID, "Content-Type": "application/json"}
        if session:
            h["X-Parse-Session-Token"] = session
        if master:
            h["X-Parse-Master-Key"] = MASTER_KEY
        h.update(extra or {})
        return h

    def req(self, method, path, body=None, session=None, master=False, headers=None, params=None, raw=None):
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        return requests.request(method, self.url + path, data=data, params=params,
                                headers=self.headers(session, master, headers), timeout=60)

    def call(self, name, params=None, session=None, master=False):
        return self.req("POST", f"/parse/functions/{name}", params or {}, session=session, master=master)


def rss_anon_kib(pid):
    """The process's private memory (RssAnon from /proc, KiB): file-backed SQLite pages excluded."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon")


def recv_until_close(sock, timeout=20):
    """Everything the server sends on `sock` until it closes (or a reset or the timeout)."""
    sock.settimeout(timeout)
    data = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not chunk:
            break
        data += chunk
    return data


def wait_job(s, job_id, timeout=60):
    """Polls a job run's `_JobStatus` row until it is no longer running; returns the row."""
    deadline = time.time() + timeout
    row = None
    while time.time() < deadline:
        row = s.req("GET", f"/parse/classes/_JobStatus/{job_id}", master=True).json()
        if row.get("status") != "running":
            return row
        time.sleep(0.1)
    return row


def example_files(app, folder):
    """The files of examples/APP/FOLDER (functions or cron), as {relative name: text}, to start a
    server with exactly what the example ships."""
    base = os.path.join(ROOT, "examples", app, folder)
    out = {}
    for dirpath, _, names in os.walk(base):
        for n in names:
            if n.endswith((".lua", ".cron")):
                path = os.path.join(dirpath, n)
                with open(path) as f:
                    out[os.path.relpath(path, base)] = f.read()
    return out


@pytest.fixture
def server_factory():
    servers = []

    def make(**kw):
        s = Server(**kw)
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()
        s.cleanup()


@pytest.fixture
def server(server_factory):
    return server_factory().start()
