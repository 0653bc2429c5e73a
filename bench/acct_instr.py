#!/usr/bin/env python3
"""Accounting's cost by instructions: W1's `GET /hello` counted by callgrind, accounting on vs off.

The wrk comparison of two processes (bench/run.sh, section 5) swings by ±6% from run to run on a
shared two-core box, more than the 5% it is meant to judge: the two processes land on different
cores, caches and neighbours. Instructions executed in the server's user space are deterministic
to a few hundred per request, and accounting adds no system call per request (its counters are
flushed by a timer), so the difference in instructions is the cost of accounting itself.

For each mode: a fresh server under `valgrind --tool=callgrind --instr-atstart=no` (on a copy of
the binary without DWARF, which valgrind 3.19 cannot read), WARMUP sequential keep-alive requests,
then instrumentation on, REQUESTS requests, off, dump. Counted: the instructions inside
libmicrohttpd's request callback (`--toggle-collect` on it), which is where a request is
authenticated, charged, run, logged and answered; not the server's timers. Accounting's flusher
is a timer: under valgrind the requests take seconds instead of milliseconds, so its work would
be charged to a hundred times fewer requests than at a real rate. The cost is then expressed
against a whole request: one more run with accounting off counts every instruction of the
process (memset's apart: valgrind counts each iteration of `rep stosb`, libmicrohttpd clearing
its per-connection memory pool, about 49,000 "instructions" a request that the CPU runs as a few
hundred).

Usage: acct_instr.py --bin MOONBASE --functions DIR --out TSV [--requests N] [--warmup N]
Prints one line per run and writes TSV: run (on, off: the request callback; whole-off: the
process), requests, instructions, memset, per_request, per_request_without_memset.
"""
import argparse
import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def hello(port, n):
    """n sequential keep-alive `GET /hello` on one connection; each must answer 200."""
    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    req = b"GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    for _ in range(n):
        s.sendall(req)
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                raise SystemExit("connection closed")
            buf += chunk
        head, _, body = buf.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 200"):
            raise SystemExit("unexpected answer: %r" % head[:80])
        length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
        while len(body) < length:
            body += s.recv(65536)
    s.close()


def totals(path):
    """(all instructions, memset's) from a callgrind output file, via callgrind_annotate."""
    out = subprocess.run(["callgrind_annotate", path], capture_output=True, text=True, check=True).stdout
    total = memset = 0
    for line in out.splitlines():
        parts = line.split()
        if not parts or not parts[0][0].isdigit():
            continue
        n = int(parts[0].replace(",", ""))
        if "PROGRAM TOTALS" in line:
            total = n
        elif "memset" in line:
            memset += n
    return total, memset


def measure(binary, functions, mode, requests, warmup, work, callback_only):
    data = os.path.join(work, "data-" + mode + ("" if callback_only else "-whole"))
    cron = os.path.join(work, "cron")
    os.makedirs(cron, exist_ok=True)
    out = os.path.join(work, "callgrind-%s-%d.out" % (mode, callback_only))
    # The @convention(c) entry of the request callback (MoonbaseHTTP's `mhdAccess`).
    toggle = ["--toggle-collect=*mhdAccess*To"] if callback_only else []
    port = free_port()
    env = dict(os.environ, MOONBASE_MASTER_KEY="acct-instr", MOONBASE_ACCOUNTING=mode)
    log = open(os.path.join(work, mode + ".log"), "w")
    p = subprocess.Popen(["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=" + out] + toggle +
                         [binary, "serve", "--host", "127.0.0.1", "--port", str(port), "--data", data,
                          "--functions", functions, "--cron", cron], env=env, stdout=log, stderr=log)
    try:
        deadline = time.time() + 180
        while True:
            try:
                urllib.request.urlopen("http://127.0.0.1:%d/parse/health" % port, timeout=5).read()
                break
            except OSError:
                if p.poll() is not None or time.time() > deadline:
                    raise SystemExit("the server under valgrind did not start (see %s.log)" % mode)
                time.sleep(0.5)
        hello(port, warmup)
        subprocess.run(["callgrind_control", "-i", "on", str(p.pid)], check=True, capture_output=True)
        hello(port, requests)
        subprocess.run(["callgrind_control", "-i", "off", str(p.pid)], check=True, capture_output=True)
        subprocess.run(["callgrind_control", "-d", str(p.pid)], check=True, capture_output=True)
        time.sleep(1)
    finally:
        p.terminate()
        try:
            p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    dumps = sorted(glob.glob(out + ".*"))
    if not dumps:
        raise SystemExit("callgrind wrote no dump for " + mode)
    return totals(dumps[0])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--functions", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--warmup", type=int, default=300)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="mb-acct-instr.")
    try:
        binary = os.path.join(work, "moonbase")
        shutil.copy(a.bin, binary)
        subprocess.run(["strip", "--strip-debug", binary], check=True)
        rows = []
        for run, mode, callback_only in (("on", "on", True), ("off", "off", True), ("whole-off", "off", False)):
            total, memset = measure(binary, a.functions, mode, a.requests, a.warmup, work, callback_only)
            rows.append((run, a.requests, total, memset, total / a.requests, (total - memset) / a.requests))
            print("%s: %.0f instructions per request (%.0f without memset)" % (run, rows[-1][4], rows[-1][5]))
        on, off, whole = rows[0][5], rows[1][5], rows[2][5]
        if not (0 < off < whole):
            raise SystemExit("the request callback counted %.0f of %.0f instructions: the toggle missed it" % (off, whole))
        print("accounting: %+.0f instructions per request, %+.2f%% of a whole request" % (on - off, (on - off) / whole * 100))
        with open(a.out, "w") as f:
            f.write("run\trequests\tinstructions\tmemset\tper_request\tper_request_without_memset\n")
            for r in rows:
                f.write("%s\t%d\t%d\t%d\t%.1f\t%.1f\n" % r)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
