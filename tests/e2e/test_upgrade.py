"""The database across releases: a file written by the previous release (internal tables
unversioned, `PRAGMA user_version` 1) is upgraded in place when the server opens it, with every
user, session, object, config parameter, file and usage row kept; `moonbase backup` copies a live
database that another server then serves."""
import json
import os
import shutil
import sqlite3
import subprocess

import pytest
import requests

from conftest import APP_ID, BIN, MASTER_KEY

pytestmark = pytest.mark.sqlite_only("upgrades and backs up the SQLite file itself")


def db_path(s):
    return os.path.join(s.data, "moonbase.sqlite")


def user_version(path):
    con = sqlite3.connect(path)
    try:
        return con.execute("PRAGMA user_version").fetchone()[0]
    finally:
        con.close()


def GEO(lat, lng):
    return {"__type": "GeoPoint", "latitude": lat, "longitude": lng}


def cli(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, MOONBASE_MASTER_KEY=MASTER_KEY))


def test_previous_release_database_is_upgraded_in_place(server_factory):
    s = server_factory().start()
    r = s.req("POST", "/parse/users", {"username": "ann", "password": "pw-ann", "email": "ann@example.com"})
    assert r.status_code == 201, r.text
    token = r.json()["sessionToken"]
    post = s.req("POST", "/parse/classes/Post", {"title": "kept"}, session=token).json()["objectId"]
    assert s.req("PUT", "/parse/config", {"params": {"motd": "hi"}}, master=True).status_code == 200
    f = requests.post(s.url + "/parse/files/note.txt", data=b"file body", timeout=30,
                      headers={"X-Parse-Application-Id": APP_ID, "Content-Type": "text/plain"})
    assert f.status_code == 201, f.text
    before = s.req("GET", "/admin/usage", params={"by": "account"}, master=True).json()["rows"]
    units_before = next(r["units"] for r in before if r["key"] == "app")
    assert units_before > 0
    spot = s.req("POST", "/parse/classes/Spot", {"at": GEO(10.5, 20.5)}, master=True)
    assert spot.status_code == 201, spot.text
    s.stop()
    assert user_version(db_path(s)) == 5

    # What the previous release left: the same tables, made by their modules without a version
    # (only the schema and request-id tables were versioned, as 1), and a usage table from
    # before its `events` column.
    con = sqlite3.connect(db_path(s))
    con.execute("ALTER TABLE _mb_usage DROP COLUMN events")
    con.execute("PRAGMA user_version=1")
    # Releases before schema version 5 kept a GeoPoint's R*Tree with an insert trigger as well.
    con.execute("""CREATE TRIGGER "Spot__geo__at__ai" AFTER INSERT ON "Spot" BEGIN
      INSERT INTO "Spot__geo__at"(id, minLat, maxLat, minLng, maxLng) SELECT id, la, la, ln, ln FROM (SELECT new.rid AS id, la, ln
        FROM (SELECT json_extract(new.data,'$.at.latitude') AS la, json_extract(new.data,'$.at.longitude') AS ln)
        WHERE la IS NOT NULL AND ln IS NOT NULL);
      END""")
    con.commit()
    con.close()

    s.start()
    assert user_version(db_path(s)) == 5
    con = sqlite3.connect(db_path(s))
    triggers = sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'Spot'"))
    con.close()
    assert triggers == ["Spot__geo__at__ad", "Spot__geo__at__au"], triggers
    # Points stored before are found; a point created after the upgrade is stored once, and found.
    box = {"at": {"$within": {"$box": [GEO(10, 20), GEO(11, 21)]}}}
    assert [o["objectId"] for o in s.req("GET", "/parse/classes/Spot", params={"where": json.dumps(box)}).json()["results"]] \
        == [spot.json()["objectId"]]
    spot2 = s.req("POST", "/parse/classes/Spot", {"at": GEO(10.25, 20.25)}, master=True)
    assert spot2.status_code == 201, spot2.text
    found = s.req("GET", "/parse/classes/Spot", params={"where": json.dumps(box)}).json()["results"]
    assert sorted(o["objectId"] for o in found) == sorted([spot.json()["objectId"], spot2.json()["objectId"]])
    # The session made before the upgrade still works, and so does the password.
    me = s.req("GET", "/parse/users/me", session=token)
    assert me.status_code == 200 and me.json()["username"] == "ann", me.text
    login = s.req("POST", "/parse/login", {"username": "ann", "password": "pw-ann"})
    assert login.status_code == 200, login.text
    assert s.req("GET", f"/parse/classes/Post/{post}", session=token).json()["title"] == "kept"
    # The change feed written before the upgrade reads on, and a later write supersedes its row.
    feed = s.req("GET", "/parse/changes/Post", params={"since": 0}, master=True).json()["results"]
    assert [(r["op"], r["object"]["title"]) for r in feed] == [("save", "kept")], feed
    assert s.req("PUT", f"/parse/classes/Post/{post}", {"title": "edited"}, session=token).status_code == 200
    feed = s.req("GET", "/parse/changes/Post", params={"since": 0}, master=True).json()["results"]
    assert [(r["op"], r["object"]["title"]) for r in feed] == [("save", "edited")], feed
    assert s.req("GET", "/parse/config").json()["params"] == {"motd": "hi"}
    g = requests.get(f"{s.url}/parse/files/{APP_ID}/{f.json()['name']}", timeout=10)
    assert g.status_code == 200 and g.content == b"file body"
    # The email stays unique case-insensitively (the index the upgrade re-declares).
    dup = s.req("POST", "/parse/users", {"username": "ann2", "password": "pw", "email": "ANN@example.com"})
    assert dup.status_code == 400 and dup.json()["code"] == 203, dup.text
    # Usage rows written before the upgrade are reported, with the restored `events` column.
    u = cli("usage", "--json", "--by", "account", "--data", s.data)
    assert u.returncode == 0, u.stdout + u.stderr
    app = next(r for r in json.loads(u.stdout)["rows"] if r["key"] == "app")
    assert app["units"] >= units_before and "events" in app, app


def test_backup_copies_a_live_database(server_factory, tmp_path):
    s = server_factory().start()
    for i in range(20):
        assert s.req("POST", "/parse/classes/Item", {"n": i}, master=True).status_code == 201
    out = tmp_path / "copy.sqlite"
    r = cli("backup", str(out), "--data", s.data)
    assert r.returncode == 0, r.stdout + r.stderr
    # Writes go on while the copy is served elsewhere.
    assert s.req("POST", "/parse/classes/Item", {"n": 20}, master=True).status_code == 201

    data2 = tmp_path / "data2"
    data2.mkdir()
    shutil.copy(out, data2 / "moonbase.sqlite")
    s2 = server_factory(data=str(data2)).start()
    c = s2.req("GET", "/parse/classes/Item", params={"count": 1, "limit": 0}, master=True)
    assert c.status_code == 200 and c.json()["count"] == 20, c.text
    assert s.req("GET", "/parse/classes/Item", params={"count": 1, "limit": 0}, master=True).json()["count"] == 21

    # No database, no backup (and no empty file left behind).
    missing = cli("backup", str(tmp_path / "none.sqlite"), "--data", str(tmp_path / "nothing"))
    assert missing.returncode != 0 and not (tmp_path / "none.sqlite").exists()
