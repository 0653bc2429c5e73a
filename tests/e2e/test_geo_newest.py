"""Newest (and oldest) first within an area, the query behind a "what's near me" feed: the page
must be exactly the filtered points of the area sorted by createdAt (ties by objectId), whatever
plan the store takes for it (on both backends, areas of a few grid cells are answered through
the geo cell index, with an exact test on the cells at the area's edge). Checked against the
answer computed here from every object, with skip, a second clause, ACLs and both directions;
on PostgreSQL also that a database made before the cell index existed gets it on start."""
import json
import math
import random

import pytest

from conftest import PGCluster, Server

LAT0, LNG0 = 45.0, 7.0   # the data area: [LAT0, LAT0 + 0.3) x [LNG0, LNG0 + 0.3)
EARTH_KM = 6371.0


def gp(lat, lng):
    return {"__type": "GeoPoint", "latitude": lat, "longitude": lng}


def haversine(lat1, lng1, lat2, lng2):
    p1, p2 = math.radians(lat1), math.radians(lat2)
    a = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lng2 - lng1) / 2) ** 2
    return 2 * math.asin(min(1.0, math.sqrt(a)))


@pytest.fixture(scope="module")
def feed():
    """One server with 480 points spread over the data area (every 7th readable by the master
    key only), a user and its session."""
    srv = Server()
    srv.start()
    try:
        r = srv.req("POST", "/parse/users", {"username": "near", "password": "pw-near-1"})
        assert r.status_code == 201, r.text
        user, session = r.json()["objectId"], r.json()["sessionToken"]
        rnd = random.Random(42)
        posts = []
        for i in range(480):
            lat, lng = LAT0 + rnd.random() * 0.3, LNG0 + rnd.random() * 0.3
            body = {"n": i, "kind": "a" if i % 3 else "b", "location": gp(lat, lng)}
            if i % 7 == 0:   # readable by the master key only
                body["ACL"] = {}
            posts.append(body)
        # Batches of 40: many objects share a millisecond, so createdAt ties are broken by objectId.
        for start in range(0, len(posts), 40):
            reqs = [{"method": "POST", "path": "/parse/classes/Spot", "body": b} for b in posts[start:start + 40]]
            r = srv.req("POST", "/parse/batch", {"requests": reqs}, master=True)
            assert r.status_code == 200 and all("success" in x for x in r.json()), r.text
        yield srv, user, session
    finally:
        srv.stop()
        srv.cleanup()


def everything(srv):
    r = srv.req("GET", "/parse/classes/Spot", master=True, params={"limit": "1000"})
    assert r.status_code == 200
    objs = r.json()["results"]
    assert len(objs) == 480
    return objs


def page(srv, where, order, limit, skip, session=None, master=False):
    r = srv.req("GET", "/parse/classes/Spot", session=session, master=master,
                params={"where": json.dumps(where), "order": order, "limit": str(limit), "skip": str(skip)})
    assert r.status_code == 200, r.text
    return [o["objectId"] for o in r.json()["results"]]


def expected(objs, keep, order, limit, skip):
    rows = [o for o in objs if keep(o)]
    rows.sort(key=lambda o: (o["createdAt"], o["objectId"]), reverse=order.startswith("-"))
    return rows[skip:skip + limit]


def same_page(got, want, objs, keep):
    """`got` (objectIds) is the page `want` (objects): the same dates in the same order, each a
    distinct object passing the filter. Objects created in the same millisecond may come in
    either order (SQLite breaks such ties by insertion order, PostgreSQL by objectId)."""
    by_id = {o["objectId"]: o for o in objs}
    assert len(set(got)) == len(got)
    assert all(keep(by_id[i]) for i in got)
    assert [by_id[i]["createdAt"] for i in got] == [o["createdAt"] for o in want]


CIRCLES = [(LAT0 + 0.15, LNG0 + 0.15, 9.0), (LAT0 + 0.08, LNG0 + 0.21, 7.5), (LAT0 + 0.2, LNG0 + 0.1, 12.0)]


