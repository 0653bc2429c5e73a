"""The reference app's jobs, schedule and concurrency (functions/README.md): cleanupExpiredPosts through the
jobs API and _JobStatus, seedDemo, `moonbase check` over the shipped folders, and 20 clients
reacting, commenting and viewing at once with exact counters afterwards."""
import json
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor

import requests

from conftest import BIN
from test_app_support import (CRON_DIR, FUNCTIONS_DIR, app, call, comment, count, counters,  # noqa: F401
                              create_post, exact_counters, fetch, file_exists, pointer, run_job, signup,
                              upload)


def test_shipped_functions_and_cron_pass_check():
    with tempfile.TemporaryDirectory() as data:
        r = subprocess.run([BIN, "check", FUNCTIONS_DIR, "--cron", CRON_DIR, "--data", data],
                           capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    with open(f"{CRON_DIR}/cleanup.cron") as f:
        lines = [line for line in f.read().splitlines() if line.strip() and not line.startswith("#")]
    assert lines == ['*/5 * * * * cleanupExpiredPosts {"graceMinutes": 0}']


def test_cleanup_expired_posts_job(app):
    ana, bea = signup(app, "ana", "female"), signup(app, "bea", "female")
    photo = upload(app, "old.png")
    soon = [create_post(app, ana, f"soon {i}", validity=5 + i) for i in range(3)]  # expire in 5-7 minutes
    past = create_post(app, ana, "long gone", photo=photo)
    r = app.req("PUT", f"/parse/classes/Post/{past}", {"expiresAt": {"__type": "Date", "iso": "2020-01-01T00:00:00.000Z"}},
                master=True)
    assert r.status_code == 200, r.text
    later = create_post(app, ana, "still valid", validity=600)
    for pid in soon + [past, later]:
        comment(app, bea, pid, "c")
        call(app, "react", {"postId": pid, "kind": "like"}, bea)
        call(app, "viewPost", {"postId": pid}, bea)

    row = run_job(app, "cleanupExpiredPosts", {})  # graceMinutes 0: only what has expired
    assert row["status"] == "succeeded", row
    assert row["message"] == '{"deleted":1}'
    assert row["jobName"] == "cleanupExpiredPosts" and row["source"] == "api"
    assert not file_exists(app, photo)
    assert count(app, "Post") == 4

    row = run_job(app, "cleanupExpiredPosts", {"graceMinutes": -15})  # also what expires within 15 minutes
    assert row["status"] == "succeeded" and row["message"] == '{"deleted":3}', row
    assert [p["objectId"] for p in app.req("GET", "/parse/classes/Post", master=True).json()["results"]] == [later]
    for cls in ("Comment", "Reaction", "View"):
        assert count(app, cls) == 1 and count(app, cls, {"post": pointer("Post", later)}) == 1
    assert counters(app, later) == exact_counters(app, later)

    row = run_job(app, "cleanupExpiredPosts", {"graceMinutes": 0})
    assert row["status"] == "succeeded" and row["message"] == '{"deleted":0}', row
    row = run_job(app, "cleanupExpiredPosts", {"graceMinutes": "soon"})
    assert row["status"] == "failed" and "graceMinutes" in row["message"], row
    r = app.req("POST", "/parse/jobs/cleanupExpiredPosts", {})
    assert r.status_code == 403 and r.json()["code"] == 119


def test_cleanup_in_batches(app):
    ana = signup(app, "ana", "female")
    posts = [{"method": "POST", "path": "/parse/classes/Post",
              "body": {"author": ana.ptr, "text": f"bulk {i}", "category": "Food",
                       "location": {"__type": "GeoPoint", "latitude": 37.7 + i / 10000, "longitude": -122.4},
                       "expiresAt": {"__type": "Date", "iso": "2020-01-01T00:00:00.000Z"}}}
             for i in range(2100)]
    for i in range(0, len(posts), 50):
        r = app.req("POST", "/parse/batch", {"requests": posts[i:i + 50]}, master=True)
        assert r.status_code == 200 and all("success" in x for x in r.json()), r.text[:500]
    keep = create_post(app, ana, "fresh")
    assert count(app, "Post") == 2101
    row = run_job(app, "cleanupExpiredPosts", {}, timeout=120)
    assert row["status"] == "succeeded" and row["message"] == '{"deleted":2100}', row
    assert row.get("progress") in (1, 1.0)
    assert count(app, "Post") == 1 and fetch(app, "Post", keep)["text"] == "fresh"


def test_seed_demo_fills_an_empty_server_once(app):
    row = run_job(app, "seedDemo", {})
    assert row["status"] == "succeeded", row
    summary = json.loads(row["message"])
    assert summary["users"] == 6 and summary["posts"] == 24 == count(app, "Post")
    assert count(app, "_User") == 6
    assert count(app, "Comment") == summary["comments"] and count(app, "Reaction") == summary["reactions"]
    for p in app.req("GET", "/parse/classes/Post", master=True, params={"limit": "100"}).json()["results"]:
        assert counters(app, p["objectId"]) == exact_counters(app, p["objectId"])
    r = app.req("POST", "/parse/login", {"username": "alice", "password": summary["password"]})
    assert r.status_code == 200, r.text
    alice = r.json()["sessionToken"]
    sf = {"__type": "GeoPoint", "latitude": 37.7749, "longitude": -122.4194}
    r = app.call("timeline", {"location": sf, "limit": 100}, session=alice)
    assert r.status_code == 200 and len(r.json()["result"]) == 12
    again = run_job(app, "seedDemo", {})
    assert again["status"] == "succeeded" and again["message"].startswith("skipped"), again
    assert count(app, "Post") == 24


def test_twenty_clients_at_once_keep_counters_exact(app):
    author = signup(app, "author", "female")
    pid = create_post(app, author, "the busy post")
    users = [signup(app, f"user{i}", ("female", "male", "other")[i % 3]) for i in range(20)]
    errors = []
    barrier = threading.Barrier(len(users))

    def client(i):
        u = users[i]
        session = requests.Session()
        headers = app.headers(session=u.token)

        def fn(name, params):
            r = session.post(f"{app.url}/parse/functions/{name}", data=json.dumps(params), headers=headers, timeout=60)
            if r.status_code != 200:
                errors.append((name, r.status_code, r.text))
            return r

        barrier.wait(timeout=60)
        for kind in ("like", "dislike", "like", "none", "dislike" if i % 2 else "like"):
            fn("react", {"postId": pid, "kind": kind})
        for j in range(2):
            r = session.post(f"{app.url}/parse/classes/Comment", headers=headers, timeout=60,
                             data=json.dumps({"post": pointer("Post", pid), "text": f"{i}.{j}"}))
            if r.status_code != 201:
                errors.append(("comment", r.status_code, r.text))
            fn("viewPost", {"postId": pid})

    with ThreadPoolExecutor(max_workers=len(users)) as pool:
        list(pool.map(client, range(len(users))))
    assert errors == []
    expected = {"likesCount": 10, "dislikesCount": 10, "commentsCount": 40, "viewsCount": 20}
    assert counters(app, pid) == exact_counters(app, pid) == expected


def test_two_devices_racing_end_consistent(app):
    author, racer = signup(app, "author", "female"), signup(app, "racer", "male")
    pid = create_post(app, author, "contested")
    errors = []

    def device(kinds):
        session = requests.Session()
        for kind in kinds:
            r = session.post(f"{app.url}/parse/functions/react", headers=app.headers(session=racer.token),
                             data=json.dumps({"postId": pid, "kind": kind}), timeout=60)
            if r.status_code != 200:
                errors.append(r.text)

    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(device, [["like", "dislike"] * 10, ["dislike", "like"] * 10,
                               ["like", "none"] * 10, ["dislike", "none", "like"] * 7]))
    assert errors == []
    rows = count(app, "Reaction", {"user": racer.ptr})
    assert rows <= 1
    c = counters(app, pid)
    assert c == exact_counters(app, pid) and c["likesCount"] + c["dislikesCount"] == rows
    final = call(app, "react", {"postId": pid, "kind": "like"}, racer)
    assert final == {"likesCount": 1, "dislikesCount": 0, "kind": "like"}
    assert count(app, "Reaction") == 1
