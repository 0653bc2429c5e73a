"""Objects API against the real binary (issue 2 items 4-6): create / get /
update with every operator / delete, typed values, first type sticks, every query operator,
order / limit / skip / keys / include / count, geo, full text, schemas, batch, request-id retries
and health. One server for the module; every test uses its own class names."""
import json
import re
import uuid

import pytest
import requests

from conftest import APP_ID, Server

ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")


@pytest.fixture(scope="module")
def srv():
    s = Server().start()
    yield s
    s.stop()
    s.cleanup()


def cls(prefix):
    """A fresh class name per test (one server serves the whole module)."""
    return prefix + uuid.uuid4().hex[:8]


def err(r):
    return r.status_code, r.json().get("code")


def create(srv, c, body, **kw):
    r = srv.req("POST", f"/parse/classes/{c}", body, **kw)
    assert r.status_code == 201, r.text
    return r.json()["objectId"]


def get(srv, c, oid, **kw):
    r = srv.req("GET", f"/parse/classes/{c}/{oid}", **kw)
    assert r.status_code == 200, r.text
    return r.json()


def find(srv, c, where=None, **params):
    p = {k: (v if isinstance(v, str) else json.dumps(v)) for k, v in params.items()}
    if where is not None:
        p["where"] = json.dumps(where)
    session = p.pop("session", None)
    master = p.pop("master", "false") == "true"
    r = srv.req("GET", f"/parse/classes/{c}", params=p, session=session, master=master)
    assert r.status_code == 200, r.text
    return r.json()


def names(res, key="name"):
    return [o[key] for o in res["results"]]


def geo(lat, lng):
    return {"__type": "GeoPoint", "latitude": lat, "longitude": lng}


def test_health(srv):
    r = requests.get(srv.url + "/parse/health", timeout=10)
    assert r.status_code == 200 and r.json() == {"status": "ok"}


