#!/usr/bin/env python3
"""Summarises one `bench/run.sh` run (bench/results/<timestamp>/) as Markdown: Moonbase next to
PocketBase per workload (median run by req/s, as the peers kit's bench.sh picks it), the ratios, the
budgets and whether each is met; nginx + Lua (the ceiling) and PocketBase with its request log on
beside them; the perf profile summaries (bench/perfsum.py) per library group.

usage: report.py RESULT_DIR                    -> the summary on stdout
       report.py RESULT_DIR --update FILE.md   -> replaces the part of FILE.md between
                                                  <!-- bench:begin --> and <!-- bench:end -->
"""
import csv
import json
import os
import sys

BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"


def runs(path):
    """workload -> list of run dicts (numbers parsed) from a bench.sh-style runs.tsv."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for r in csv.DictReader(f, delimiter="\t"):
            for k in ("req_s", "p50_ms", "p99_ms", "server_cpu_us_per_req", "other_cpu_pct", "requests", "non2xx"):
                try:
                    r[k] = float(r[k])
                except (TypeError, ValueError):
                    r[k] = None
            out.setdefault(r["workload"], []).append(r)
    return out


def median(rs):
    """The median run by req/s (a real run when the count is odd), with min/max req/s."""
    if not rs:
        return None
    s = sorted(rs, key=lambda r: r["req_s"] or 0)
    m = dict(s[(len(s) - 1) // 2])
    m["min"], m["max"], m["n"] = s[0]["req_s"], s[-1]["req_s"], len(s)
    return m


def fmt(v, nd=0):
    if v is None:
        return "–"
    return f"{v:,.{nd}f}"


def ratio(a, b):
    return None if not a or not b else a / b


def yes(ok):
    return "–" if ok is None else ("**met**" if ok else "**missed**")


def w1_required(pb_rps, ngx_rps):
    """The W1 req/s the budget asks for: 3× PocketBase's or 0.9× nginx + Lua's in the same run,
    whichever is lower (a peer that was not measured does not count; None when neither was)."""
    c = [x for x in (3 * pb_rps if pb_rps else None, 0.9 * ngx_rps if ngx_rps else None) if x]
    return min(c) if c else None


def w1_met(m, pb_rps, ngx_rps):
    """W1's budget: the req/s above, p99 < 5 ms and ≤ 15 µs server CPU per request."""
    need = w1_required(pb_rps, ngx_rps)
    return (need is not None and (m["req_s"] or 0) >= need and m["p99_ms"] is not None and m["p99_ms"] < 5
            and m["server_cpu_us_per_req"] is not None and m["server_cpu_us_per_req"] <= 15)


PROFILED = (("w1", "W1 `GET /hello`"), ("w2", "W2 create"), ("w6", "W6 cleanup job"))
GROUPS = ("kernel", "libsqlite3", "liblua", "libmicrohttpd", "libswift", "moonbase", "libc", "other")


def profile_groups(path):
    """A perfsum.py NAME-dso.txt -> {group: percent} (its first block)."""
    out = {}
    for line in open(path).read().split("\n\n")[0].splitlines():
        if line.startswith("#") or "\t" not in line:
            continue
        g, v = line.split("\t", 1)
        out[g] = float(v)
    return out


