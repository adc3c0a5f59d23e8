"""scripts/junit_totals.py adds up the counts of several pytest runs' JUnit reports into test-all.sh's closing
line (errors count as failed; a report that was never written, an unmatched glob, counts nothing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "junit_totals.py"
REPORT = '<testsuites><testsuite name="pytest" errors="{e}" failures="{f}" skipped="{s}" tests="{t}"/></testsuites>'


def test_counts_of_every_report_add_up(tmp_path: Path) -> None:
    (tmp_path / "a.xml").write_text(REPORT.format(e=1, f=2, s=3, t=100))
    (tmp_path / "b.xml").write_text(REPORT.format(e=0, f=0, s=1, t=20))
    done = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "a.xml"), str(tmp_path / "b.xml"), f"{tmp_path}/junit-*.xml"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == "total: 113 passed, 3 failed, 4 skipped\n"
