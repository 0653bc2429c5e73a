"""Parse Config (GET/PUT, masterKeyOnly, Lua config.get), modules under functions/lib/ (require,
cycles, hot reload, `moonbase check`) and Cloud Code crypto (vectors; RS256/ES256 signatures
checked with the openssl command-line tool)."""
import base64
import os
import subprocess
import tempfile
import time

from conftest import BIN, MASTER_KEY

CONFIG_LUA = r'''
cloud.define("cfg", function(req) return {v = config.get(req.params.name)} end)
'''


def test_config_get_put_master_only_and_lua(server_factory):
    s = server_factory(functions={"c.lua": CONFIG_LUA}).start()
    assert s.req("GET", "/parse/config").json() == {"params": {}}
    r = s.req("PUT", "/parse/config", {"params": {"a": 1}})
    assert r.status_code == 403 and r.json()["code"] == 119
    r = s.req("PUT", "/parse/config", {"params": {"welcome": "hi", "limits": {"n": 3}, "apiSecret": "s3"},
                                        "masterKeyOnly": {"apiSecret": True}}, master=True)
    assert r.status_code == 200 and r.json() == {"result": True}
    assert s.req("GET", "/parse/config").json() == {"params": {"welcome": "hi", "limits": {"n": 3}}}
    m = s.req("GET", "/parse/config", master=True).json()
    assert m["params"] == {"welcome": "hi", "limits": {"n": 3}, "apiSecret": "s3"}
    assert m["masterKeyOnly"] == {"apiSecret": True}
    # Cloud Code sees every parameter, whoever calls.
    assert s.call("cfg", {"name": "apiSecret"}).json()["result"] == {"v": "s3"}
    assert s.call("cfg", {"name": "limits"}).json()["result"] == {"v": {"n": 3}}
    assert s.call("cfg", {"name": "missing"}).json()["result"] == {}
    # Merge: listed params change, Delete removes, others stay; the cache follows every write.
    r = s.req("PUT", "/parse/config", {"params": {"welcome": {"__op": "Delete"}, "n": 2}}, master=True)
    assert r.status_code == 200
    assert s.req("GET", "/parse/config").json() == {"params": {"limits": {"n": 3}, "n": 2}}
    assert s.call("cfg", {"name": "welcome"}).json()["result"] == {}
    s.req("PUT", "/parse/config", {"masterKeyOnly": {"apiSecret": False}}, master=True)
    assert s.req("GET", "/parse/config").json()["params"]["apiSecret"] == "s3"
    bad = s.req("PUT", "/parse/config", {"params": [1]}, master=True)
    assert bad.status_code == 400 and bad.json()["code"] == 107
    # Survives a restart.
    s.stop()
    s.start()
    assert s.req("GET", "/parse/config").json() == {"params": {"limits": {"n": 3}, "n": 2, "apiSecret": "s3"}}


GEO_V1 = '''
local M = {}
function M.km(miles) return miles * 1.609344 end
M.version = 1
return M
'''

MAIN = '''
local geo = require("lib.geo")
local strings = require("lib.text.strings")
cloud.define("km", function(req) return {km = geo.km(req.params.miles), v = geo.version, up = strings.up("a")} end)
cloud.define("noShared", function(req) return {helperVisible = sharedHelper ~= nil} end)
cloud.define("lazy", function(req)
  local m = require("lib.lazy")   -- first required during a call: its globals stay its own
  return {value = m.value(), callGlobal = lazyGlobal == nil, same = m == require("lib.lazy")}
end)
'''

LAZY = 'lazyGlobal = 7\nreturn {value = function() return lazyGlobal end}\n'

STRINGS = 'sharedHelper = function() end\nreturn {up = function(s) return s:upper() end}\n'


