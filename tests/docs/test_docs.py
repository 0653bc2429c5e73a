"""The documentation check (check_docs.py) passes on the repository, and fails when a setting is
added to the code without documentation."""
import os
import shutil
import tempfile

import pytest

import check_docs

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("MOONBASE_BIN", os.path.join(ROOT, ".build", "debug", "moonbase"))


def test_repository_docs_are_complete_and_links_resolve():
    assert check_docs.check(ROOT, BIN) == []


@pytest.fixture
def copy_of_repo():
    tmp = tempfile.mkdtemp(prefix="moonbase-docs-")
    for sub in ("Sources", "docs"):
        shutil.copytree(os.path.join(ROOT, sub), os.path.join(tmp, sub))
    for top in ("README.md", "CONTRIBUTING.md"):
        shutil.copy(os.path.join(ROOT, top), tmp)
    os.makedirs(os.path.join(tmp, "functions"))
    shutil.copy(os.path.join(ROOT, "functions", "README.md"), os.path.join(tmp, "functions"))
    yield tmp
    shutil.rmtree(tmp)


def test_copy_passes_before_it_is_changed(copy_of_repo):
    assert check_docs.check(copy_of_repo) == []


def test_undocumented_environment_variable_fails(copy_of_repo):
    with open(os.path.join(copy_of_repo, "Sources", "MoonbaseAPI", "HostConfig.swift"), "a") as f:
        f.write('\nlet _undocumented = getenv("MOONBASE_SOMETHING_NEW")\n')
    problems = check_docs.check(copy_of_repo)
    assert any("MOONBASE_SOMETHING_NEW" in p for p in problems), problems


def test_undocumented_cli_flag_fails(copy_of_repo):
    path = os.path.join(copy_of_repo, "Sources", "MoonbaseHost", "ServeCommand.swift")
    with open(path) as f:
        text = f.read()
    assert 'values: ["host"' in text
    with open(path, "w") as f:
        f.write(text.replace('values: ["host"', 'values: ["brand-new-flag", "host"', 1))
    problems = check_docs.check(copy_of_repo)
    assert any("--brand-new-flag" in p for p in problems), problems


def test_documented_but_missing_variable_fails(copy_of_repo):
    with open(os.path.join(copy_of_repo, "docs", "operations.md"), "a") as f:
        f.write("\n| `MOONBASE_NOT_REAL` | 1 | nothing |\n")
    problems = check_docs.check(copy_of_repo)
    assert any("MOONBASE_NOT_REAL" in p for p in problems), problems


def test_broken_link_fails(copy_of_repo):
    with open(os.path.join(copy_of_repo, "docs", "cli.md"), "a") as f:
        f.write("\nSee [nowhere](missing.md) and [bad anchor](operations.md#no-such-heading).\n")
    problems = check_docs.check(copy_of_repo)
    assert any("missing.md" in p for p in problems), problems
    assert any("no-such-heading" in p for p in problems), problems
