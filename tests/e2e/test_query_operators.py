"""The query operators Parse has beyond the basics, through REST (and Lua for the subqueries):
`$inQuery`, `$notInQuery`, `$select`, `$dontSelect` (inner queries under the caller's ACLs and
class permissions), `$nor`, `$eq`, `$containedBy`, the Polygon type with `$geoIntersects`, and
`$geoWithin: {$polygon}` on GeoPoints; injection attempts in names and values; none of them
answers 102 "unsupported"."""
import json

import pytest

LUA = r"""
cloud.define("hotComments", function(req)
  local out = json.array()
  for _, c in ipairs(db.find("Comment", {post = {["$inQuery"] = {className = "Post", where = {hot = true}}}}, {order = "text"})) do
    out[#out + 1] = c.text
  end
  return out
end)
"""


def ptr(cls, oid):
    return {"__type": "Pointer", "className": cls, "objectId": oid}


def gp(lat, lng):
    return {"__type": "GeoPoint", "latitude": lat, "longitude": lng}


def find(srv, cls, where, session=None, master=False, key="text", **params):
    r = srv.req("GET", f"/parse/classes/{cls}", session=session, master=master, params={"where": json.dumps(where), **params})
    assert r.status_code == 200, r.text
    return sorted(o[key] for o in r.json()["results"])


def code(srv, cls, where, session=None, master=False):
    r = srv.req("GET", f"/parse/classes/{cls}", session=session, master=master, params={"where": json.dumps(where)})
    return r.status_code, r.json().get("code"), r.json().get("error", "")


@pytest.fixture
def srv(server_factory):
    return server_factory(functions={"main.lua": LUA}).start()


def signup(srv, name):
    r = srv.req("POST", "/parse/users", {"username": name, "password": "pw"})
    return r.json()["objectId"], r.json()["sessionToken"]


def test_in_query_and_not_in_query(srv):
    a, ta = signup(srv, "ann")
    b, tb = signup(srv, "ben")
    hot = srv.req("POST", "/parse/classes/Post", {"hot": True, "title": "hot"}, master=True).json()["objectId"]
    cold = srv.req("POST", "/parse/classes/Post", {"hot": False, "title": "cold"}, master=True).json()["objectId"]
    # hot, but only ann may read it
    secret = srv.req("POST", "/parse/classes/Post", {"hot": True, "title": "secret", "ACL": {a: {"read": True}}}, master=True).json()["objectId"]
    for text, p in [("c1", hot), ("c2", cold), ("c3", secret), ("c4", hot)]:
        srv.req("POST", "/parse/classes/Comment", {"text": text, "post": ptr("Post", p)}, master=True)
    srv.req("POST", "/parse/classes/Comment", {"text": "c5"}, master=True)  # no post at all
    inq = {"post": {"$inQuery": {"className": "Post", "where": {"hot": True}}}}
    assert find(srv, "Comment", inq, master=True) == ["c1", "c3", "c4"]
    assert find(srv, "Comment", inq, session=ta) == ["c1", "c3", "c4"]
    assert find(srv, "Comment", inq, session=tb) == ["c1", "c4"]  # the inner query applies ben's ACLs
    assert find(srv, "Comment", inq) == ["c1", "c4"]
    notq = {"post": {"$notInQuery": {"className": "Post", "where": {"hot": True}}}}
    assert find(srv, "Comment", notq, master=True) == ["c2", "c5"]
    assert find(srv, "Comment", notq, session=tb) == ["c2", "c3", "c5"]
    # count and Lua
    r = srv.req("GET", "/parse/classes/Comment", params={"where": json.dumps(inq), "count": "1", "limit": "0"})
    assert r.json()["count"] == 2
    assert srv.call("hotComments", session=ta).json()["result"] == ["c1", "c3", "c4"]
    assert srv.call("hotComments", session=tb).json()["result"] == ["c1", "c4"]
    # nested: comments on posts whose author is in a query
    srv.req("PUT", f"/parse/classes/Post/{hot}", {"author": ptr("_User", a)}, master=True)
    nested = {"post": {"$inQuery": {"className": "Post", "where": {"author": {"$inQuery": {"className": "_User", "where": {"username": "ann"}}}}}}}
    assert find(srv, "Comment", nested) == ["c1", "c4"]
    # array of pointers
    srv.req("POST", "/parse/classes/Digest", {"text": "d1", "posts": [ptr("Post", cold), ptr("Post", hot)]}, master=True)
    srv.req("POST", "/parse/classes/Digest", {"text": "d2", "posts": [ptr("Post", cold)]}, master=True)
    assert find(srv, "Digest", {"posts": {"$inQuery": {"className": "Post", "where": {"hot": True}}}}) == ["d1"]
    # the inner class's permissions apply: find denied there → 119
    srv.req("PUT", "/parse/schemas/Post", {"classLevelPermissions": {"find": {a: True}}}, master=True)
    assert code(srv, "Comment", inq, session=tb)[:2] == (403, 119)
    assert find(srv, "Comment", inq, session=ta) == ["c1", "c3", "c4"]
    assert code(srv, "Comment", {"post": {"$inQuery": {"className": "_Session", "where": {}}}}, session=ta)[:2] == (403, 119)
    # an inner class that does not exist matches nothing; $notInQuery then matches everything
    assert find(srv, "Comment", {"post": {"$inQuery": {"className": "Nope", "where": {}}}}) == []


