"""Files against the real binary (issue 4 item 5): upload → 201 `{url, name}` with
a random prefix, download without any header and with the stored content type, delete with the
master key only, path traversal refused or sanitised (nothing written or read outside
`DATA/files`), uploads over 20 MiB → 413, and File values linking objects to files."""
import json
import os
import re
import socket

import pytest
import requests

from conftest import APP_ID, Server

LUA = """
cloud.define("dropFile", {requireMaster = true}, function(req) return files.delete(req.params.file) end)
"""
STORED = re.compile(r"^[0-9a-f]{32}_[A-Za-z0-9._-]+$")


@pytest.fixture(scope="module")
def srv():
    s = Server(functions={"files.lua": LUA}).start()
    yield s
    s.stop()
    s.cleanup()


def upload(srv, name, data, content_type="text/plain"):
    return requests.post(srv.url + f"/parse/files/{name}", data=data, timeout=60,
                         headers={"X-Parse-Application-Id": APP_ID, "Content-Type": content_type})


def all_files(root):
    out = set()
    for d, _, names in os.walk(root):
        for n in names:
            out.add(os.path.relpath(os.path.join(d, n), root))
    return out


def raw(srv, method, path, body=b"", headers=None):
    """Sends the path exactly as given (no client-side dot-segment normalisation)."""
    h = {"Host": f"127.0.0.1:{srv.port}", "X-Parse-Application-Id": APP_ID, "Content-Type": "text/plain",
         "Content-Length": str(len(body)), "Connection": "close"}
    h.update(headers or {})
    head = f"{method} {path} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items()) + "\r\n"
    with socket.create_connection(("127.0.0.1", srv.port), timeout=10) as s:
        s.sendall(head.encode() + body)
        out = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    status = int(out.split(b" ", 2)[1])
    return status, out.partition(b"\r\n\r\n")[2]


def test_upload_download_delete(srv):
    data = bytes(range(256)) * 40
    r = upload(srv, "photo.png", data, "image/png")
    assert r.status_code == 201, r.text
    body = r.json()
    assert set(body) == {"url", "name"}
    name = body["name"]
    assert STORED.match(name) and name.endswith("_photo.png")
    assert body["url"] == f"{srv.url}/parse/files/{APP_ID}/{name}"
    assert os.path.exists(os.path.join(srv.data, "files", name))
    # Same name twice: two different files.
    r2 = upload(srv, "photo.png", b"other", "image/png")
    assert r2.json()["name"] != name

    # Download with no headers at all, content type kept.
    g = requests.get(body["url"], timeout=10)
    assert g.status_code == 200 and g.content == data
    assert g.headers["Content-Type"].startswith("image/png")
    g = requests.get(srv.url + f"/parse/files/{APP_ID}/{r2.json()['name']}", timeout=10)
    assert g.content == b"other"
    # Wrong app or unknown name → 404.
    assert requests.get(srv.url + f"/parse/files/otherapp/{name}", timeout=10).status_code == 404
    assert requests.get(srv.url + f"/parse/files/{APP_ID}/{'0' * 32}_nothing.png", timeout=10).status_code == 404

    # Uploads need the application id.
    r = requests.post(srv.url + "/parse/files/x.txt", data=b"x", timeout=10)
    assert r.status_code == 403 and r.json() == {"error": "unauthorized"}

    # Delete: master only.
    r = srv.req("DELETE", f"/parse/files/{name}")
    assert r.status_code == 403 and r.json()["code"] == 119
    assert requests.get(body["url"], timeout=10).status_code == 200
    r = srv.req("DELETE", f"/parse/files/{name}", master=True)
    assert r.status_code == 200, r.text
    assert requests.get(body["url"], timeout=10).status_code == 404
    assert not os.path.exists(os.path.join(srv.data, "files", name))
    assert srv.req("DELETE", f"/parse/files/{name}", master=True).status_code == 404

    # Empty files and files with an unusual content type.
    r = upload(srv, "empty.bin", b"", "application/octet-stream")
    assert r.status_code == 201
    g = requests.get(r.json()["url"], timeout=10)
    assert g.status_code == 200 and g.content == b""


