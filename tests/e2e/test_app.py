"""The reference app (functions/README.md) played over HTTP against the real binary with the shipped
`functions/`: posting and its authority rules, timeline newest/trending, map box, categories,
search, comments paged by 5, reactions, views and hide flags. Accounts, stats, jobs and
concurrency are in test_app_accounts.py and test_app_jobs.py."""
import json

import requests

from test_app_support import (FAR, HOME, app, call, call_error, comment, count, counters, create_post,  # noqa: F401
                              exact_counters, fetch, geo, get, ids, pointer, signup, upload)


def test_hello_route_and_function(app):
    r = requests.get(app.url + "/hello", timeout=30)
    assert r.status_code == 200 and r.json() == {"hello": "world"}
    r = app.call("hello")
    assert r.status_code == 200 and r.json() == {"result": {"hello": "world"}}


def test_post_validation_and_server_owned_fields(app):
    ana = signup(app, "ana", "female")
    bob = signup(app, "bob", "male")
    base = {"text": "Espresso", "category": "Coffee", "location": geo(*HOME), "validityMinutes": 30}

    r = app.req("POST", "/parse/classes/Post", base)  # anonymous: class permission
    assert r.status_code == 403 and r.json()["code"] == 119
    for bad in ({"text": ""}, {"text": "   "}, {"text": "x" * 501}, {"text": 7}, {"category": "Pets"},
                {"validityMinutes": 0}, {"validityMinutes": 10081}, {"validityMinutes": 2.5},
                {"location": None}, {"location": {"lat": 1}}, {"hideLocation": "yes"}):
        body = dict(base, **bad)
        body = {k: v for k, v in body.items() if v is not None}
        r = app.req("POST", "/parse/classes/Post", body, session=ana.token)
        assert r.status_code == 400 and r.json()["code"] == 142, (bad, r.text)
    assert count(app, "Post") == 0

    forged = dict(base, text="é" * 500, author=bob.ptr, likesCount=99, viewsCount=5,
                  expiresAt={"__type": "Date", "iso": "2099-01-01T00:00:00.000Z"})
    r = app.req("POST", "/parse/classes/Post", forged, session=ana.token)
    assert r.status_code == 201, r.text
    pid = r.json()["objectId"]
    post = fetch(app, "Post", pid)
    assert post["author"]["objectId"] == ana.id
    assert counters(app, pid) == {"likesCount": 0, "dislikesCount": 0, "commentsCount": 0, "viewsCount": 0}
    assert [post["hideLocation"], post["hideUsername"], post["hideProfilePic"]] == [False, False, False]
    from datetime import datetime
    created = datetime.fromisoformat(post["createdAt"].replace("Z", "+00:00"))
    expires = datetime.fromisoformat(post["expiresAt"]["iso"].replace("Z", "+00:00"))
    assert abs((expires - created).total_seconds() - 30 * 60) < 5

    # The author edits text, category and flags; counters, author, location, validity and
    # expiry are the server's.
    r = app.req("PUT", f"/parse/classes/Post/{pid}", {"text": "Better espresso", "category": "Drinks",
                                                      "hideUsername": True}, session=ana.token)
    assert r.status_code == 200, r.text
    for change in ({"likesCount": 10}, {"likesCount": {"__op": "Increment", "amount": 1}},
                   {"author": bob.ptr}, {"location": geo(1, 1)}, {"validityMinutes": 99},
                   {"expiresAt": {"__type": "Date", "iso": "2099-01-01T00:00:00.000Z"}},
                   {"text": ""}, {"category": "Pets"}):
        r = app.req("PUT", f"/parse/classes/Post/{pid}", change, session=ana.token)
        assert r.status_code == 400 and r.json()["code"] == 142, (change, r.text)
    r = app.req("PUT", f"/parse/classes/Post/{pid}", {"text": "mine now"}, session=bob.token)
    assert r.status_code == 404 and r.json()["code"] == 101  # ACL: author write only
    post = fetch(app, "Post", pid)
    assert post["text"] == "Better espresso" and post["category"] == "Drinks" and post["likesCount"] == 0

    # Reactions and views are Cloud Code's: clients cannot create them.
    for cls in ("Reaction", "View"):
        r = app.req("POST", f"/parse/classes/{cls}", {"post": pointer("Post", pid), "user": bob.ptr,
                                                     "kind": "like"}, session=bob.token)
        assert r.status_code == 403 and r.json()["code"] == 119, r.text
    assert count(app, "Reaction") == 0 and count(app, "View") == 0


