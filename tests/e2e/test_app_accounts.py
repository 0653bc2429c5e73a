"""The reference app's account side (functions/README.md): stats computed exactly, myPosts, myData, and the
cascades: deleteAccount, a post deleted over REST, a user deleted with the master key."""
from test_app_support import (HOME, PASSWORD, app, call, call_error, comment, count, counters,  # noqa: F401
                              create_post, exact_counters, fetch, file_exists, get, ids, pct, pointer,
                              signup, upload)


def test_stats_are_exact(app):
    ana = signup(app, "ana", "female")
    bea, carl = signup(app, "bea", "female"), signup(app, "carl", "male")
    dee, eve = signup(app, "dee", "other"), signup(app, "eve", "female")
    p1 = create_post(app, ana, "first")
    p2 = create_post(app, ana, "second", dlat=0.001)
    other = create_post(app, bea, "bea's own")

    for who, pid in ((bea, p1), (bea, p2), (carl, p1), (dee, p2), (ana, p1), (ana, p2)):
        call(app, "viewPost", {"postId": pid}, who)
    call(app, "react", {"postId": p1, "kind": "like"}, bea)
    call(app, "react", {"postId": p1, "kind": "dislike"}, carl)
    call(app, "react", {"postId": p2, "kind": "like"}, ana)  # her own reaction is still a reaction
    comment(app, bea, p2, "nice")
    comment(app, eve, p1, "seen it from afar")  # engaged without a view
    comment(app, ana, p1, "thanks all")
    call(app, "viewPost", {"postId": other}, ana)  # views of others' posts are not hers

    # Engaged (commented or reacted, others): bea, carl, eve = 3 of bea, carl, dee, eve = 4.
    # Viewers (others): bea, carl, dee -> one female, one male, one other.
    assert call(app, "stats", {}, ana) == {
        "account": {"posts": 2, "comments": 1, "views": 4},
        "insights": {"popularity": pct(2, 3), "engagement": pct(3, 4)},
        "audience": {"female": pct(1, 3), "male": pct(1, 3), "other": pct(1, 3)},
    }
    assert pct(2, 3) == 66.7 and pct(3, 4) == 75.0 and pct(1, 3) == 33.3
    assert call(app, "stats", {}, bea) == {
        "account": {"posts": 1, "comments": 1, "views": 1},
        "insights": {"popularity": 0, "engagement": 0},
        "audience": {"female": 100, "male": 0, "other": 0},
    }
    assert call(app, "stats", {}, dee) == {
        "account": {"posts": 0, "comments": 0, "views": 0},
        "insights": {"popularity": 0, "engagement": 0},
        "audience": {"female": 0, "male": 0, "other": 0},
    }
    r = app.call("stats", {})
    assert r.status_code == 400 and r.json()["code"] == 142


def test_my_posts_and_my_data(app):
    ana, bea = signup(app, "ana", "female"), signup(app, "bea", "female")
    p1 = create_post(app, ana, "one")
    p2 = create_post(app, ana, "two", hideLocation=True)
    p3 = create_post(app, ana, "three")
    r = app.req("PUT", f"/parse/classes/Post/{p3}", {"expiresAt": {"__type": "Date", "iso": "2001-01-01T00:00:00.000Z"}},
                master=True)
    assert r.status_code == 200, r.text
    pb = create_post(app, bea, "bea's")
    assert ids(call(app, "myPosts", {}, ana)) == [p3, p2, p1]  # expired included, newest first
    assert ids(call(app, "myPosts", {"limit": 1, "skip": 1}, ana)) == [p2]
    assert "location" in call(app, "myPosts", {}, ana)[1]  # the author sees her hidden fields
    call_error(app, "myPosts", {"limit": -1}, ana, 142)

    c1 = comment(app, bea, p1, "hello")
    c2 = comment(app, bea, pb, "my own")
    call(app, "react", {"postId": p1, "kind": "like"}, bea)
    call(app, "react", {"postId": p2, "kind": "like"}, bea)
    call(app, "react", {"postId": p3, "kind": "dislike"}, bea)
    data = call(app, "myData", {}, bea)
    assert ids(data["posts"]) == [pb]
    assert ids(data["comments"]) == [c2, c1] and {c["authorUsername"] for c in data["comments"]} == {"bea"}
    assert ids(data["likes"]) == [p2, p1] and ids(data["dislikes"]) == [p3]
    assert "location" not in data["likes"][0]  # ana's hidden location stays hidden from bea
    call(app, "react", {"postId": p2, "kind": "none"}, bea)
    data = call(app, "myData", {}, bea)
    assert ids(data["likes"]) == [p1] and ids(data["dislikes"]) == [p3]
    empty = call(app, "myData", {}, signup(app, "cid", "other"))
    assert empty == {"posts": [], "comments": [], "likes": [], "dislikes": []}


