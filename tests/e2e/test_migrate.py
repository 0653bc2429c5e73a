"""`moonbase migrate --to URL`: the reference app's SQLite database copied into PostgreSQL keeps every
class's schema, object, user, session, role, file, Config value, job run and change-feed position;
users log in with their old passwords and old session tokens keep working. A non-empty target is
refused without being touched. Run by the PostgreSQL pass of `make test` (it needs the cluster)."""
import json
import os
import sqlite3
import subprocess

import pytest
import requests

from conftest import BIN, PGCluster
from test_app_support import HOME, PASSWORD, call, comment, create_post, geo, pointer, run_job, \
    shipped_functions, signup, upload

pytestmark = pytest.mark.postgres_only("copies a SQLite database into a PostgreSQL one")


def sqlite_server(server_factory, **kw):
    """A server on SQLite in its data dir, whatever backend the run uses."""
    s = server_factory(**kw)
    s.env.pop("MOONBASE_DATABASE_URL", None)
    return s


def migrate(data, url, extra_env=None):
    env = dict(os.environ)
    env.pop("MOONBASE_DATABASE_URL", None)
    env.update(extra_env or {})
    return subprocess.run([BIN, "migrate", "--to", url, "--data", data], env=env,
                          capture_output=True, text=True, timeout=300)


def find_all(s, cls, **params):
    q = {"order": "createdAt,objectId", "limit": "1000"}
    q.update(params)
    r = s.req("GET", f"/parse/classes/{cls}", master=True, params=q)
    assert r.status_code == 200, (cls, r.text)
    return r.json()["results"]


def schemas(s, classes):
    out = {}
    for cls in classes:
        r = s.req("GET", f"/parse/schemas/{cls}", master=True)
        assert r.status_code == 200, r.text
        out[cls] = r.json()
    return out


def snapshot(s, classes):
    """Every object of every class (find ordered, and each GET by id), Config, and the feed."""
    snap = {"objects": {}, "by_id": {}}
    for cls in classes:
        rows = find_all(s, cls)
        snap["objects"][cls] = rows
        for o in rows:
            r = s.req("GET", f"/parse/classes/{cls}/{o['objectId']}", master=True)
            assert r.status_code == 200, r.text
            snap["by_id"][(cls, o["objectId"])] = r.json()
    r = s.req("GET", "/parse/config", master=True)
    assert r.status_code == 200, r.text
    snap["config"] = r.json()
    feed = s.req("GET", "/parse/changes/Post", master=True, params={"since": "0", "limit": "1000"})
    assert feed.status_code == 200, feed.text
    snap["feed"] = feed.json()
    return snap


def near(s, session=None):
    where = {"location": {"$nearSphere": geo(*HOME), "$maxDistanceInMiles": 5}}
    r = s.req("GET", "/parse/classes/Post", master=session is None, session=session,
              params={"where": json.dumps(where), "limit": "100"})
    assert r.status_code == 200, r.text
    return [o["objectId"] for o in r.json()["results"]]


def text_search(s, term):
    where = {"text": {"$text": {"$search": {"$term": term}}}}
    r = s.req("GET", "/parse/classes/Post", master=True, params={"where": json.dumps(where), "order": "createdAt"})
    assert r.status_code == 200, r.text
    return [o["objectId"] for o in r.json()["results"]]