def test_path_traversal_is_refused_or_sanitised(srv):
    with open(os.path.join(srv.data, "secret.txt"), "w") as f:
        f.write("TOP-SECRET-CONTENT")
    outside_before = all_files(srv.tmp) - {os.path.join("data", "files", n) for n in os.listdir(os.path.join(srv.data, "files"))}
    attempts = ["/parse/files/../../etc/passwd", "/parse/files/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
                "/parse/files/..%2F..%2Fsecret.txt", "/parse/files/%2e%2e", "/parse/files/..",
                "/parse/files/.hidden", "/parse/files/a%2Fb.txt", "/parse/files/a%5C..%5Cb.txt",
                "/parse/files/%2E%2E%5Csecret.txt", "/parse/files/a%00b.txt", "/parse/files/" + "n" * 300]
    for path in attempts:
        status, body = raw(srv, "POST", path, b"EVIL-CONTENT")
        assert status in (201, 400, 404, 405), (path, status, body)
        if status == 201:
            name = json.loads(body)["name"]
            assert STORED.match(name), (path, name)   # no "/" left: the name cannot leave the folder
            assert os.path.exists(os.path.join(srv.data, "files", name))
        else:
            assert json.loads(body)["code"] in (101, 107, 108, 122), (path, body)
    outside_after = all_files(srv.tmp) - {os.path.join("data", "files", n) for n in os.listdir(os.path.join(srv.data, "files"))}
    new = {p for p in outside_after - outside_before if not p.startswith(os.path.join("data", "moonbase.sqlite")) and p != "server.log"}
    assert not new, f"files written outside DATA/files: {new}"
    for d, _, names in os.walk(srv.tmp):
        for n in names:
            p = os.path.join(d, n)
            if os.path.dirname(p) != os.path.join(srv.data, "files") and n != "server.log" and not n.startswith("moonbase.sqlite"):
                assert b"EVIL-CONTENT" not in open(p, "rb").read(), p

    # Downloads cannot reach outside DATA/files either.
    for path in [f"/parse/files/{APP_ID}/..%2Fsecret.txt", f"/parse/files/{APP_ID}/../secret.txt",
                 f"/parse/files/{APP_ID}/%2e%2e%2fsecret.txt", "/parse/files/../secret.txt",
                 f"/parse/files/{APP_ID}/..%2Fmoonbase.sqlite", f"/parse/files/{APP_ID}/..%2F..%2Fserver.log",
                 f"/parse/files/{APP_ID}/secret.txt", f"/parse/files/{APP_ID}/%2Fetc%2Fpasswd"]:
        status, body = raw(srv, "GET", path)
        assert status in (400, 404, 405), (path, status)
        assert b"TOP-SECRET" not in body and b"root:" not in body and b"SQLite format" not in body
    # Deletes likewise.
    for path in ["/parse/files/..%2Fsecret.txt", "/parse/files/%2e%2e%2fsecret.txt", "/parse/files/secret.txt"]:
        status, _ = raw(srv, "DELETE", path, headers={"X-Parse-Master-Key": srv.env["MOONBASE_MASTER_KEY"]})
        assert status in (400, 404, 405), (path, status)
    assert open(os.path.join(srv.data, "secret.txt")).read() == "TOP-SECRET-CONTENT"


def test_oversize_upload_is_413_and_nothing_is_stored(srv):
    before = set(os.listdir(os.path.join(srv.data, "files")))
    big = b"z" * ((20 << 20) + 1)
    r = upload(srv, "big.bin", big, "application/octet-stream")
    assert r.status_code == 413, r.status_code
    assert r.json()["code"] == 130
    assert set(os.listdir(os.path.join(srv.data, "files"))) == before
    # Exactly 20 MiB is accepted and comes back whole.
    r = upload(srv, "max.bin", b"m" * (20 << 20), "application/octet-stream")
    assert r.status_code == 201, r.text
    g = requests.get(r.json()["url"], timeout=60)
    assert len(g.content) == 20 << 20
    assert srv.req("DELETE", f"/parse/files/{r.json()['name']}", master=True).status_code == 200
    # A JSON body keeps its own 1 MiB limit: the file limit is for /parse/files only.
    r = srv.req("POST", "/parse/classes/Big", raw=json.dumps({"x": "y" * (2 << 20)}))
    assert r.status_code == 413


def test_file_value_links_an_object_to_a_file(srv):
    r = upload(srv, "avatar.jpg", b"\xff\xd8JPEGDATA", "image/jpeg")
    f = r.json()
    r = srv.req("POST", "/parse/classes/Profile", {"name": "ann", "avatar": {"__type": "File", "name": f["name"], "url": f["url"]}})
    assert r.status_code == 201
    oid = r.json()["objectId"]
    o = srv.req("GET", f"/parse/classes/Profile/{oid}").json()
    assert o["avatar"]["__type"] == "File" and o["avatar"]["name"] == f["name"]
    g = requests.get(o["avatar"]["url"], timeout=10)
    assert g.status_code == 200 and g.content == b"\xff\xd8JPEGDATA" and g.headers["Content-Type"].startswith("image/jpeg")
    # The File field keeps its type and can be queried by equality on the file.
    assert srv.req("POST", "/parse/classes/Profile", {"avatar": "not a file"}).json()["code"] == 111
    res = srv.req("GET", "/parse/classes/Profile", params={"where": json.dumps({"avatar": {"__type": "File", "name": f["name"]}})}).json()
    assert [x["objectId"] for x in res["results"]] == [oid]
    # Lua's files.delete (given the File value) removes the file through the same store.
    r = srv.call("dropFile", {"file": o["avatar"]})
    assert (r.status_code, r.json()["code"]) == (400, 142)  # requireMaster
    assert requests.get(o["avatar"]["url"], timeout=10).status_code == 200
    r = srv.call("dropFile", {"file": o["avatar"]}, master=True)
    assert r.status_code == 200 and r.json() == {"result": True}, r.text
    assert requests.get(o["avatar"]["url"], timeout=10).status_code == 404
    assert not os.path.exists(os.path.join(srv.data, "files", f["name"]))
    assert srv.call("dropFile", {"file": o["avatar"]}, master=True).json() == {"result": False}
