"""Package.swift's dependencies equal the imports.

The Swift targets build with `MemberImportVisibility`, so a file must import every module whose
members it uses; this test closes the other half: a target lists exactly the modules its files
import (no stale dependency that would hide a layering change, no import that only works through
another target's dependency). The toolchain's own modules are not package dependencies.
"""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOLCHAIN = {"Glibc", "Foundation", "FoundationEssentials", "Synchronization", "Testing", "XCTest", "Dispatch"}


def targets():
    text = (ROOT / "Package.swift").read_text()
    for m in re.finditer(r'\.(target|executableTarget|testTarget)\(\s*name:\s*"(\w+)"(.*?)\)\s*,\s*(?=\.|//|\])', text, re.S):
        kind, name, rest = m.groups()
        deps = re.search(r'dependencies:\s*\[(.*?)\]', rest, re.S)
        path = re.search(r'path:\s*"([^"]+)"', rest)
        yield kind, name, set(re.findall(r'"(\w+)"', deps.group(1))) if deps else set(), path.group(1) if path else None


def imports(folder):
    found = set()
    for f in folder.rglob("*.swift"):
        for line in f.read_text().splitlines():
            m = re.match(r'^\s*(?:@testable\s+|@_implementationOnly\s+)?import\s+(\w+)\s*$', line)
            if m:
                found.add(m.group(1))
    return found - TOOLCHAIN


def test_every_swift_target_depends_on_exactly_what_it_imports():
    checked = 0
    problems = []
    for kind, name, deps, path in targets():
        folder = ROOT / (path or ("Tests/" + name if kind == "testTarget" else "Sources/" + name))
        if not any(folder.rglob("*.swift")):
            continue  # a C target
        imp = imports(folder)
        checked += 1
        if imp - deps:
            problems.append(f"{name} imports {sorted(imp - deps)} without depending on them")
        if deps - imp:
            problems.append(f"{name} depends on {sorted(deps - imp)} without importing them")
    assert checked >= 25, f"only {checked} Swift targets found: the Package.swift parser is broken"
    assert not problems, "\n".join(problems)
