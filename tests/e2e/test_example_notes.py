"""examples/notes end to end: notes synced across devices, last writer wins, through the real
binary and its Lua. The live and catch-up parts (pullNotes on the change feed, LiveQuery) are in
test_example_notes_sync.py."""
import concurrent.futures
import os
import random
import subprocess
import time

import pytest

from conftest import BIN, ROOT, example_files, wait_job


@pytest.fixture
def app(server_factory):
    return server_factory(functions=example_files("notes", "functions"), cron=example_files("notes", "cron")).start()


def signup(s, name):
    r = s.req("POST", "/parse/users", {"username": name, "password": "pw-" + name})
    assert r.status_code == 201, r.text
    return r.json()["sessionToken"], r.json()["objectId"]


def push(s, token, notes):
    r = s.call("pushNotes", {"notes": notes}, session=token)
    assert r.status_code == 200, r.text
    return r.json()["result"]["results"]


def note(noteId, modifiedAt, device="phone", title="t", body="b", deleted=None):
    n = {"noteId": noteId, "title": title, "body": body, "modifiedAt": modifiedAt, "device": device}
    if deleted is not None:
        n["deleted"] = deleted
    return n


def stored(s, token, noteId):
    r = s.req("GET", "/parse/classes/Note", params={"where": '{"noteId":"%s"}' % noteId}, session=token)
    res = r.json()["results"]
    assert len(res) <= 1
    return res[0] if res else None


