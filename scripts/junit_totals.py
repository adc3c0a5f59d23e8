"""The counts of several pytest runs' JUnit reports added up, as one closing line: `total: N passed, N failed,
N skipped` (scripts/test-all.sh runs pytest several times, side by side)."""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET


def totals(paths: list[str]) -> tuple[int, int, int]:
    """(passed, failed, skipped) over the reports: errors count as failed."""
    tests = failed = skipped = 0
    for path in paths:
        root = ET.parse(path).getroot()
        for suite in root.iter("testsuite"):
            tests += int(suite.get("tests", 0))
            failed += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
            skipped += int(suite.get("skipped", 0))
    return tests - failed - skipped, failed, skipped


def main(argv: list[str]) -> int:
    paths = [p for p in argv if not p.endswith("*.xml")]  # an unmatched glob: no report
    passed, failed, skipped = totals(paths)
    print(f"total: {passed} passed, {failed} failed, {skipped} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
