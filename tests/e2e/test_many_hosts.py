"""Several hosts on one PostgreSQL database: what one host writes, does or is told, the others
see. Run by the PostgreSQL pass of `make test` only (each test starts its own hosts)."""
import pytest
pytestmark = pytest.mark.postgres_only("two hosts share one PostgreSQL database")

def test_read_your_write_across_hosts(host_factory):
    a = host_factory().start()
    b = host_factory(like=a).start()
    r = a.req("POST", "/parse/classes/Note", {"text": "hi"})
    assert r.status_code == 201, r.text
    oid = r.json()["objectId"]
    got = b.req("GET", f"/parse/classes/Note/{oid}")
    assert got.status_code == 200 and got.json()["text"] == "hi"
