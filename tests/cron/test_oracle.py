"""Sanity checks of the croniter oracle itself (run: .venv/bin/python -m pytest tests/cron).

The differential comparison lives in Tests/MoonbaseCronTests/CronDifferentialTests.swift, which
writes its cases to a temp file and runs oracle.py; these tests make sure the oracle answers
in the shape the Swift side expects.
"""
import json
import subprocess
import sys
from pathlib import Path

ORACLE = Path(__file__).with_name("oracle.py")


def ask(cases):
    out = subprocess.run([sys.executable, str(ORACLE), "-"], input=json.dumps({"cases": cases}),
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_reports_version_and_successive_times():
    answer = ask([{"expr": "*/5 * * * *", "tz": "UTC", "start": 1764447825678, "count": 3}])
    assert answer["croniter"] == "7.0.0"
    assert answer["results"] == [{"next": [1764447900000, 1764448200000, 1764448500000]}]


def test_dst_gap_fires_after_the_gap():
    # 2024-03-10 in New York: 02:30 does not exist; croniter fires at 03:00 EDT (07:00Z).
    answer = ask([{"expr": "30 2 * * *", "tz": "America/New_York", "start": 1710003600000}])
    assert answer["results"] == [{"next": [1710054000000]}]


def test_invalid_and_impossible_expressions():
    answer = ask([{"expr": "61 * * * *", "tz": "UTC", "start": 0},
                  {"expr": "0 0 31 2 *", "tz": "UTC", "start": 0}])
    assert "invalid" in answer["results"][0]
    assert answer["results"][1] == {"next": []}