def test_select_and_dont_select(srv):
    for city, pct in [("Oslo", 0.7), ("Rome", 0.2), ("Lima", 0.9)]:
        srv.req("POST", "/parse/classes/Team", {"city": city, "winPct": pct}, master=True)
    srv.req("POST", "/parse/classes/Team", {"city": "Kyiv", "winPct": 0.8, "ACL": {}}, master=True)  # master only
    for name, town in [("p1", "Oslo"), ("p2", "Rome"), ("p3", "Lima"), ("p4", "Kyiv"), ("p5", "Pune")]:
        srv.req("POST", "/parse/classes/Person", {"text": name, "hometown": town}, master=True)
    sel = {"hometown": {"$select": {"query": {"className": "Team", "where": {"winPct": {"$gt": 0.5}}}, "key": "city"}}}
    assert find(srv, "Person", sel) == ["p1", "p3"]
    assert find(srv, "Person", sel, master=True) == ["p1", "p3", "p4"]
    dont = {"hometown": {"$dontSelect": {"query": {"className": "Team", "where": {"winPct": {"$gt": 0.5}}}, "key": "city"}}}
    assert find(srv, "Person", dont) == ["p2", "p4", "p5"]
    # select on objectId and pointer keys
    t = srv.req("POST", "/parse/classes/Team", {"city": "Bern", "winPct": 0.6}, master=True).json()["objectId"]
    srv.req("POST", "/parse/classes/Fan", {"text": "f1", "team": ptr("Team", t)}, master=True)
    srv.req("POST", "/parse/classes/Award", {"text": "a1", "teamId": t}, master=True)
    assert find(srv, "Award", {"teamId": {"$select": {"query": {"className": "Fan", "where": {}}, "key": "team"}}}) == ["a1"]
    assert find(srv, "Fan", {"team": {"$select": {"query": {"className": "Award", "where": {}}, "key": "teamId"}}}) == ["f1"]
    # malformed
    for bad in [{"hometown": {"$select": {"query": {"className": "Team"}}}},
                {"hometown": {"$select": {"query": {"className": "Team"}, "key": "city", "extra": 1}}},
                {"hometown": {"$select": "x"}}]:
        assert code(srv, "Person", bad)[1] == 102, bad


def test_nor_eq_contained_by(srv):
    for n, tags in [(1, ["a", "b"]), (2, ["a"]), (3, ["c"]), (4, []), (5, None)]:
        body = {"n": n}
        if tags is not None:
            body["tags"] = tags
        srv.req("POST", "/parse/classes/Thing", body, master=True)
    assert find(srv, "Thing", {"$nor": [{"n": 1}, {"n": {"$gt": 3}}]}, key="n") == [2, 3]
    assert find(srv, "Thing", {"$nor": [{"tags": "a"}]}, key="n") == [3, 4, 5]
    assert find(srv, "Thing", {"n": {"$eq": 3}}, key="n") == [3]
    assert find(srv, "Thing", {"tags": {"$containedBy": ["a", "b"]}}, key="n") == [1, 2, 4]
    assert find(srv, "Thing", {"tags": {"$containedBy": ["a"]}}, key="n") == [2, 4]
    assert find(srv, "Thing", {"tags": {"$containedBy": []}}, key="n") == [4]
    assert code(srv, "Thing", {"tags": {"$containedBy": "a"}})[1] == 102
    assert code(srv, "Thing", {"n": {"$containedBy": [1]}})[1] == 102
    assert code(srv, "Thing", {"$nor": {}})[1] == 102


