#!/usr/bin/env python3
"""croniter 7.0.0 as a test oracle for MoonbaseCron's CronExpression.

Usage: oracle.py CASES.json  (or "-" for stdin)

CASES.json is {"cases": [{"expr": "*/5 * * * *", "tz": "America/New_York",
"start": <ms since epoch>, "count": 3}, ...]}. For every case, in order, prints one
JSON array element: {"next": [ms, ...]} with up to `count` successive get_next()
times (fewer when croniter finds no further date), or {"invalid": "<message>"}
when croniter rejects the expression. The whole answer is one JSON document on
stdout: {"croniter": "<version>", "results": [...]}.

Zones come from the standard library's zoneinfo (the system tzdata), which is
the tzinfo flavour croniter's DST code path is written for (pytz takes another
path). Run with the test virtual environment: .venv/bin/python.
"""
import datetime
import json
import sys
from importlib.metadata import version
from zoneinfo import ZoneInfo

from croniter import CroniterBadCronError, CroniterBadDateError, croniter

EXPECTED = "7.0.0"


def answer(case, zones):
    tz = zones.setdefault(case["tz"], ZoneInfo(case["tz"]))
    start = datetime.datetime.fromtimestamp(case["start"] / 1000, tz)
    try:
        it = croniter(case["expr"], start)
    except (CroniterBadCronError, ValueError, TypeError, KeyError) as exc:
        return {"invalid": f"{type(exc).__name__}: {exc}"}
    out = []
    for _ in range(case.get("count", 1)):
        try:
            ts = it.get_next(float)
        except CroniterBadDateError:
            break
        out.append(int(round(ts * 1000)))
    return {"next": out}


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    have = version("croniter")
    if have != EXPECTED:
        print(f"oracle needs croniter=={EXPECTED}, found {have}", file=sys.stderr)
        return 3
    src = sys.stdin if argv[1] == "-" else open(argv[1], encoding="utf-8")
    with src:
        cases = json.load(src)["cases"]
    zones = {}
    results = [answer(c, zones) for c in cases]
    json.dump({"croniter": have, "results": results}, sys.stdout, separators=(",", ":"))
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
