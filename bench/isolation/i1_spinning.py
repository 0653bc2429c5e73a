"""I1: isolation. As many Cloud Code calls spin at their time limit as there are workers, while a
light load of REST reads, REST writes and other Lua calls (one client, one request at a time, a
5 ms pause between requests, like a handful of app users) measures its latency. Budget: the light
load's p99 < 5 ms.

Starts its own `moonbase serve` (MOONBASE_BIN) on a free loopback port with a temp data dir and
its defaults (the worker pool's growth included), with `--workers N` (N = twice the cores, the
default, stated so the spinner count matches). Each spinner thread calls `spin` (a `while true
do end` stopped by its 300 ms limit, answered 141) again as soon as it is answered. Latencies are
taken on the client around each whole request (http.client, one kept-alive connection).
Prints one JSON line; `--out FILE` also writes it there.
"""
import argparse
import http.client
import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import urllib.request

FUNCTIONS = r'''
cloud.define("spin", {timeoutMs = 300}, function(req)
  while true do end
end)

cloud.define("hello", function(req)
  return {hello = "world"}
end)
'''
HEADERS = {"X-Parse-Application-Id": "moonbase", "Content-Type": "application/json"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def percentile(sorted_values, q):
    if not sorted_values:
        return None
    return sorted_values[min(len(sorted_values) - 1, max(0, int(round(q * len(sorted_values))) - 1))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--workers", type=int, default=2 * (os.cpu_count() or 1))
    ap.add_argument("--out")
    args = ap.parse_args()
    binary = os.environ.get("MOONBASE_BIN", ".build/release/moonbase")
    tmp = tempfile.mkdtemp(prefix="moonbase-i1-")
    for d in ("functions", "cron"):
        os.makedirs(os.path.join(tmp, d))
    with open(os.path.join(tmp, "functions", "i1.lua"), "w") as f:
        f.write(FUNCTIONS)
    port = free_port()
    env = dict(os.environ, MOONBASE_MASTER_KEY="bench-master", MOONBASE_APP_ID="moonbase")
    log = open(os.path.join(tmp, "server.log"), "ab")
    try:
        proc = subprocess.Popen([binary, "serve", "--host", "127.0.0.1", "--port", str(port), "--data",
                                 os.path.join(tmp, "data"), "--functions", os.path.join(tmp, "functions"),
                                 "--cron", os.path.join(tmp, "cron"), "--workers", str(args.workers)],
                                env=env, stdout=log, stderr=subprocess.STDOUT)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/parse/health", timeout=1)
                break
            except Exception:
                time.sleep(0.05)
        else:
            raise SystemExit("server did not start")
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)

        def request(method, path, body=None):
            conn.request(method, path, body=body, headers=HEADERS)
            r = conn.getresponse()
            data = r.read()
            return r.status, data

        status, data = request("POST", "/parse/classes/Note", json.dumps({"n": 0}))
        assert status == 201, data
        note_id = json.loads(data)["objectId"]

        stop = threading.Event()
        spins = []

        def spinner():
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            while not stop.is_set():
                c.request("POST", "/parse/functions/spin", body="{}", headers=HEADERS)
                r = c.getresponse()
                spins.append((r.status, json.loads(r.read()).get("code")))
            c.close()

        threads = [threading.Thread(target=spinner, daemon=True) for _ in range(args.workers)]
        for t in threads:
            t.start()
        time.sleep(1.0)  # every spinner on a worker, the pool grown past them
        kinds = {"read": [], "write": [], "lua": []}
        errors = []
        cpu0 = cpu_seconds(proc.pid)
        timeline = []   # (seconds, kind, started at): the slowest are reported
        start = time.perf_counter()
        deadline = time.monotonic() + args.seconds
        i = 0
        while time.monotonic() < deadline:
            kind = ("read", "write", "lua")[i % 3]
            t0 = time.perf_counter()
            if kind == "read":
                status, data = request("GET", f"/parse/classes/Note/{note_id}")
                ok = status == 200
            elif kind == "write":
                status, data = request("POST", "/parse/classes/Note", json.dumps({"n": i}))
                ok = status == 201
            else:
                status, data = request("POST", "/parse/functions/hello", "{}")
                ok = status == 200
            kinds[kind].append(time.perf_counter() - t0)
            timeline.append((time.perf_counter() - t0, kind, round(t0 - start, 3)))
            if not ok:
                errors.append((kind, status, data[:200].decode(errors="replace")))
            i += 1
            time.sleep(0.005)
        cpu1 = cpu_seconds(proc.pid)
        stop.set()
        for t in threads:
            t.join(timeout=5)
        conn.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(tmp, ignore_errors=True)

    every = sorted(x for v in kinds.values() for x in v)
    ms = lambda v: None if v is None else round(v * 1000, 3)
    out = {
        "workers": args.workers,
        "spinners": args.workers,
        "spins_answered": len(spins),
        "spins_141": sum(1 for s in spins if s == (400, 141)),
        "requests": len(every),
        "errors": errors[:5],
        "error_count": len(errors),
        "p50_ms": ms(percentile(every, 0.5)),
        "p99_ms": ms(percentile(every, 0.99)),
        "max_ms": ms(every[-1] if every else None),
        "by_kind": {k: {"n": len(v), "p50_ms": ms(percentile(sorted(v), 0.5)), "p99_ms": ms(percentile(sorted(v), 0.99))}
                    for k, v in kinds.items()},
        "slowest": [{"kind": k, "ms": ms(d), "at_s": at} for d, k, at in sorted(timeline, reverse=True)[:5]],
        "server_cpu_s": round(cpu1 - cpu0, 2),
        "seconds": args.seconds,
    }
    line = json.dumps(out)
    print(line)
    if args.out:
        with open(args.out, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