def test_functions_need_a_valid_session(app):
    ana = signup(app, "ana", "female")
    r = app.call("timeline", {"location": geo(*HOME)})
    assert r.status_code == 400 and r.json()["code"] == 142
    r = app.call("timeline", {"location": geo(*HOME)}, session="r:not-a-real-token")
    assert r.status_code == 400 and r.json()["code"] == 209
    assert call(app, "timeline", {"location": geo(*HOME)}, ana) == []


def test_timeline_newest_trending_radius_categories(app):
    ana, bob, cid = signup(app, "ana", "female"), signup(app, "bob", "male"), signup(app, "cid", "other")
    p1 = create_post(app, ana, "oldest", dlat=0.001, category="Coffee")
    p2 = create_post(app, bob, "middle", dlat=0.02, category="Food")
    p3 = create_post(app, cid, "newest", dlat=-0.03, category="Coffee")
    far = create_post(app, ana, "far away", at=FAR, category="Food")
    expired = create_post(app, bob, "expired", dlat=0.002)
    r = app.req("PUT", f"/parse/classes/Post/{expired}",
                {"expiresAt": {"__type": "Date", "iso": "2001-01-01T00:00:00.000Z"}}, master=True)
    assert r.status_code == 200, r.text

    here = {"location": geo(*HOME)}
    assert ids(call(app, "timeline", dict(here, sort="newest"), ana)) == [p3, p2, p1]
    assert ids(call(app, "timeline", here, ana)) == [p3, p2, p1]  # newest by default
    assert ids(call(app, "timeline", dict(here, limit=2, skip=1), ana)) == [p2, p1]
    assert ids(call(app, "timeline", dict(here, radiusMiles=50), ana)) == [far, p3, p2, p1]
    assert ids(call(app, "timeline", dict(here, radiusMiles=1), ana)) == [p1]
    assert ids(call(app, "timeline", dict(here, category="Food"), ana)) == [p2]
    assert ids(call(app, "timeline", dict(here, category="Food", radiusMiles=50), ana)) == [far, p2]

    for who in (bob, cid):
        call(app, "react", {"postId": p1, "kind": "like"}, who)
    call(app, "react", {"postId": p2, "kind": "like"}, cid)
    call(app, "react", {"postId": p3, "kind": "dislike"}, ana)
    assert ids(call(app, "timeline", dict(here, sort="trending"), ana)) == [p1, p2, p3]
    top = call(app, "timeline", dict(here, sort="trending", limit=1), bob)[0]
    assert top["likesCount"] == 2 and top["authorUsername"] == "ana" and top["text"] == "oldest"

    for bad in ({}, {"location": {"latitude": 1}}, dict(here, sort="best"), dict(here, limit=0),
                dict(here, limit="ten"), dict(here, skip=-1), dict(here, radiusMiles=-2),
                dict(here, category="Pets")):
        call_error(app, "timeline", bad, ana, 142)


def test_map_box_and_categories(app):
    ana = signup(app, "ana", "female")
    p1 = create_post(app, ana, "pier", dlat=0.01, category="Sights")
    p2 = create_post(app, ana, "cafe", dlat=-0.01, category="Coffee")
    far = create_post(app, ana, "far", at=FAR, category="Sights")
    box = {"southwest": geo(HOME[0] - 0.05, HOME[1] - 0.05), "northeast": geo(HOME[0] + 0.05, HOME[1] + 0.05)}
    assert ids(call(app, "mapPosts", box, ana)) == [p2, p1]
    assert ids(call(app, "mapPosts", dict(box, category="Sights"), ana)) == [p1]
    assert ids(call(app, "mapPosts", dict(box, limit=1), ana)) == [p2]
    far_box = {"southwest": geo(FAR[0] - 0.01, FAR[1] - 0.01), "northeast": geo(FAR[0] + 0.01, FAR[1] + 0.01)}
    assert ids(call(app, "mapPosts", far_box, ana)) == [far]
    call_error(app, "mapPosts", {"southwest": box["southwest"]}, ana, 142)
    call_error(app, "mapPosts", {"southwest": box["northeast"], "northeast": box["southwest"]}, ana, 142)


