# Sourced by bench/run.sh: server control, job polling and the wrk measurement loop.
# The measurement follows the peers kit's bench.sh (same wrk settings, same quiet-box wait and
# noisy-run retry, same CPU arithmetic) so Moonbase's figures compare with PocketBase's, except
# that memory is RssAnon (private memory; SQLite's mmap'd file pages excluded).

CLK=$(getconf CLK_TCK)

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# json_get FIELD < JSON   (prints the field of a JSON object, empty when absent)
json_get() { python3 -c 'import json,sys; v=json.load(sys.stdin).get(sys.argv[1]); print("" if v is None else (v if isinstance(v,str) else json.dumps(v)))' "$1"; }

pids_of() {  # given pids + their direct children
  local p
  for p in "$@"; do echo "$p"; pgrep -P "$p" 2>/dev/null || true; done | sort -un
}
status_kb() {  # status_kb FIELD PID...  (sum of a /proc/PID/status field in kB)
  local f="$1" sum=0 p v; shift
  for p in $(pids_of "$@"); do v=$(awk -v f="$f:" '$1==f{print $2}' "/proc/$p/status" 2>/dev/null || echo 0); sum=$((sum + ${v:-0})); done
  echo "$sum"
}
cpu_ticks() {  # utime+stime (clock ticks) summed over the server processes
  local sum=0 p v
  for p in $(pids_of "$@"); do v=$(awk '{print $14+$15}' "/proc/$p/stat" 2>/dev/null || echo 0); sum=$((sum + ${v:-0})); done
  echo "$sum"
}
box_busy_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
box_ticks() { awk '/^cpu /{print $2+$3+$4+$7+$9, $8}' /proc/stat; }  # "busy-without-softirq softirq"
wait_quiet() {  # returns after the box was < QUIET_PCT busy for 1 s, or QUIET_WAIT s passed
  local start b0 b1 pct
  start=$(date +%s)
  while :; do
    b0=$(box_busy_ticks); sleep 1; b1=$(box_busy_ticks)
    pct=$(( 100 * (b1 - b0) / CLK ))
    [ "$pct" -lt "$QUIET_PCT" ] && return 0
    [ $(( $(date +%s) - start )) -ge "$QUIET_WAIT" ] && return 0
  done
}
to_ms() { awk -v v="$1" 'BEGIN{ if (v ~ /us$/) {sub(/us$/,"",v); printf "%.3f", v/1000} else if (v ~ /ms$/) {sub(/ms$/,"",v); printf "%.3f", v} else if (v ~ /s$/) {sub(/s$/,"",v); printf "%.3f", v*1000} else print v }'; }

# --- Moonbase server control --------------------------------------------------------------
# mb_start NAME PORT DATA FUNCTIONS [VAR=VALUE ...]: starts the release binary in the background
# (pid in $STATE/NAME.pid) and waits for /parse/health. Its log (stderr/stdout) is written to a
# file, request log included, as a deployment would keep it; that file stays in $STATE (W1 alone
# writes millions of lines) and mb_stop keeps its other lines in $OUT/NAME.log.
mb_start() {
  local name="$1" port="$2" data="$3" funcs="$4"; shift 4
  mkdir -p "$data" "$STATE/cron-empty" "$STATE/logs"
  env "$@" MOONBASE_MASTER_KEY="$MASTER_KEY" nohup "$MOONBASE_BIN" serve --host 127.0.0.1 --port "$port" \
    --data "$data" --functions "$funcs" --cron "$STATE/cron-empty" >> "$STATE/logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$STATE/$name.pid"
  local i
  for i in $(seq 1 240); do
    curl -fsS "http://127.0.0.1:$port/parse/health" > /dev/null 2>&1 && return 0
    kill -0 "$(cat "$STATE/$name.pid")" 2>/dev/null || { tail -20 "$STATE/logs/$name.log" >&2; die "moonbase $name exited"; }
    sleep 0.25
  done
  die "moonbase $name did not answer /parse/health within 60 s"
}
mb_pid() { cat "$STATE/$1.pid"; }
# mb_stop NAME: SIGTERM (graceful: flush accounting, checkpoint WAL), SIGKILL after 30 s.
mb_stop() {
  local f="$STATE/$1.pid" p i
  [ -f "$f" ] || return 0
  p=$(cat "$f")
  if kill -0 "$p" 2>/dev/null; then
    kill -TERM "$p"
    for i in $(seq 1 120); do kill -0 "$p" 2>/dev/null || break; sleep 0.25; done
    kill -0 "$p" 2>/dev/null && { log "moonbase $1 did not stop in 30 s; killing"; kill -KILL "$p"; }
  fi
  rm -f "$f"
  mb_keep_log "$1"
}
# A request log line (text format): "TIME INFO [request id] METHOD PATH STATUS µs account=…".
REQ_LINE='^[^ ]+ INFO \[[^]]*\] [A-Z]+ /'
# mb_keep_log NAME: $OUT/NAME.log gets the log's lines that are not request lines, and the count
# and size of those; $STATE/logs/NAME.requests holds "LINES BYTES" for the report.
mb_keep_log() {
  local f="$STATE/logs/$1.log" n b
  [ -f "$f" ] || return 0
  n=$(grep -c -E "$REQ_LINE" "$f" || true); b=$(grep -E "$REQ_LINE" "$f" | wc -c || true)
  { grep -v -E "$REQ_LINE" "$f" || true; echo "[bench] ${n:-0} request log lines ($b bytes) were written; not kept"; } >> "$OUT/$1.log"
  echo "${n:-0} $b" > "$STATE/logs/$1.requests"
  rm -f "$f"
}