def test_polygon_type_and_geo_operators(srv):
    square = [[0, 0], [0, 10], [10, 10], [10, 0]]
    r = srv.req("POST", "/parse/classes/Zone", {"name": "sq", "bounds": {"__type": "Polygon", "coordinates": square}}, master=True)
    assert r.status_code == 201, r.text
    zid = r.json()["objectId"]
    tri = [[20, 20], [30, 20], [20, 30]]
    srv.req("POST", "/parse/classes/Zone", {"name": "tri", "bounds": {"__type": "Polygon", "coordinates": tri}}, master=True)
    got = srv.req("GET", f"/parse/classes/Zone/{zid}").json()
    assert got["bounds"]["__type"] == "Polygon" and [[p[0], p[1]] for p in got["bounds"]["coordinates"]] == square
    assert srv.req("GET", "/parse/schemas/Zone", master=True).json()["fields"]["bounds"]["type"] == "Polygon"
    # $geoIntersects
    assert find(srv, "Zone", {"bounds": {"$geoIntersects": {"$point": gp(5, 5)}}}, key="name") == ["sq"]
    assert find(srv, "Zone", {"bounds": {"$geoIntersects": {"$point": gp(22, 22)}}}, key="name") == ["tri"]
    assert find(srv, "Zone", {"bounds": {"$geoIntersects": {"$point": gp(29, 29)}}}, key="name") == []  # in the box, not the triangle
    assert find(srv, "Zone", {"bounds": {"$geoIntersects": {"$point": gp(-5, 5)}}}, key="name") == []
    # bad polygons
    for bad in [[[0, 0], [1, 1]], [[0, 0], [1, 1], [91, 0]], "x", [[0, 0], [1, 1], ["a", 0]]]:
        r = srv.req("POST", "/parse/classes/Zone", {"bounds": {"__type": "Polygon", "coordinates": bad}}, master=True)
        assert r.status_code == 400 and r.json()["code"] == 111, (bad, r.text)
    assert srv.req("POST", "/parse/classes/Zone", {"bounds": gp(1, 1)}, master=True).json()["code"] == 111
    # $geoWithin $polygon on GeoPoints
    for name, lat, lng in [("in", 5, 5), ("edge", 0, 5), ("out", 15, 5), ("corner", 9.9, 0.1), ("tri-out", 29, 29)]:
        srv.req("POST", "/parse/classes/Place", {"name": name, "loc": gp(lat, lng)}, master=True)
    pts = [gp(0, 0), gp(0, 10), gp(10, 10), gp(10, 0)]
    assert find(srv, "Place", {"loc": {"$geoWithin": {"$polygon": pts}}}, key="name") == ["corner", "edge", "in"]
    assert find(srv, "Place", {"loc": {"$geoWithin": {"$polygon": {"__type": "Polygon", "coordinates": square}}}}, key="name") == ["corner", "edge", "in"]
    assert find(srv, "Place", {"loc": {"$geoWithin": {"$polygon": [[20, 20], [30, 20], [20, 30]]}}}, key="name") == []
    assert find(srv, "Place", {"loc": {"$geoWithin": {"$polygon": pts}}, "name": {"$ne": "in"}}, key="name", order="-name") == ["corner", "edge"]
    for bad in [{"$polygon": [gp(0, 0), gp(1, 1)]}, {"$polygon": "x"}, {"$polygon": [gp(0, 0), gp(1, 1), {"lat": 1}]}]:
        assert code(srv, "Place", {"loc": {"$geoWithin": bad}})[1] == 102, bad
    assert code(srv, "Place", {"name": {"$geoIntersects": {"$point": gp(1, 1)}}})[1] == 102
    assert code(srv, "Zone", {"bounds": {"$geoIntersects": {"$point": gp(100, 1)}}})[1] == 102


def test_injection_in_names_and_values(srv):
    srv.req("POST", "/parse/classes/Comment", {"text": "x", "tags": ["t"], "post": ptr("Post", "p")}, master=True)
    srv.req("POST", "/parse/classes/Post", {"hot": True, "title": "t"}, master=True)
    evil_names = ["Post\"; DROP TABLE \"Comment\"; --", "_mb_schema", "Post' OR '1'='1", "_mb_join:Post:x"]
    for name in evil_names:
        st, c, _ = code(srv, "Comment", {"post": {"$inQuery": {"className": name, "where": {}}}}, master=True)
        assert (st, c) == (400, 103), name
        st, c, _ = code(srv, "Comment", {"text": {"$select": {"query": {"className": name, "where": {}}, "key": "hot"}}}, master=True)
        assert (st, c) == (400, 103), name
    for key in ["hot') OR 1=1 --", "a'b", "$where"]:
        st, c, _ = code(srv, "Comment", {"text": {"$select": {"query": {"className": "Post", "where": {}}, "key": key}}}, master=True)
        assert c in (102, 105), key
        st, c, _ = code(srv, "Comment", {"post": {"$inQuery": {"className": "Post", "where": {key: 1}}}}, master=True)
        assert c in (102, 105), key
    # hostile values are bound, never spliced: they match nothing and break nothing
    for v in ["' OR 1=1 --", "\") OR 1=1 --", "x'); DROP TABLE \"Post\"; --"]:
        assert find(srv, "Comment", {"post": {"$inQuery": {"className": "Post", "where": {"title": v}}}}, master=True) == []
        assert find(srv, "Comment", {"tags": {"$containedBy": [v]}}, master=True) == []
        assert find(srv, "Comment", {"$nor": [{"text": v}]}, master=True) == ["x"]
    assert len(srv.req("GET", "/parse/classes/Post", master=True).json()["results"]) == 1


