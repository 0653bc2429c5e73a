"""R2: one write matched by N LiveQuery subscribers.

Starts its own `moonbase serve` (MOONBASE_BIN), opens N WebSockets subscribed to the same
query, then (1) latency: single writes spaced apart, time from just before the POST to each
subscriber's receipt (p50/p99 over all write×subscriber pairs, and whether all arrived);
(2) sustained fan-out: W writes sent back to back by a few concurrent writers, events received
per second until the last delivery, with the server's CPU per delivered event.
Prints one JSON line; `--out FILE` also writes it there. The client is Python (websockets,
asyncio): one process decoding every frame, which limits the sustained figure.
"""
import argparse
import asyncio
import http.client
import json
import os
import time

import websockets

from r1_idle import cpu_seconds, start_for


def post(port, body):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    c.request("POST", "/parse/classes/Fan", json.dumps(body),
              {"X-Parse-Application-Id": "moonbase", "X-Parse-Master-Key": "bench-master",
               "Content-Type": "application/json"})
    r = c.getresponse()
    r.read()
    c.close()
    assert r.status == 201, r.status


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--subscribers", type=int, default=1000)
    ap.add_argument("--writes", type=int, default=20)
    ap.add_argument("--sustained", type=int, default=200)
    ap.add_argument("--out")
    a = ap.parse_args()
    proc, port = start_for(a.subscribers)
    arrivals = {}   # tag -> list of arrival times
    received = [0]
    try:
        url = f"ws://127.0.0.1:{port}/parse"

        async def subscriber(i):
            ws = await websockets.connect(url, ping_interval=None, max_queue=None, open_timeout=60)
            await ws.send(json.dumps({"op": "connect", "applicationId": "moonbase"}))
            await ws.recv()
            await ws.send(json.dumps({"op": "subscribe", "requestId": 1,
                                      "query": {"className": "Fan", "where": {"room": "r"}, "keys": ["tag"]}}))
            await ws.recv()
            return ws

        async def reader(ws):
            async for m in ws:
                now = time.perf_counter()
                received[0] += 1
                i = m.find('"tag":"')
                if i >= 0:
                    tag = m[i + 7:m.index('"', i + 7)]
                    arrivals.setdefault(tag, []).append(now)

        conns = []
        for s in range(0, a.subscribers, 100):
            conns += await asyncio.gather(*(subscriber(k) for k in range(s, min(a.subscribers, s + 100))))
        tasks = [asyncio.create_task(reader(ws)) for ws in conns]
        await asyncio.sleep(1)
        # (1) latency of single writes
        lat = []
        complete = 0
        for w in range(a.writes):
            tag = f"L{w}"
            t0 = time.perf_counter()
            await asyncio.to_thread(post, port, {"room": "r", "tag": tag})
            deadline = time.perf_counter() + 10
            while len(arrivals.get(tag, [])) < a.subscribers and time.perf_counter() < deadline:
                await asyncio.sleep(0.001)
            got = arrivals.get(tag, [])
            complete += len(got) == a.subscribers
            lat += [(t - t0) * 1000 for t in got]
            await asyncio.sleep(0.2)
        # (2) sustained fan-out
        before = received[0]
        cpu0 = cpu_seconds(proc.pid)
        t0 = time.perf_counter()
        per_writer = a.sustained // 4

        def writer(k):
            for j in range(per_writer):
                post(port, {"room": "r", "tag": f"S{k}-{j}"})
        await asyncio.gather(*(asyncio.to_thread(writer, k) for k in range(4)))
        want = before + per_writer * 4 * a.subscribers
        deadline = time.perf_counter() + 120
        while received[0] < want and time.perf_counter() < deadline:
            await asyncio.sleep(0.01)
        elapsed = time.perf_counter() - t0
        delivered = received[0] - before
        cpu = cpu_seconds(proc.pid) - cpu0
        r = {"workload": "R2", "subscribers": a.subscribers, "single_writes": a.writes,
             "writes_fully_delivered": complete,
             "p50_ms": round(pct(lat, 50), 2) if lat else None, "p99_ms": round(pct(lat, 99), 2) if lat else None,
             "sustained_writes": per_writer * 4, "sustained_events": delivered, "sustained_seconds": round(elapsed, 2),
             "events_per_second": round(delivered / elapsed), "server_cpu_us_per_event": round(cpu * 1e6 / max(1, delivered), 2)}
        line = json.dumps(r)
        print(line)
        if a.out:
            with open(a.out, "w") as f:
                f.write(line + "\n")
        for t in tasks:
            t.cancel()
        for ws in conns:
            ws.transport.abort()
    finally:
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    asyncio.run(main())