def test_search_full_text(app):
    ana = signup(app, "ana", "female")
    p1 = create_post(app, ana, "Great coffee near the Pier", dlat=0.001)
    p2 = create_post(app, ana, "Tacos and COFFEE tonight", dlat=0.02, category="Food")
    p3 = create_post(app, ana, "Sunset view from the hill", dlat=0.01, category="Sights")
    far = create_post(app, ana, "Coffee roastery", at=FAR)
    assert ids(call(app, "searchPosts", {"term": "coffee"}, ana)) == [far, p2, p1]
    assert ids(call(app, "searchPosts", {"term": "CoF"}, ana)) == [far, p2, p1]  # prefix, any case
    assert ids(call(app, "searchPosts", {"term": "coffee tacos"}, ana)) == [p2]  # every word
    assert ids(call(app, "searchPosts", {"term": "sunset hill"}, ana)) == [p3]
    assert call(app, "searchPosts", {"term": "pizza"}, ana) == []
    near = call(app, "searchPosts", {"term": "coffee", "location": geo(*HOME)}, ana)
    assert ids(near) == [p1, p2]  # within 5 miles, nearest first
    assert ids(call(app, "searchPosts", {"term": "coffee", "location": geo(*HOME), "radiusMiles": 100}, ana)) == [p1, p2, far]
    assert ids(call(app, "searchPosts", {"term": "coffee", "limit": 1}, ana)) == [far]
    for bad in ({}, {"term": ""}, {"term": "  !! "}, {"term": 5}, {"term": "coffee", "location": "here"}):
        call_error(app, "searchPosts", bad, ana, 142)


def test_comments_paged_by_five(app):
    ana, bob = signup(app, "ana", "female"), signup(app, "bob", "male")
    pid = create_post(app, ana, "Open mic tonight", category="Arts")
    other = create_post(app, bob, "Another post", category="Arts")
    written = [comment(app, [ana, bob][i % 2], pid, f"comment {i}") for i in range(12)]
    assert counters(app, pid)["commentsCount"] == 12

    page1 = call(app, "comments", {"postId": pid}, bob)
    assert ids(page1) == written[:5]
    assert [c["authorUsername"] for c in page1] == ["ana", "bob", "ana", "bob", "ana"]
    assert [c["text"] for c in page1] == [f"comment {i}" for i in range(5)]
    assert ids(call(app, "comments", {"postId": pid, "skip": 5}, bob)) == written[5:10]
    assert ids(call(app, "comments", {"postId": pid, "skip": 10}, bob)) == written[10:]
    assert ids(call(app, "comments", {"postId": pid, "limit": 3, "skip": 1}, bob)) == written[1:4]

    reply = comment(app, bob, pid, "replying", reply_to=written[0])
    assert call(app, "comments", {"postId": pid, "skip": 12}, ana)[0]["replyTo"]["objectId"] == written[0]
    r = app.req("POST", "/parse/classes/Comment", {"post": pointer("Post", other), "text": "x",
                                                   "replyTo": pointer("Comment", written[0])}, session=bob.token)
    assert r.status_code == 400 and r.json()["code"] == 142  # a reply stays on its post
    for bad in ({"text": ""}, {"text": "y" * 501}, {"post": pointer("Post", "nope123456")}, {"post": None}):
        body = {k: v for k, v in dict({"post": pointer("Post", pid), "text": "ok"}, **bad).items() if v is not None}
        r = app.req("POST", "/parse/classes/Comment", body, session=bob.token)
        assert r.status_code == 400 and r.json()["code"] == 142, (bad, r.text)
    r = app.req("POST", "/parse/classes/Comment", {"post": pointer("Post", pid), "text": "anon"})
    assert r.status_code == 403 and r.json()["code"] == 119
    r = app.req("POST", "/parse/classes/Comment", {"post": pointer("Post", pid), "text": "forged",
                                                   "author": ana.ptr}, session=bob.token)
    assert fetch(app, "Comment", r.json()["objectId"])["author"]["objectId"] == bob.id
    assert counters(app, pid)["commentsCount"] == 14

    r = app.req("DELETE", f"/parse/classes/Comment/{reply}", session=bob.token)
    assert r.status_code == 200, r.text
    r = app.req("DELETE", f"/parse/classes/Comment/{written[1]}", session=ana.token)
    assert r.status_code == 404  # not hers
    assert counters(app, pid)["commentsCount"] == 13 == count(app, "Comment", {"post": pointer("Post", pid)})
    call_error(app, "comments", {"postId": "doesnotexist"}, bob, 101)
    call_error(app, "comments", {}, bob, 142)
    call_error(app, "comments", {"postId": pid, "limit": 0}, bob, 142)


