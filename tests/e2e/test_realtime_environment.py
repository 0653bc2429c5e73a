"""The realtime environment variables that no feature test sets: each one changes what the server
does, checked against the real binary started with it. (SSE tests use short keep-alives so that
closed streams are noticed at once and the server stops promptly.)"""
import asyncio
import json

import pytest
import requests
import websockets

from test_livequery_ws import connected, recv_json, run, signup, ws_url
from test_realtime_feed import SSE


def test_livequery_max_connections(server_factory):
    s = server_factory(env={"MOONBASE_LIVEQUERY_MAX_CONNECTIONS": "2"}).start()

    async def go():
        a, b = await connected(s), await connected(s)
        with pytest.raises(websockets.InvalidStatus) as e:
            await websockets.connect(ws_url(s))
        assert e.value.response.status_code == 503
        await a.close()
        await asyncio.sleep(0.5)
        c = await connected(s)   # a freed slot is usable again
        await b.close()
        await c.close()
    run(go())


def test_livequery_max_subscriptions(server_factory):
    s = server_factory(env={"MOONBASE_LIVEQUERY_MAX_SUBSCRIPTIONS": "2"}).start()

    async def go():
        ws = await connected(s)
        for i in (1, 2, 3):
            await ws.send(json.dumps({"op": "subscribe", "requestId": i, "query": {"className": "T", "where": {}}}))
        got = [await recv_json(ws) for _ in range(3)]
        assert [m["op"] for m in got] == ["subscribed", "subscribed", "error"], got
        assert got[2]["code"] == 155 and got[2]["requestId"] == 3
        await ws.close()
    run(go())


def test_livequery_max_message_bytes(server_factory):
    s = server_factory(env={"MOONBASE_LIVEQUERY_MAX_MESSAGE_BYTES": "1024"}).start()

    async def go():
        ws = await connected(s)
        await ws.send(json.dumps({"op": "y" * 900}))            # under the cap: answered (unknown op)
        assert (await recv_json(ws))["code"] == 3
        await ws.send(json.dumps({"op": "x" * 2000}))           # over it: error 1, then closed 1009
        m = await recv_json(ws)
        assert (m["op"], m["code"]) == ("error", 1)
        with pytest.raises(websockets.ConnectionClosed) as e:
            await asyncio.wait_for(ws.recv(), 20)
        assert e.value.rcvd is not None and e.value.rcvd.code == 1009
    run(go())


def test_sse_max_streams(server_factory):
    s = server_factory(env={"MOONBASE_SSE_MAX_STREAMS": "1", "MOONBASE_SSE_KEEPALIVE_SECONDS": "0.5"}).start()
    first = SSE(s, "T")
    r = requests.get(f"{s.url}/parse/live/T", headers=s.headers(), timeout=10)
    assert r.status_code == 429 and r.json()["code"] == 155
    first.close()


def test_sse_max_streams_per_user(server_factory):
    s = server_factory(env={"MOONBASE_SSE_MAX_STREAMS_PER_USER": "1", "MOONBASE_SSE_KEEPALIVE_SECONDS": "0.5"}).start()
    _, token = signup(s, "streamer")
    first = SSE(s, "T", session=token)
    r = requests.get(f"{s.url}/parse/live/T", headers=s.headers(session=token), timeout=10)
    assert r.status_code == 429 and r.json()["code"] == 155
    other = SSE(s, "T")       # an anonymous stream is not this user's
    other.close()
    first.close()
