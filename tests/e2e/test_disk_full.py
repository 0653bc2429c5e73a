"""Disk full on a small tmpfs (needs root to mount; the CI runs as root): writes are refused
with a clear 503 naming the cause, /parse/health reports the store read-only, the episode is
logged once, nothing acknowledged is lost, and writes resume by themselves when space returns."""
import os
import subprocess
import time
import tempfile

import pytest

from conftest import Server

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root"),
              pytest.mark.sqlite_only("fills the disk under the SQLite file in the data directory")]


@pytest.fixture
def small_fs():
    d = tempfile.mkdtemp(prefix="moonbase-full-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", d], check=True)
    yield d
    subprocess.run(["umount", "-l", d], check=False)
    os.rmdir(d)


def test_disk_full_is_503_read_only_and_recovers(small_fs):
    srv = Server(data=os.path.join(small_fs, "data")).start()
    try:
        blob = "x" * 60_000
        acked = []
        refused = None
        for i in range(400):
            r = srv.req("POST", "/parse/classes/Fill", {"i": i, "blob": blob})
            if r.status_code == 201:
                acked.append(r.json()["objectId"])
                continue
            refused = r
            break
        assert refused is not None, "the 6 MiB tmpfs never filled"
        assert refused.status_code == 503, refused.text
        body = refused.json()
        assert body["code"] == 1 and "disk is full" in body["error"]
        h = srv.req("GET", "/parse/health")
        assert h.status_code == 503 and h.json()["status"] == "read-only"
        # Reads keep working; a second refused write does not log the episode again.
        assert srv.req("GET", "/parse/classes/Fill", params={"limit": 1}).status_code == 200
        assert srv.req("POST", "/parse/classes/Fill", {"blob": blob}).status_code == 503
        # Space returns: writes resume without a restart, health is ok again.
        subprocess.run(["mount", "-o", "remount,size=64m", small_fs], check=True)
        assert srv.req("GET", "/parse/health").status_code == 200
        r = srv.req("POST", "/parse/classes/Fill", {"i": -1, "blob": "small"})
        assert r.status_code == 201, r.text
        # Every acknowledged write is there.
        for oid in acked[:: max(1, len(acked) // 20)] + acked[-1:]:
            assert srv.req("GET", f"/parse/classes/Fill/{oid}").status_code == 200
        # Info lines reach the log through its buffer (written every 100 ms): wait for them.
        deadline = time.time() + 10
        while "disk-full episode over" not in srv.read_log() and time.time() < deadline:
            time.sleep(0.1)
        log = srv.read_log()
        assert log.count("database or disk is full (") == 1, log[-2000:]
        assert "disk-full episode over" in log
    finally:
        srv.stop()
        srv.cleanup()
