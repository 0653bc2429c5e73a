"""The benchmark report's rules (bench/report.py, bench/perfsum.py): the W1 budget takes the lower
of 3× PocketBase and 0.9× nginx + Lua in the same run, the profile summary files every sample of
a known library in its group, and a generated report carries the peers' rows and the profile table.
"""
import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def load(name):
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


report = load("report")
perfsum = load("perfsum")


def run(req_s, p99=1.0, cpu=10.0):
    return {"req_s": req_s, "p99_ms": p99, "server_cpu_us_per_req": cpu}


def test_w1_budget_takes_the_lower_of_the_two_peers():
    # 3× PocketBase (135k) is above 0.9× nginx + Lua (108k): nginx sets the bar.
    assert report.w1_required(45_000, 120_000) == pytest.approx(108_000)
    # 3× PocketBase (60k) is below 0.9× nginx + Lua (108k): PocketBase sets it.
    assert report.w1_required(20_000, 120_000) == pytest.approx(60_000)
    # A peer that was not measured does not count.
    assert report.w1_required(45_000, None) == pytest.approx(135_000)
    assert report.w1_required(None, 120_000) == pytest.approx(108_000)
    assert report.w1_required(None, None) is None


def test_w1_met_needs_the_rate_the_latency_and_the_cpu():
    assert report.w1_met(run(110_000), 45_000, 120_000)
    assert not report.w1_met(run(100_000), 45_000, 120_000)          # below 0.9× nginx, below 3× PocketBase
    assert report.w1_met(run(100_000), 45_000, None) is False        # 3× PocketBase alone: 135k
    assert not report.w1_met(run(110_000, p99=5.0), 45_000, 120_000)
    assert not report.w1_met(run(110_000, cpu=15.1), 45_000, 120_000)
    assert report.w1_met(run(110_000, cpu=15.0), 45_000, 120_000)
    assert not report.w1_met(run(1e9), None, None)                    # no peer measured: not met


def test_profile_groups_cover_the_libraries_of_the_server():
    g = perfsum.group
    assert g("[kernel.kallsyms]") == "kernel"
    assert g("/usr/lib/x86_64-linux-gnu/libsqlite3.so.0.8.6") == "libsqlite3"
    assert g("liblua5.4.so.0.0.0") == "liblua"
    assert g("libmicrohttpd.so.12.60.0") == "libmicrohttpd"
    assert g("/usr/lib/swift/linux/libswiftCore.so") == "libswift"
    assert g("libFoundationEssentials.so") == "libswift"
    assert g(".build/release/moonbase") == "moonbase"   # the binary as perf names it, by path
    assert g("libc.so.6") == "libc" and g("ld-linux-x86-64.so.2") == "libc" and g("libm.so.6") == "libc"
    assert g("libsodium.so.23") == "other"
    folded = perfsum.fold_groups([(40.0, "[kernel.kallsyms]"), (30.0, "libswiftCore.so"), (5.0, "libswift_Concurrency.so"),
                                  (20.0, "moonbase"), (5.0, "libsodium.so.23")])
    assert list(folded) == list(perfsum.GROUPS) == list(report.GROUPS)
    assert folded["libswift"] == 35.0 and folded["other"] == 5.0 and folded["libsqlite3"] == 0.0


def test_perf_script_stacks_are_folded_root_first():
    text = (
        "moonbase 123 [000] 1.0: 1001001 cpu-clock:\n"
        "\t    55d0 leaf+0x10 (/x/moonbase)\n"
        "\t    55c0 caller+0x2 (/x/moonbase)\n"
        "\t    7f00 [unknown] ([unknown])\n"
        "\n"
        "moonbase 123 [000] 1.1: 1001001 cpu-clock:\n"
        "\t    55d0 leaf+0x11 (/x/moonbase)\n"
        "\t    55c0 caller+0x9 (/x/moonbase)\n"
        "\t    7f00 [unknown] ([unknown])\n"
        "\n"
        "MHD-worker 124 [001] 1.2: 1001001 cpu-clock:\n"
        "\t    ffff epoll_wait+0x5 ([kernel.kallsyms])\n"
    )
    stacks = perfsum.collapse(text)
    assert stacks == {"moonbase;[unknown];caller;leaf": 2, "MHD-worker;epoll_wait": 1}


