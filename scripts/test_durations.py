"""Each test module's time in pytest logs that list every test's duration (``--durations=0``, as CI runs it),
the longest of the logs given, written as ``tests/durations.json``: the parallel run starts the longest
modules first (tests/conftest.py).

    .venv/bin/python scripts/test_durations.py ci.log [more.log ...] > tests/durations.json
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter

DURATION = re.compile(r"^([\d.]+)s (?:setup|call|teardown)\s+(\S+?)::")


def module_seconds(lines: list[str]) -> dict[str, int]:
    """Seconds per module (setup, call and teardown of its tests), longest first."""
    seconds: Counter[str] = Counter()
    for line in lines:
        if match := DURATION.match(line):
            seconds[match.group(2)] += float(match.group(1))
    return {module: round(total) for module, total in seconds.most_common()}


if __name__ == "__main__":
    longest: Counter[str] = Counter()
    for name in sys.argv[1:]:
        with open(name) as log:
            for module, seconds in module_seconds(log.readlines()).items():
                longest[module] = max(longest[module], seconds)
    print(json.dumps(dict(longest.most_common()), indent=1))
