"""R2: one write matched by N realtime subscribers, Moonbase (LiveQuery WebSockets) and, with
`--peer pocketbase`, PocketBase's SSE `/api/realtime` (same subscribers, same writes, same
client).

For each server: opens N subscribers to the same query, then (1) latency: single writes spaced
apart, time from just before the POST to each subscriber's receipt (p50/p99 over all
write×subscriber pairs, and whether all arrived); (2) sustained fan-out: W writes sent back to
back by 4 writers, events received per second until the last delivery, with the server's CPU
per delivered event. Prints one JSON line per server; `--out FILE` also writes it there.

The client: `--procs` processes share the subscribers. Each holds its sockets in one epoll loop
over plain non-blocking sockets (WebSocket frames parsed by hand, pings answered; SSE data
scanned for the event's tag) and stamps every event with CLOCK_MONOTONIC, which all processes
share, on the `recv` that brought it. That costs a few µs per event, where a `websockets`
(asyncio) client spent 60–80 µs decoding each frame and, alone, could not tell a 50 ms p99 from
its own backlog. Each line reports the client's own CPU per event (`client_cpu_us_per_event`).
"""
import argparse
import base64
import http.client
import json
import multiprocessing as mp
import os
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time

from r1_idle import cpu_seconds, free_port, start_for


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def http_post(port, path, body, headers):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **headers})
    r = c.getresponse()
    data = r.read()
    c.close()
    assert r.status in (200, 201, 204), (r.status, data[:200])
    return data


