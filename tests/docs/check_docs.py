"""Keeps the documentation honest: every environment variable, CLI flag and Lua global the code
offers is documented, everything documented exists, and every relative link in the docs resolves.

Run as a script (`python3 tests/docs/check_docs.py [ROOT]`, exit 1 with a list of problems) or
through pytest (tests/docs/test_docs.py), which `make test` runs.

How names are found in the code (kept deliberately simple, so that a new name written the usual
way is picked up):
- environment variables: any `"MOONBASE_…"` string literal in Sources/ (Swift or C);
- CLI flags: the `values: [...]` / `flags: [...]` option lists passed to `Commands.parse` and the
  common options in Sources/MoonbaseHost/*.swift;
- Lua globals: the manifest printed by `moonbase check --list-api` when a binary is given
  (MOONBASE_BIN), so the list is what a VM really exposes.
"""
import os
import re
import subprocess
import sys

ENV_RE = re.compile(r'"(MOONBASE_[A-Z0-9_]+)"')
DOC_ENV_RE = re.compile(r"\b(MOONBASE_[A-Z0-9_]+)\b")
LIST_RE = re.compile(r'\b(?:values|flags|commonValueOptions)\s*(?::\s*Set<String>)?\s*[:=]\s*\[([^\]]*)\]', re.S)
FLAG_WORD_RE = re.compile(r'"([a-z][a-z0-9-]*)"')
DOC_FLAG_RE = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]+)")
LINK_RE = re.compile(r"\]\(([^)\s]+)\)")
HEADING_RE = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)

# Lua 5.4 libraries offered whole: documented by name, with a pointer to the Lua manual.
STDLIB_NAMESPACES = {"string", "table", "math", "utf8"}
# Names in docs that are not the server's own settings.
DOC_ENV_IGNORE = {"MOONBASE_BIN"}          # the test harness's binary path (tests/ only)
# Flags of other programs shown in examples (curl, pytest, make) are not ours.
DOC_FLAG_IGNORE = {"data-urlencode", "data-binary", "help"}


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def files_under(root, sub, exts):
    out = []
    for dirpath, _, names in os.walk(os.path.join(root, sub)):
        for n in names:
            if n.endswith(exts):
                out.append(os.path.join(dirpath, n))
    return sorted(out)


def doc_files(root):
    docs = files_under(root, "docs", (".md",))
    return [os.path.join(root, "README.md")] + docs


def code_env_vars(root):
    names = set()
    for p in files_under(root, "Sources", (".swift", ".c", ".h")):
        names.update(ENV_RE.findall(read(p)))
    return names


def documented_env_vars(root):
    names = set()
    for p in doc_files(root):
        names.update(DOC_ENV_RE.findall(read(p)))
    return names - DOC_ENV_IGNORE


def code_flags(root):
    flags = set()
    for p in files_under(root, "Sources/MoonbaseHost", (".swift",)):
        for body in LIST_RE.findall(read(p)):
            flags.update(FLAG_WORD_RE.findall(body))
    flags.discard("help")
    return flags


def documented_flags(root):
    text = read(os.path.join(root, "docs", "cli.md"))
    return set(DOC_FLAG_RE.findall(text)) - DOC_FLAG_IGNORE


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    s = heading.strip().lower()
    s = re.sub(r"[`*_~]", "", s)
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    return {slug(h) for h in HEADING_RE.findall(read(path))}


def broken_links(root):
    problems = []
    for p in doc_files(root) + [os.path.join(root, "functions", "README.md")]:
        if not os.path.exists(p):
            continue
        text = read(p)
        text = re.sub(r"```.*?```", "", text, flags=re.S)      # code blocks hold no links
        for target in LINK_RE.findall(text):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):       # http:, https:, mailto:
                continue
            file_part, _, anchor = target.partition("#")
            dest = p if not file_part else os.path.normpath(os.path.join(os.path.dirname(p), file_part))
            rel = os.path.relpath(p, root)
            if not os.path.exists(dest):
                problems.append(f"{rel}: link to missing {target}")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                problems.append(f"{rel}: link to missing anchor {target}")
    return problems


def lua_api(binary):
    """The Lua globals and namespace functions a VM exposes, as `moonbase check --list-api` prints
    them (one dotted name per line)."""
    out = subprocess.run([binary, "check", "--list-api"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"moonbase check --list-api failed: {out.stderr}")
    return {line.strip() for line in out.stdout.splitlines() if line.strip()}


def documented_lua(root):
    text = read(os.path.join(root, "docs", "cloud-code.md")) + read(os.path.join(root, "docs", "security.md"))
    return text


def check(root, binary=None):
    problems = []
    code_env, doc_env = code_env_vars(root), documented_env_vars(root)
    ops = read(os.path.join(root, "docs", "operations.md"))
    for n in sorted(code_env):
        if not re.search(r"\b" + re.escape(n) + r"\b", ops):
            problems.append(f"environment variable {n} is read by the code but not documented in docs/operations.md")
    for n in sorted(doc_env - code_env):
        problems.append(f"environment variable {n} is documented but the code never reads it")
    code_f, doc_f = code_flags(root), documented_flags(root)
    for f in sorted(code_f - doc_f):
        problems.append(f"CLI option --{f} exists but is not documented in docs/cli.md")
    for f in sorted(doc_f - code_f):
        problems.append(f"CLI option --{f} is documented in docs/cli.md but no verb accepts it")
    problems += broken_links(root)
    if binary:
        text = documented_lua(root)
        names = set()
        for name in lua_api(binary):
            # Lua's own libraries are documented as a whole (the Lua 5.4 manual covers them);
            # only the namespace must be named.
            ns = name.split(".")[0]
            names.add(ns if ns in STDLIB_NAMESPACES else name)
        for name in sorted(names):
            if not re.search(r"(?<![\w.])" + re.escape(name) + r"(?![\w])", text):
                problems.append(f"Lua global {name} exists but is not documented in docs/cloud-code.md")
    return problems


if __name__ == "__main__":
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..")
    found = check(os.path.abspath(root), os.environ.get("MOONBASE_BIN"))
    for p in found:
        print(p)
    sys.exit(1 if found else 0)
