"""Helpers for the reference-app scenarios (test_app*.py): a server running the shipped
`functions/`, users, posts and function calls spoken over HTTP. No tests live here."""
import json
import os
import time
import urllib.parse

import pytest

from conftest import ROOT

FUNCTIONS_DIR = os.path.join(ROOT, "functions")
CRON_DIR = os.path.join(ROOT, "cron")
PASSWORD = "correct horse 42"
# A point in San Francisco; 1 degree of latitude is about 69 miles.
HOME = (37.7749, -122.4194)
FAR = (HOME[0] + 0.5, HOME[1])   # about 35 miles north


def shipped_functions():
    """Every shipped Lua file and module (`lib/…`), as the harness's `functions={name: text}`."""
    out = {}
    for root, _, names in os.walk(FUNCTIONS_DIR):
        for name in sorted(names):
            if name.endswith(".lua"):
                path = os.path.join(root, name)
                with open(path) as f:
                    out[os.path.relpath(path, FUNCTIONS_DIR)] = f.read()
    return out


@pytest.fixture
def app(server_factory):
    """A fresh server with the shipped Cloud Code (and no schedules, so no cron run interferes)."""
    return server_factory(functions=shipped_functions()).start()


def geo(lat, lng):
    return {"__type": "GeoPoint", "latitude": lat, "longitude": lng}


def pointer(cls, oid):
    return {"__type": "Pointer", "className": cls, "objectId": oid}


class User:
    def __init__(self, oid, token, username):
        self.id, self.token, self.username = oid, token, username

    @property
    def ptr(self):
        return pointer("_User", self.id)


def signup(s, username, gender, **extra):
    body = {"username": username, "password": PASSWORD, "email": f"{username}@example.com",
            "fullname": username.title(), "city": "San Francisco", "gender": gender,
            "birthdate": {"__type": "Date", "iso": "1990-05-01T00:00:00.000Z"}}
    body.update(extra)
    r = s.req("POST", "/parse/users", body)
    assert r.status_code == 201, r.text
    return User(r.json()["objectId"], r.json()["sessionToken"], username)


def create_post(s, user, text, at=HOME, dlat=0.0, category="Coffee", validity=60, **extra):
    body = {"text": text, "category": category, "location": geo(at[0] + dlat, at[1]),
            "validityMinutes": validity}
    body.update(extra)
    r = s.req("POST", "/parse/classes/Post", body, session=user.token)
    assert r.status_code == 201, r.text
    time.sleep(0.003)  # distinct createdAt milliseconds keep "newest first" unambiguous
    return r.json()["objectId"]


def call(s, name, params, user):
    """Calls a function as `user` and returns its result (asserting success)."""
    r = s.call(name, params, session=user.token)
    assert r.status_code == 200, f"{name}: {r.status_code} {r.text}"
    return r.json()["result"]


def call_error(s, name, params, user, code, status=None):
    """Calls a function expecting a Parse error `code` (HTTP status by code: 101 → 404, 119 → 403, 155 → 429, 1 → 500, else 400)."""
    r = s.call(name, params, session=user.token if user else None)
    expected = status or {101: 404, 119: 403, 155: 429, 1: 500}.get(code, 400)
    assert r.status_code == expected, f"{name}: {r.status_code} {r.text}"
    assert r.json()["code"] == code, r.text
    assert r.json().get("error"), r.text
    return r.json()


def ids(objects):
    return [o["objectId"] for o in objects]


def get(s, cls, oid, session=None, master=False, **params):
    return s.req("GET", f"/parse/classes/{cls}/{oid}", session=session, master=master, params=params or None)


def fetch(s, cls, oid):
    """The stored object, read with the master key (no afterFind)."""
    r = get(s, cls, oid, master=True)
    assert r.status_code == 200, r.text
    return r.json()


def count(s, cls, where=None):
    params = {"count": "1", "limit": "0"}
    if where is not None:
        params["where"] = json.dumps(where)
    r = s.req("GET", f"/parse/classes/{cls}", master=True, params=params)
    assert r.status_code == 200, r.text
    return r.json()["count"]


def counters(s, post_id):
    o = fetch(s, "Post", post_id)
    return {k: o.get(k) for k in ("likesCount", "dislikesCount", "commentsCount", "viewsCount")}


def exact_counters(s, post_id):
    """The counters as the rows say they should be (what the triggers must maintain)."""
    p = pointer("Post", post_id)
    return {"likesCount": count(s, "Reaction", {"post": p, "kind": "like"}),
            "dislikesCount": count(s, "Reaction", {"post": p, "kind": "dislike"}),
            "commentsCount": count(s, "Comment", {"post": p}),
            "viewsCount": count(s, "View", {"post": p})}


def comment(s, user, post_id, text, reply_to=None):
    body = {"post": pointer("Post", post_id), "text": text}
    if reply_to:
        body["replyTo"] = pointer("Comment", reply_to)
    r = s.req("POST", "/parse/classes/Comment", body, session=user.token)
    assert r.status_code == 201, r.text
    time.sleep(0.003)
    return r.json()["objectId"]


def upload(s, name, data=b"\x89PNG\r\n\x1a\nfake", content_type="image/png"):
    r = s.req("POST", f"/parse/files/{urllib.parse.quote(name)}", raw=data,
              headers={"Content-Type": content_type})
    assert r.status_code == 201, r.text
    return {"__type": "File", "name": r.json()["name"], "url": r.json()["url"]}


def file_exists(s, f):
    import requests
    return requests.get(f["url"], timeout=30).status_code == 200


def run_job(s, name, params=None, timeout=60):
    """Starts a job with the master key and polls its _JobStatus row until it finishes."""
    r = s.req("POST", f"/parse/jobs/{name}", params or {}, master=True)
    assert r.status_code == 200, r.text
    status_id = r.headers["X-Parse-Job-Status-Id"]
    deadline = time.time() + timeout
    while time.time() < deadline:
        row = fetch(s, "_JobStatus", status_id)
        if row["status"] not in ("running", "pending"):
            return row
        time.sleep(0.05)
    raise AssertionError(f"job {name} did not finish in {timeout}s")


def pct(part, whole):
    """The app's percentages: 0-100, one decimal, half up (as functions/account.lua rounds)."""
    if whole == 0:
        return 0
    import math
    return math.floor(part * 1000 / whole + 0.5) / 10
