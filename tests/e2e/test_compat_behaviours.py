"""Behaviours the first release got wrong, each checked through the real binary: Lua object
tables as Pointers, validators for master calls, per-function memory limits, job messages,
`{code, error}` on every error answer, huge limits and control characters in class names, the
read-only CLI verbs, session purging, login throttling across a restart, 137 in Lua, and the
headers files are served with."""
import json
import os
import subprocess
import tempfile
import time

import requests

from conftest import APP_ID, BIN, MASTER_KEY, database_args

LUA = r'''
cloud.afterDelete("Post", function(req)
  -- The idiom: the deleted object itself is the where value (a Pointer to it).
  db.deleteWhere("Comment", {post = req.object}, {master = true})
end)

cloud.define("pointers", function(req)
  local post = db.create("Post", {title = "p"})
  db.create("Comment", {post = post, text = "a"})       -- a field value: stored as a Pointer
  db.create("Comment", {post = post, text = "b"})
  local other = db.create("Post", {title = "q"})
  db.create("Comment", {post = other, text = "c"})
  local found = db.find("Comment", {post = post}, {order = "text"})
  local stored = db.get("Comment", found[1].objectId)
  local updated = db.updateWhere("Comment", {post = other}, {post = post})
  return {found = #found, storedType = stored.post.__type, storedClass = stored.post.className,
          postId = post.objectId, updated = updated,
          deleted = db.deleteWhere("Comment", {post = post})}
end)

cloud.define("strictUser", {validateMasterKey = true, requireUser = true}, function(req)
  return "ran"
end)

cloud.define("smallMemory", {maxMemoryMB = 2}, function(req)
  local t = {}
  for i = 1, 200000 do t[i] = string.rep("x", 40) .. i end
  return #t
end)

cloud.define("defaultMemory", function(req)
  local t = {}
  for i = 1, 200000 do t[i] = string.rep("x", 40) .. i end
  return #t
end)

cloud.job("talks", function(req)
  req.message("halfway there")
  local start = time.now()
  while time.now() - start < (req.params.ms or 1500) do end
end)

cloud.index("Tag", {"slug"}, {unique = true})

cloud.define("duplicate", function(req)
  db.create("Tag", {slug = "x"})
  local other = db.create("Tag", {slug = "y"})
  local function code(ok, e) return ok and "ok" or (type(e) == "table" and e.code or tostring(e)) end
  return {
    create = code(pcall(db.create, "Tag", {slug = "x"})),
    update = code(pcall(db.update, "Tag", other.objectId, {slug = "x"})),
    updateWhere = code(pcall(db.updateWhere, "Tag", {slug = "y"}, {slug = "x"})),
    inTransaction = code(pcall(db.transaction, function() db.create("Tag", {slug = "x"}) end)),
  }
end)

cloud.define("duplicateUncaught", function(req)
  db.create("Tag", {slug = "z"})
  db.create("Tag", {slug = "z"})
end)
'''


def code_of(r):
    return r.status_code, r.json().get("code")


def test_lua_object_tables_mean_pointers(server_factory):
    s = server_factory(functions={"main.lua": LUA}).start()
    r = s.call("pointers")
    assert r.status_code == 200, r.text
    res = r.json()["result"]
    assert res["found"] == 2 and res["storedType"] == "Pointer" and res["storedClass"] == "Post", res
    assert res["updated"] == 1 and res["deleted"] == 3, res
    # Over REST the stored field is a Pointer, and the afterDelete cascade with req.object matches.
    post = s.req("POST", "/parse/classes/Post", {"title": "r"}).json()["objectId"]
    ptr = {"__type": "Pointer", "className": "Post", "objectId": post}
    for t in ["x", "y"]:
        assert s.req("POST", "/parse/classes/Comment", {"post": ptr, "text": t}).status_code == 201
    assert s.req("DELETE", f"/parse/classes/Post/{post}").status_code == 200
    left = s.req("GET", "/parse/classes/Comment", params={"where": json.dumps({"post": ptr})}).json()["results"]
    assert left == [], left


def test_validate_master_key_runs_validators_for_master(server_factory):
    s = server_factory(functions={"main.lua": LUA}).start()
    r = s.call("strictUser", master=True)
    assert code_of(r) == (400, 142), r.text


def test_per_function_max_memory_lowers_the_limit(server_factory):
    s = server_factory(functions={"main.lua": LUA}).start()
    assert s.call("defaultMemory").json()["result"] == 200000
    r = s.call("smallMemory")
    assert code_of(r) == (400, 141) and "memory" in r.json()["error"], r.text