def read_head(s):
    """Reads an HTTP response head; returns (status line, bytes read past it)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError("closed during the response head")
        buf += chunk
    head, _, rest = buf.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0], rest


# --- WebSocket framing (client side: frames out are masked) --------------------------------------

def ws_frame(payload, opcode=1):
    n = len(payload)
    if n < 126:
        head = bytes([0x80 | opcode, 0x80 | n])
    elif n < 65536:
        head = bytes([0x80 | opcode, 0x80 | 126]) + n.to_bytes(2, "big")
    else:
        head = bytes([0x80 | opcode, 0x80 | 127]) + n.to_bytes(8, "big")
    key = os.urandom(4)
    k = int.from_bytes((key * (n // 4 + 1))[:n], "big") if n else 0
    body = (int.from_bytes(payload, "big") ^ k).to_bytes(n, "big") if n else b""
    return head + key + body


def ws_frames(buf):
    """Complete frames at the start of `buf`: ([(opcode, payload)], bytes consumed)."""
    out, i, end = [], 0, len(buf)
    while end - i >= 2:
        n = buf[i + 1] & 0x7F
        h = 2
        if n == 126:
            if end - i < 4:
                break
            n, h = int.from_bytes(buf[i + 2:i + 4], "big"), 4
        elif n == 127:
            if end - i < 10:
                break
            n, h = int.from_bytes(buf[i + 2:i + 10], "big"), 10
        if end - i < h + n:
            break
        out.append((buf[i] & 0x0F, buf[i + h:i + h + n]))
        i += h + n
    return out, i


# --- the servers -----------------------------------------------------------------------------------

class Moonbase:
    name = "moonbase"
    marker = b'"tag":"'

    def __init__(self, n):
        self.proc, self.port = start_for(n)
        self.pid = self.proc.pid

    def subscribe(self):
        """One subscriber (blocking set-up); returns its socket and bytes already read."""
        s = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall((f"GET /parse HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                   f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        status, buf = read_head(s)
        assert b" 101 " in status + b" ", status
        query = {"className": "Fan", "where": {"room": "r"}, "keys": ["tag"]}
        for msg, want in (({"op": "connect", "applicationId": "moonbase"}, b'"connected"'),
                          ({"op": "subscribe", "requestId": 1, "query": query}, b'"subscribed"')):
            s.sendall(ws_frame(json.dumps(msg).encode()))
            while True:
                frames, used = ws_frames(buf)
                buf = buf[used:]
                if any(op == 1 and want in p for op, p in frames):
                    break
                for op, p in frames:
                    if op == 9:
                        s.sendall(ws_frame(p, 10))
                    assert op != 8, "closed during set-up"
                chunk = s.recv(65536)
                if not chunk:
                    raise ConnectionError("closed during set-up")
                buf += chunk
        return s, buf

    @staticmethod
    def events(sub, data):
        """Event payloads in `data` (plus what `sub` kept from before); answers pings."""
        buf = sub.rest + data if sub.rest else data
        frames, used = ws_frames(buf)
        sub.rest = buf[used:]
        out = []
        for op, p in frames:
            if op == 1:
                out.append(p)
            elif op == 9:
                sub.sock.send(ws_frame(p, 10))
            elif op == 8:
                sub.closed = True
        return out

    def post(self, tag):
        http_post(self.port, "/parse/classes/Fan", {"room": "r", "tag": tag},
                  {"X-Parse-Application-Id": "moonbase", "X-Parse-Master-Key": "bench-master"})

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


class PocketBase:
    """PocketBase from the peers kit in PEERS_DIR (its `posts` collection: public list and create rules)."""
    name = "pocketbase"
    marker = b'"category":"'

    def __init__(self, n):
        peers = os.environ.get("PEERS_DIR")
        if not peers:
            raise SystemExit("the PocketBase side of R2 needs the peers kit: set PEERS_DIR (make bench explains it)")
        self.run_dir = tempfile.mkdtemp(prefix="moonbase-r2-pb-")
        self.port = free_port()
        self.env = dict(os.environ, PEERS_RUN_DIR=self.run_dir, PB_PORT=str(self.port), SEED_POSTS="0",
                        PB_REQUEST_LOGS="0")
        self.stop_script = os.path.join(peers, "pocketbase", "stop.sh")
        subprocess.run(["bash", os.path.join(peers, "pocketbase", "start.sh")], env=self.env, check=True,
                       stdout=subprocess.DEVNULL)
        with open(os.path.join(self.run_dir, "pocketbase", "pid")) as f:
            self.pid = int(f.read().strip())

    def subscribe(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=60)
        # HTTP/1.1 (chunked): each event arrives as one chunk; only its data line is scanned.
        s.sendall(b"GET /api/realtime HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
        _, buf = read_head(s)
        while b'"clientId":"' not in buf or b'"' not in buf.split(b'"clientId":"', 1)[1]:
            chunk = s.recv(65536)
            if not chunk:
                raise ConnectionError("closed during set-up")
            buf += chunk
        client_id = buf.split(b'"clientId":"', 1)[1].split(b'"', 1)[0].decode()
        http_post(self.port, "/api/realtime", {"clientId": client_id, "subscriptions": ["posts/*"]}, {})
        return s, b""

    @staticmethod
    def events(sub, data):
        buf = sub.rest + data if sub.rest else data
        # Everything up to the last complete line; an event's data is one line.
        cut = buf.rfind(b"\n") + 1
        sub.rest = buf[cut:]
        return [line for line in buf[:cut].split(b"\n") if line.startswith(b"data:")]

    def post(self, tag):
        http_post(self.port, "/api/collections/posts/records", {"text": "r2", "category": tag}, {})

    def stop(self):
        subprocess.run(["bash", self.stop_script], env=self.env, stdout=subprocess.DEVNULL)
        shutil.rmtree(self.run_dir, ignore_errors=True)


# --- one client process ----------------------------------------------------------------------------

class Sub:
    __slots__ = ("sock", "rest", "closed")

    def __init__(self, sock, rest):
        self.sock, self.rest, self.closed = sock, rest, False


def client_main(target, n, conn, counter):
    """Opens `n` subscribers of `target`, then stamps events until told to report."""
    subs = {}
    ep = select.epoll()
    for _ in range(n):
        s, rest = target.subscribe()
        s.setblocking(False)
        subs[s.fileno()] = Sub(s, rest)
        ep.register(s.fileno(), select.EPOLLIN)
    ep.register(conn.fileno(), select.EPOLLIN)
    conn.send(("ready", len(subs)))
    marker, mlen = target.marker, len(target.marker)
    events = target.events
    arrivals = {}
    count = 0
    cpu0 = time.process_time()
    ctl = conn.fileno()
    while True:
        for fd, _ in ep.poll(1.0):
            if fd == ctl:
                conn.recv()
                conn.send((arrivals, count, time.process_time() - cpu0, sum(s.closed for s in subs.values())))
                for sub in subs.values():
                    sub.sock.close()
                return
            sub = subs[fd]
            try:
                data = sub.sock.recv(262144)
            except BlockingIOError:
                continue
            now = time.monotonic_ns()
            if not data:
                sub.closed = True
                ep.unregister(fd)
                continue
            got = 0
            for p in events(sub, data):
                i = p.find(marker)
                if i < 0:
                    continue
                j = p.index(b'"', i + mlen)
                tag = p[i + mlen:j]
                lst = arrivals.get(tag)
                if lst is None:
                    arrivals[tag] = lst = []
                lst.append(now)
                got += 1
            if got:
                count += got
                counter.value += got


def run_client(target, n, procs, ctx):
    """Starts the client processes; returns (pipes, counters, processes) once all are ready."""
    pipes, counters, ps = [], [], []
    for k in range(procs):
        share = n // procs + (1 if k < n % procs else 0)
        parent, child = ctx.Pipe()
        counter = ctx.Value("q", 0, lock=False)
        p = ctx.Process(target=client_main, args=(target, share, child, counter), daemon=True)
        p.start()
        pipes.append(parent)
        counters.append(counter)
        ps.append(p)
    opened = 0
    for c in pipes:
        if not c.poll(300):
            raise SystemExit("a client process did not open its subscribers within 300 s")
        opened += c.recv()[1]
    assert opened == n, (opened, n)
    return pipes, counters, ps


def measure(target, n, writes, sustained, procs):
    ctx = mp.get_context("fork")
    pipes, counters, ps = run_client(target, n, procs, ctx)

    def total():
        return sum(c.value for c in counters)

    time.sleep(1)
    starts, posts = {}, []
    for w in range(writes):
        tag = f"L{w}"
        before = total()
        starts[tag] = time.monotonic_ns()
        target.post(tag)
        posts.append((time.monotonic_ns() - starts[tag]) / 1e6)
        deadline = time.monotonic() + 10
        while total() < before + n and time.monotonic() < deadline:
            time.sleep(0.001)
        time.sleep(0.2)
    before = total()
    cpu0 = cpu_seconds(target.pid)
    t0 = time.monotonic_ns()
    per_writer = sustained // 4

    def writer(k):
        for j in range(per_writer):
            target.post(f"S{k}-{j}")
    threads = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    want = before + per_writer * 4 * n
    deadline = time.monotonic() + 120
    while total() < want and time.monotonic() < deadline:
        time.sleep(0.01)
    cpu = cpu_seconds(target.pid) - cpu0
    arrivals, client_cpu, closed = {}, 0.0, 0
    for c in pipes:
        c.send("report")
    for c in pipes:
        a, _, ccpu, cl = c.recv()
        client_cpu += ccpu
        closed += cl
        for tag, ts in a.items():
            arrivals.setdefault(tag.decode(), []).extend(ts)
    for p in ps:
        p.join(timeout=30)
    lat, complete, spread, first = [], 0, [], []
    for tag, t in starts.items():
        got = arrivals.get(tag, [])
        complete += len(got) == n
        lat += [(x - t) / 1e6 for x in got]
        if got:
            first.append((min(got) - t) / 1e6)
            spread.append((max(got) - min(got)) / 1e6)
    sus = [x for tag, ts in arrivals.items() if tag.startswith("S") for x in ts]
    delivered = len(sus)
    elapsed = ((max(sus) - t0) / 1e9) if sus else float("nan")
    events_total = sum(len(v) for v in arrivals.values())
    return {"workload": "R2", "server": target.name, "subscribers": n, "client_processes": procs,
            "single_writes": writes, "writes_fully_delivered": complete,
            "p50_ms": round(pct(lat, 50), 2) if lat else None, "p99_ms": round(pct(lat, 99), 2) if lat else None,
            "max_ms": round(max(lat), 2) if lat else None,
            "post_p50_ms": round(pct(posts, 50), 2) if posts else None,
            "first_p50_ms": round(pct(first, 50), 2) if first else None,
            "first_to_last_p50_ms": round(pct(spread, 50), 2) if spread else None,
            "sustained_writes": per_writer * 4, "sustained_events": delivered, "sustained_seconds": round(elapsed, 2),
            "events_per_second": round(delivered / elapsed) if sus else 0,
            "server_cpu_us_per_event": round(cpu * 1e6 / max(1, delivered), 2),
            "client_cpu_us_per_event": round(client_cpu * 1e6 / max(1, events_total), 2),
            "subscribers_dropped": closed}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--subscribers", type=int, default=1000)
    ap.add_argument("--writes", type=int, default=20)
    ap.add_argument("--sustained", type=int, default=200)
    ap.add_argument("--procs", type=int, default=4, help="client processes sharing the subscribers")
    ap.add_argument("--peer", choices=["none", "pocketbase"], default="none")
    ap.add_argument("--out")
    a = ap.parse_args()
    lines = []
    for cls in [Moonbase] + ([PocketBase] if a.peer == "pocketbase" else []):
        target = cls(a.subscribers)
        try:
            lines.append(json.dumps(measure(target, a.subscribers, a.writes, a.sustained, a.procs)))
            print(lines[-1], flush=True)
        finally:
            target.stop()
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