def test_require_and_hot_reload_of_lib(server_factory):
    s = server_factory(functions={"main.lua": MAIN, "lib/geo.lua": GEO_V1, "lib/text/strings.lua": STRINGS,
                                  "lib/lazy.lua": LAZY}).start()
    assert s.call("km", {"miles": 10}).json()["result"] == {"km": 16.09344, "v": 1, "up": "A"}
    assert s.call("lazy").json()["result"] == {"value": 7, "callGlobal": True, "same": True}
    # A module's top-level globals stay in the module: no sharing through globals.
    assert s.call("noShared").json()["result"] == {"helperVisible": False}
    # Editing a module reloads the generation.
    path = os.path.join(s.functions, "lib", "geo.lua")
    with open(path, "w") as f:
        f.write(GEO_V1.replace("M.version = 1", "M.version = 2"))
    deadline = time.time() + 10
    while time.time() < deadline and s.call("km", {"miles": 1}).json()["result"]["v"] != 2:
        time.sleep(0.1)
    assert s.call("km", {"miles": 1}).json()["result"]["v"] == 2
    # A broken module leaves the previous generation serving and is reported with its file:line.
    with open(path, "w") as f:
        f.write("local M = {\n")
    time.sleep(1.5)
    assert s.call("km", {"miles": 1}).json()["result"]["v"] == 2
    listed = s.req("GET", "/admin/functions", master=True).json()
    assert "lib/geo.lua" in str(listed)


def run_check(files):
    with tempfile.TemporaryDirectory() as d:
        for name, text in files.items():
            p = os.path.join(d, "functions", name)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w") as f:
                f.write(text)
        os.makedirs(os.path.join(d, "cron"))
        return subprocess.run([BIN, "check", os.path.join(d, "functions"), "--cron", os.path.join(d, "cron"),
                               "--data", os.path.join(d, "data")], capture_output=True, text=True, timeout=60)


def test_check_reports_cycles_and_broken_modules():
    r = run_check({"main.lua": 'local a = require("lib.a")\n', "lib/a.lua": 'local b = require("lib.b")\nreturn {}\n',
                   "lib/b.lua": 'local a = require("lib.a")\nreturn {}\n'})
    assert r.returncode == 1
    assert "require cycle" in r.stderr and "lib/a.lua" in r.stderr and "lib/b.lua" in r.stderr
    # A module nobody requires yet is still checked.
    r = run_check({"main.lua": "", "lib/unused.lua": "return {\n  x =\n"})
    assert r.returncode == 1 and "lib/unused.lua:" in r.stderr
    r = run_check({"main.lua": MAIN, "lib/geo.lua": GEO_V1, "lib/text/strings.lua": STRINGS})
    assert r.returncode == 0, r.stderr


CRYPTO_LUA = r'''
cloud.define("digests", function(req)
  return {
    sha = crypto.sha256(req.params.s),
    hmac = crypto.hmacSha256(req.params.key, req.params.s),
    hmac64 = crypto.hmacSha256(req.params.key, req.params.s, "base64"),
    b64 = crypto.base64.encode(req.params.s),
    b64url = crypto.base64url.encode(crypto.sha256(req.params.s, "raw")),
    back = crypto.base64.decode(crypto.base64.encode(req.params.s)) == req.params.s,
  }
end)

-- A JWT as APNs and FCM want it.
cloud.define("jwt", function(req)
  local header = crypto.base64url.encode(json.encode({alg = req.params.alg, typ = "JWT"}))
  local claims = crypto.base64url.encode(json.encode({iss = "team", iat = 1700000000}))
  local input = header .. "." .. claims
  return {input = input, sig = crypto.base64url.encode(crypto.sign(req.params.alg, req.params.pem, input))}
end)
'''


