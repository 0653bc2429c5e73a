"""R1: N idle LiveQuery WebSockets held by one server; RssAnon per connection.

Starts its own `moonbase serve` (MOONBASE_BIN) on a free loopback port with a temp data dir,
reads the server's RssAnon from /proc, opens N WebSockets (each sends `connect` and one
`subscribe`), holds them, reads RssAnon again, drops them all, reads it a third time.
Prints one JSON line; `--out FILE` also writes it there.
"""
import argparse
import asyncio
import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import websockets


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_anon_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return -1


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def start_server(binary, env_extra):
    tmp = tempfile.mkdtemp(prefix="moonbase-r1-")
    for d in ("functions", "cron"):
        os.makedirs(os.path.join(tmp, d))
    port = free_port()
    env = dict(os.environ, MOONBASE_MASTER_KEY="bench-master", MOONBASE_APP_ID="moonbase", **env_extra)
    log = open(os.path.join(tmp, "server.log"), "ab")
    proc = subprocess.Popen([binary, "serve", "--host", "127.0.0.1", "--port", str(port), "--data",
                             os.path.join(tmp, "data"), "--functions", os.path.join(tmp, "functions"),
                             "--cron", os.path.join(tmp, "cron")], env=env, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/parse/health", timeout=1)
            return proc, port
        except Exception:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("server did not start")


def start_for(connections):
    """Raises our descriptor limit and starts the server with room for `connections` from here."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    binary = os.environ.get("MOONBASE_BIN", ".build/release/moonbase")
    return start_server(binary, {"MOONBASE_LIVEQUERY_MAX_PER_IP": str(connections + 10)})


async def open_one(url, i):
    ws = await websockets.connect(url, ping_interval=None, max_queue=4, open_timeout=60, close_timeout=1)
    await ws.send(json.dumps({"op": "connect", "applicationId": "moonbase"}))
    await ws.recv()
    await ws.send(json.dumps({"op": "subscribe", "requestId": 1, "query": {"className": "Idle", "where": {"n": i}}}))
    await ws.recv()
    return ws


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--connections", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=200)
    ap.add_argument("--out")
    a = ap.parse_args()
    proc, port = start_for(a.connections)
    try:
        url = f"ws://127.0.0.1:{port}/parse"
        time.sleep(0.5)
        # Warm one connection up so per-thread one-time allocations are in the baseline.
        warm = await open_one(url, -1)
        await warm.close()
        await asyncio.sleep(0.5)
        base = rss_anon_kb(proc.pid)
        cpu0 = cpu_seconds(proc.pid)
        t0 = time.time()
        conns = []
        for start in range(0, a.connections, a.batch):
            n = min(a.batch, a.connections - start)
            conns += await asyncio.gather(*(open_one(url, start + k) for k in range(n)))
        opened = time.time() - t0
        open_cpu = cpu_seconds(proc.pid) - cpu0
        await asyncio.sleep(2)
        held = rss_anon_kb(proc.pid)
        for c in conns:
            c.transport.abort()
        conns = []
        await asyncio.sleep(3)
        after = rss_anon_kb(proc.pid)
        r = {"workload": "R1", "connections": a.connections, "rss_anon_base_kib": base, "rss_anon_held_kib": held,
             "rss_anon_after_drop_kib": after,
             "per_connection_bytes": round((held - base) * 1024 / a.connections),
             "open_seconds": round(opened, 2), "server_cpu_per_open_us": round(open_cpu * 1e6 / a.connections, 1)}
        line = json.dumps(r)
        print(line)
        if a.out:
            with open(a.out, "w") as f:
                f.write(line + "\n")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


if __name__ == "__main__":
    asyncio.run(main())
