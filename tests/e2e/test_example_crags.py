"""examples/crags end to end: crags and route reviews with photos, uploaded from the device later.
Every rule of the app's README has a test here, through the real binary and its Lua."""
import concurrent.futures
import os
import subprocess

import pytest
import requests

from conftest import BIN, ROOT, example_files, wait_job

GEO = lambda lat, lng: {"__type": "GeoPoint", "latitude": lat, "longitude": lng}
DATE = lambda iso: {"__type": "Date", "iso": iso}
PTR = lambda cls, oid: {"__type": "Pointer", "className": cls, "objectId": oid}
FONT = GEO(48.4470, 2.6360)


@pytest.fixture
def app(server_factory):
    return server_factory(functions=example_files("crags", "functions"), cron=example_files("crags", "cron")).start()


def signup(s, name):
    r = s.req("POST", "/parse/users", {"username": name, "password": "pw-" + name, "email": name + "@x.test"})
    assert r.status_code == 201, r.text
    return r.json()["sessionToken"], r.json()["objectId"]


def crag(s, token, name="Bas Cuvier", loc=FONT, **extra):
    r = s.req("POST", "/parse/classes/Crag", {"name": name, "address": "Fontainebleau", "location": loc, **extra},
              session=token)
    assert r.status_code == 201, r.text
    return r.json()["objectId"]


def review(cragId, clientId, **extra):
    r = {"crag": PTR("Crag", cragId), "climbedAt": DATE("2026-05-01T10:00:00.000Z"), "difficulty": "hard",
         "style": "free", "sent": True, "project": False, "clientId": clientId}
    r.update(extra)
    return r


def upload(s, token, reviews):
    return s.call("uploadReviews", {"reviews": reviews}, session=token)


def file_upload(s, name, data=b"\x89PNG fake image bytes"):
    r = requests.post(s.url + "/parse/files/" + name, data=data,
                      headers={"X-Parse-Application-Id": "moonbase", "Content-Type": "image/png"}, timeout=30)
    assert r.status_code == 201, r.text
    return {"__type": "File", "name": r.json()["name"], "url": r.json()["url"]}


def file_exists(s, f):
    return requests.get(f["url"], timeout=30).status_code == 200


