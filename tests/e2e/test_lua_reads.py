"""Lua's `db.first` / `db.find` / `db.get` through the real binary: equality finds are answered
from statements cached by the query's shape, and objects cross into Lua as the stored JSON text,
tagged with their className by the bridge. Whatever path a read takes, Lua must see what REST
sees (plus `className`), and afterFind triggers, class permissions, schema changes and
read-your-writes inside `db.transaction` must hold on every call, the cached ones included."""
import pytest

from conftest import Server

LUA = r"""
cloud.define("first", function(req)
  local o = db.first(req.params.class, req.params.where, {master = req.params.master})
  if o == nil then return json.null end
  return o
end)

cloud.define("find", function(req)
  local out = json.array()
  for _, o in ipairs(db.find(req.params.class, req.params.where, {master = req.params.master, limit = req.params.limit})) do
    out[#out + 1] = o
  end
  return out
end)

-- The same query many times in one call (the cached statement): every answer the same.
cloud.define("firstMany", function(req)
  local seen = {}
  for i = 1, 20 do
    local o = db.first(req.params.class, req.params.where)
    seen[#seen + 1] = o and o.objectId or "none"
  end
  return seen
end)

-- Nested values: objects inside fields are not tagged, nulls and empty arrays survive.
cloud.define("shapeOf", function(req)
  local o = db.first("Row", {name = "nested"})
  local list = db.find("Row", {name = "nested"})
  local got = db.get("Row", o.objectId)
  return {className = o.className, metaClass = o.meta.className == nil, noneIsNull = o.none == json.null,
          emptyIsArray = json.encode(o.empty) == "[]", listClass = list[1].className, getClass = got.className,
          innerTagged = o.list[1].className ~= nil}
end)

cloud.define("readOwnWrite", function(req)
  return db.transaction(function()
    db.create("Row", {name = "inTx", n = 99})
    local o = db.first("Row", {n = 99})
    return {found = o ~= nil and o.name == "inTx"}
  end)
end)

-- Reads before and after a write in one call (no db.transaction): the write is seen.
cloud.define("readWriteRead", function(req)
  local before = db.first("Row", {name = req.params.name})
  db.create("Row", {name = req.params.name})
  local after = db.first("Row", {name = req.params.name})
  local all = db.find("Row", {name = req.params.name})
  return {before = before == nil, after = after ~= nil, count = #all}
end)

cloud.afterFind("Secret", function(req)
  local out = {}
  for _, o in ipairs(req.objects) do
    if not o.hidden then
      o.seen = true
      out[#out + 1] = o
    end
  end
  return out
end)
"""


@pytest.fixture(scope="module")
def srv():
    s = Server(functions={"reads.lua": LUA}).start()
    yield s
    s.stop()
    s.cleanup()


def create(srv, cls, body, master=True):
    r = srv.req("POST", f"/parse/classes/{cls}", body, master=master)
    assert r.status_code == 201, r.text
    return r.json()["objectId"]


def rest_find(srv, cls, where, master=False):
    import json
    r = srv.req("GET", f"/parse/classes/{cls}", params={"where": json.dumps(where), "limit": "1000"}, master=master)
    assert r.status_code == 200, r.text
    return r.json()["results"]


def call(srv, name, params, master=False):
    r = srv.call(name, params, master=master)
    return r


def test_equality_reads_answer_what_rest_answers(srv):
    ids = [create(srv, "Row", {"name": "a", "n": i, "f": i + 0.5, "ok": i % 2 == 0}) for i in range(5)]
    create(srv, "Row", {"name": "private", "n": 1, "ACL": {}})   # nobody but master reads it
    for where in [{"name": "a"}, {"n": 3}, {"f": 2.5}, {"ok": True}, {"name": "a", "n": 2}, {"objectId": ids[4]},
                  {"n": 1}, {"name": "zzz"}, {}]:
        for master in (False, True):
            want = rest_find(srv, "Row", where, master=master)
            for _ in range(2):   # the second call runs the cached statement
                r = call(srv, "find", {"class": "Row", "where": where, "master": master, "limit": 1000})
                assert r.status_code == 200, r.text
                got = r.json()["result"]
                assert [dict(o, className="Row") for o in want] == got, (where, master)
                r = call(srv, "first", {"class": "Row", "where": where, "master": master})
                assert r.status_code == 200, r.text
                first = r.json()["result"]
                if want:
                    assert first in got, (where, master)
                else:
                    assert first is None
    r = call(srv, "firstMany", {"class": "Row", "where": {"n": 3}})
    assert r.status_code == 200, r.text
    assert r.json()["result"] == [ids[3]] * 20
    # The limit is honoured on the cached path.
    r = call(srv, "find", {"class": "Row", "where": {"name": "a"}, "limit": 2})
    assert len(r.json()["result"]) == 2