def test_delete_account_cascades_in_one_transaction(app):
    ana, bea, cid = signup(app, "ana", "female"), signup(app, "bea", "female"), signup(app, "cid", "other")
    photo = upload(app, "spot.png")
    avatar = upload(app, "ana.png")
    assert app.req("PUT", "/parse/users/me", {"avatar": avatar}, session=ana.token).status_code == 200
    a1 = create_post(app, ana, "with a photo", photo=photo)
    a2 = create_post(app, ana, "plain")
    b1 = create_post(app, bea, "bea's post")
    # Others on ana's posts.
    comment(app, bea, a1, "bea on ana")
    call(app, "react", {"postId": a1, "kind": "like"}, bea)
    call(app, "viewPost", {"postId": a1}, bea)
    # Ana on bea's post, next to cid.
    comment(app, ana, b1, "ana on bea")
    call(app, "react", {"postId": b1, "kind": "dislike"}, ana)
    call(app, "viewPost", {"postId": b1}, ana)
    comment(app, cid, b1, "cid on bea")
    call(app, "react", {"postId": b1, "kind": "like"}, cid)
    call(app, "viewPost", {"postId": b1}, cid)
    assert counters(app, b1) == {"likesCount": 1, "dislikesCount": 1, "commentsCount": 2, "viewsCount": 2}

    call_error(app, "deleteAccount", {"password": "wrong password"}, ana, 101)
    call_error(app, "deleteAccount", {}, ana, 142)
    assert get(app, "Post", a1, master=True).status_code == 200
    result = call(app, "deleteAccount", {"password": PASSWORD}, ana)
    assert result == {"deleted": {"posts": 2, "comments": 2, "reactions": 2, "views": 2}}

    for pid in (a1, a2):
        assert get(app, "Post", pid, master=True).status_code == 404
    assert app.req("GET", f"/parse/users/{ana.id}", master=True).status_code == 404
    for cls, field in (("Comment", "author"), ("Reaction", "user"), ("View", "user")):
        assert count(app, cls, {field: ana.ptr}) == 0
        assert count(app, cls, {"post": pointer("Post", a1)}) == 0
    assert counters(app, b1) == exact_counters(app, b1) == {"likesCount": 1, "dislikesCount": 0,
                                                           "commentsCount": 1, "viewsCount": 1}
    assert not file_exists(app, photo) and not file_exists(app, avatar)
    r = app.call("timeline", {"location": {"__type": "GeoPoint", "latitude": HOME[0], "longitude": HOME[1]}},
                 session=ana.token)
    assert r.status_code == 400 and r.json()["code"] == 209  # sessions are gone
    r = app.req("POST", "/parse/login", {"username": "ana", "password": PASSWORD})
    assert r.status_code == 404 and r.json()["code"] == 101
    assert ids(call(app, "myPosts", {}, bea)) == [b1]


def test_rest_delete_of_a_post_cascades(app):
    ana, bea = signup(app, "ana", "female"), signup(app, "bea", "female")
    photo = upload(app, "photo.png")
    pid = create_post(app, ana, "to be deleted", photo=photo)
    keep = create_post(app, ana, "kept")
    for who in (ana, bea):
        comment(app, who, pid, "c")
        comment(app, who, keep, "k")
    call(app, "react", {"postId": pid, "kind": "like"}, bea)
    call(app, "react", {"postId": keep, "kind": "like"}, bea)
    call(app, "viewPost", {"postId": pid}, bea)
    assert file_exists(app, photo)
    assert app.req("DELETE", f"/parse/classes/Post/{pid}", session=bea.token).status_code == 404  # not hers
    r = app.req("DELETE", f"/parse/classes/Post/{pid}", session=ana.token)
    assert r.status_code == 200, r.text
    for cls in ("Comment", "Reaction", "View"):
        assert count(app, cls, {"post": pointer("Post", pid)}) == 0
    assert count(app, "Comment", {"post": pointer("Post", keep)}) == 2
    assert counters(app, keep) == exact_counters(app, keep)
    assert not file_exists(app, photo)


def test_master_deletes_a_user_and_counters_are_fixed(app):
    ana, bea = signup(app, "ana", "female"), signup(app, "bea", "female")
    pid = create_post(app, bea, "bea's")
    own = create_post(app, ana, "ana's")
    comment(app, ana, pid, "one")
    comment(app, ana, pid, "two")
    comment(app, bea, own, "bea on ana")
    call(app, "react", {"postId": pid, "kind": "like"}, ana)
    call(app, "viewPost", {"postId": pid}, ana)
    assert counters(app, pid) == {"likesCount": 1, "dislikesCount": 0, "commentsCount": 2, "viewsCount": 1}
    r = app.req("DELETE", f"/parse/users/{ana.id}", master=True)
    assert r.status_code == 200, r.text
    assert counters(app, pid) == exact_counters(app, pid) == {"likesCount": 0, "dislikesCount": 0,
                                                             "commentsCount": 0, "viewsCount": 0}
    assert get(app, "Post", own, master=True).status_code == 404
    assert count(app, "Comment", {"author": bea.ptr}) == 0  # her comment went with ana's post
    assert fetch(app, "Post", pid)["text"] == "bea's"