def test_no_operator_answers_unsupported(srv):
    srv.req("POST", "/parse/classes/Any", {"a": 1, "tags": ["x"], "p": ptr("Any", "z"), "loc": gp(1, 1),
                                          "poly": {"__type": "Polygon", "coordinates": [[0, 0], [0, 1], [1, 1]]}}, master=True)
    wheres = [
        {"p": {"$inQuery": {"className": "Any", "where": {}}}},
        {"p": {"$notInQuery": {"className": "Any", "where": {}}}},
        {"a": {"$select": {"query": {"className": "Any", "where": {}}, "key": "a"}}},
        {"a": {"$dontSelect": {"query": {"className": "Any", "where": {}}, "key": "a"}}},
        {"$nor": [{"a": 2}]},
        {"a": {"$eq": 1}},
        {"tags": {"$containedBy": ["x"]}},
        {"loc": {"$geoWithin": {"$polygon": [gp(0, 0), gp(0, 2), gp(2, 2)]}}},
        {"poly": {"$geoIntersects": {"$point": gp(0.2, 0.5)}}},
        {"$relatedTo": {"object": ptr("Any", "z"), "key": "rel"}},
    ]
    for w in wheres:
        r = srv.req("GET", "/parse/classes/Any", params={"where": json.dumps(w)})
        assert r.status_code == 200, (w, r.text)
        assert "unsupported" not in r.text


def test_inner_queries_cannot_reveal_hidden_user_fields(srv):
    r = srv.req("POST", "/parse/users", {"username": "ann", "password": "pw", "email": "ann@mail.test"})
    assert r.status_code == 201, r.text
    srv.req("POST", "/parse/classes/Guess", {"text": "ann@mail.test"}, master=True)
    _, tb = signup(srv, "ben")
    for where in [{"text": {"$select": {"query": {"className": "_User", "where": {}}, "key": "email"}}},
                  {"text": {"$dontSelect": {"query": {"className": "_User", "where": {}}, "key": "email"}}},
                  {"u": {"$inQuery": {"className": "_User", "where": {"email": "ann@mail.test"}}}},
                  {"u": {"$inQuery": {"className": "_User", "where": {"$nor": [{"email": {"$regex": "^a"}}]}}}}]:
        assert code(srv, "Guess", where, session=tb)[:2] == (403, 119), where
    assert find(srv, "Guess", {"text": {"$select": {"query": {"className": "_User", "where": {}}, "key": "email"}}}, master=True) == ["ann@mail.test"]


def test_inner_query_beside_a_geo_constraint(srv):
    # The geo planner drives these from the R*Tree or the cell index; the inner query's own `t`
    # must still bind to the inner class.
    hot = srv.req("POST", "/parse/classes/Post", {"hot": True}, master=True).json()["objectId"]
    cold = srv.req("POST", "/parse/classes/Post", {"hot": False}, master=True).json()["objectId"]
    for i in range(40):
        srv.req("POST", "/parse/classes/Spot", {"text": f"s{i:02d}", "loc": gp(10 + i * 0.001, 20), "post": ptr("Post", hot if i % 2 else cold)},
                master=True)
    inq = {"post": {"$inQuery": {"className": "Post", "where": {"hot": True}}}}
    near = {**inq, "loc": {"$nearSphere": gp(10, 20), "$maxDistanceInKilometers": 50}}
    r = srv.req("GET", "/parse/classes/Spot", params={"where": json.dumps(near), "limit": "5"})
    assert [o["text"] for o in r.json()["results"]] == ["s01", "s03", "s05", "s07", "s09"]
    box = {**inq, "loc": {"$within": {"$box": [gp(9, 19), gp(11, 21)]}}}
    r = srv.req("GET", "/parse/classes/Spot", params={"where": json.dumps(box), "order": "-createdAt", "limit": "3"})
    assert [o["text"] for o in r.json()["results"]] == ["s39", "s37", "s35"]