def test_check_passes_for_the_example():
    fn = os.path.join(ROOT, "examples", "crags", "functions")
    cron = os.path.join(ROOT, "examples", "crags", "cron")
    r = subprocess.run([BIN, "check", fn, "--cron", cron], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 error(s)" in r.stdout


def test_functions_need_a_session(app):
    for name in ["nearbyCrags", "cragReviews", "myTimeline", "myProjects", "cragStats", "uploadReviews",
                 "setDefaultCrag", "myProfile"]:
        r = app.call(name, {})
        assert r.status_code == 400 and r.json()["code"] == 142, (name, r.text)
    r = app.call("myTimeline", {}, session="r:not-a-real-token")
    assert r.json()["code"] == 209


def test_crag_validation_and_permissions(app):
    t, _ = signup(app, "ada")
    anon = app.req("POST", "/parse/classes/Crag", {"name": "x", "location": FONT})
    assert anon.status_code == 403 and anon.json()["code"] == 119
    for bad, msg in [({"location": FONT}, "name"), ({"name": "  ", "location": FONT}, "name"),
                     ({"name": "x"}, "location"), ({"name": "x", "location": GEO(91, 0)}, "location"),
                     ({"name": "x" * 101, "location": FONT}, "name"),
                     ({"name": "x", "location": FONT, "avatar": "not a file"}, "avatar")]:
        r = app.req("POST", "/parse/classes/Crag", bad, session=t)
        assert r.status_code == 400 and r.json()["code"] == 142 and msg in r.json()["error"], (bad, r.text)
    cid = crag(app, t)
    got = app.req("GET", f"/parse/classes/Crag/{cid}", session=t).json()
    assert got["reviewsCount"] == 0
    # curated with the master key only
    r = app.req("PUT", f"/parse/classes/Crag/{cid}", {"name": "renamed"}, session=t)
    assert r.status_code == 403 and r.json()["code"] == 119
    assert app.req("PUT", f"/parse/classes/Crag/{cid}", {"name": "renamed"}, master=True).status_code == 200


def test_review_rules_author_set_by_server_and_author_only_writes(app):
    ada, adaId = signup(app, "ada")
    bob, bobId = signup(app, "bob")
    cid = crag(app, ada)
    body = review(cid, "dev-1")
    body["author"] = PTR("_User", bobId)        # a client value is overwritten
    r = app.req("POST", "/parse/classes/Review", body, session=ada)
    assert r.status_code == 201, r.text
    rid = r.json()["objectId"]
    got = app.req("GET", f"/parse/classes/Review/{rid}", session=bob).json()     # public read
    assert got["author"]["objectId"] == adaId
    assert got["orientation"] == "none"
    # only the author writes
    r = app.req("PUT", f"/parse/classes/Review/{rid}", {"sent": False}, session=bob)
    assert r.status_code == 404 and r.json()["code"] == 101
    assert app.req("PUT", f"/parse/classes/Review/{rid}", {"sent": False}, session=ada).status_code == 200
    for change, msg in [({"crag": PTR("Crag", crag(app, ada, "Other"))}, "another crag"),
                        ({"author": PTR("_User", bobId)}, "author"), ({"clientId": "other"}, "clientId"),
                        ({"difficulty": "extreme"}, "difficulty"), ({"style": "aid"}, "style"),
                        ({"sent": "yes"}, "sent"), ({"orientation": "sideways"}, "orientation"),
                        ({"climbedAt": "yesterday"}, "climbedAt"), ({"image": {"url": "x"}}, "image")]:
        r = app.req("PUT", f"/parse/classes/Review/{rid}", change, session=ada)
        assert r.status_code == 400 and r.json()["code"] == 142 and msg in r.json()["error"], (change, r.text)
    # a review of a crag that does not exist
    r = app.req("POST", "/parse/classes/Review", review("nosuchcrag", "dev-2"), session=ada)
    assert r.status_code == 404 and r.json()["code"] == 101
    assert app.req("POST", "/parse/classes/Review", review(cid, "dev-3")).json()["code"] == 119   # anonymous


def test_upload_is_idempotent_and_all_or_nothing(app):
    ada, _ = signup(app, "ada")
    cid = crag(app, ada)
    batch = [review(cid, "c1"), review(cid, "c2", difficulty="easy", sent=False, project=True)]
    first = upload(app, ada, batch)
    assert first.status_code == 200, first.text
    ids = first.json()["result"]["results"]
    assert set(ids) == {"c1", "c2"}
    # the answer was lost: the device retries the same upload, plus one new review
    again = upload(app, ada, batch + [{"cragId": cid, **review(cid, "c3")}])
    assert again.status_code == 200, again.text
    ids2 = again.json()["result"]["results"]
    assert ids2["c1"] == ids["c1"] and ids2["c2"] == ids["c2"] and ids2["c3"] not in ids.values()
    count = app.req("GET", "/parse/classes/Review", params={"limit": 0, "count": 1}, session=ada).json()["count"]
    assert count == 3
    assert app.req("GET", f"/parse/classes/Crag/{cid}", session=ada).json()["reviewsCount"] == 3
    # one invalid review: nothing of this upload is created
    bad = upload(app, ada, [review(cid, "c4"), review(cid, "c5", difficulty="impossible")])
    assert bad.status_code == 400 and bad.json()["code"] == 142 and "c5" in bad.json()["error"]
    assert app.req("GET", "/parse/classes/Review", params={"limit": 0, "count": 1}, session=ada).json()["count"] == 3
    # shape errors
    assert upload(app, ada, []).json()["code"] == 142
    assert upload(app, ada, [review(cid, "d")] * 2).json()["code"] == 142        # same clientId twice
    assert upload(app, ada, [review(cid, f"n{i}") for i in range(51)]).json()["code"] == 142
    # another user's clientIds are their own
    bob, _ = signup(app, "bob")
    other = upload(app, bob, [review(cid, "c1")]).json()["result"]["results"]
    assert other["c1"] != ids["c1"]


def test_concurrent_retries_create_nothing_twice(app):
    ada, _ = signup(app, "ada")
    cid = crag(app, ada)
    batch = [review(cid, f"x{i}") for i in range(10)]
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as ex:
        answers = list(ex.map(lambda _: upload(app, ada, batch), range(6)))
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    maps = [a.json()["result"]["results"] for a in answers]
    assert all(m == maps[0] for m in maps)
    assert app.req("GET", "/parse/classes/Review", params={"limit": 0, "count": 1}, session=ada).json()["count"] == 10
    assert app.req("GET", f"/parse/classes/Crag/{cid}", session=ada).json()["reviewsCount"] == 10


def test_nearby_crags_nearest_first_within_radius_with_counts(app):
    ada, _ = signup(app, "ada")
    near = crag(app, ada, "Near", GEO(48.4470, 2.6360))
    mid = crag(app, ada, "Mid", GEO(48.5000, 2.7000))            # ~7.5 km away
    far = crag(app, ada, "Far", GEO(37.7420, -119.6020))         # Yosemite
    upload(app, ada, [review(mid, "m1"), review(mid, "m2")])
    r = app.call("nearbyCrags", {"location": GEO(48.4471, 2.6361)}, session=ada)
    assert r.status_code == 200, r.text
    got = r.json()["result"]
    assert [c["objectId"] for c in got] == [near, mid]
    assert got[1]["reviewsCount"] == 2 and got[0]["reviewsCount"] == 0
    small = app.call("nearbyCrags", {"location": GEO(48.4471, 2.6361), "radiusKm": 1}, session=ada).json()["result"]
    assert [c["objectId"] for c in small] == [near]
    assert app.call("nearbyCrags", {"location": GEO(0, 0), "radiusKm": 1}, session=ada).json()["result"] == []
    for bad in [{}, {"location": "here"}, {"location": FONT, "radiusKm": -1}, {"location": FONT, "radiusKm": "far"}]:
        assert app.call("nearbyCrags", bad, session=ada).json()["code"] == 142, bad
    assert far


def test_crag_reviews_timeline_projects_and_stats(app):
    ada, _ = signup(app, "ada")
    bob, _ = signup(app, "bob")
    cid = crag(app, ada)
    upload(app, ada, [
        review(cid, "a1", climbedAt=DATE("2026-01-01T10:00:00.000Z"), difficulty="easy", style="free", sent=True),
        review(cid, "a2", climbedAt=DATE("2026-03-01T10:00:00.000Z"), difficulty="hard", style="noFeet", sent=False,
               project=True),
    ])
    upload(app, bob, [review(cid, "b1", climbedAt=DATE("2026-02-01T10:00:00.000Z"), difficulty="hard",
                             style="handFoot", sent=True)])
    r = app.call("cragReviews", {"cragId": cid}, session=bob).json()["result"]
    assert [x["clientId"] for x in r] == ["a2", "b1", "a1"]                       # newest climb first
    assert r[0]["crag"]["name"] == "Bas Cuvier"                                  # crag included
    page = app.call("cragReviews", {"cragId": cid, "limit": 1, "skip": 1}, session=bob).json()["result"]
    assert [x["clientId"] for x in page] == ["b1"]
    mine = app.call("myTimeline", {}, session=ada).json()["result"]
    assert [x["clientId"] for x in mine] == ["a2", "a1"]
    assert [x["clientId"] for x in app.call("myProjects", {}, session=ada).json()["result"]] == ["a2"]
    assert app.call("myProjects", {}, session=bob).json()["result"] == []
    stats = app.call("cragStats", {"cragId": cid}, session=bob).json()["result"]
    assert stats == {"reviews": 3, "byDifficulty": {"easy": 1, "moderate": 0, "hard": 2, "unknown": 0},
                     "byStyle": {"free": 1, "handFoot": 1, "noFeet": 1, "unknown": 0}, "sentPercent": 66.7}
    empty = app.call("cragStats", {"cragId": crag(app, ada, "Empty")}, session=ada).json()["result"]
    assert empty["reviews"] == 0 and empty["sentPercent"] == 0
    for name in ["cragReviews", "cragStats"]:
        r = app.call(name, {"cragId": "nosuchcrag"}, session=ada)
        assert r.status_code == 404 and r.json()["code"] == 101
        assert app.call(name, {}, session=ada).json()["code"] == 142
    assert app.call("cragReviews", {"cragId": cid, "limit": 0}, session=ada).json()["code"] == 142


def test_default_crag_profile(app):
    ada, adaId = signup(app, "ada")
    bob, _ = signup(app, "bob")
    cid = crag(app, ada)
    assert app.call("myProfile", {}, session=ada).json()["result"] == {}
    r = app.call("setDefaultCrag", {"cragId": cid}, session=ada)
    assert r.status_code == 200, r.text
    assert app.call("setDefaultCrag", {"cragId": cid}, session=ada).status_code == 200   # an update, not a second row
    prof = app.call("myProfile", {}, session=ada).json()["result"]
    assert prof["defaultCrag"]["objectId"] == cid and prof["defaultCrag"]["name"] == "Bas Cuvier"
    assert app.req("GET", "/parse/classes/Profile", params={"limit": 0, "count": 1}, master=True).json()["count"] == 1
    # profiles are private and written only through the function
    assert app.req("GET", "/parse/classes/Profile", session=bob).json()["results"] == []
    assert app.req("POST", "/parse/classes/Profile", {"defaultCrag": PTR("Crag", cid)}, session=bob).json()["code"] == 119
    r = app.call("setDefaultCrag", {"cragId": "nosuchcrag"}, session=ada)
    assert r.status_code == 404 and r.json()["code"] == 101


def test_deleting_a_review_removes_its_files_after_commit(app):
    ada, _ = signup(app, "ada")
    cid = crag(app, ada)
    img, thumb = file_upload(app, "route.png"), file_upload(app, "route-small.png")
    rid = upload(app, ada, [review(cid, "p1", image=img, thumbnail=thumb)]).json()["result"]["results"]["p1"]
    assert file_exists(app, img) and file_exists(app, thumb)
    assert app.req("DELETE", f"/parse/classes/Review/{rid}", session=ada).status_code == 200
    assert not file_exists(app, img) and not file_exists(app, thumb)
    assert app.req("GET", f"/parse/classes/Crag/{cid}", session=ada).json()["reviewsCount"] == 0


def test_deleting_a_crag_removes_reviews_files_and_profile_choice(app):
    ada, _ = signup(app, "ada")
    bob, _ = signup(app, "bob")
    cid = crag(app, ada)
    other = crag(app, ada, "Other")
    img = file_upload(app, "a.png")
    upload(app, ada, [review(cid, "r1", image=img), review(other, "r2")])
    upload(app, bob, [review(cid, "r3")])
    app.call("setDefaultCrag", {"cragId": cid}, session=bob)
    assert app.req("DELETE", f"/parse/classes/Crag/{cid}", session=ada).json()["code"] == 119     # master only
    assert app.req("DELETE", f"/parse/classes/Crag/{cid}", master=True).status_code == 200
    left = app.req("GET", "/parse/classes/Review", master=True).json()["results"]
    assert [r["clientId"] for r in left] == ["r2"]
    assert not file_exists(app, img)
    assert "defaultCrag" not in app.call("myProfile", {}, session=bob).json()["result"]


def test_deleting_an_account_removes_reviews_files_and_profile(app):
    ada, adaId = signup(app, "ada")
    bob, _ = signup(app, "bob")
    cid = crag(app, bob)
    img = file_upload(app, "mine.png")
    upload(app, ada, [review(cid, "a1", image=img), review(cid, "a2")])
    upload(app, bob, [review(cid, "b1")])
    app.call("setDefaultCrag", {"cragId": cid}, session=ada)
    assert app.req("DELETE", f"/parse/users/{adaId}", session=ada).status_code == 200
    left = app.req("GET", "/parse/classes/Review", master=True).json()["results"]
    assert [r["clientId"] for r in left] == ["b1"]
    assert not file_exists(app, img)
    assert app.req("GET", "/parse/classes/Profile", master=True).json()["results"] == []
    assert app.req("GET", f"/parse/classes/Crag/{cid}", session=bob).json()["reviewsCount"] == 1


def test_seed_and_recount_jobs(app):
    r = app.req("POST", "/parse/jobs/seedDemo", {}, master=True)
    assert r.status_code == 200
    st = wait_job(app, r.headers["X-Parse-Job-Status-Id"], timeout=120)
    assert st["status"] == "succeeded", st.get("message")
    login = app.req("POST", "/parse/login", {"username": "alex", "password": "moonbase-demo"})
    assert login.status_code == 200
    token = login.json()["sessionToken"]
    near = app.call("nearbyCrags", {"location": GEO(48.4470, 2.6360)}, session=token).json()["result"]
    assert len(near) == 3 and sum(c["reviewsCount"] for c in near) == 18
    # drift a counter with the master key; the recount job repairs it
    app.req("PUT", f"/parse/classes/Crag/{near[0]['objectId']}", {"reviewsCount": 99}, master=True)
    r = app.req("POST", "/parse/jobs/recountReviews", {}, master=True)
    st = wait_job(app, r.headers["X-Parse-Job-Status-Id"])
    assert st["status"] == "succeeded" and '"fixed":1' in st["message"], st
    assert app.req("GET", f"/parse/classes/Crag/{near[0]['objectId']}", master=True).json()["reviewsCount"] == 6
