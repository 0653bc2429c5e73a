"""R2: one write matched by N realtime subscribers, Moonbase (LiveQuery WebSockets) and, with
`--peer pocketbase`, PocketBase's SSE `/api/realtime` (same subscribers, same writes).

For each server: opens N subscribers to the same query, then (1) latency: single writes spaced
apart, time from just before the POST to each subscriber's receipt (p50/p99 over all
write×subscriber pairs, and whether all arrived); (2) sustained fan-out: W writes sent back to
back by 4 writers, events received per second until the last delivery, with the server's CPU
per delivered event. Prints one JSON line per server; `--out FILE` also writes them there.
The client is Python (asyncio) in one process decoding every frame/event, which limits the
sustained figure.
"""
import argparse
import asyncio
import http.client
import json
import os
import shutil
import subprocess
import tempfile
import time

import websockets

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


class Arrivals:
    """Receipt times per write tag, and a count of every event received."""

    def __init__(self, field):
        self.marker = f'"{field}":"'
        self.by_tag = {}
        self.count = 0

    def saw(self, text):
        now = time.perf_counter()
        self.count += 1
        i = text.find(self.marker)
        if i >= 0:
            start = i + len(self.marker)
            tag = text[start:text.index('"', start)]
            self.by_tag.setdefault(tag, []).append(now)


class Moonbase:
    name = "moonbase"
    tag_field = "tag"

    def __init__(self, n):
        self.proc, self.port = start_for(n)
        self.pid = self.proc.pid

    async def subscriber(self, arrivals):
        ws = await websockets.connect(f"ws://127.0.0.1:{self.port}/parse", ping_interval=None, max_queue=None,
                                      open_timeout=60)
        await ws.send(json.dumps({"op": "connect", "applicationId": "moonbase"}))
        await ws.recv()
        await ws.send(json.dumps({"op": "subscribe", "requestId": 1,
                                  "query": {"className": "Fan", "where": {"room": "r"}, "keys": ["tag"]}}))
        await ws.recv()

        async def read():
            async for m in ws:
                arrivals.saw(m)
        return ws.transport.abort, read()

    def post(self, tag):
        http_post(self.port, "/parse/classes/Fan", {"room": "r", "tag": tag},
                  {"X-Parse-Application-Id": "moonbase", "X-Parse-Master-Key": "bench-master"})

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


class PocketBase:
    """PocketBase from the peers kit in PEERS_DIR (its `posts` collection: public list and create rules)."""
    name = "pocketbase"
    tag_field = "category"

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

    async def subscriber(self, arrivals):
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        # HTTP/1.1 (chunked): each event arrives as one chunk; its lines are read as they come.
        writer.write(b"GET /api/realtime HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n")
        await writer.drain()
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):
            pass
        client_id = None
        while client_id is None:
            line = await reader.readline()
            if line.startswith(b"data:"):
                client_id = json.loads(line[5:])["clientId"]
        await asyncio.to_thread(http_post, self.port, "/api/realtime",
                                {"clientId": client_id, "subscriptions": ["posts/*"]}, {})

        async def read(keep=writer):
            # `keep`: a StreamWriter closes its socket when collected.
            while True:
                line = await reader.readline()
                if not line:
                    return
                if line.startswith(b"data:"):
                    arrivals.saw(line.decode())
        return writer.transport.abort, read()

    def post(self, tag):
        http_post(self.port, "/api/collections/posts/records", {"text": "r2", "category": tag}, {})

    def stop(self):
        subprocess.run(["bash", self.stop_script], env=self.env, stdout=subprocess.DEVNULL)
        shutil.rmtree(self.run_dir, ignore_errors=True)


async def measure(target, n, writes, sustained):
    arrivals = Arrivals(target.tag_field)
    aborts, tasks = [], []
    for s in range(0, n, 100):
        subs = await asyncio.gather(*(target.subscriber(arrivals) for _ in range(min(100, n - s))))
        for abort, read in subs:
            aborts.append(abort)
            tasks.append(asyncio.create_task(read))
    await asyncio.sleep(1)
    lat, complete = [], 0
    for w in range(writes):
        tag = f"L{w}"
        t0 = time.perf_counter()
        await asyncio.to_thread(target.post, tag)
        deadline = time.perf_counter() + 10
        while len(arrivals.by_tag.get(tag, [])) < n and time.perf_counter() < deadline:
            await asyncio.sleep(0.001)
        got = arrivals.by_tag.get(tag, [])
        complete += len(got) == n
        lat += [(t - t0) * 1000 for t in got]
        await asyncio.sleep(0.2)
    before = arrivals.count
    cpu0 = cpu_seconds(target.pid)
    t0 = time.perf_counter()
    per_writer = sustained // 4

    def writer(k):
        for j in range(per_writer):
            target.post(f"S{k}-{j}")
    await asyncio.gather(*(asyncio.to_thread(writer, k) for k in range(4)))
    want = before + per_writer * 4 * n
    deadline = time.perf_counter() + 120
    while arrivals.count < want and time.perf_counter() < deadline:
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - t0
    delivered = arrivals.count - before
    cpu = cpu_seconds(target.pid) - cpu0
    for t in tasks:
        t.cancel()
    for abort in aborts:
        abort()
    return {"workload": "R2", "server": target.name, "subscribers": n, "single_writes": writes,
            "writes_fully_delivered": complete,
            "p50_ms": round(pct(lat, 50), 2) if lat else None, "p99_ms": round(pct(lat, 99), 2) if lat else None,
            "sustained_writes": per_writer * 4, "sustained_events": delivered, "sustained_seconds": round(elapsed, 2),
            "events_per_second": round(delivered / elapsed),
            "server_cpu_us_per_event": round(cpu * 1e6 / max(1, delivered), 2)}


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--subscribers", type=int, default=1000)
    ap.add_argument("--writes", type=int, default=20)
    ap.add_argument("--sustained", type=int, default=200)
    ap.add_argument("--peer", choices=["none", "pocketbase"], default="none")
    ap.add_argument("--out")
    a = ap.parse_args()
    lines = []
    for cls in [Moonbase] + ([PocketBase] if a.peer == "pocketbase" else []):
        target = cls(a.subscribers)
        try:
            lines.append(json.dumps(await measure(target, a.subscribers, a.writes, a.sustained)))
            print(lines[-1], flush=True)
        finally:
            target.stop()
    if a.out:
        with open(a.out, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    asyncio.run(main())
