"""examples/pals over realtime: two group members and a stranger subscribe over WebSocket and the
test checks who receives what — locations, SOS, journeys, chat, the leave on stop-sharing, a
removed member who stops receiving at once, the stranger who receives nothing — and presence
(online at the first connection, offline at the last disconnect)."""
import asyncio
import json
import time

import pytest

from conftest import example_files
from test_example_pals import FAR, HOME, NEAR_HOME, User, group_of
from test_livequery_ws import connected, recv_json, run

PTR = lambda cls, oid: {"__type": "Pointer", "className": cls, "objectId": oid}


@pytest.fixture
def app(server_factory):
    return server_factory(functions=example_files("pals", "functions"), cron=example_files("pals", "cron")).start()


async def subscribe(ws, rid, cls, where=None):
    await ws.send(json.dumps({"op": "subscribe", "requestId": rid, "query": {"className": cls, "where": where or {}}}))
    m = await recv_json(ws)
    assert m["op"] == "subscribed" and m["requestId"] == rid, m
    return m


class Inbox:
    """A connection's messages, kept per subscription so that waiting on one never drops another's."""

    def __init__(self, ws):
        self.ws, self.pending = ws, []

    async def _next(self, timeout):
        return json.loads(await asyncio.wait_for(self.ws.recv(), timeout))

    async def drain(self, seconds):
        """Every message kept or arriving within `seconds`."""
        out, self.pending = self.pending, []
        end = time.time() + seconds
        while (left := end - time.time()) > 0:
            try:
                out.append(await self._next(left))
            except asyncio.TimeoutError:
                break
        return out

    async def event(self, rid, timeout=20):
        for i, m in enumerate(self.pending):
            if m.get("requestId") == rid:
                return self.pending.pop(i)
        end = time.time() + timeout
        while (left := end - time.time()) > 0:
            m = await self._next(left)
            if m.get("requestId") == rid:
                return m
            self.pending.append(m)
        raise AssertionError(f"nothing on subscription {rid}")

    async def expect(self, rid, op, test=lambda o: True):
        """The next event of subscription `rid`, which must be `op` and pass `test`."""
        m = await self.event(rid)
        assert m["op"] == op and test(m["object"]), (op, m)
        return m["object"]

    async def until(self, rid, op, test):
        """Skips the subscription's events until one is `op` and passes `test`."""
        while True:
            m = await self.event(rid)
            if m["op"] == op and test(m["object"]):
                return m["object"]

    async def close(self):
        await self.ws.close()


async def inbox(app, token):
    return Inbox(await connected(app, sessionToken=token))


async def follow(user, app, ada_id):
    """A member's (or the stranger's) connection: ada's state, text chat, notifications, path
    points, journeys and groups."""
    box = await inbox(app, user.token)
    ws = box.ws
    await subscribe(ws, 1, "MemberState", {"user": PTR("_User", ada_id)})
    await subscribe(ws, 2, "ChatMessage", {"kind": "text"})
    await subscribe(ws, 3, "Notification")
    await subscribe(ws, 4, "PathPoint")
    await subscribe(ws, 5, "Journey")
    await subscribe(ws, 6, "Group")
    return box


def test_members_receive_locations_sos_journeys_chat_and_the_stranger_nothing(app):
    ada, ben, eve = User(app, "ada"), User(app, "ben"), User(app, "eve")
    fam = group_of(app, ada, "Family", ben)
    group_of(app, eve, "Eve's")   # the stranger has groups of her own
    ada.ok("startSharing", {"groupId": fam})

    async def go():
        b, e = await follow(ben, app, ada.id), await follow(eve, app, ada.id)
        ada.ok("updateLocation", {"location": HOME, "accuracy": 5})
        await b.expect(1, "update", lambda o: o["location"] == HOME and o["state"] == "Active" and o["accuracy"] == 5)
        ada.ok("triggerSOS", {"location": NEAR_HOME})
        await b.expect(1, "update", lambda o: o["state"] == "SOS" and o["location"] == NEAR_HOME)
        await b.expect(4, "create", lambda o: o["kind"] == "sos" and o["location"] == NEAR_HOME)
        await b.expect(3, "create", lambda o: o["kind"] == "sos" and o["actor"]["objectId"] == ada.id)
        ada.ok("stopSOS")
        await b.expect(1, "update", lambda o: o["state"] == "Active")
        await b.expect(3, "create", lambda o: o["kind"] == "sosStopped")
        ada.ok("startJourney", {"groupId": fam, "destination": FAR, "etaMinutes": 30})
        await b.expect(5, "create", lambda o: o["status"] == "active" and o["destination"] == FAR)
        await b.expect(1, "update", lambda o: o["state"] == "Routing")
        await b.expect(3, "create", lambda o: o["kind"] == "journeyStarted")
        ada.ok("updateLocation", {"location": FAR})
        await b.expect(4, "create", lambda o: o["kind"] == "journey" and o["location"] == FAR)
        await b.expect(5, "update", lambda o: o["status"] == "arrived")
        await b.expect(3, "create", lambda o: o["kind"] == "journeyArrived")
        await b.expect(1, "update", lambda o: o["location"] == FAR and o["state"] == "Active")
        ada.ok("renameGroup", {"groupId": fam, "name": "Home"})
        await b.expect(6, "update", lambda o: o["name"] == "Home" and o["objectId"] == fam)
        ada.ok("sendMessage", {"groupId": fam, "text": "home safe"})
        await b.expect(2, "create", lambda o: o["text"] == "home safe" and o["author"]["objectId"] == ada.id)
        # Stop sharing: ben's subscriptions to ada's state and path get a leave, then nothing.
        ada.ok("stopSharing", {"groupId": fam})
        await b.expect(1, "leave", lambda o: o["user"]["objectId"] == ada.id)
        await b.expect(4, "leave", lambda o: o["kind"] == "sos")
        await b.expect(4, "leave", lambda o: o["kind"] == "journey")
        ada.ok("updateLocation", {"location": HOME})
        ada.ok("sendMessage", {"groupId": fam, "text": "still chatting"})
        await b.expect(2, "create", lambda o: o["text"] == "still chatting")
        ada.ok("createGroup", {"name": "Ada's secret group"})   # ben is not in it
        rest = await b.drain(1.0)
        assert [m for m in rest if m.get("requestId") in (1, 4, 6)] == [], rest
        # The stranger received nothing at all.
        assert await e.drain(0.5) == []
        await b.close()
        await e.close()
    run(go())