# mb_job PORT NAME PARAMS_JSON TIMEOUT_S: starts a job through the jobs API with the master key,
# polls its _JobStatus row until it is no longer running, and prints the row (JSON).
mb_job() {
  local port="$1" name="$2" params="$3" timeout="$4" id row st deadline
  id=$(curl -fsS -D - -o /dev/null -X POST -H "X-Parse-Application-Id: $APP_ID" -H "X-Parse-Master-Key: $MASTER_KEY" \
        -H 'Content-Type: application/json' -d "$params" "http://127.0.0.1:$port/parse/jobs/$name" |
       awk -F': ' 'tolower($1)=="x-parse-job-status-id"{gsub(/\r/,"",$2); print $2}')
  [ -n "$id" ] || die "job $name did not start"
  deadline=$(( $(date +%s) + timeout ))
  while :; do
    row=$(curl -fsS -H "X-Parse-Application-Id: $APP_ID" -H "X-Parse-Master-Key: $MASTER_KEY" \
          "http://127.0.0.1:$port/parse/classes/_JobStatus/$id")
    st=$(echo "$row" | json_get status)
    [ "$st" != "running" ] && { echo "$row"; return 0; }
    [ "$(date +%s)" -ge "$deadline" ] && die "job $name still running after ${timeout}s: $row"
    sleep 0.5
  done
}

# --- measurement ------------------------------------------------------------------------------
HDR='label\tworkload\trep\treq_s\tp50_ms\tp99_ms\trequests\tnon2xx\tsocket_errors\trss_warm_kb\trss_after_kb\thwm_kb\tserver_cpu_pct\tserver_cpu_us_per_req\twrk_cpu_pct\tsoftirq_pct\tother_cpu_pct\n'

# run_once LABEL WORKLOAD REP CONNS PIDS WRKARGS... -> one TSV line (bench.sh's columns; the
# rss columns hold RssAnon in kB, hwm VmHWM); sets OTHER.
run_once() {
  local label="$1" w="$2" rep="$3" conns="$4" pids="$5"; shift 5
  local f="$OUT/moonbase/$w-$rep.txt" rss0 rss1 hwm c0 c1 t0 t1 x0 s0 x1 s1 wrkcpu sirq rps p50 p99 reqs non2xx serr cpu us
  # shellcheck disable=SC2086
  rss0=$(status_kb RssAnon $pids); c0=$(cpu_ticks $pids); read -r x0 s0 < <(box_ticks); t0=$(date +%s.%N)
  /usr/bin/time -f '%U %S' -o "$OUT/moonbase/.wrktime" wrk -t"$THREADS" -c"$conns" -d"$DURATION" --latency "$@" > "$f" 2>&1 || true
  # shellcheck disable=SC2086
  t1=$(date +%s.%N); c1=$(cpu_ticks $pids); read -r x1 s1 < <(box_ticks); rss1=$(status_kb RssAnon $pids); hwm=$(status_kb VmHWM $pids)
  wrkcpu=$(awk -v t0="$t0" -v t1="$t1" '{printf "%.0f", 100*($1+$2)/(t1-t0)}' "$OUT/moonbase/.wrktime")
  sirq=$(awk -v a="$s0" -v b="$s1" -v t0="$t0" -v t1="$t1" -v k="$CLK" 'BEGIN{printf "%.0f", 100*(b-a)/k/(t1-t0)}')
  OTHER=$(awk -v a="$c0" -v b="$c1" -v x="$x0" -v y="$x1" -v t0="$t0" -v t1="$t1" -v k="$CLK" -v wc="$wrkcpu" \
    'BEGIN{o = 100*((y-x)-(b-a))/k/(t1-t0) - wc; if (o < 0) o = 0; printf "%.0f", o}')
  rps=$(awk '/^Requests\/sec:/{print $2}' "$f"); rps=${rps:-0}
  p50=$(to_ms "$(awk '$1=="50%"{print $2}' "$f")")
  p99=$(to_ms "$(awk '$1=="99%"{print $2}' "$f")")
  reqs=$(awk '/requests in/{print $1}' "$f"); reqs=${reqs:-0}
  non2xx=$(awk -F': ' '/Non-2xx/{print $2}' "$f"); non2xx=${non2xx:-0}
  serr=$(awk -F'Socket errors: ' '/Socket errors/{print $2}' "$f" | tr -d ','); serr=${serr:-none}
  cpu=$(awk -v a="$c0" -v b="$c1" -v t0="$t0" -v t1="$t1" -v k="$CLK" 'BEGIN{printf "%.0f", 100*(b-a)/k/(t1-t0)}')
  us=$(awk -v a="$c0" -v b="$c1" -v k="$CLK" -v n="$reqs" 'BEGIN{ if (n>0) printf "%.1f", 1e6*(b-a)/k/n; else print "NA"}')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$label" "$w" "$rep" "$rps" "$p50" "$p99" \
    "$reqs" "$non2xx" "$serr" "$rss0" "$rss1" "$hwm" "$cpu" "$us" "$wrkcpu" "$sirq" "$OTHER"
}