def main():
    d = sys.argv[1]
    stamp = os.path.basename(d.rstrip("/"))
    mb, pb = runs(f"{d}/moonbase/runs.tsv"), runs(f"{d}/pocketbase/runs.tsv")
    M = {w: median(rs) for w, rs in mb.items()}
    P = {w: median(rs) for w, rs in pb.items()}
    PL = {w: median(rs) for w, rs in runs(f"{d}/pocketbase-logs/runs.tsv").items()}
    N = {w: median(rs) for w, rs in runs(f"{d}/nginx-lua/runs.tsv").items()}
    env = open(f"{d}/env.txt").read() if os.path.exists(f"{d}/env.txt") else ""
    lines = []
    add = lines.append

    def best(*ws):
        c = [P[w] for w in ws if P.get(w)]
        return max(c, key=lambda r: r["req_s"] or 0) if c else None

    add(f"Run `{stamp}` (raw files: `bench/results/{stamp}/`).")
    add("")
    add("```")
    add(env.strip())
    add("```")
    add("")
    rl = f"{d}/moonbase/request-log.txt"
    if os.path.exists(rl):
        text = open(rl).read().strip()
        add(text if text.startswith("**") else f"Moonbase ran with its defaults, its request log on: {text}")
        add("")
    add("### Moonbase vs PocketBase (PocketBase's request log off; same run, median of the runs by req/s)")
    add("")
    add("| workload | Moonbase req/s (min–max) | p50 / p99 ms | CPU µs/req | PocketBase (log off) req/s | p99 ms | CPU µs/req "
        "| ratio req/s | ratio CPU/req | budget | |")
    add("|---|---|---|---|---|---|---|---|---|---|---|")

    def row(name, mw, pr, budget, ok, pname=""):
        m = M.get(mw)
        if not m:
            return
        rr = ratio(m["req_s"], pr["req_s"]) if pr else None
        cr = ratio(pr["server_cpu_us_per_req"], m["server_cpu_us_per_req"]) if pr else None
        add(f"| {name} | {fmt(m['req_s'])} ({fmt(m['min'])}–{fmt(m['max'])}) | {fmt(m['p50_ms'], 2)} / {fmt(m['p99_ms'], 2)} "
            f"| {fmt(m['server_cpu_us_per_req'], 1)} | {fmt(pr['req_s']) + pname if pr else '–'} "
            f"| {fmt(pr['p99_ms'], 2) if pr else '–'} | {fmt(pr['server_cpu_us_per_req'], 1) if pr else '–'} "
            f"| {fmt(rr, 2) + '×' if rr else '–'} | {fmt(cr, 2) + '×' if cr else '–'} | {budget} | {yes(ok(m, rr) if ok else None)} |")

    def label(pr):
        return f" ({pr['workload']})" if pr else ""

    pw1, nw1 = P.get("w1"), N.get("w1")
    need = w1_required(pw1 and pw1["req_s"], nw1 and nw1["req_s"])
    row("W1 `GET /hello` (cloud.route)", "w1", pw1,
        f"≥ 3× PocketBase or ≥ 0.9× nginx + Lua, whichever is lower{' (≥ ' + fmt(need) + ' req/s)' if need else ''}; "
        "p99 < 5 ms, ≤ 15 µs CPU",
        lambda m, r: w1_met(m, pw1 and pw1["req_s"], nw1 and nw1["req_s"]))
    row("W1 `POST /parse/functions/hello`", "w1fn", pw1, "(reported)", None)
    row("W1 function, 10 indexed reads", "w1reads", pw1, "(reported)", None)
    p2 = best("w2", "w2api")
    row("W2 create `POST /parse/classes/Bench`", "w2", p2, "≥ 3× best create", lambda m, r: r is not None and r >= 3, label(p2))
    p3 = best("w3", "w3api")
    row("W3 0.1° box, newest 20", "w3", p3, "≥ 10×", lambda m, r: r is not None and r >= 10, label(p3))
    p3s = best("w3s", "w3sapi")
    row("W3s 0.01° box, newest 20", "w3s", p3s, "≥ 5×", lambda m, r: r is not None and r >= 5, label(p3s))
    row("W5 `$nearSphere` 5 mi, newest 20, 1M posts, -c8", "w5", None, "p99 < 5 ms", lambda m, r: m["p99_ms"] < 5)
    add("")
    if any(M.get(w) for w in ("pg_w2", "pg_w3", "pg_w3s", "pg_w5")):
        add("### Moonbase on PostgreSQL (same run, same data set and wrk settings; `BENCH_POSTGRES=1`)")
        add("")
        add("One host on a throw-away local PostgreSQL 15 cluster seeded by `moonbase migrate`; CPU µs/req "
            "counts the host and the PostgreSQL server together.")
        add("")
        add("| workload | PostgreSQL req/s (min–max) | p50 / p99 ms | CPU µs/req | SQLite req/s | CPU µs/req "
            "| PostgreSQL / SQLite req/s | PocketBase req/s |")
        add("|---|---|---|---|---|---|---|---|")
        for name, w, pr in (("W2 create", "w2", best("w2", "w2api")), ("W3 0.1° box, newest 20", "w3", best("w3", "w3api")),
                            ("W3s 0.01° box, newest 20", "w3s", best("w3s", "w3sapi")),
                            ("W5 `$nearSphere` 5 mi, newest 20, -c8", "w5", None)):
            g, m = M.get("pg_" + w), M.get(w)
            if not g:
                continue
            rr = ratio(g["req_s"], m["req_s"]) if m else None
            add(f"| {name} | {fmt(g['req_s'])} ({fmt(g['min'])}–{fmt(g['max'])}) | {fmt(g['p50_ms'], 2)} / {fmt(g['p99_ms'], 2)} "
                f"| {fmt(g['server_cpu_us_per_req'], 1)} | {fmt(m['req_s']) if m else '–'} "
                f"| {fmt(m['server_cpu_us_per_req'], 1) if m else '–'} | {fmt(rr, 2) + '×' if rr else '–'} "
                f"| {fmt(pr['req_s']) + label(pr) if pr else '–'} |")
        mig = f"{d}/moonbase/pg-migrate.txt"
        if os.path.exists(mig):
            last = open(mig).read().strip().splitlines()[-1:]
            if last:
                add("")
                add(f"Seeding by `moonbase migrate`: {last[0]}.")
        add("")
    if N:
        add("### The ceiling: nginx + Lua (same run; nginx 1.22 with its Lua module, LuaJIT, LuaSQL for SQLite)")
        add("")
        add("CPU µs/req counts the nginx master and all its workers.")
        add("")
        add("| workload | Moonbase req/s | CPU µs/req | nginx + Lua req/s (min–max) | p50 / p99 ms | CPU µs/req "
            "| Moonbase / nginx req/s | ratio CPU/req |")
        add("|---|---|---|---|---|---|---|---|")
        for name, w in (("W1 `GET /hello`", "w1"), ("W2 create", "w2")):
            n, m = N.get(w), M.get(w)
            if not n:
                continue
            rr = ratio(m["req_s"], n["req_s"]) if m else None
            cr = ratio(n["server_cpu_us_per_req"], m["server_cpu_us_per_req"]) if m else None
            add(f"| {name} | {fmt(m['req_s']) if m else '–'} | {fmt(m['server_cpu_us_per_req'], 1) if m else '–'} "
                f"| {fmt(n['req_s'])} ({fmt(n['min'])}–{fmt(n['max'])}) | {fmt(n['p50_ms'], 2)} / {fmt(n['p99_ms'], 2)} "
                f"| {fmt(n['server_cpu_us_per_req'], 1)} | {fmt(rr, 2) + '×' if rr else '–'} | {fmt(cr, 2) + '×' if cr else '–'} |")
        add("")
    if PL:
        add("### PocketBase with its request log on (its default), beside off (same run)")
        add("")
        add("The budgets compare with PocketBase's fastest setting (log off, above); its out-of-the-box setting "
            "writes every request to its log database:")
        add("")
        add("| workload | PocketBase log on req/s (min–max) | p50 / p99 ms | CPU µs/req | log off req/s | CPU µs/req "
            "| Moonbase req/s | Moonbase / PocketBase log on, req/s | CPU/req |")
        add("|---|---|---|---|---|---|---|---|---|")
        for w, mw in (("w1", "w1"), ("w2", "w2"), ("w2api", "w2")):
            q, p, m = PL.get(w), P.get(w), M.get(mw)
            if not q:
                continue
            rr = ratio(m["req_s"], q["req_s"]) if m else None
            cr = ratio(q["server_cpu_us_per_req"], m["server_cpu_us_per_req"]) if m else None
            add(f"| {w} | {fmt(q['req_s'])} ({fmt(q['min'])}–{fmt(q['max'])}) | {fmt(q['p50_ms'], 2)} / {fmt(q['p99_ms'], 2)} "
                f"| {fmt(q['server_cpu_us_per_req'], 1)} | {fmt(p['req_s']) if p else '–'} "
                f"| {fmt(p['server_cpu_us_per_req'], 1) if p else '–'} | {fmt(m['req_s']) if m else '–'} "
                f"| {fmt(rr, 2) + '×' if rr else '–'} | {fmt(cr, 2) + '×' if cr else '–'} |")
        add("")
    if P:
        add("PocketBase rows: its best of the script route and the records API where both exist "
            "(`w2`/`w2api`, `w3`/`w3api`, `w3s`/`w3sapi`); all of them:")
        add("")
        add("| PocketBase workload | req/s (min–max) | p50 / p99 ms | CPU µs/req | RSS after run MiB |")
        add("|---|---|---|---|---|")
        for w in ("w1", "w2", "w2api", "w3", "w3api", "w3s", "w3sapi"):
            p = P.get(w)
            if p:
                add(f"| {w} | {fmt(p['req_s'])} ({fmt(p['min'])}–{fmt(p['max'])}) | {fmt(p['p50_ms'], 2)} / {fmt(p['p99_ms'], 2)} "
                    f"| {fmt(p['server_cpu_us_per_req'], 1)} | {fmt(float(p['rss_after_kb']) / 1024, 1)} |")
        add("")

    # W6
    w6 = f"{d}/moonbase/w6-jobstatus.json"
    if os.path.exists(w6):
        j = json.load(open(w6))
        deleted = json.loads(j.get("message") or "{}").get("deleted", 0)
        ms = j.get("durationMs") or 0
        pps = deleted * 1000 / ms if ms else None
        add("### W6 cleanup, memory, accounting")
        add("")
        add("| measure | value | budget | |")
        add("|---|---|---|---|")
        add(f"| W6 `cleanupExpiredPosts` ({fmt(deleted)} posts × 3 comments × 5 reactions) | {fmt(ms)} ms → "
            f"**{fmt(pps)} posts/s** ({fmt(pps * 9 if pps else None)} rows/s) | ≥ 20,000 posts/s | {yes(pps is not None and pps >= 20000)} |")
    else:
        add("| measure | value | budget | |")
        add("|---|---|---|---|")
    mem = {}
    if os.path.exists(f"{d}/moonbase/memory.tsv"):
        with open(f"{d}/moonbase/memory.tsv") as f:
            for r in csv.DictReader(f, delimiter="\t"):
                mem[r["phase"]] = r
    if "idle" in mem:
        v = int(mem["idle"]["rss_anon_kb"]) / 1024
        add(f"| RssAnon idle (VmRSS {fmt(int(mem['idle']['vm_rss_kb']) / 1024, 1)} MiB) | {fmt(v, 1)} MiB | < 30 MB | {yes(v < 30)} |")
    if "after-w1-w5" in mem:
        a = mem["after-w1-w5"]
        v = int(a["rss_anon_kb"]) / 1024
        add(f"| RssAnon after W1–W5 (VmRSS {fmt(int(a['vm_rss_kb']) / 1024, 1)} MiB, VmHWM {fmt(int(a['vm_hwm_kb']) / 1024, 1)} MiB, "
            f"{a['threads']} threads) | {fmt(v, 1)} MiB | < 60 MB | {yes(v < 60)} |")
    on, off = mb.get("w1_acct_on"), mb.get("w1_acct_off")
    if on and off:
        # Reps were alternated on/off; compare the medians of each metric over the reps.
        def med(rs, k):
            v = sorted(r[k] for r in rs if r[k] is not None)
            return v[(len(v) - 1) // 2] if v else None
        ron, roff = med(on, "req_s"), med(off, "req_s")
        con, coff = med(on, "server_cpu_us_per_req"), med(off, "server_cpu_us_per_req")
        dr = (ron - roff) / roff * 100
        dc = (con - coff) / coff * 100
        add(f"| accounting: W1 on {fmt(ron)} req/s, {fmt(con, 1)} µs/req; off {fmt(roff)} req/s, {fmt(coff, 1)} µs/req "
            f"(medians of {len(on)} alternated reps) | {dc:+.1f}% CPU/req, {dr:+.1f}% req/s (on vs off) "
            f"| < 5% apart | {yes(abs(dc) < 5)} (CPU/req; req/s {'within' if abs(dr) < 5 else 'outside'} 5%) |")
    ai = f"{d}/moonbase/acct-instr.tsv"
    if os.path.exists(ai):
        with open(ai) as f:
            r = {row["run"]: float(row["per_request_without_memset"]) for row in csv.DictReader(f, delimiter="\t")}
        if {"on", "off", "whole-off"} <= r.keys():
            extra = r["on"] - r["off"]
            pct = extra / r["whole-off"] * 100
            add(f"| accounting by instructions (callgrind, 2,000 sequential W1 requests per server; the request callback "
                f"on {fmt(r['on'])}, off {fmt(r['off'])} per request; a whole request, accounting off, {fmt(r['whole-off'])}, "
                f"memset's counted iterations aside) | {extra:+,.0f} instructions, {pct:+.2f}% of a request "
                f"| < 5% apart | {yes(pct < 5)} |")
    i1 = f"{d}/moonbase/i1.json"
    if os.path.exists(i1):
        j = json.load(open(i1))
        p99 = j.get("p99_ms")
        kinds = ", ".join(f"{k} {v['p99_ms']}" for k, v in j.get("by_kind", {}).items())
        ok = p99 is not None and p99 < 5 and j.get("error_count") == 0
        add(f"| I1 isolation: {j['spinners']} scripts spinning at their 300 ms limit ({j['workers']} workers, "
            f"{fmt(j['spins_answered'])} spins answered, {fmt(j['spins_141'])} with 141); a light load of "
            f"{fmt(j['requests'])} REST reads, writes and Lua calls, {fmt(j['error_count'])} errors | p50 {fmt(j['p50_ms'], 2)} ms, "
            f"**p99 {fmt(p99, 2)} ms** (by kind p99 ms: {kinds}), max {fmt(j['max_ms'], 1)} ms | p99 < 5 ms | {yes(ok)} |")
    add("")
    prof = [(w, name) for w, name in PROFILED
            if os.path.exists(f"{d}/perf/{w}-dso.txt") or os.path.exists(f"{d}/perf/{w}-error.txt")]
    if prof:
        add("### Where Moonbase's CPU goes (`perf record -F 999 -g`, self time per library group, % of the server's samples)")
        add("")
        add("W1 and W2: one extra run after the kept ones, not counted; W6: during the measured job (its figure "
            "includes the sampling's cost). Files in "
            f"`bench/results/{stamp}/perf/`: `NAME-top.txt` (top 40 symbols), `NAME-dso.txt` (per shared object), "
            "`NAME.folded` (stacks for flamegraph.pl / speedscope).")
        add("")
        add("| workload | " + " | ".join(GROUPS) + " |")
        add("|---|" + "---|" * len(GROUPS))
        for w, name in prof:
            if os.path.exists(f"{d}/perf/{w}-dso.txt"):
                g = profile_groups(f"{d}/perf/{w}-dso.txt")
                add(f"| {name} | " + " | ".join(f"{g.get(k, 0):.1f}%" for k in GROUPS) + " |")
            else:
                why = open(f"{d}/perf/{w}-error.txt").read().strip().splitlines()
                add(f"| {name} | not profiled: {(why[0] if why else '?').replace('|', '/')} |" + " |" * (len(GROUPS) - 1))
        add("")
    if os.path.exists(f"{d}/moonbase/seed.tsv"):
        add("Seeding (bench-only Lua jobs, batches in `db.transaction`, not measured as a workload):")
        with open(f"{d}/moonbase/seed.tsv") as f:
            for r in csv.DictReader(f, delimiter="\t"):
                add(f"- `{r['job']}` `{r['params']}`: {fmt(float(r['duration_ms']))} ms, {r['message']}")
        add("")
    noisy = [(w, r) for w, rs in list(mb.items()) + list(pb.items()) for r in rs if (r["other_cpu_pct"] or 0) > 25]
    add("All Moonbase runs (server CPU % is of one core; `other` = CPU used by processes outside the test):")
    add("")
    add("| workload | rep | req/s | p50 ms | p99 ms | CPU µs/req | non-2xx | other CPU % |")
    add("|---|---|---|---|---|---|---|---|")
    for w, rs in mb.items():
        for r in rs:
            add(f"| {w} | {r['rep']} | {fmt(r['req_s'])} | {fmt(r['p50_ms'], 2)} | {fmt(r['p99_ms'], 2)} "
                f"| {fmt(r['server_cpu_us_per_req'], 1)} | {fmt(r['non2xx'])} | {fmt(r['other_cpu_pct'])} |")
    add("")
    if noisy:
        add(f"{len(noisy)} kept run(s) had other processes above 25% CPU after the retries (see `other CPU %`).")
        add("")
    return "\n".join(lines)


if __name__ == "__main__":
    text = main()
    if len(sys.argv) > 3 and sys.argv[2] == "--update":
        path = sys.argv[3]
        old = open(path).read() if os.path.exists(path) else f"# Benchmark results\n\n{BEGIN}\n{END}\n"
        if BEGIN not in old or END not in old:
            old = old.rstrip() + f"\n\n{BEGIN}\n{END}\n"
        head, rest = old.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        with open(path, "w") as f:
            f.write(f"{head}{BEGIN}\n{text}\n{END}{tail}")
    else:
        print(text)
