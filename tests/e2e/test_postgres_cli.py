"""`--database` / `MOONBASE_DATABASE_URL` on the command line, against a real PostgreSQL (the run's
throw-away cluster, whichever backend the run's servers use): the verbs open the database the URL
names and leave no SQLite file behind; `serve` insists on a shared master key; `backup` points to
pg_dump."""
import json
import os
import subprocess
import time

from conftest import BIN, MASTER_KEY, PGCluster


def run(args, env=None, cwd=None):
    e = {k: v for k, v in os.environ.items() if not k.startswith("MOONBASE_")}
    e.update(env or {})
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=120, env=e, cwd=cwd)


def hour_start_ms():
    now = int(time.time())
    return (now - now % 3600) * 1000


def test_usage_reads_the_database_the_url_names(tmp_path):
    pg = PGCluster.get()
    url = pg.new_database()
    data = tmp_path / "data"
    first = run(["usage", "--json", "--by", "account", "--database", url, "--data", str(data)])
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["rows"] == []
    # Opening the database made its internal tables; a row written there is what usage reports.
    pg.psql(f"INSERT INTO _mb_usage(hour, kind, key, units, db_reads) VALUES ({hour_start_ms()}, 'account', 'app', 7, 3)", url)
    r = run(["usage", "--json", "--by", "account", "--database", url, "--data", str(data)])
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)["rows"]
    assert [(x["key"], x["units"], x["dbReads"]) for x in rows] == [("app", 7, 3)], rows
    assert not os.path.exists(data / "moonbase.sqlite")


def test_serve_on_a_database_needs_the_shared_master_key(tmp_path):
    url = PGCluster.get().new_database()
    r = run(["serve", "--port", "0", "--data", str(tmp_path / "data")], env={"MOONBASE_DATABASE_URL": url}, cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    assert "MOONBASE_MASTER_KEY" in r.stderr
    assert not os.path.exists(tmp_path / "data" / "master.key")


def test_only_postgres_urls_are_accepted(tmp_path):
    for args, env in ((["usage", "--database", "sqlite:///x.db"], {}),
                      (["usage"], {"MOONBASE_DATABASE_URL": "mysql://db/app"})):
        r = run(args + ["--data", str(tmp_path)], env=env)
        assert r.returncode == 2, r.stderr
        assert "postgres://" in r.stderr


def test_backup_on_postgres_exits_2_pointing_to_pg_dump(tmp_path):
    url = PGCluster.get().new_database()
    out = tmp_path / "copy.sqlite"
    r = run(["backup", str(out), "--database", url], env={"MOONBASE_MASTER_KEY": MASTER_KEY})
    assert r.returncode == 2, r.stderr
    assert "pg_dump" in r.stderr
    assert not out.exists()