def test_reference_app_migrates_with_everything_intact(server_factory):
    old = sqlite_server(server_factory, functions=shipped_functions()).start()
    # Drive the app: users with avatars, posts with geo and photos, reactions, views, comments
    # with replies, a role with members, Config, an installation, a job run.
    avatar = upload(old, "ana.png")
    ana = signup(old, "ana", "female", avatar=avatar)
    bob = signup(old, "bob", "male")
    cid = signup(old, "cid", "other")
    photo = upload(old, "espresso.jpg", b"\xff\xd8\xff\xe0 not really a jpeg", "image/jpeg")
    posts = [create_post(old, ana, "Espresso bar on the corner", photo=photo),
             create_post(old, bob, "Tacos near the park", dlat=0.01, category="Food"),
             create_post(old, cid, "Street art wall", dlat=0.02, category="Arts"),
             create_post(old, ana, "Far away espresso", at=(HOME[0] + 3, HOME[1]))]
    call(old, "react", {"postId": posts[0], "kind": "like"}, bob)
    call(old, "react", {"postId": posts[0], "kind": "dislike"}, cid)
    call(old, "react", {"postId": posts[1], "kind": "like"}, ana)
    call(old, "viewPost", {"postId": posts[0]}, bob)
    call(old, "viewPost", {"postId": posts[2]}, ana)
    c1 = comment(old, bob, posts[0], "Great crema")
    comment(old, ana, posts[0], "Thanks!", reply_to=c1)
    comment(old, cid, posts[1], "Spicy")
    r = old.req("POST", "/parse/roles", {"name": "Moderators", "ACL": {"*": {"read": True}},
                                         "users": {"__op": "AddRelation", "objects": [ana.ptr, bob.ptr]}},
                master=True)
    assert r.status_code == 201, r.text
    role_id = r.json()["objectId"]
    r = old.req("PUT", "/parse/config", {"params": {"welcome": "hi", "maxPosts": 5, "flags": {"beta": True}}},
                master=True)
    assert r.status_code == 200, r.text
    r = old.req("POST", "/parse/classes/_Installation", {"deviceType": "ios", "installationId": "0123-abcd",
                                                         "channels": ["news"]}, master=True)
    assert r.status_code == 201, r.text
    r = old.req("PUT", "/parse/schemas/Comment", {"indexes": {"by_text": {"text": 1}}}, master=True)
    assert r.status_code == 200, r.text
    job = run_job(old, "cleanupExpiredPosts", {})
    assert job["status"] == "succeeded", job
    # A second session of ana's (the first stays in the client).
    r = old.req("POST", "/parse/login", {"username": "ana", "password": PASSWORD})
    assert r.status_code == 200, r.text
    ana_second = r.json()["sessionToken"]

    # Every class the SQLite catalogue holds (the server is running: a read-only look).
    con = sqlite3.connect(os.path.join(old.data, "moonbase.sqlite"))
    classes = sorted(r[0] for r in con.execute("SELECT className FROM _mb_schema"))
    con.close()
    before_schemas = schemas(old, classes)
    for cls in ("_User", "_Session", "_Role", "_Installation", "_JobStatus", "Post", "Comment", "Reaction", "View"):
        assert cls in classes, cls
    before = snapshot(old, classes)
    members = old.req("GET", "/parse/classes/_User", master=True, params={
        "where": json.dumps({"$relatedTo": {"object": pointer("_Role", role_id), "key": "users"}}),
        "order": "username"}).json()["results"]
    assert [u["username"] for u in members] == ["ana", "bob"]
    before_near, before_text = near(old), text_search(old, "espresso")
    before_near_bob = near(old, session=bob.token)
    assert set(before_near) == set(posts[:3]) and before_text == [posts[0], posts[3]]
    feed_next = before["feed"]["next"]
    assert old.stop() == 0

    # The file holds internal tables the copy must carry (file records, role join tables);
    # migrate fails on one it does not know (test_migrate_refuses_… below).
    con = sqlite3.connect(os.path.join(old.data, "moonbase.sqlite"))
    internal = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table' AND name LIKE '\\_mb\\_%' ESCAPE '\\'")]
    con.close()
    assert "_mb_files" in internal and any(t.startswith("_mb_join:") for t in internal)

    url = PGCluster.get().new_database()
    out = migrate(old.data, url)
    assert out.returncode == 0, out.stderr + out.stdout
    assert "Post" in out.stderr  # progress
    summary = {line.split()[0]: line.split()[1] for line in out.stdout.splitlines()[1:-1]}
    assert summary["Post"] == str(len(before["objects"]["Post"]))
    assert summary["_User"] == "3" and summary["_mb_files"] == "2" and summary["_mb_join:_Role:users"] == "2"
    assert "rows/s" in out.stdout.splitlines()[-1]

    new = server_factory(data=old.data, env={"MOONBASE_DATABASE_URL": url}).start()
    assert sorted(PGCluster.get().psql("SELECT className FROM _mb_schema", url=url).split()) == classes
    assert schemas(new, classes) == before_schemas
    after = snapshot(new, classes)
    assert after["objects"] == before["objects"]
    assert after["by_id"] == before["by_id"]
    assert after["config"] == before["config"]
    assert after["feed"] == before["feed"]
    # The indexes exist in PostgreSQL, not only in the catalogue.
    indexes = PGCluster.get().psql("SELECT indexname FROM pg_indexes ORDER BY 1", url=url).split()
    for name in ("Post__idx__text_text", "Reaction__idx__idx_post_user", "Comment__idx__by_text",
                 "_User__idx__auth_username", "_User__auth_email", "_Session__idx__auth_token",
                 "Post__geo__location"):
        assert name in indexes, (name, indexes)

    # Old password, old session tokens, role membership, files, geo and text queries.
    r = new.req("POST", "/parse/login", {"username": "bob", "password": PASSWORD})
    assert r.status_code == 200 and r.json()["objectId"] == bob.id, r.text
    r = new.req("POST", "/parse/login", {"username": "bob", "password": "wrong"})
    assert r.status_code == 404 and r.json()["code"] == 101
    for token, uid in ((ana.token, ana.id), (ana_second, ana.id), (cid.token, cid.id)):
        r = new.req("GET", "/parse/users/me", session=token)
        assert r.status_code == 200 and r.json()["objectId"] == uid, r.text
    r = new.req("GET", "/parse/classes/_User", master=True, params={
        "where": json.dumps({"$relatedTo": {"object": pointer("_Role", role_id), "key": "users"}}),
        "order": "username"})
    assert r.json()["results"] == members
    for f, body in ((photo, b"\xff\xd8\xff\xe0 not really a jpeg"), (avatar, b"\x89PNG\r\n\x1a\nfake")):
        got = requests.get(f["url"].replace(old.url, new.url), timeout=30)
        assert got.status_code == 200 and got.content == body
    assert near(new) == before_near
    assert near(new, session=bob.token) == before_near_bob
    assert text_search(new, "espresso") == before_text

    # The feed goes on from where the old server was, with new seqs after the copied ones.
    r = new.req("PUT", f"/parse/classes/Post/{posts[1]}", {"text": "Tacos, now with salsa"}, session=bob.token)
    assert r.status_code == 200, r.text
    r = new.req("GET", "/parse/changes/Post", master=True, params={"since": str(feed_next)})
    assert r.status_code == 200, r.text
    rows = r.json()["results"]
    assert [x["object"]["objectId"] for x in rows] == [posts[1]] and rows[0]["seq"] > feed_next

    # The app runs on the copy (its Cloud Code loaded this time): a new post, a like, the timeline.
    assert new.stop() == 0
    app = server_factory(data=old.data, functions=shipped_functions(), env={"MOONBASE_DATABASE_URL": url}).start()
    newer = create_post(app, cid, "Espresso tasting tonight")
    assert call(app, "react", {"postId": newer, "kind": "like"}, ana)["likesCount"] == 1
    timeline = call(app, "timeline", {"location": geo(*HOME)}, bob)
    assert [p["objectId"] for p in timeline] == [newer, posts[2], posts[1], posts[0]]
    assert text_search(app, "espresso") == [posts[0], posts[3], newer]


