#!/usr/bin/env python3
"""Folds one `perf record -g` profile of a server into three text files kept with the results:

  NAME-top.txt     the top symbols by self time (`perf report --no-children`), Swift names demangled
  NAME-dso.txt     self time per library group: kernel, libsqlite3, liblua, libmicrohttpd, libswift
                   (Swift runtime and Foundation), moonbase (the binary), libc, other
  NAME.folded      every sampled stack, root first, one `frame;frame;… count` line per stack
                   (the input of flamegraph.pl or speedscope)

usage: perfsum.py PERF_DATA OUT_DIR NAME [TOP]
"""
import collections
import os
import re
import shutil
import subprocess
import sys

GROUPS = ("kernel", "libsqlite3", "liblua", "libmicrohttpd", "libswift", "moonbase", "libc", "other")


def group(dso):
    """The library group of a perf shared-object name (a path or a bare file name)."""
    base = os.path.basename(dso.strip().strip("()"))
    if dso.startswith("[kernel") or base.startswith("[kernel") or base in ("[vdso]", "[vsyscall]") or dso.startswith("[k"):
        return "kernel"
    if base.startswith("libsqlite3"):
        return "libsqlite3"
    if base.startswith("liblua"):
        return "liblua"
    if base.startswith("libmicrohttpd"):
        return "libmicrohttpd"
    if base.startswith(("libswift", "libFoundation", "lib_Foundation", "libdispatch", "libBlocksRuntime")):
        return "libswift"
    if base == "moonbase" or base.startswith("moonbase"):
        return "moonbase"
    if re.match(r"(libc|libm|libpthread|libdl|librt|ld-linux[^/]*)\.so", base) or base.startswith("ld-linux"):
        return "libc"
    return "other"


def fold_groups(rows):
    """rows: (percent, dso) -> {group: percent}, every group present, in GROUPS order."""
    out = collections.OrderedDict((g, 0.0) for g in GROUPS)
    for pct, dso in rows:
        out[group(dso)] += pct
    return out


def parse_report(text):
    """`perf report --stdio -t '\\t'` lines -> list of field lists with the percentage as a float."""
    rows = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        f = [x.strip() for x in line.split("\t")]
        try:
            f[0] = float(f[0].rstrip("%"))
        except ValueError:
            continue
        rows.append(f)
    return rows


FRAME = re.compile(r"^\s*[0-9a-f]+\s+(.*?)\s+\((.*)\)\s*$")


def collapse(script_text):
    """`perf script` output (with call graphs) -> Counter of 'comm;root;…;leaf' stacks."""
    stacks = collections.Counter()
    comm, frames = None, []

    def flush():
        if comm is not None:
            stacks[";".join([comm] + [f for f in reversed(frames)])] += 1

    for line in script_text.splitlines():
        if not line.strip():
            flush()
            comm, frames = None, []
            continue
        if not line[0].isspace():
            flush()
            comm, frames = line.split()[0], []
            continue
        m = FRAME.match(line)
        if m:
            sym = re.sub(r"\+0x[0-9a-f]+$", "", m.group(1))
            if sym in ("[unknown]", ""):
                base = os.path.basename(m.group(2))
                sym = base if base.startswith("[") else "[" + base + "]"
            frames.append(sym.replace(";", ":"))
    flush()
    return stacks


def demangler():
    """A function that demangles Swift symbols through `swift demangle` (identity without it)."""
    tool = shutil.which("swift")
    if not tool:
        return lambda names: names

    def run(names):
        if not names:
            return names
        try:
            p = subprocess.run([tool, "demangle", "--simplified", "--compact"], input="\n".join(names) + "\n",
                               capture_output=True, text=True, timeout=120)
            out = p.stdout.split("\n")
            return out[:len(names)] if p.returncode == 0 and len(out) >= len(names) else names
        except (OSError, subprocess.SubprocessError):
            return names
    return run


def perf(*args):
    return subprocess.run(["perf", *args], capture_output=True, text=True, check=True).stdout


def main():
    data, out, name = sys.argv[1], sys.argv[2], sys.argv[3]
    top = int(sys.argv[4]) if len(sys.argv) > 4 else 40
    demangle = demangler()
    by_dso = parse_report(perf("report", "-i", data, "--stdio", "--no-children", "-g", "none", "-t", "\t",
                               "--sort", "dso"))
    by_sym = parse_report(perf("report", "-i", data, "--stdio", "--no-children", "-g", "none", "-t", "\t",
                               "--sort", "dso,sym"))
    groups = fold_groups([(r[0], r[1]) for r in by_dso if len(r) > 1])
    total = sum(r[0] for r in by_dso)
    with open(os.path.join(out, f"{name}-dso.txt"), "w") as f:
        f.write(f"# {name}: self time per library group, % of the server's samples (perf record -F 999 -g)\n")
        for g, v in groups.items():
            f.write(f"{g}\t{v:.1f}\n")
        f.write("\n# by shared object\n")
        for r in by_dso:
            if len(r) > 1:
                f.write(f"{r[0]:.2f}%\t{r[1]}\n")
    rows = [r for r in by_sym if len(r) > 2][:top]
    names = demangle([re.sub(r"^\[[.k]\]\s*", "", r[2]) for r in rows])
    with open(os.path.join(out, f"{name}-top.txt"), "w") as f:
        f.write(f"# {name}: top {len(rows)} symbols by self time (perf report --no-children), % of the server's samples\n")
        for r, n in zip(rows, names):
            f.write(f"{r[0]:6.2f}%  {group(r[1]):<13} {n}\n")
    stacks = collapse(perf("script", "-i", data, "-F", "comm,ip,sym,dso"))
    keys = list(stacks)
    # Demangle frame by frame (one `swift demangle` call for all distinct frames).
    frames = sorted({fr for k in keys for fr in k.split(";")})
    table = dict(zip(frames, demangle(frames)))
    with open(os.path.join(out, f"{name}.folded"), "w") as f:
        for k in sorted(keys, key=lambda k: -stacks[k]):
            f.write(";".join(table.get(fr, fr).replace(";", ":").replace(" ", "_") for fr in k.split(";")) + f" {stacks[k]}\n")
    print(f"{name}: {sum(stacks.values())} samples; " + ", ".join(f"{g} {v:.0f}%" for g, v in groups.items() if v >= 0.5)
          + ("" if abs(total - 100) < 1 else f" (of {total:.0f}%)"))


if __name__ == "__main__":
    main()