# measure LABEL WORKLOAD REP CONNS PIDS WRKARGS...: one kept run (quiet-box wait first; a run
# during which other processes used > NOISE_PCT % CPU goes to runs-discarded.tsv and is repeated,
# at most NOISE_RETRIES times), appended to $OUT/moonbase/runs.tsv.
measure() {
  local label="$1" w="$2" rep="$3" try=0 line
  while :; do
    wait_quiet
    line=$(run_once "$@")
    OTHER=$(echo "$line" | cut -f17)
    if [ "$OTHER" -gt "$NOISE_PCT" ] && [ "$try" -lt "$NOISE_RETRIES" ]; then
      echo "$line" >> "$OUT/moonbase/runs-discarded.tsv"; cp "$OUT/moonbase/$w-$rep.txt" "$OUT/moonbase/$w-$rep-discarded-$try.txt"
      log "discarded $w rep $rep: other processes used ${OTHER}% CPU; retrying"
      try=$((try + 1)); continue
    fi
    echo "$line" >> "$OUT/moonbase/runs.tsv"
    log "$(echo "$line" | awk -F'\t' '{printf "%s %s #%s: %s req/s, p50 %s ms, p99 %s ms, %s µs CPU/req, non-2xx %s, other %s%%", $1, $2, $3, $4, $5, $6, $14, $8, $17}')"
    return 0
  done
}

# workload LABEL WORKLOAD CONNS PIDS WRKARGS...: warm-up, then REPEAT kept runs.
workload() {
  local label="$1" w="$2" conns="$3" pids="$4" rep; shift 4
  wrk -t"$THREADS" -c"$conns" -d"$WARMUP" "$@" > "$OUT/moonbase/$w-warmup.txt" 2>&1 || true
  for rep in $(seq 1 "$REPEAT"); do measure "$label" "$w" "$rep" "$conns" "$pids" "$@"; done
}

# --- profiles ---------------------------------------------------------------------------------
# perf_start NAME PID: samples every thread of the server (999 Hz, call graphs) in the background
# until perf_stop NAME, which folds the samples into $OUT/perf/NAME-top.txt, NAME-dso.txt and
# NAME.folded (bench/perfsum.py) and deletes perf.data. When perf is missing or cannot attach
# (permissions: kernel.perf_event_paranoid), NAME-error.txt says why and the run goes on.
PERF_PID=""
perf_start() {
  local name="$1" pid="$2"
  mkdir -p "$OUT/perf"; PERF_PID=""
  if [ "${BENCH_PERF:-1}" != 1 ]; then echo "BENCH_PERF=0: not profiled" > "$OUT/perf/$name-error.txt"; return 0; fi
  command -v perf > /dev/null || { echo "perf is not installed (Debian package linux-perf)" > "$OUT/perf/$name-error.txt"; return 0; }
  perf record -F 999 -g -p "$pid" -o "$STATE/$name.perf.data" > "$STATE/$name.perf.log" 2>&1 &
  PERF_PID=$!
  sleep 0.5   # perf attaches before the load starts
  if ! kill -0 "$PERF_PID" 2>/dev/null; then
    { echo "perf record could not attach to pid $pid (kernel.perf_event_paranoid=$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo '?'), uid $(id -u)):"
      cat "$STATE/$name.perf.log"; } > "$OUT/perf/$name-error.txt"
    PERF_PID=""
  fi
}
perf_stop() {
  local name="$1"
  [ -n "$PERF_PID" ] || return 0
  kill -INT "$PERF_PID" 2>/dev/null || true; wait "$PERF_PID" 2>/dev/null || true; PERF_PID=""
  if python3 "$HERE/perfsum.py" "$STATE/$name.perf.data" "$OUT/perf" "$name" > "$STATE/$name.perfsum.log" 2>&1; then
    log "profile $(cat "$STATE/$name.perfsum.log")"
  else
    { echo "perf record ran but its samples could not be summarised:"; cat "$STATE/$name.perf.log" "$STATE/$name.perfsum.log"; } > "$OUT/perf/$name-error.txt"
    log "profile $name failed (see perf/$name-error.txt)"
  fi
  rm -f "$STATE/$name.perf.data"
}
# profile NAME CONNS PID WRKARGS...: one more run of the workload, not counted, with perf attached
# (so the kept runs are not slowed by sampling); wrk's own output in $OUT/perf/NAME-wrk.txt.
profile() {
  local name="$1" conns="$2" pid="$3"; shift 3
  wait_quiet
  perf_start "$name" "$pid"
  wrk -t"$THREADS" -c"$conns" -d"$DURATION" --latency "$@" > "$OUT/perf/$name-wrk.txt" 2>&1 || true
  perf_stop "$name"
}