def test_migrate_refuses_a_database_that_is_not_empty(server_factory):
    old = sqlite_server(server_factory).start()
    r = old.req("POST", "/parse/classes/Note", {"text": "one"})
    assert r.status_code == 201, r.text
    # While the server runs: a consistent snapshot is copied, with a warning to stop it first.
    live = migrate(old.data, PGCluster.get().new_database())
    assert live.returncode == 0 and "may still be running" in live.stderr, live.stderr
    assert old.stop() == 0

    url = PGCluster.get().new_database()
    PGCluster.get().psql('CREATE TABLE "Mine"(id int); INSERT INTO "Mine" VALUES (1)', url=url)
    out = migrate(old.data, url)
    assert out.returncode == 3, out.stderr
    assert "not empty" in out.stderr and '"Mine"' in out.stderr
    # Nothing was written: no Moonbase table appeared.
    tables = PGCluster.get().psql("SELECT tablename FROM pg_tables WHERE schemaname = 'public'", url=url).split()
    assert tables == ["Mine"]

    # A database a copy already went into is not empty either.
    url2 = PGCluster.get().new_database()
    first = migrate(old.data, url2)
    assert first.returncode == 0 and "warning" not in first.stderr, first.stderr  # the server stopped cleanly
    again = migrate(old.data, url2)
    assert again.returncode == 3 and '"Note"' in again.stderr

    # An internal table this build does not know (a newer moonbase made it) stops the copy
    # instead of being left behind; the target stays empty.
    con = sqlite3.connect(os.path.join(old.data, "moonbase.sqlite"))
    con.execute("CREATE TABLE _mb_future(k TEXT PRIMARY KEY)")
    con.execute("INSERT INTO _mb_future VALUES ('x')")
    con.commit()
    con.close()
    url3 = PGCluster.get().new_database()
    out = migrate(old.data, url3)
    assert out.returncode == 1 and "_mb_future" in out.stderr, out.stderr
    assert PGCluster.get().psql('SELECT count(*) FROM pg_tables WHERE tablename = \'Note\'', url=url3).strip() == "0"

    # Misuse: no --to, or not a PostgreSQL URL.
    bad = subprocess.run([BIN, "migrate", "--data", old.data], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--to" in bad.stderr
    bad = subprocess.run([BIN, "migrate", "--to", "mysql://x", "--data", old.data], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