def test_create_get_update_delete_with_every_operator(srv):
    c = cls("Obj")
    r = srv.req("POST", f"/parse/classes/{c}", {"name": "a", "n": 5, "tags": ["x", "y"], "gone": "soon"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert set(body) == {"objectId", "createdAt"}
    oid = body["objectId"]
    assert re.fullmatch(r"[A-Za-z0-9]{10}", oid)
    assert ISO_MS.match(body["createdAt"])
    assert r.headers["Location"] == f"{srv.url}/parse/classes/{c}/{oid}"
    # Location follows the Host header the client sent.
    r = srv.req("POST", f"/parse/classes/{c}", {"name": "b"}, headers={"Host": "api.example.test:8443"})
    assert r.status_code == 201
    assert r.headers["Location"] == f"http://api.example.test:8443/parse/classes/{c}/{r.json()['objectId']}"

    o = get(srv, c, oid)
    assert o["name"] == "a" and o["n"] == 5 and o["tags"] == ["x", "y"]
    assert ISO_MS.match(o["createdAt"]) and o["updatedAt"] == o["createdAt"]

    r = srv.req("PUT", f"/parse/classes/{c}/{oid}", {
        "n": {"__op": "Increment", "amount": 3},
        "gone": {"__op": "Delete"},
        "tags": {"__op": "Add", "objects": ["x", "z"]},
        "name": "renamed",
    })
    assert r.status_code == 200, r.text
    assert set(r.json()) == {"updatedAt"} and ISO_MS.match(r.json()["updatedAt"])
    o = get(srv, c, oid)
    assert o["n"] == 8 and "gone" not in o and o["tags"] == ["x", "y", "x", "z"] and o["name"] == "renamed"
    assert o["updatedAt"] >= o["createdAt"]

    srv.req("PUT", f"/parse/classes/{c}/{oid}", {"tags": {"__op": "AddUnique", "objects": ["y", "w", "w"]},
                                                 "n": {"__op": "Increment", "amount": -10}})
    o = get(srv, c, oid)
    assert o["tags"] == ["x", "y", "x", "z", "w"] and o["n"] == -2
    srv.req("PUT", f"/parse/classes/{c}/{oid}", {"tags": {"__op": "Remove", "objects": ["x", "nope"]}})
    assert get(srv, c, oid)["tags"] == ["y", "z", "w"]
    # Increment of a field that does not exist yet starts from 0.
    srv.req("PUT", f"/parse/classes/{c}/{oid}", {"fresh": {"__op": "Increment", "amount": 2}})
    assert get(srv, c, oid)["fresh"] == 2

    r = srv.req("DELETE", f"/parse/classes/{c}/{oid}")
    assert r.status_code == 200 and r.json() == {}
    assert err(srv.req("GET", f"/parse/classes/{c}/{oid}")) == (404, 101)
    assert err(srv.req("DELETE", f"/parse/classes/{c}/{oid}")) == (404, 101)
    assert err(srv.req("PUT", f"/parse/classes/{c}/{oid}", {"n": 1})) == (404, 101)


def test_typed_values_round_trip_and_first_type_sticks(srv):
    c = cls("Typed")
    u = create(srv, c, {"name": "target"})
    values = {
        "when": {"__type": "Date", "iso": "2026-01-02T03:04:05.678Z"},
        "loc": geo(48.8566, 2.3522),
        "ref": {"__type": "Pointer", "className": c, "objectId": u},
        "file": {"__type": "File", "name": "abc_photo.jpg", "url": "http://x.test/parse/files/moonbase/abc_photo.jpg"},
        "obj": {"a": {"b": [1, 2.5, None, True, "s"]}},
        "flag": False,
        "num": 1.25,
    }
    oid = create(srv, c, values)
    o = get(srv, c, oid)
    for k, v in values.items():
        assert o[k] == v, k
    # A Date given without milliseconds comes back with them.
    oid2 = create(srv, c, {"when": {"__type": "Date", "iso": "2026-01-02T03:04:05Z"}})
    assert get(srv, c, oid2)["when"]["iso"] == "2026-01-02T03:04:05.000Z"

    # First type sticks: on create, on update, and for typed values.
    for field, bad in [("num", "text"), ("when", 5), ("loc", "here"), ("ref", {"__type": "Pointer", "className": "Other", "objectId": "x"}),
                       ("flag", 1), ("obj", [1])]:
        assert err(srv.req("POST", f"/parse/classes/{c}", {field: bad})) == (400, 111), field
        assert err(srv.req("PUT", f"/parse/classes/{c}/{oid}", {field: bad})) == (400, 111), field
    assert get(srv, c, oid) == o
    assert find(srv, c, limit="0", count="1")["count"] == 3

    # Date comparisons work on the instant.
    res = find(srv, c, {"when": {"$gt": {"__type": "Date", "iso": "2026-01-02T03:04:05.100Z"}}})
    assert [x["objectId"] for x in res["results"]] == [oid]


def test_query_operators(srv):
    c = cls("Q")
    rows = [
        {"name": "alpha", "n": 1, "tags": ["a", "b"], "s": "Hello World", "opt": 1},
        {"name": "beta", "n": 2, "tags": ["b", "c"], "s": "hello there"},
        {"name": "gamma", "n": 3, "tags": ["c"], "s": "Goodbye", "opt": 2},
        {"name": "delta", "n": 4, "tags": ["a", "b", "c"], "s": "HELLO"},
    ]
    for r in rows:
        create(srv, c, r)

    def q(where, order="name"):
        return names(find(srv, c, where, order=order))

    assert q({"name": "beta"}) == ["beta"]
    assert q({"n": {"$lt": 2}}) == ["alpha"]
    assert q({"n": {"$lte": 2}}) == ["alpha", "beta"]
    assert q({"n": {"$gt": 3}}) == ["delta"]
    assert q({"n": {"$gte": 3}}) == ["delta", "gamma"]
    assert q({"n": {"$gt": 1, "$lt": 4}}) == ["beta", "gamma"]
    assert q({"n": {"$ne": 2}}) == ["alpha", "delta", "gamma"]
    assert q({"name": {"$in": ["beta", "gamma", "zeta"]}}) == ["beta", "gamma"]
    assert q({"name": {"$nin": ["beta", "gamma"]}}) == ["alpha", "delta"]
    assert q({"opt": {"$exists": True}}) == ["alpha", "gamma"]
    assert q({"opt": {"$exists": False}}) == ["beta", "delta"]
    assert q({"tags": {"$all": ["a", "b"]}}) == ["alpha", "delta"]
    assert q({"tags": "c"}) == ["beta", "delta", "gamma"]                       # array containment
    assert q({"tags": {"$in": ["a"]}}) == ["alpha", "delta"]
    assert q({"s": {"$regex": "^hello"}}) == ["beta"]
    assert q({"s": {"$regex": "^hello", "$options": "i"}}) == ["alpha", "beta", "delta"]
    assert q({"s": {"$regex": "o(r|o)"}}) == ["alpha", "gamma"]
    assert q({"$or": [{"n": 1}, {"name": "gamma"}]}) == ["alpha", "gamma"]
    assert q({"$and": [{"n": {"$gt": 1}}, {"tags": "b"}]}) == ["beta", "delta"]
    assert q({"$or": [{"$and": [{"n": {"$gte": 2}}, {"n": {"$lte": 3}}]}, {"name": "delta"}]}) == ["beta", "delta", "gamma"]
    assert q({"name": "nobody"}) == []


def test_pointers_order_limit_skip_keys_count(srv):
    c, a = cls("Item"), cls("Author")
    a1, a2 = create(srv, a, {"name": "ann"}), create(srv, a, {"name": "bob"})
    for i in range(12):
        create(srv, c, {"name": f"i{i:02d}", "grp": i % 3, "n": i,
                        "author": {"__type": "Pointer", "className": a, "objectId": a1 if i % 2 else a2}})
    p1 = {"__type": "Pointer", "className": a, "objectId": a1}
    assert names(find(srv, c, {"author": p1}, order="n")) == [f"i{i:02d}" for i in range(1, 12, 2)]
    assert len(find(srv, c, {"author": {"$in": [p1]}})["results"]) == 6
    # Multi-key order: grp ascending, n descending.
    res = find(srv, c, order="grp,-n")
    assert [(o["grp"], o["n"]) for o in res["results"]] == sorted([(i % 3, i) for i in range(12)], key=lambda t: (t[0], -t[1]))
    assert names(find(srv, c, order="-n", limit="3")) == ["i11", "i10", "i09"]
    assert names(find(srv, c, order="n", limit="3", skip="10")) == ["i10", "i11"]
    res = find(srv, c, order="n", keys="name,n", limit="1")
    assert set(res["results"][0]) <= {"objectId", "createdAt", "updatedAt", "name", "n", "ACL"}
    assert "author" not in res["results"][0] and "grp" not in res["results"][0]
    res = find(srv, c, {"grp": 1}, count="1", limit="2")
    assert res["count"] == 4 and len(res["results"]) == 2
    assert find(srv, c, {"grp": 1}, count="1", limit="0") == {"results": [], "count": 4}
    assert find(srv, c, {"grp": 7}, count="1", limit="0") == {"results": [], "count": 0}
    # include expands the pointer into an Object.
    res = find(srv, c, {"n": 1}, include="author")
    auth = res["results"][0]["author"]
    assert auth["__type"] == "Object" and auth["className"] == a and auth["objectId"] == a1 and auth["name"] == "ann"
    o = get(srv, c, res["results"][0]["objectId"], params={"include": "author", "keys": "author"})
    assert o["author"]["name"] == "ann" and "grp" not in o


def test_limit_default_and_cap(srv):
    c = cls("Many")
    reqs = [{"method": "POST", "path": f"/parse/classes/{c}", "body": {"i": i}} for i in range(50)]
    for _ in range(23):  # 1150 objects
        r = srv.req("POST", "/parse/batch", {"requests": reqs})
        assert r.status_code == 200 and all("success" in x for x in r.json())
    assert len(find(srv, c)["results"]) == 100
    assert len(find(srv, c, limit="5000")["results"]) == 1000
    assert len(find(srv, c, limit="1000", skip="1000")["results"]) == 150
    assert find(srv, c, limit="0", count="1")["count"] == 1150


def test_geo_queries(srv):
    c = cls("Place")
    places = {
        "sfnear": (37.78, -122.42), "oakland": (37.8044, -122.2712), "berkeley": (37.8715, -122.2730),
        "paloalto": (37.4419, -122.1430), "sanjose": (37.3382, -121.8863), "la": (34.0522, -118.2437),
    }
    for n, (lat, lng) in places.items():
        create(srv, c, {"name": n, "loc": geo(lat, lng)})
    sf = geo(37.7749, -122.4194)
    nearest = ["sfnear", "oakland", "berkeley", "paloalto", "sanjose", "la"]
    assert names(find(srv, c, {"loc": {"$nearSphere": sf}})) == nearest
    assert names(find(srv, c, {"loc": {"$nearSphere": sf, "$maxDistanceInMiles": 10}})) == ["sfnear", "oakland"]
    assert names(find(srv, c, {"loc": {"$nearSphere": sf, "$maxDistanceInKilometers": 20}})) == ["sfnear", "oakland", "berkeley"]
    assert names(find(srv, c, {"loc": {"$nearSphere": sf, "$maxDistanceInRadians": 35 / 3958.8}})) == nearest[:4]
    # order wins over distance; limit applies after the distance order.
    assert names(find(srv, c, {"loc": {"$nearSphere": sf, "$maxDistanceInMiles": 30}}, order="name")) == \
        ["berkeley", "oakland", "paloalto", "sfnear"]
    assert names(find(srv, c, {"loc": {"$nearSphere": sf}}, limit="2")) == ["sfnear", "oakland"]
    box = {"$box": [geo(37.7, -122.5), geo(37.9, -122.2)]}
    assert names(find(srv, c, {"loc": {"$within": box}}, order="name")) == ["berkeley", "oakland", "sfnear"]
    center = {"$centerSphere": [sf, 15 / 3958.8]}
    assert names(find(srv, c, {"loc": {"$geoWithin": center}}, order="name")) == ["berkeley", "oakland", "sfnear"]
    # Geo combined with another constraint.
    assert names(find(srv, c, {"loc": {"$nearSphere": sf, "$maxDistanceInMiles": 50}, "name": {"$ne": "sfnear"}})) == \
        ["oakland", "berkeley", "paloalto", "sanjose"]
    assert find(srv, c, {"loc": {"$within": box}}, count="1", limit="0")["count"] == 3


def test_text_search_and_schemas(srv):
    c = cls("Article")
    assert err(srv.req("PUT", f"/parse/schemas/{c}", {"indexes": {"txt": {"body": "text"}}})) == (403, 119)
    r = srv.req("PUT", f"/parse/schemas/{c}", {"indexes": {"txt": {"body": "text"}, "byN": {"n": -1},
                                                           "uniq": {"fields": {"slug": 1}, "unique": True}}}, master=True)
    assert r.status_code == 200, r.text
    for i, text in enumerate(["The quick brown fox", "A lazy dog sleeps", "Foxes and dogs", "Nothing here"]):
        create(srv, c, {"body": text, "n": i, "slug": f"s{i}"})
    def search(term):
        return [o["n"] for o in find(srv, c, {"body": {"$text": {"$search": {"$term": term}}}}, order="n")["results"]]

    # Every word must occur, as a prefix (the search bar), case-insensitively.
    assert search("dog") == [1, 2]
    assert search("FOX") == [0, 2]
    assert search("lazy dog") == [1]
    assert search("quick; DROP TABLE x") == []
    # The index follows updates.
    r = srv.req("GET", f"/parse/classes/{c}", params={"where": json.dumps({"n": 3})})
    oid = r.json()["results"][0]["objectId"]
    srv.req("PUT", f"/parse/classes/{c}/{oid}", {"body": "a dog after all"})
    assert search("dog") == [1, 2, 3]
    assert search("nothing") == []
    # The unique index refuses duplicates (137) and nothing is written.
    assert err(srv.req("POST", f"/parse/classes/{c}", {"slug": "s1", "body": "dup"})) == (400, 137)
    assert find(srv, c, limit="0", count="1")["count"] == 4

    r = srv.req("GET", f"/parse/schemas/{c}", master=True)
    assert r.status_code == 200, r.text
    schema = r.json()
    assert schema["className"] == c
    assert schema["fields"]["body"]["type"] == "String" and schema["fields"]["n"]["type"] == "Number"
    assert set(schema["indexes"]) >= {"txt", "byN", "uniq"}
    assert err(srv.req("GET", f"/parse/schemas/{c}")) == (403, 119)
    # CLPs through schemas: find needs authentication, create only master.
    r = srv.req("PUT", f"/parse/schemas/{c}", {"classLevelPermissions": {"find": {"requiresAuthentication": True},
                                                                          "create": {}}}, master=True)
    assert r.status_code == 200, r.text
    clp = srv.req("GET", f"/parse/schemas/{c}", master=True).json()["classLevelPermissions"]
    assert clp["find"] == {"requiresAuthentication": True} and clp["create"] == {}
    assert err(srv.req("GET", f"/parse/classes/{c}")) == (403, 119)
    assert err(srv.req("POST", f"/parse/classes/{c}", {"body": "x"})) == (403, 119)
    assert srv.req("GET", f"/parse/classes/{c}", master=True).status_code == 200
    assert err(srv.req("PUT", f"/parse/schemas/{c}", {"classLevelPermissions": {"fly": {"*": True}}}, master=True))[0] == 400
    assert err(srv.req("GET", "/parse/schemas/NoSuchClass" + uuid.uuid4().hex[:6], master=True))[0] == 400


def test_batch(srv):
    c = cls("Batch")
    r = srv.req("POST", "/parse/batch", {"requests": [
        {"method": "POST", "path": f"/parse/classes/{c}", "body": {"name": "one", "n": 1}},
        {"method": "POST", "path": f"/classes/{c}", "body": {"name": "two", "n": 2}},
        {"method": "POST", "path": f"/classes/{c}", "body": {"name": 3}},  # wrong type
    ]})
    assert r.status_code == 200, r.text
    out = r.json()
    assert len(out) == 3 and "success" in out[0] and "success" in out[1]
    assert out[2]["error"]["code"] == 111
    id1, id2 = out[0]["success"]["objectId"], out[1]["success"]["objectId"]
    assert ISO_MS.match(out[0]["success"]["createdAt"])

    r = srv.req("POST", "/parse/batch", {"requests": [
        {"method": "PUT", "path": f"/classes/{c}/{id1}", "body": {"n": {"__op": "Increment", "amount": 10}}},
        {"method": "GET", "path": f"/parse/classes/{c}/{id1}"},
        {"method": "GET", "path": f"/classes/{c}", "body": {"where": {"n": 2}}},
        {"method": "DELETE", "path": f"/classes/{c}/{id2}"},
        {"method": "GET", "path": f"/classes/{c}/{id2}"},
    ]})
    out = r.json()
    assert "updatedAt" in out[0]["success"]
    assert out[1]["success"]["n"] == 11
    assert [o["name"] for o in out[2]["success"]["results"]] == ["two"]
    assert out[3]["success"] == {}
    assert out[4]["error"]["code"] == 101

    # transaction: true is all-or-nothing.
    before = find(srv, c, limit="0", count="1")["count"]
    r = srv.req("POST", "/parse/batch", {"transaction": True, "requests": [
        {"method": "POST", "path": f"/classes/{c}", "body": {"name": "t1"}},
        {"method": "PUT", "path": f"/classes/{c}/{id1}", "body": {"n": 100}},
        {"method": "POST", "path": f"/classes/{c}", "body": {"name": ["wrong"]}},
    ]})
    assert err(r) == (400, 111)
    assert find(srv, c, limit="0", count="1")["count"] == before
    assert get(srv, c, id1)["n"] == 11
    r = srv.req("POST", "/parse/batch", {"transaction": True, "requests": [
        {"method": "POST", "path": f"/classes/{c}", "body": {"name": "t1"}},
        {"method": "PUT", "path": f"/classes/{c}/{id1}", "body": {"n": 100}},
    ]})
    assert r.status_code == 200 and all("success" in x for x in r.json())
    assert get(srv, c, id1)["n"] == 100

    # 51 sub-requests: 107 and nothing applied; 50 are fine.
    before = find(srv, c, limit="0", count="1")["count"]
    many = [{"method": "POST", "path": f"/classes/{c}", "body": {"name": f"m{i}"}} for i in range(51)]
    assert err(srv.req("POST", "/parse/batch", {"requests": many})) == (400, 107)
    assert find(srv, c, limit="0", count="1")["count"] == before
    r = srv.req("POST", "/parse/batch", {"requests": many[:50]})
    assert r.status_code == 200 and len(r.json()) == 50
    assert find(srv, c, limit="0", count="1")["count"] == before + 50


def test_request_id_retry_is_applied_once(srv):
    c = cls("Retry")
    rid = uuid.uuid4().hex
    r1 = srv.req("POST", f"/parse/classes/{c}", {"name": "once"}, headers={"X-Parse-Request-Id": rid})
    assert r1.status_code == 201
    r2 = srv.req("POST", f"/parse/classes/{c}", {"name": "once"}, headers={"X-Parse-Request-Id": rid})
    assert err(r2) == (400, 159)
    assert find(srv, c, limit="0", count="1")["count"] == 1
    oid = r1.json()["objectId"]
    rid2 = uuid.uuid4().hex
    for _ in range(3):
        srv.req("PUT", f"/parse/classes/{c}/{oid}", {"k": {"__op": "Increment", "amount": 1}},
                headers={"X-Parse-Request-Id": rid2})
    assert get(srv, c, oid)["k"] == 1
    # A different id is a different request.
    r3 = srv.req("POST", f"/parse/classes/{c}", {"name": "twice"}, headers={"X-Parse-Request-Id": uuid.uuid4().hex})
    assert r3.status_code == 201
    assert find(srv, c, limit="0", count="1")["count"] == 2


def test_request_id_of_a_failed_request_is_not_burnt(srv):
    """A request that failed was not applied: its retry (same id) is applied, not answered 159."""
    c = cls("RetryFail")
    assert srv.req("PUT", f"/parse/schemas/{c}", {"indexes": {"u": {"fields": {"slug": 1}, "unique": True}}},
                   master=True).status_code == 200
    blocker = create(srv, c, {"slug": "taken"})
    rid = uuid.uuid4().hex
    r = srv.req("POST", f"/parse/classes/{c}", {"slug": "taken", "v": 1}, headers={"X-Parse-Request-Id": rid})
    assert err(r) == (400, 137)
    srv.req("DELETE", f"/parse/classes/{c}/{blocker}")
    r = srv.req("POST", f"/parse/classes/{c}", {"slug": "taken", "v": 1}, headers={"X-Parse-Request-Id": rid})
    assert r.status_code == 201, r.text
    assert err(srv.req("POST", f"/parse/classes/{c}", {"slug": "taken", "v": 1}, headers={"X-Parse-Request-Id": rid})) == (400, 159)
    assert find(srv, c, limit="0", count="1")["count"] == 1
    # The same for a transactional batch that failed as a whole.
    rid = uuid.uuid4().hex
    batch = {"transaction": True, "requests": [{"method": "POST", "path": f"/classes/{c}", "body": {"slug": "b1"}},
                                               {"method": "POST", "path": f"/classes/{c}", "body": {"slug": "taken"}}]}
    assert err(srv.req("POST", "/parse/batch", batch, headers={"X-Parse-Request-Id": rid})) == (400, 137)
    batch["requests"][1]["body"]["slug"] = "b2"
    r = srv.req("POST", "/parse/batch", batch, headers={"X-Parse-Request-Id": rid})
    assert r.status_code == 200 and all("success" in x for x in r.json()), r.text
    assert err(srv.req("POST", "/parse/batch", batch, headers={"X-Parse-Request-Id": rid})) == (400, 159)
    assert find(srv, c, limit="0", count="1")["count"] == 3


def test_concurrent_update_operators_are_atomic(srv):
    """8 clients increment, add and add-unique on one object at once: nothing is lost."""
    import threading
    c = cls("Atomic")
    oid = create(srv, c, {"n": 0, "list": [], "set": []})
    errors = []

    def worker(w):
        s = requests.Session()
        h = {"X-Parse-Application-Id": APP_ID, "Content-Type": "application/json"}
        for i in range(25):
            body = {"n": {"__op": "Increment", "amount": 2}, "list": {"__op": "Add", "objects": [f"{w}-{i}"]},
                    "set": {"__op": "AddUnique", "objects": [i % 5, f"w{w}"]}}
            r = s.put(f"{srv.url}/parse/classes/{c}/{oid}", data=json.dumps(body), headers=h, timeout=30)
            if r.status_code != 200:
                errors.append(r.text)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors[:3]
    o = get(srv, c, oid)
    assert o["n"] == 8 * 25 * 2
    assert sorted(o["list"]) == sorted(f"{w}-{i}" for w in range(8) for i in range(25))
    assert sorted(map(str, o["set"])) == sorted([str(i) for i in range(5)] + [f"w{w}" for w in range(8)])


def test_public_url_is_used_for_location_and_files(server_factory):
    s = server_factory(args=["--public-url", "https://api.example.test/"]).start()
    r = s.req("POST", "/parse/classes/Place", {"name": "x"})
    assert r.headers["Location"] == f"https://api.example.test/parse/classes/Place/{r.json()['objectId']}"
    r = requests.post(s.url + "/parse/files/a.txt", data=b"a", timeout=10,
                      headers={"X-Parse-Application-Id": APP_ID, "Content-Type": "text/plain"})
    assert r.json()["url"] == f"https://api.example.test/parse/files/{APP_ID}/{r.json()['name']}"


def test_concurrent_first_writes_agree_on_one_type(srv):
    """16 clients create a new class at once, half sending a String and half a Number for the
    same new field: one type wins, the others get 111, and no stored row has the losing type.
    (On PostgreSQL this once deadlocked about one round in 30: the rounds are many.)"""
    import threading
    for _ in range(8):
        c = cls("Race")
        results = []

        def worker(i):
            v = i if i % 2 else str(i)
            r = requests.post(f"{srv.url}/parse/classes/{c}", data=json.dumps({"f": v, f"g{i % 3}": i}), timeout=30,
                              headers={"X-Parse-Application-Id": APP_ID, "Content-Type": "application/json"})
            results.append((r.status_code, r.json().get("code")))

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        assert sorted(results).count((201, None)) == 8 and results.count((400, 111)) == 8, json.dumps(sorted(results))
        rows = find(srv, c)["results"]
        assert len(rows) == 8 and len({type(o["f"]) for o in rows}) == 1
        fields = srv.req("GET", f"/parse/schemas/{c}", master=True).json()["fields"]
        assert fields["f"]["type"] == ("String" if isinstance(rows[0]["f"], str) else "Number")
        assert {"g0", "g1", "g2"} <= set(fields)
