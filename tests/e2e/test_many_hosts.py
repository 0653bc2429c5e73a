"""Several hosts on one PostgreSQL database: what one host writes, does or is told, the others
see. Run by the PostgreSQL pass of `make test` only (each test starts its own hosts)."""
import pytest
import requests

from conftest import APP_ID

pytestmark = pytest.mark.postgres_only("two hosts share one PostgreSQL database")

def test_read_your_write_across_hosts(host_factory):
    a = host_factory().start()
    b = host_factory(like=a).start()
    r = a.req("POST", "/parse/classes/Note", {"text": "hi"})
    assert r.status_code == 201, r.text
    oid = r.json()["objectId"]
    got = b.req("GET", f"/parse/classes/Note/{oid}")
    assert got.status_code == 200 and got.json()["text"] == "hi"


def test_files_uploaded_on_one_host_are_served_and_deleted_by_another_sharing_the_directory(host_factory):
    """Hosts on one database share their data directory's `files/` (a network file system in
    production): the bytes go there, the record into the database, so any host serves them."""
    a = host_factory().start()
    b = host_factory(like=a, data=a.data).start()
    h = {"X-Parse-Application-Id": APP_ID, "Content-Type": "text/plain"}
    up = requests.post(a.url + "/parse/files/hello.txt", data=b"shared bytes", headers=h, timeout=30)
    assert up.status_code == 201, up.text
    name = up.json()["name"]
    got = requests.get(b.url + f"/parse/files/{APP_ID}/{name}", timeout=30)
    assert got.status_code == 200 and got.content == b"shared bytes"
    assert got.headers["Content-Type"].startswith("text/plain")
    assert b.req("DELETE", f"/parse/files/{name}", master=True).status_code == 200
    assert requests.get(a.url + f"/parse/files/{APP_ID}/{name}", timeout=30).status_code == 404
