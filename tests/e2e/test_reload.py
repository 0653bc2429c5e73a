"""Hot reload and deployment end-to-end (issue 3 item 8): a changed file serves within
1 s; a file that fails to load leaves the previous generation serving and is reported with
file:line by `GET /admin/functions`; `PUT`/`GET`/`DELETE /admin/functions/FILE`; the CLI verbs
`deploy`, `check` and `call`; and a reload under constant load drops no request."""
import json
import os
import random
import subprocess
import threading
import time

import requests

from conftest import APP_ID, BIN, MASTER_KEY, database_args

ADMIN = {"X-Parse-Application-Id": APP_ID, "X-Parse-Master-Key": MASTER_KEY}


def version_lua(v, extra=""):
    return f'''
cloud.define("version", function(req)
  return {{version = {v}}}
end)
{extra}
'''


def write_atomic(path, text):
    """Writes like a deploy tool or most editors do: a temporary file renamed over the old one."""
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def version_of(s):
    r = s.call("version")
    assert r.status_code == 200, r.text
    return r.json()["result"]["version"]


def wait_for(predicate, timeout):
    """Polls `predicate` until true; returns the seconds it took, or None at the deadline."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if predicate():
            return time.monotonic() - t0
        time.sleep(0.02)
    return None


def admin_functions(s):
    r = s.req("GET", "/admin/functions", master=True)
    assert r.status_code == 200, r.text
    return r.json()


def test_changed_file_serves_within_one_second(server_factory):
    s = server_factory(functions={"v.lua": version_lua(1)}).start()
    assert version_of(s) == 1
    gen = admin_functions(s)["generation"]
    for v in (2, 3):
        time.sleep(0.05)
        write_atomic(os.path.join(s.functions, "v.lua"), version_lua(v))
        took = wait_for(lambda: version_of(s) == v, timeout=20)
        assert took is not None, f"version {v} never served"
        # The budget is 1 s (the watcher polls every 250 ms: typically 0.25-0.5 s here); the
        # assertion keeps a margin for a loaded 2-core CI box, as the project's rules ask.
        assert took < 2.0, f"reload took {took:.2f} s"
    assert admin_functions(s)["generation"] > gen

    # Routes follow reloads too.
    route = 'cloud.route("GET", "/api/ver", function() return {json = {v = %d}} end)\n'
    write_atomic(os.path.join(s.functions, "r.lua"), route % 1)
    assert wait_for(lambda: requests.get(s.url + "/api/ver", timeout=30).status_code == 200, timeout=20) is not None
    assert requests.get(s.url + "/api/ver", timeout=30).json() == {"v": 1}
    write_atomic(os.path.join(s.functions, "r.lua"), route.replace("/api/ver", "/api/ver2") % 2)
    assert wait_for(lambda: requests.get(s.url + "/api/ver2", timeout=30).status_code == 200, timeout=20) is not None
    assert requests.get(s.url + "/api/ver", timeout=30).status_code == 404

    # A new file adds its functions; a removed one takes them away.
    write_atomic(os.path.join(s.functions, "extra.lua"), 'cloud.define("extra", function() return "x" end)')
    assert wait_for(lambda: s.call("extra").status_code == 200, timeout=20) is not None
    os.remove(os.path.join(s.functions, "extra.lua"))
    assert wait_for(lambda: s.call("extra").status_code == 400, timeout=20) is not None
    r = s.call("extra")
    assert (r.json()["code"], r.json()["error"]) == (141, 'Invalid function: "extra"')


def test_in_flight_call_finishes_on_its_generation(server_factory):
    slow = version_lua(1, extra="""