def test_report_has_the_peer_tables_and_the_profiles(tmp_path):
    hdr = ("label\tworkload\trep\treq_s\tp50_ms\tp99_ms\trequests\tnon2xx\tsocket_errors\trss_warm_kb\trss_after_kb"
           "\thwm_kb\tserver_cpu_pct\tserver_cpu_us_per_req\twrk_cpu_pct\tsoftirq_pct\tother_cpu_pct\n")

    def tsv(folder, rows):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "runs.tsv").write_text(hdr + "".join(
            f"{folder}\t{w}\t1\t{rps}\t0.5\t{p99}\t{rps * 10}\t0\tnone\t1000\t1000\t1000\t100\t{cpu}\t20\t5\t0\n"
            for w, rps, p99, cpu in rows))

    tsv("moonbase", [("w1", 100_000, 1.5, 12.0), ("w2", 9_000, 8.0, 120.0)])
    tsv("pocketbase", [("w1", 45_000, 6.0, 28.0), ("w2api", 3_000, 20.0, 200.0)])
    tsv("pocketbase-logs", [("w1", 12_000, 27.0, 80.0)])
    tsv("nginx-lua", [("w1", 110_000, 3.9, 8.0), ("w2", 7_500, 9.0, 100.0)])
    (tmp_path / "moonbase" / "request-log.txt").write_text("one text line per request: 3000000 lines.\n")
    (tmp_path / "perf").mkdir()
    (tmp_path / "perf" / "w1-dso.txt").write_text("# w1\nkernel\t40.0\nlibswift\t30.0\nmoonbase\t30.0\n\n# by shared object\n")
    (tmp_path / "perf" / "w6-error.txt").write_text("perf record could not attach to pid 1 (kernel.perf_event_paranoid=3)\n")
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "report.py"), str(tmp_path)],
                         capture_output=True, text=True, check=True).stdout
    w1 = next(line for line in out.splitlines() if line.startswith("| W1 `GET /hello` (cloud.route)"))
    # 100k ≥ min(135k, 99k) with p99 1.5 ms and 12 µs: met; the bar is printed.
    assert "≥ 99,000 req/s" in w1 and w1.endswith("**met** |")
    assert "### The ceiling: nginx + Lua" in out and "| W1 `GET /hello` | 100,000 | 12.0 | 110,000" in out
    assert "### PocketBase with its request log on" in out and "| w1 | 12,000 (12,000–12,000)" in out
    assert "request log on: one text line per request: 3000000 lines." in out
    assert "| W1 `GET /hello` | 40.0% | 0.0% | 0.0% | 0.0% | 30.0% | 30.0% | 0.0% | 0.0% |" in out
    assert "| W6 cleanup job | not profiled: perf record could not attach" in out
    assert os.path.basename(str(tmp_path)) in out


def test_accounting_by_instructions_is_judged_against_a_whole_request(tmp_path):
    (tmp_path / "moonbase").mkdir()
    hdr = "run\trequests\tinstructions\tmemset\tper_request\tper_request_without_memset\n"

    def report_row(on, off, whole):
        (tmp_path / "moonbase" / "acct-instr.tsv").write_text(
            hdr + f"on\t2000\t0\t0\t{on}\t{on}\noff\t2000\t0\t0\t{off}\t{off}\nwhole-off\t2000\t0\t0\t{whole}\t{whole}\n")
        out = subprocess.run([sys.executable, str(ROOT / "bench" / "report.py"), str(tmp_path)],
                             capture_output=True, text=True, check=True).stdout
        return next(line for line in out.splitlines() if line.startswith("| accounting by instructions"))

    # 2,500 more instructions in the callback, of a 100,000-instruction request: 2.5%.
    row = report_row(94_000, 91_500, 100_000)
    assert "+2,500 instructions, +2.50% of a request" in row and row.endswith("**met** |")
    # 6,000 of 100,000: missed, although the callback alone grew by 6.6%.
    row = report_row(97_500, 91_500, 100_000)
    assert "+6.00% of a request" in row and row.endswith("**missed** |")