def test_job_message_is_stored_while_running_and_without_return(server_factory):
    s = server_factory(functions={"main.lua": LUA}).start()
    r = s.req("POST", "/parse/jobs/talks", {"ms": 2500}, master=True)
    rid = r.headers["X-Parse-Job-Status-Id"]
    seen_running = False
    deadline = time.time() + 30
    while time.time() < deadline:
        row = s.req("GET", f"/parse/classes/_JobStatus/{rid}", master=True).json()
        if row["status"] == "running" and row.get("message") == "halfway there":
            seen_running = True
        if row["status"] != "running":
            break
        time.sleep(0.1)
    assert seen_running, "the message was not visible while the job ran"
    assert row["status"] == "succeeded" and row["message"] == "halfway there", row


def test_every_error_has_code_and_error(server_factory):
    s = server_factory(args=["--metrics-require-master"]).start()
    bare = {"Content-Type": "application/json"}
    # /admin/* without the master key: 403 with 119, with or without the application id.
    for headers in [bare, {"X-Parse-Application-Id": APP_ID}]:
        for method, path in [("GET", "/admin/functions"), ("GET", "/admin/jobs"), ("GET", "/admin/usage"),
                             ("PUT", "/admin/functions/a.lua"), ("DELETE", "/admin/functions/a.lua")]:
            r = requests.request(method, s.url + path, headers=headers, timeout=30)
            assert code_of(r) == (403, 119), (method, path, r.text)
    r = requests.get(s.url + "/metrics", timeout=30)
    assert code_of(r) == (403, 119), r.text
    master = {"X-Parse-Master-Key": MASTER_KEY, "X-Parse-Application-Id": APP_ID}
    for method, path in [("GET", "/admin/usage?by=nonsense"), ("GET", "/admin/functions/..x"),
                         ("GET", "/admin/functions/missing.lua"), ("POST", "/admin/jobs"), ("POST", "/metrics"),
                         ("GET", "/admin/nothing")]:
        r = requests.request(method, s.url + path, headers=master, timeout=30)
        assert r.status_code >= 400 and set(r.json()) == {"code", "error"}, (method, path, r.status_code, r.text)
    # The one exception: a missing application id on the Parse API.
    r = requests.get(s.url + "/parse/classes/X", timeout=30)
    assert (r.status_code, r.json()) == (403, {"error": "unauthorized"})


def test_huge_limit_is_capped_and_control_characters_in_class_names_are_103(server):
    s = server
    for i in range(3):
        s.req("POST", "/parse/classes/Many", {"n": i})
    for limit in ["99999999999999999999999", "18446744073709551616", "9223372036854775808"]:
        r = s.req("GET", "/parse/classes/Many", params={"limit": limit})
        assert r.status_code == 200 and len(r.json()["results"]) == 3, (limit, r.text)
    r = s.req("POST", "/parse/batch", {"requests": [{"method": "GET", "path": "/classes/Many",
                                                      "body": {"limit": 10 ** 30}}]})
    assert len(r.json()[0]["success"]["results"]) == 3, r.text
    for name in ["A%01B", "A%1FB", "A%7FB", "A%0AB", "A%09B"]:
        for method, body in [("GET", None), ("POST", {"a": 1})]:
            r = s.req(method, f"/parse/classes/{name}", body)
            assert code_of(r) == (400, 103), (name, method, r.text)
    # A NUL cannot be in a URL (400/107 before any class name is read), but class names also
    # arrive inside JSON: batch paths, Pointers, Lua.
    for name in ["A\\u0000B", "A\\u0001B", "A\\u001fB"]:
        raw = '{"requests":[{"method":"POST","path":"/classes/%s","body":{"a":1}}]}' % name
        r = s.req("POST", "/parse/batch", raw=raw)
        assert r.json()[0]["error"]["code"] == 103, (name, r.text)
        raw = '{"p":{"__type":"Pointer","className":"%s","objectId":"x"}}' % name
        r = s.req("POST", "/parse/classes/Holder", raw=raw)
        assert r.status_code == 400 and r.json()["code"] in (103, 106), (name, r.text)
    assert code_of(s.req("GET", "/parse/classes/A%00B")) == (400, 107)


