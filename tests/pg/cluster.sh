#!/usr/bin/env bash
# A throw-away PostgreSQL 15 cluster for tests.
#
#   tests/pg/cluster.sh start DIR [OWNER_PID]   initdb into DIR/data, start on a free port of
#                                               127.0.0.1, print the postgres:// URL
#   tests/pg/cluster.sh stop DIR                stop it (fast shutdown; kill if it hangs)
#
# Trust authentication on 127.0.0.1 only, the unix socket inside DIR (never /var/run), C
# collation (strings sort in byte order, as on SQLite), no fsync (the data is thrown away).
# initdb refuses to run as root: as root, DIR is chowned to an unprivileged user (PG_USER,
# default nobody) and the server runs as that user. With OWNER_PID, a watcher stops the
# cluster when that process exits, so a crashed test run leaves no server behind.
# PG_BIN overrides the binaries' directory (Debian: /usr/lib/postgresql/15/bin).
set -euo pipefail

PG_BIN=${PG_BIN:-/usr/lib/postgresql/15/bin}
PG_USER=${PG_USER:-nobody}

usage() { echo "usage: $0 start DIR [OWNER_PID] | stop DIR" >&2; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1
dir=$(realpath -m "$2")
self=$(realpath "$0")

as_server_user() {
  if [ "$(id -u)" = 0 ]; then runuser -u "$PG_USER" -- "$@"; else "$@"; fi
}

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

stop_cluster() {
  local data=$dir/data
  [ -f "$data/postmaster.pid" ] || return 0
  if ! as_server_user "$PG_BIN/pg_ctl" -D "$data" -m fast -w -t 30 stop >/dev/null 2>&1; then
    local pid
    pid=$(head -1 "$data/postmaster.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then
      kill -QUIT "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
  fi
}

case "$cmd" in
start)
  [ -x "$PG_BIN/initdb" ] || { echo "error: PostgreSQL 15 not found in $PG_BIN (apt-get install postgresql-15)" >&2; exit 1; }
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then
    chown "$PG_USER" "$dir"
    as_server_user test -w "$dir" || { echo "error: $PG_USER cannot write $dir (are its parents traversable?)" >&2; exit 1; }
  fi
  as_server_user mkdir -p "$dir/sock"
  as_server_user "$PG_BIN/initdb" -D "$dir/data" -U postgres -A trust -E UTF8 --locale=C --no-sync >"$dir/initdb.log" 2>&1 \
    || { cat "$dir/initdb.log" >&2; exit 1; }
  as_server_user tee "$dir/data/pg_hba.conf" >/dev/null <<HBA
local all all trust
host all all 127.0.0.1/32 trust
HBA
  # A port found free may be taken before the server binds it: try a few.
  for attempt in 1 2 3 4 5; do
    port=$(free_port)
    as_server_user tee "$dir/data/postgresql.auto.conf" >/dev/null <<CONF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir/sock'
fsync = off
synchronous_commit = off
full_page_writes = off
shared_buffers = 32MB
max_connections = 100
dynamic_shared_memory_type = mmap
CONF
    if as_server_user "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null 2>&1; then
      url="postgres://postgres@127.0.0.1:$port/postgres"
      echo "$url" > "$dir/url"
      if [ $# -ge 3 ]; then
        owner=$3
        # Detached from our stdout so the caller reading the URL is not kept waiting.
        setsid bash -c "while kill -0 $owner 2>/dev/null && [ -f '$dir/data/postmaster.pid' ]; do sleep 1; done; '$self' stop '$dir'" \
          </dev/null >/dev/null 2>&1 &
      fi
      echo "$url"
      exit 0
    fi
    grep -q "could not bind\|Address already in use" "$dir/server.log" 2>/dev/null || break
  done
  echo "error: PostgreSQL did not start; its log:" >&2
  cat "$dir/server.log" >&2 2>/dev/null || true
  exit 1
  ;;
stop)
  stop_cluster
  ;;
*)
  usage
  ;;
esac
