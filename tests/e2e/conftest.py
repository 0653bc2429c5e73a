"""End-to-end harness: starts the real `moonbase` binary on 127.0.0.1 with a free port and a
temporary data directory, speaks HTTP to it, and stops it (by its PID) afterwards.

Backends: by default every server runs on SQLite in its data directory. With
`MOONBASE_TEST_BACKEND=postgres` the run starts one throw-away PostgreSQL 15 cluster
(tests/pg/cluster.sh, stopped when the run ends) and gives each server a fresh database of it
(`MOONBASE_DATABASE_URL`); a server started on an earlier server's data directory gets that
server's database back, as it would get its SQLite file. Tests about SQLite itself (its file,
WAL, backup, upgrade) carry `@pytest.mark.sqlite_only("why")` and are left out of a PostgreSQL
run; tests about several hosts sharing one database carry `@pytest.mark.postgres_only("why")`
and run in the PostgreSQL run only (`make test` runs both); every other test runs on both
backends."""
import itertools
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

BACKEND = os.environ.get("MOONBASE_TEST_BACKEND", "sqlite")
if BACKEND not in ("sqlite", "postgres"):
    raise RuntimeError(f"MOONBASE_TEST_BACKEND must be sqlite or postgres, not {BACKEND!r}")

class PGCluster:
    """The run's throw-away PostgreSQL cluster (started on first use) and its databases."""

    _current = None
    PG_BIN = os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin")
    SCRIPT = os.path.join(ROOT, "tests", "pg", "cluster.sh")

    def __init__(self):
        # Directly under /tmp: as root the server runs as another user, who must reach it, and
        # the socket path must stay short.
        self.dir = tempfile.mkdtemp(prefix="mb-pg-", dir="/tmp")
        out = subprocess.run(["bash", self.SCRIPT, "start", self.dir, str(os.getpid())],
                             capture_output=True, text=True, timeout=180)
        if out.returncode != 0:
            raise RuntimeError(f"cluster.sh start failed: {out.stderr}{out.stdout}")
        self.url = out.stdout.strip().splitlines()[-1]
        self.names = itertools.count(1)
        self.by_data = {}

    @classmethod
    def get(cls):
        if cls._current is None:
            cls._current = PGCluster()
        return cls._current

    @classmethod
    def stop_current(cls):
        if cls._current is not None:
            subprocess.run(["bash", cls.SCRIPT, "stop", cls._current.dir], capture_output=True, timeout=120)
            shutil.rmtree(cls._current.dir, ignore_errors=True)
            cls._current = None

    def psql(self, sql, url=None):
        out = subprocess.run([os.path.join(self.PG_BIN, "psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
                              "-d", url or self.url, "-c", sql], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RuntimeError(f"psql failed: {out.stderr}")
        return out.stdout

    def new_database(self):
        name = f"mb_{os.getpid()}_{next(self.names)}"
        self.psql(f"CREATE DATABASE {name}")
        return self.url.rsplit("/", 1)[0] + "/" + name

    def database_for(self, data_dir):
        """The database of the server whose data directory is `data_dir` (made on first use)."""
        key = os.path.realpath(data_dir)
        if key not in self.by_data:
            self.by_data[key] = self.new_database()
        return self.by_data[key]


def pytest_configure(config):
    config.addinivalue_line("markers", "sqlite_only(reason): the test is about SQLite itself; "
                                       "a PostgreSQL run leaves it out")
    config.addinivalue_line("markers", "postgres_only(reason): the test needs several hosts on one "
                                       "PostgreSQL database; a SQLite run leaves it out")


def pytest_collection_modifyitems(config, items):
    keep, drop = [], []
    for item in items:
        only = {}
        for name in ("sqlite_only", "postgres_only"):
            mark = item.get_closest_marker(name)
            if mark is not None and not (mark.args and mark.args[0]):
                raise pytest.UsageError(f"{item.nodeid}: {name} needs a reason")
            only[name] = mark is not None
        wanted = not only["postgres_only"] if BACKEND == "sqlite" else not only["sqlite_only"]
        (keep if wanted else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_sessionfinish(session, exitstatus):
    PGCluster.stop_current()


def database_args(data_dir):
    """The CLI options that open the same database as a server on `data_dir`."""
    args = ["--data", data_dir]
    if BACKEND == "postgres":
        args += ["--database", PGCluster.get().database_for(data_dir)]
    return args


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One running `moonbase serve` process."""

    def __init__(self, functions=None, cron=None, env=None, args=None, data=None, wrapper=None):
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
        if BACKEND == "postgres":
            self.env["MOONBASE_DATABASE_URL"] = PGCluster.get().database_for(self.data)
        self.env.update(env or {})
        self.args = args or []
        # A command the server is started under (e.g. setpriv dropping a capability).
        self.wrapper = wrapper or []
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
            self.wrapper + [BIN, "serve", "--host", "127.0.0.1", "--port", str(self.port), "--data", self.data,
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
def host_factory(server_factory):
    """Several hosts on one PostgreSQL database (tests marked `postgres_only`): each host has
    its own data, functions and cron directories; `make(**kw)` makes the first, `make(like=a,
    **kw)` another on a's database. Not started: call `.start()`."""

    def make(like=None, env=None, **kw):
        env = dict(env or {})
        if like is not None:
            env["MOONBASE_DATABASE_URL"] = like.env["MOONBASE_DATABASE_URL"]
        return server_factory(env=env, **kw)

    return make


@pytest.fixture
def server(server_factory):
    return server_factory().start()