def test_check_passes_for_the_example():
    fn = os.path.join(ROOT, "examples", "notes", "functions")
    cron = os.path.join(ROOT, "examples", "notes", "cron")
    r = subprocess.run([BIN, "check", fn, "--cron", cron], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_newer_copy_replaces_older_and_stale_answers_with_stored(app):
    t, uid = signup(app, "ada")
    assert push(app, t, [note("n1", 1000, "phone", title="first")])[0]["status"] == "applied"
    got = stored(app, t, "n1")
    assert got["title"] == "first" and got["owner"]["objectId"] == uid and got["deleted"] is False
    assert push(app, t, [note("n1", 2000, "laptop", title="second")])[0]["status"] == "applied"
    r = push(app, t, [note("n1", 1500, "phone", title="older")])[0]
    assert r["status"] == "stale" and r["note"]["title"] == "second"
    # the same instant: the device id breaks the tie, the same way on every replica
    assert push(app, t, [note("n1", 2000, "zz-tablet", title="tie-high")])[0]["status"] == "applied"
    assert push(app, t, [note("n1", 2000, "aa-watch", title="tie-low")])[0]["status"] == "stale"
    assert push(app, t, [note("n1", 2000, "zz-tablet", title="same")])[0]["status"] == "stale"
    assert stored(app, t, "n1")["title"] == "tie-high"
    # a tombstone is a change like any other
    assert push(app, t, [note("n1", 3000, "phone", deleted=True)])[0]["status"] == "applied"
    assert stored(app, t, "n1")["deleted"] is True


def test_notes_are_private_and_ids_are_per_owner(app):
    ada, _ = signup(app, "ada")
    bob, _ = signup(app, "bob")
    push(app, ada, [note("shared-id", 1000, "phone", title="ada's")])
    assert stored(app, bob, "shared-id") is None
    assert push(app, bob, [note("shared-id", 500, "phone", title="bob's")])[0]["status"] == "applied"
    assert stored(app, ada, "shared-id")["title"] == "ada's"
    assert stored(app, bob, "shared-id")["title"] == "bob's"
    # REST writes are closed: notes change only through pushNotes
    r = app.req("POST", "/parse/classes/Note", {"noteId": "x", "modifiedAt": 1, "device": "d"}, session=ada)
    assert r.status_code == 403 and r.json()["code"] == 119
    oid = stored(app, ada, "shared-id")["objectId"]
    assert app.req("PUT", f"/parse/classes/Note/{oid}", {"title": "hack"}, session=ada).json()["code"] == 119
    assert app.req("GET", f"/parse/classes/Note/{oid}", session=bob).status_code == 404


def test_validation(app):
    t, _ = signup(app, "ada")
    for bad in [[], "x", [{"modifiedAt": 1, "device": "d"}], [note("a", "soon", "d")], [note("a", 1.5, "d")],
                [note("a", 1, "")], [note("a", 1, "d", title="x" * 201)], [note("a", 1, "d", body="x" * 100001)],
                [note("a", 1, "d", deleted="yes")], [note(f"n{i}", 1, "d") for i in range(101)]]:
        r = app.call("pushNotes", {"notes": bad}, session=t)
        assert r.status_code == 400 and r.json()["code"] == 142, (str(bad)[:80], r.text)
    assert app.call("pushNotes", {"notes": [note("a", 1, "d")]}).json()["code"] == 142      # login required
    # a bad note anywhere in a push applies nothing of it
    r = app.call("pushNotes", {"notes": [note("ok", 1, "d"), note("bad", "x", "d")]}, session=t)
    assert r.json()["code"] == 142 and stored(app, t, "ok") is None


def test_share_and_unshare(app):
    ada, _ = signup(app, "ada")
    bob, bobId = signup(app, "bob")
    carl, _ = signup(app, "carl")
    push(app, ada, [note("plan", 1000, "ada-phone", title="trip")])
    assert stored(app, bob, "plan") is None
    r = app.call("shareNote", {"noteId": "plan", "username": "bob"}, session=ada)
    assert r.status_code == 200, r.text
    assert [u["objectId"] for u in r.json()["result"]["sharedWith"]] == [bobId]
    assert stored(app, bob, "plan")["title"] == "trip"
    assert stored(app, carl, "plan") is None
    # the collaborator's devices sync it too: last writer wins across both users
    assert push(app, bob, [note("plan", 2000, "bob-laptop", title="trip v2")])[0]["status"] == "applied"
    assert stored(app, ada, "plan")["title"] == "trip v2"
    assert push(app, ada, [note("plan", 1500, "ada-phone", title="late")])[0]["status"] == "stale"
    # only the owner shares; unknown users and notes are 101
    assert app.call("shareNote", {"noteId": "plan", "username": "carl"}, session=bob).json()["code"] == 101
    assert app.call("shareNote", {"noteId": "plan", "username": "nobody"}, session=ada).json()["code"] == 101
    assert app.call("shareNote", {"noteId": "nope", "username": "bob"}, session=ada).json()["code"] == 101
    assert app.call("shareNote", {"noteId": "plan"}, session=ada).json()["code"] == 142
    assert app.call("unshareNote", {"noteId": "plan", "username": "bob"}, session=ada).status_code == 200
    assert stored(app, bob, "plan") is None
    # bob's later push of that id is his own note now, ada's stays
    push(app, bob, [note("plan", 9000, "bob-laptop", title="bob's own")])
    assert stored(app, ada, "plan")["title"] == "trip v2"


def test_concurrent_pushes_of_one_note_end_with_the_newest(app):
    t, _ = signup(app, "ada")
    copies = [note("race", 1000 + i, f"dev{i % 3}", title=f"v{i}") for i in range(24)]
    random.Random(7).shuffle(copies)
    with concurrent.futures.ThreadPoolExecutor(max_workers=8) as ex:
        list(ex.map(lambda c: push(app, t, [c]), copies))
    assert stored(app, t, "race")["title"] == "v23"
    assert app.req("GET", "/parse/classes/Note", params={"count": 1, "limit": 0}, session=t).json()["count"] == 1


def test_three_devices_converge_to_last_writer_wins(app):
    """Seeded random edits from three devices, pushed in random batches and interleavings from
    three threads: every note ends as the copy with the greatest (modifiedAt, device)."""
    t, _ = signup(app, "ada")
    rng = random.Random(20261201)
    ids = [f"note-{i}" for i in range(12)]
    devices = ["phone", "laptop", "tablet"]
    queues = {d: [] for d in devices}
    expected = {}
    for step in range(240):
        d = rng.choice(devices)
        nid = rng.choice(ids)
        copy = note(nid, 1_000_000 + rng.randint(0, 400), d, title=f"{d}-{step}", body=str(rng.random()),
                    deleted=rng.random() < 0.1)
        queues[d].append(copy)
        key = (copy["modifiedAt"], d)
        if nid not in expected or key > expected[nid][0]:
            expected[nid] = (key, copy)

    def run(device):
        q = list(queues[device])
        rng2 = random.Random(device)
        rng2.shuffle(q)                      # a device's pushes arrive in any order (retries, offline queues)
        while q:
            k = rng2.randint(1, 6)
            batch, q = q[:k], q[k:]
            push(app, t, batch)

    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as ex:
        list(ex.map(run, devices))
    rows = app.req("GET", "/parse/classes/Note", params={"limit": 1000}, session=t).json()["results"]
    got = {r["noteId"]: r for r in rows}
    assert set(got) == set(expected)
    for nid, (_, copy) in expected.items():
        g = got[nid]
        assert (g["modifiedAt"], g["device"], g["title"], g["body"], g["deleted"]) == \
            (copy["modifiedAt"], copy["device"], copy["title"], copy["body"], copy.get("deleted", False)), nid


def test_purge_tombstones_job(app):
    t, _ = signup(app, "ada")
    push(app, t, [note("keep", 1, "d"), note("gone", 1, "d", deleted=True)])
    r = app.req("POST", "/parse/jobs/purgeTombstones", {"days": 0}, master=True)
    st = wait_job(app, r.headers["X-Parse-Job-Status-Id"])
    assert st["status"] == "succeeded" and '"purged":1' in st["message"], st
    assert stored(app, t, "gone") is None and stored(app, t, "keep") is not None
    # the default keeps 30 days of tombstones
    push(app, t, [note("recent", 2, "d", deleted=True)])
    r = app.req("POST", "/parse/jobs/purgeTombstones", {}, master=True)
    st = wait_job(app, r.headers["X-Parse-Job-Status-Id"])
    assert '"purged":0' in st["message"], st
    assert stored(app, t, "recent") is not None