def test_a_removed_member_stops_receiving_at_once(app):
    ada, ben, cleo = User(app, "ada"), User(app, "ben"), User(app, "cleo")
    fam = group_of(app, ada, "Family", ben, cleo)
    ada.ok("startSharing", {"groupId": fam})

    async def go():
        b, c = await follow(ben, app, ada.id), await follow(cleo, app, ada.id)
        ada.ok("updateLocation", {"location": HOME})
        for ws in (b, c):
            await ws.expect(1, "update", lambda o: o["location"] == HOME)
        ada.ok("removeMember", {"groupId": fam, "userId": ben.id})
        ada.ok("updateLocation", {"location": NEAR_HOME})
        ada.ok("triggerSOS", {"location": FAR})
        ada.ok("sendMessage", {"groupId": fam, "text": "ben is gone"})
        await c.expect(1, "update", lambda o: o["location"] == NEAR_HOME)
        await c.expect(1, "update", lambda o: o["state"] == "SOS")
        await c.expect(2, "create", lambda o: o["text"] == "ben is gone")
        got = [m for m in await b.drain(1.0) if m.get("requestId") in (1, 2, 4, 5)]
        assert got == [], got
        # His own notifications (memberAdded earlier) are his; no sos reaches him now.
        assert [n["kind"] for n in ben.notifications("sos")] == []
        await b.close()
        await c.close()
    run(go())


def test_presence_online_at_first_connection_offline_at_last(app):
    ada, ben, eve = User(app, "ada"), User(app, "ben"), User(app, "eve")
    fam = group_of(app, ada, "Family", ben)
    ben.ok("startSharing", {"groupId": fam})
    is_ben = lambda event: (lambda o: o["event"] == event and o["author"]["objectId"] == ben.id)

    async def go():
        a = await inbox(app, ada.token)
        await subscribe(a.ws, 1, "ChatMessage", {"kind": "system", "author": PTR("_User", ben.id)})
        await subscribe(a.ws, 2, "MemberState", {"user": PTR("_User", ben.id)})
        e = await inbox(app, eve.token)
        await subscribe(e.ws, 1, "ChatMessage")
        await subscribe(e.ws, 2, "MemberState", {"user": PTR("_User", ben.id)})
        b1 = await connected(app, sessionToken=ben.token)
        await a.expect(1, "create", is_ben("online"))
        await a.until(2, "update", lambda o: o["online"] is True)
        b2 = await connected(app, sessionToken=ben.token)         # a second device: still one "online"
        # The connect event runs after the handshake is answered: wait until it was counted, or
        # b1's disconnect could be counted first (0 → "offline", then "online" again).
        await a.until(2, "update", lambda o: o.get("connections") == 2)
        await b1.close()                                          # one device left: no "offline"
        await asyncio.sleep(1.0)
        assert [m for m in await a.drain(0.5) if m.get("requestId") == 1] == []
        assert {m["username"]: m for m in ada.ok("groupMembers", {"groupId": fam})}["ben"]["online"] is True
        await b2.close()
        await a.expect(1, "create", is_ben("offline"))
        await a.until(2, "update", lambda o: o["online"] is False)
        assert await e.drain(0.5) == []
        await a.close()
        await e.close()
    run(go())
    history = [(m["event"], m["author"]["objectId"]) for m in reversed(ada.ok("chatHistory", {"groupId": fam}))
               if m["kind"] == "system"]
    # One online and one offline for ben's two devices; ada's own connection announced her too.
    assert [e for e, who in history if who == ben.id] == ["joined", "online", "offline"], history
    assert ("online", ada.id) in history