def run_cli(args, env_extra=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOONBASE_")}
    env.update(env_extra or {})
    return subprocess.run([BIN] + args, env=env, capture_output=True, text=True, timeout=120)


def test_usage_without_by_shows_accounts_and_functions(server_factory):
    fns = 'cloud.define("hello", function(req) return "hi" end)\n'
    s = server_factory(functions={"main.lua": fns}).start()
    assert s.call("hello").status_code == 200
    s.req("POST", "/parse/classes/Thing", {"a": 1})
    s.stop()
    r = run_cli(["usage", *database_args(s.data)], {"MOONBASE_MASTER_KEY": MASTER_KEY})
    assert r.returncode == 0, r.stderr
    assert "ip:127.0.0.1" in r.stdout and "function:hello" in r.stdout, r.stdout
    r = run_cli(["usage", *database_args(s.data), "--json"], {"MOONBASE_MASTER_KEY": MASTER_KEY})
    j = json.loads(r.stdout)
    assert {"accounts", "functions"} <= set(j), j
    assert any(row["key"] == "function:hello" for row in j["functions"]["rows"]), j


def test_read_only_verbs_never_create_a_master_key():
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "data")
        fdir = os.path.join(tmp, "functions")
        os.makedirs(fdir)
        for args in [["jobs"], ["jobs", "--json"], ["usage"], ["check", fdir]]:
            r = run_cli(args + ["--data", data, "--functions", fdir, "--cron", os.path.join(tmp, "cron")])
            assert r.returncode == 0, (args, r.stdout, r.stderr)
            assert not os.path.exists(os.path.join(data, "master.key")), args


def test_expired_sessions_are_purged_on_a_schedule(server_factory):
    s = server_factory(env={"MOONBASE_SESSION_LENGTH_SECONDS": "1", "MOONBASE_SESSION_PURGE_SECONDS": "1"}).start()
    for i in range(3):
        assert s.req("POST", "/parse/users", {"username": f"u{i}", "password": "pw-123456"}).status_code == 201
    count = lambda: s.req("GET", "/parse/classes/_Session", master=True, params={"count": "1", "limit": "0"}).json()["count"]
    assert count() == 3
    deadline = time.time() + 20
    while time.time() < deadline and count() != 0:
        time.sleep(0.2)
    assert count() == 0


def test_login_throttle_survives_a_restart(server_factory):
    s = server_factory(env={"MOONBASE_LOGIN_MAX_FAILURES": "3"}).start()
    assert s.req("POST", "/parse/users", {"username": "al", "password": "right-pw"}).status_code == 201
    for _ in range(3):
        assert code_of(s.req("POST", "/parse/login", {"username": "al", "password": "wrong"})) == (404, 101)
    assert s.req("POST", "/parse/login", {"username": "al", "password": "right-pw"}).status_code == 429
    s.stop()
    s.start()
    r = s.req("POST", "/parse/login", {"username": "al", "password": "right-pw"})
    assert code_of(r) == (429, 155), r.text
    assert int(r.headers["Retry-After"]) > 0


def test_duplicate_under_unique_index_is_137_in_lua(server_factory):
    s = server_factory(functions={"main.lua": LUA}).start()
    r = s.call("duplicate")
    assert r.json()["result"] == {"create": 137, "update": 137, "updateWhere": 137, "inTransaction": 137}, r.text
    # Uncaught, the function answers with that code, as REST does.
    assert code_of(s.call("duplicateUncaught")) == (400, 137)
    assert code_of(s.req("POST", "/parse/classes/Tag", {"slug": "x"})) == (400, 137)


def test_files_are_served_with_nosniff_and_a_sandbox(server):
    s = server
    cases = [("page.html", "text/html", b"<script>alert(1)</script>", True),
             ("pic.svg", "image/svg+xml", b"<svg xmlns='http://www.w3.org/2000/svg'><script>1</script></svg>", True),
             ("pic.png", "image/png", b"\x89PNG\r\n\x1a\n", False),
             ("pic.jpg", "image/jpeg", b"\xff\xd8\xff", False),
             ("pic.gif", "image/gif", b"GIF89a", False),
             ("pic.webp", "image/webp", b"RIFF0000WEBP", False),
             ("data.bin", "application/octet-stream", b"\x00\x01", True)]
    for name, ctype, body, sandboxed in cases:
        up = s.req("POST", f"/parse/files/{name}", raw=body, headers={"Content-Type": ctype})
        assert up.status_code == 201, up.text
        r = requests.get(up.json()["url"], timeout=30)
        assert r.status_code == 200 and r.content == body
        assert r.headers["X-Content-Type-Options"] == "nosniff", name
        assert (r.headers.get("Content-Security-Policy") == "sandbox") == sandboxed, (name, r.headers)