def b64url_decode(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def der_ecdsa(raw):
    def integer(b):
        b = b.lstrip(b"\0") or b"\0"
        if b[0] & 0x80:
            b = b"\0" + b
        return b"\x02" + bytes([len(b)]) + b
    body = integer(raw[:32]) + integer(raw[32:])
    return b"\x30" + bytes([len(body)]) + body


def openssl_verify(d, pub, data, sig):
    with open(os.path.join(d, "data"), "wb") as f:
        f.write(data)
    with open(os.path.join(d, "sig"), "wb") as f:
        f.write(sig)
    return subprocess.run(["openssl", "dgst", "-sha256", "-verify", pub, "-signature", os.path.join(d, "sig"),
                           os.path.join(d, "data")], capture_output=True, text=True)


def test_crypto_vectors_and_signatures(server_factory):
    s = server_factory(functions={"c.lua": CRYPTO_LUA}).start()
    out = s.call("digests", {"s": "what do ya want for nothing?", "key": "Jefe"}).json()["result"]
    assert out["hmac"] == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"   # RFC 4231 case 2
    assert out["sha"] == "b381e7fec653fc3ab9b178272366b8ac87fed8d31cb25ed1d0e1f3318644c89c"
    assert base64.b64decode(out["hmac64"]).hex() == out["hmac"]
    assert out["b64"] == base64.b64encode(b"what do ya want for nothing?").decode()
    assert b64url_decode(out["b64url"]).hex() == out["sha"] and "=" not in out["b64url"]
    assert out["back"] is True
    with tempfile.TemporaryDirectory() as d:
        keys = {
            "RS256": ["openssl", "genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048"],
            "ES256": ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
        }
        for alg, cmd in keys.items():
            key = os.path.join(d, alg + ".pem")
            pub = os.path.join(d, alg + ".pub")
            subprocess.run(cmd + ["-out", key], check=True, capture_output=True)
            subprocess.run(["openssl", "pkey", "-in", key, "-pubout", "-out", pub], check=True, capture_output=True)
            with open(key) as f:
                pem = f.read()
            r = s.call("jwt", {"alg": alg, "pem": pem})
            assert r.status_code == 200, r.text
            jwt = r.json()["result"]
            sig = b64url_decode(jwt["sig"])
            if alg == "ES256":
                assert len(sig) == 64   # JOSE r||s, not DER
                sig = der_ecdsa(sig)
            v = openssl_verify(d, pub, jwt["input"].encode(), sig)
            assert v.returncode == 0 and "Verified OK" in v.stdout, v.stdout + v.stderr
            # A signature over other data does not verify.
            assert openssl_verify(d, pub, b"tampered", sig).returncode != 0
        # The wrong key type for the algorithm is a clear error.
        with open(os.path.join(d, "ES256.pem")) as f:
            r = s.call("jwt", {"alg": "RS256", "pem": f.read()})
        assert r.status_code == 400 and "RS256 needs an RSA private key" in r.json()["error"]


def test_admin_deploys_modules(server_factory):
    s = server_factory(functions={"x.lua": "-- empty\n"}).start()
    main = 'local u = require("lib.util")\ncloud.define("twice", function(req) return u.twice(req.params.n) end)\n'
    r = s.req("PUT", "/admin/functions/main.lua", raw=main, master=True)
    assert r.status_code == 400 and "lib/util.lua" in r.json()["error"]   # not there yet: refused
    r = s.req("PUT", "/admin/functions/lib/util.lua", raw="return {twice = function(n) return 2 * n end}\n", master=True)
    assert r.status_code == 200, r.text
    assert s.req("GET", "/admin/functions/lib/util.lua", master=True).text.startswith("return {twice")
    assert s.req("PUT", "/admin/functions/main.lua", raw=main, master=True).status_code == 200
    assert s.call("twice", {"n": 21}).json()["result"] == 42
    # Removing a module still required is refused; the generation keeps serving.
    r = s.req("DELETE", "/admin/functions/lib/util.lua", master=True)
    assert r.status_code == 400 and "lib.util" in r.json()["error"]
    assert s.call("twice", {"n": 2}).json()["result"] == 4
    assert s.req("PUT", "/admin/functions/lib/..%2Fevil.lua", raw="return {}", master=True).status_code in (400, 404)