def test_objects_cross_whole_and_tagged(srv):
    create(srv, "Row", {"name": "nested", "meta": {"k": 1}, "none": None, "empty": [], "list": [{"x": 1}]})
    r = call(srv, "shapeOf", {})
    assert r.status_code == 200, r.text
    assert r.json()["result"] == {"className": "Row", "metaClass": True, "noneIsNull": True, "emptyIsArray": True,
                                  "listClass": "Row", "getClass": "Row", "innerTagged": False}


def test_after_find_applies_on_every_call(srv):
    create(srv, "Secret", {"k": 1, "hidden": False})
    create(srv, "Secret", {"k": 2, "hidden": True})
    for _ in range(2):
        r = call(srv, "find", {"class": "Secret", "where": {}})
        assert r.status_code == 200, r.text
        got = r.json()["result"]
        assert [o["k"] for o in got] == [1] and got[0]["seen"] is True
        r = call(srv, "first", {"class": "Secret", "where": {"k": 2}})
        assert r.json()["result"] is None
        # Master reads skip afterFind, as REST's do.
        r = call(srv, "first", {"class": "Secret", "where": {"k": 2}, "master": True})
        assert r.json()["result"]["k"] == 2 and "seen" not in r.json()["result"]


def test_class_permissions_changed_between_calls(srv):
    create(srv, "Guarded", {"k": 1})
    r = call(srv, "first", {"class": "Guarded", "where": {"k": 1}})
    assert r.status_code == 200 and r.json()["result"]["k"] == 1, r.text
    r = srv.req("PUT", "/parse/schemas/Guarded", {"classLevelPermissions": {"find": {}, "get": {"*": True}}}, master=True)
    assert r.status_code == 200, r.text
    r = call(srv, "first", {"class": "Guarded", "where": {"k": 1}})
    assert r.status_code >= 400 and r.json()["code"] == 119, r.text
    r = call(srv, "first", {"class": "Guarded", "where": {"k": 1}, "master": True})
    assert r.status_code == 200 and r.json()["result"]["k"] == 1, r.text


def test_a_field_that_gets_a_type_changes_the_answer(srv):
    create(srv, "Late", {"a": 1})
    r = call(srv, "first", {"class": "Late", "where": {"b": 1}})
    assert r.status_code == 200 and r.json()["result"] is None, r.text
    create(srv, "Late", {"b": "text"})
    # `b` is a String now: a Number no longer compares with it, on the cached shape too.
    r = call(srv, "first", {"class": "Late", "where": {"b": 1}})
    assert r.status_code >= 400 and r.json()["code"] == 111, r.text
    r = call(srv, "first", {"class": "Late", "where": {"b": "text"}})
    assert r.status_code == 200 and r.json()["result"]["b"] == "text", r.text


def test_reads_inside_a_transaction_see_its_writes(srv):
    r = call(srv, "readOwnWrite", {})
    assert r.status_code == 200, r.text
    assert r.json()["result"] == {"found": True}


def test_reads_after_a_write_in_the_same_call_see_it(srv):
    for i in range(3):
        r = call(srv, "readWriteRead", {"name": f"rwr{i}"})
        assert r.status_code == 200, r.text
        assert r.json()["result"] == {"before": True, "after": True, "count": 1}
    # Writes by other requests between calls are seen by the next call's reads.
    create(srv, "Row", {"name": "between"})
    r = call(srv, "first", {"class": "Row", "where": {"name": "between"}})
    assert r.json()["result"]["name"] == "between"