def test_react_like_dislike_none(app):
    ana, bob = signup(app, "ana", "female"), signup(app, "bob", "male")
    pid = create_post(app, ana, "Rooftop bar", category="Drinks")

    def react(kind, who=bob):
        return call(app, "react", {"postId": pid, "kind": kind}, who)

    assert react("like") == {"likesCount": 1, "dislikesCount": 0, "kind": "like"}
    assert react("like") == {"likesCount": 1, "dislikesCount": 0, "kind": "like"}  # repeat: no-op
    assert react("dislike") == {"likesCount": 0, "dislikesCount": 1, "kind": "dislike"}  # moves one count
    assert react("like", ana) == {"likesCount": 1, "dislikesCount": 1, "kind": "like"}
    assert react("none") == {"likesCount": 1, "dislikesCount": 0, "kind": "none"}
    assert react("none") == {"likesCount": 1, "dislikesCount": 0, "kind": "none"}
    assert counters(app, pid) == exact_counters(app, pid) == {"likesCount": 1, "dislikesCount": 0,
                                                             "commentsCount": 0, "viewsCount": 0}
    assert count(app, "Reaction", {"user": bob.ptr}) == 0
    call_error(app, "react", {"postId": "doesnotexist", "kind": "like"}, bob, 101)
    call_error(app, "react", {"postId": pid, "kind": "love"}, bob, 142)
    call_error(app, "react", {"kind": "like"}, bob, 142)
    rid = app.req("GET", "/parse/classes/Reaction", session=ana.token).json()["results"][0]["objectId"]
    r = app.req("DELETE", f"/parse/classes/Reaction/{rid}", session=ana.token)
    assert r.status_code == 403 and r.json()["code"] == 119  # only Cloud Code deletes reactions


def test_views_count_once_and_never_the_author(app):
    ana, bob, cid = signup(app, "ana", "female"), signup(app, "bob", "male"), signup(app, "cid", "other")
    pid = create_post(app, ana, "Gallery opening", category="Arts")
    seen = call(app, "viewPost", {"postId": pid}, ana)
    assert seen["objectId"] == pid and seen["viewsCount"] == 0  # the author's view never counts
    assert call(app, "viewPost", {"postId": pid}, bob)["viewsCount"] == 1
    assert call(app, "viewPost", {"postId": pid}, bob)["viewsCount"] == 1
    seen = call(app, "viewPost", {"postId": pid}, cid)
    assert seen["viewsCount"] == 2 and seen["authorUsername"] == "ana" and seen["text"] == "Gallery opening"
    dan = signup(app, "dan", "male")
    call(app, "react", {"postId": pid, "kind": "like"}, dan)  # reacting or commenting is no view
    comment(app, dan, pid, "nice")
    assert counters(app, pid) == exact_counters(app, pid) == {"likesCount": 1, "dislikesCount": 0,
                                                             "commentsCount": 1, "viewsCount": 2}
    call_error(app, "viewPost", {"postId": "doesnotexist"}, bob, 101)
    call_error(app, "viewPost", {}, bob, 142)


def test_hide_flags_strip_fields_for_everyone_but_the_author(app):
    ana, bob = signup(app, "ana", "female"), signup(app, "bob", "male")
    avatar = upload(app, "ana.png")
    r = app.req("PUT", "/parse/users/me", {"avatar": avatar}, session=ana.token)
    assert r.status_code == 200, r.text
    hidden = create_post(app, ana, "secret spot", hideLocation=True, hideUsername=True, hideProfilePic=True)
    only_pic = create_post(app, ana, "no face", dlat=0.001, hideProfilePic=True)
    shown = create_post(app, ana, "open spot", dlat=0.002)

    def check_stripped(o):
        assert "location" not in o and "author" not in o and "authorUsername" not in o and "authorAvatar" not in o
        assert o["text"] == "secret spot"

    def check_full(o):
        assert o["location"]["latitude"] == HOME[0] and o["author"]["objectId"] == ana.id
        assert o["authorUsername"] == "ana" and o["authorAvatar"]["name"] == avatar["name"]

    for o in (get(app, "Post", hidden, session=bob.token).json(), get(app, "Post", hidden).json(),
              call(app, "viewPost", {"postId": hidden}, bob)):
        check_stripped(o)
    projected = get(app, "Post", hidden, session=bob.token, keys="location,text").json()
    assert "location" not in projected  # a projection cannot dodge the flags
    check_full(get(app, "Post", hidden, session=ana.token).json())
    check_full(call(app, "viewPost", {"postId": hidden}, ana))

    listed = {o["objectId"]: o for o in call(app, "timeline", {"location": geo(*HOME)}, bob)}
    check_stripped(listed[hidden])
    assert "authorAvatar" not in listed[only_pic] and listed[only_pic]["authorUsername"] == "ana"
    assert listed[only_pic]["location"]["latitude"] == HOME[0] + 0.001
    assert listed[shown]["authorAvatar"]["name"] == avatar["name"] and listed[shown]["authorUsername"] == "ana"
    found = app.req("GET", "/parse/classes/Post", session=bob.token,
                    params={"where": json.dumps({"objectId": hidden})}).json()["results"]
    check_stripped(found[0])
    mine = {o["objectId"]: o for o in call(app, "myPosts", {}, ana)}
    check_full(mine[hidden])