cloud.define("slow", function(req)
  local t0 = time.now()
  while time.now() - t0 < 800 do end
  return {version = 1}
end)""")
    s = server_factory(functions={"v.lua": slow}).start()
    out = {}

    def call_slow():
        out["r"] = s.call("slow")

    t = threading.Thread(target=call_slow)
    t.start()
    time.sleep(0.2)
    write_atomic(os.path.join(s.functions, "v.lua"), slow.replace("version = 1", "version = 2"))
    assert wait_for(lambda: version_of(s) == 2, timeout=20) is not None
    t.join(timeout=30)
    assert out["r"].status_code == 200 and out["r"].json()["result"] == {"version": 1}
    assert s.call("slow").json()["result"] == {"version": 2}


def test_broken_file_keeps_previous_generation(server_factory):
    s = server_factory(functions={"v.lua": version_lua(1)}).start()
    assert version_of(s) == 1
    gen = admin_functions(s)["generation"]
    broken = version_lua(2) + "\nlocal x = = 1\n"
    line = broken.splitlines().index("local x = = 1") + 1
    write_atomic(os.path.join(s.functions, "v.lua"), broken)
    took = wait_for(lambda: admin_functions(s)["errors"], timeout=20)
    assert took is not None, "the load error never showed"
    listing = admin_functions(s)
    assert "v.lua" in listing["errors"], listing
    assert f"v.lua:{line}" in listing["errors"]["v.lua"], listing["errors"]
    assert listing["generation"] == gen
    assert version_of(s) == 1                           # still the previous generation
    assert f"v.lua:{line}" in s.read_log()

    # A runtime error at load time (a bad declaration) is reported with its line as well.
    dup = version_lua(2) + 'cloud.define("version", function() end)\n'
    line = dup.splitlines().index('cloud.define("version", function() end)') + 1
    write_atomic(os.path.join(s.functions, "v.lua"), dup)
    assert wait_for(lambda: "already defined" in json.dumps(admin_functions(s)["errors"]), timeout=20) is not None
    assert f"v.lua:{line}" in admin_functions(s)["errors"]["v.lua"], admin_functions(s)["errors"]
    assert version_of(s) == 1

    # Fixing the file clears the error and serves the new code.
    write_atomic(os.path.join(s.functions, "v.lua"), version_lua(3))
    assert wait_for(lambda: version_of(s) == 3, timeout=20) is not None
    assert admin_functions(s)["errors"] == {}


def test_broken_at_start_serves_without_it_until_fixed(server_factory):
    s = server_factory(functions={"v.lua": version_lua(1) + "\nif then\n"}).start()
    listing = admin_functions(s)
    assert "v.lua" in listing["errors"] and "v.lua:7" in listing["errors"]["v.lua"], listing
    r = s.call("version")
    assert (r.status_code, r.json()["code"]) == (400, 141)
    write_atomic(os.path.join(s.functions, "v.lua"), version_lua(2))
    assert wait_for(lambda: s.call("version").status_code == 200, timeout=20) is not None
    assert version_of(s) == 2 and admin_functions(s)["errors"] == {}


def test_admin_functions_api(server_factory):
    s = server_factory(functions={"v.lua": version_lua(1)}).start()
    url = s.url + "/admin/functions/"
    listing = admin_functions(s)
    assert listing["files"] == ["v.lua"] and "version" in listing["functions"]

    # Master key required.
    r = requests.put(url + "new.lua", data="x", headers={"X-Parse-Application-Id": APP_ID}, timeout=30)
    assert (r.status_code, r.json()["code"]) == (403, 119)
    assert s.req("GET", "/admin/functions").status_code == 403

    # Deploy: serves as soon as the PUT answers, and the file is on disk.
    text = 'cloud.define("greet", function(req) return "hi " .. req.params.name end)\n'
    r = requests.put(url + "greet.lua", data=text, headers=ADMIN, timeout=30)
    assert r.status_code == 200, r.text
    assert "greet" in r.json()["functions"] and "greet.lua" in r.json()["files"]
    assert s.call("greet", {"name": "ann"}).json()["result"] == "hi ann"
    with open(os.path.join(s.functions, "greet.lua")) as f:
        assert f.read() == text
    r = requests.get(url + "greet.lua", headers=ADMIN, timeout=30)
    assert r.status_code == 200 and r.text == text

    # A file that fails to load is refused with its file:line, and nothing changes.
    bad = 'cloud.define("greet", function(req)\n  return "changed"\nend\nlocal = 5\n'
    r = requests.put(url + "greet.lua", data=bad, headers=ADMIN, timeout=30)
    assert (r.status_code, r.json()["code"]) == (400, 141), r.text
    assert "greet.lua:4" in r.json()["error"], r.text
    assert s.call("greet", {"name": "bob"}).json()["result"] == "hi bob"
    with open(os.path.join(s.functions, "greet.lua")) as f:
        assert f.read() == text
    # The refused candidate never reached the folder: the listing reports no error.
    assert admin_functions(s)["errors"] == {}
    r = requests.put(url + "other.lua", data='cloud.define("version", function() return 0 end)', headers=ADMIN,
                     timeout=30)
    assert r.status_code == 400 and "already defined" in r.json()["error"], r.text
    assert not os.path.exists(os.path.join(s.functions, "other.lua"))
    assert version_of(s) == 1

    # Bad names.
    for name in ("../evil.lua", "evil.txt", ".hidden.lua"):
        r = requests.put(url + name, data="", headers=ADMIN, timeout=30)
        assert r.status_code in (400, 404), (name, r.status_code, r.text)
    assert not os.path.exists(os.path.join(os.path.dirname(s.functions), "evil.lua"))

    # Delete.
    r = requests.delete(url + "greet.lua", headers=ADMIN, timeout=30)
    assert r.status_code == 200, r.text
    assert "greet" not in r.json()["functions"]
    assert not os.path.exists(os.path.join(s.functions, "greet.lua"))
    assert s.call("greet", {"name": "x"}).json()["code"] == 141
    r = requests.delete(url + "greet.lua", headers=ADMIN, timeout=30)
    assert (r.status_code, r.json()["code"]) == (404, 101)
    assert version_of(s) == 1


def run_cli(*args, env=None, timeout=60):
    e = dict(os.environ)
    e.update(env or {})
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=timeout, env=e)


def test_cli_deploy(server_factory, tmp_path):
    s = server_factory(functions={"v.lua": version_lua(1)}).start()
    src = tmp_path / "src"
    src.mkdir()
    (src / "v.lua").write_text(version_lua(7))
    (src / "more.lua").write_text('cloud.define("more", function() return "more" end)\n')
    env = {"MOONBASE_MASTER_KEY": MASTER_KEY, "MOONBASE_APP_ID": APP_ID}
    p = run_cli("deploy", str(src), "--server", s.url, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "deployed v.lua" in p.stdout and "deployed more.lua" in p.stdout
    assert version_of(s) == 7 and s.call("more").json()["result"] == "more"

    # One file; a bad one is refused with file:line and exit 1.
    (tmp_path / "bad.lua").write_text('cloud.define("bad", function()\n  return 1\nend\nend\n')
    p = run_cli("deploy", str(tmp_path / "bad.lua"), "--server", s.url, env=env)
    assert p.returncode == 1
    assert "bad.lua:4" in p.stderr, p.stderr
    assert s.call("bad").json()["code"] == 141

    # A wrong master key is refused.
    p = run_cli("deploy", str(src / "more.lua"), "--server", s.url, env={**env, "MOONBASE_MASTER_KEY": "wrong"})
    assert p.returncode == 1 and "403" in p.stderr, p.stderr


def test_cli_check(tmp_path):
    good, bad, cron = tmp_path / "good", tmp_path / "bad", tmp_path / "cron"
    for d in (good, bad, cron):
        d.mkdir()
    (good / "a.lua").write_text(version_lua(1) + 'cloud.job("tidy", function() end)\n')
    (good / "b.lua").write_text('cloud.route("GET", "/x", function() return {json = {}} end)\n')
    p = run_cli("check", str(good), "--cron", str(cron))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 function(s), 1 job(s), 1 route(s)" in p.stdout and "0 error(s)" in p.stdout

    (bad / "ok.lua").write_text(version_lua(1))
    (bad / "broken.lua").write_text("-- a comment\n\ncloud.define('x', function()\n  return (1\nend)\n")
    p = run_cli("check", str(bad), "--cron", str(cron))
    assert p.returncode == 1
    assert "broken.lua:5" in p.stderr, p.stderr

    # A cron line naming an undefined job fails the check too.
    (cron / "jobs.cron").write_text("*/5 * * * * tidy\n0 3 * * * missingJob\n")
    p = run_cli("check", str(good), "--cron", str(cron))
    assert p.returncode == 1 and "missingJob" in p.stderr, p.stdout + p.stderr


def test_cli_call_against_data_dir(server_factory, tmp_path):
    lua = r'''
cloud.define("countThings", function(req)
  return {count = db.count("Thing", {}, {master = true}), master = req.master,
          user = req.user and req.user.username or json.null, params = req.params}
end)
cloud.define("adminOnly", {requireMaster = true}, function(req) return "secret" end)
'''
    s = server_factory(functions={"t.lua": lua}).start()
    for i in range(3):
        assert s.req("POST", "/parse/classes/Thing", {"i": i}).status_code == 201
    r = s.req("POST", "/parse/users", {"username": "cliuser", "password": "pw-cli"})
    uid = r.json()["objectId"]
    s.stop()
    common = [*database_args(s.data), "--functions", s.functions, "--cron", s.cron]
    env = {"MOONBASE_MASTER_KEY": MASTER_KEY}

    p = run_cli("call", "countThings", '{"x": 1}', "--master", *common, env=env)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1]) == {
        "result": {"count": 3, "master": True, "user": None, "params": {"x": 1}}}

    p = run_cli("call", "countThings", "--user", uid, *common, env=env)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1])["result"]["user"] == "cliuser"

    # Anonymous by default: the validator refuses with its message; unknown functions fail.
    p = run_cli("call", "adminOnly", *common, env=env)
    assert p.returncode == 1 and "Master key is required" in p.stderr, p.stdout + p.stderr
    assert json.loads(run_cli("call", "adminOnly", "--master", *common, env=env).stdout)["result"] == "secret"
    p = run_cli("call", "nope", *common, env=env)
    assert p.returncode == 1 and 'Invalid function: "nope"' in p.stderr
    p = run_cli("call", "countThings", "not json", *common, env=env)
    assert p.returncode != 0


def test_reload_under_load_drops_nothing(server_factory):
    LAST = 12
    s = server_factory(functions={"v.lua": version_lua(0)}).start()
    path = os.path.join(s.functions, "v.lua")
    headers = {"X-Parse-Application-Id": APP_ID, "Content-Type": "application/json"}
    stop = threading.Event()
    failures, seen = [], []
    lock = threading.Lock()

    def client():
        versions = []
        deadline = time.monotonic() + 30
        with requests.Session() as sess:
            while not stop.is_set() and time.monotonic() < deadline:
                try:
                    r = sess.post(s.url + "/parse/functions/version", data="{}", headers=headers, timeout=30)
                    if r.status_code != 200:
                        with lock:
                            failures.append((r.status_code, r.text))
                    else:
                        versions.append(r.json()["result"]["version"])
                except requests.RequestException as e:
                    with lock:
                        failures.append(("exception", repr(e)))
        with lock:
            seen.append(versions)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        # Twelve new versions over about 3 s, alternately by rewriting the file and through the
        # admin API; a deploy lands about when the watcher picks up the previous rewrite, so a
        # folder reload that overtook the deploy would show up as a client going back.
        rng = random.Random(7)
        for v in range(1, LAST + 1):
            text = version_lua(v, extra=f"local pad = '{'x' * v}'")
            if v % 2:
                time.sleep(0.2)
                write_atomic(path, text)
            else:
                time.sleep(rng.uniform(0.2, 0.3))
                r = requests.put(s.url + "/admin/functions/v.lua", data=text, headers=ADMIN, timeout=30)
                assert r.status_code == 200, r.text
        assert wait_for(lambda: version_of(s) == LAST, timeout=20) is not None
        time.sleep(0.3)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=30)
    assert not any(t.is_alive() for t in threads)
    total = sum(len(v) for v in seen)
    print(f"\nreload under load: {total} calls, {len(failures)} failures, "
          f"versions seen {sorted(set(x for v in seen for x in v))}")
    assert failures == [], failures[:5]
    assert total >= 100, total
    for versions in seen:
        # Each client saw the generations in order: a new call never ran on an older generation.
        assert versions == sorted(versions), versions
        assert versions[-1] == LAST
    assert len(set(x for v in seen for x in v)) >= LAST // 2