@pytest.mark.parametrize("order", ["-createdAt", "createdAt"])
@pytest.mark.parametrize("limit,skip", [(5, 0), (7, 4), (30, 10)])
def test_near_newest_matches_every_object(feed, order, limit, skip):
    srv, _, session = feed
    objs = everything(srv)
    for lat, lng, km in CIRCLES:
        where = {"location": {"$nearSphere": gp(lat, lng), "$maxDistanceInKilometers": km}}

        def inside(o, lat=lat, lng=lng, km=km):
            p = o["location"]
            return haversine(lat, lng, p["latitude"], p["longitude"]) <= km / EARTH_KM
        want = expected(objs, inside, order, limit, skip)
        assert len(want) == limit   # the page is full: the area holds enough points
        same_page(page(srv, where, order, limit, skip, master=True), want, objs, inside)
        # A second clause and the ACL of a user (objects with an empty ACL are hidden).
        where_b = {**where, "kind": "b"}

        def inside_b(o, inside=inside):
            return inside(o) and o["kind"] == "b" and o["n"] % 7 != 0
        same_page(page(srv, where_b, order, limit, skip, session=session), expected(objs, inside_b, order, limit, skip), objs, inside_b)
        # $centerSphere: the same circle.
        center = {"location": {"$geoWithin": {"$centerSphere": [[lng, lat], km / EARTH_KM]}}}
        same_page(page(srv, center, order, limit, skip, master=True), want, objs, inside)


@pytest.mark.parametrize("order", ["-createdAt", "createdAt"])
def test_box_newest_matches_every_object(feed, order):
    srv, _, _ = feed
    objs = everything(srv)
    for south, west, north, east in [(LAT0 + 0.03, LNG0 + 0.04, LAT0 + 0.17, LNG0 + 0.26),
                                     (LAT0 + 0.1, LNG0 + 0.1, LAT0 + 0.2, LNG0 + 0.2),
                                     (LAT0 + 0.012, LNG0 + 0.013, LAT0 + 0.03, LNG0 + 0.041)]:
        where = {"location": {"$within": {"$box": [gp(south, west), gp(north, east)]}}}

        def inside(o):
            p = o["location"]
            return south <= p["latitude"] <= north and west <= p["longitude"] <= east
        for limit, skip in [(6, 0), (9, 5)]:
            same_page(page(srv, where, order, limit, skip, master=True), expected(objs, inside, order, limit, skip), objs, inside)


def test_points_only_at_the_edge(feed):
    """No point in the area's interior cells: every page comes from the edge cells' exact test."""
    srv, _, _ = feed
    lat, lng, km = LAT0 + 0.15, LNG0 + 0.15, 9.0
    r = srv.req("POST", "/parse/batch", {"requests": [
        {"method": "POST", "path": "/parse/classes/Ring", "body": {"n": i, "location": gp(
            lat + math.degrees(d / EARTH_KM) * math.cos(a), lng + math.degrees(d / EARTH_KM) * math.sin(a) / math.cos(math.radians(lat)))}}
        for i, (a, d) in enumerate((i * 0.7, km * (0.93 + 0.1 * (i % 2))) for i in range(30))]}, master=True)
    assert r.status_code == 200, r.text
    r = srv.req("GET", "/parse/classes/Ring", master=True, params={"limit": "100"})
    objs = r.json()["results"]
    where = {"location": {"$nearSphere": gp(lat, lng), "$maxDistanceInKilometers": km}}
    for order in ("-createdAt", "createdAt"):
        r = srv.req("GET", "/parse/classes/Ring", master=True,
                    params={"where": json.dumps(where), "order": order, "limit": "8", "skip": "2"})
        assert r.status_code == 200, r.text
        got = [o["objectId"] for o in r.json()["results"]]

        def inside(o):
            return haversine(lat, lng, o["location"]["latitude"], o["location"]["longitude"]) <= km / EARTH_KM
        want = expected(objs, inside, order, 8, 2)
        assert len(want) == 8
        same_page(got, want, objs, inside)


@pytest.mark.postgres_only("the PostgreSQL layout's migration step adds the index")
def test_cell_index_added_to_an_older_database(server_factory):
    srv = server_factory()
    srv.start()
    r = srv.req("POST", "/parse/classes/Old", {"location": gp(45.1, 7.1)}, master=True)
    assert r.status_code == 201, r.text
    pg = PGCluster.get()
    url = pg.database_for(srv.data)
    index = pg.psql("SELECT indexdef FROM pg_indexes WHERE indexname = 'Old__geocell__location'", url).strip()
    assert "createdat" in index and "floor" in index
    srv.stop()
    # As a database made before the index: without it and without the migration step that adds it.
    pg.psql("DROP INDEX \"Old__geocell__location\"; DELETE FROM _mb_migrations WHERE version = 6", url)
    srv.start()
    assert pg.psql("SELECT indexdef FROM pg_indexes WHERE indexname = 'Old__geocell__location'", url).strip() == index
    where = {"location": {"$nearSphere": gp(45.1, 7.1), "$maxDistanceInKilometers": 20}}
    r = srv.req("GET", "/parse/classes/Old", params={"where": json.dumps(where), "order": "-createdAt"})
    assert r.status_code == 200 and len(r.json()["results"]) == 1
