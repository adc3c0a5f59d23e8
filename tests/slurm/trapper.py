"""Run by every task of the graceful-stop tests (through hpcplace-run): a program that traps
SIGTERM (and the time-limit warning signal) the way a trainer that checkpoints would, and records
what it got, when, in which attempt.

    python3 trapper.py OUT_DIR TOTAL [FAIL_COMPONENT:FAIL_RANK]

Writes OUT_DIR/<attempt>.<component>.<rank>.<event> files: `start` (pid, time, whether the
node-local directory was empty), `USR1`, `after_warning` (3 s after USR1: is the node-local
directory still there), `TERM` (time), `saved` (the handler finished its "checkpoint"). The failing rank exits 7 once all TOTAL tasks have started. In attempt 1 and later
(a requeued job) every task exits 0 at once, after recording its start.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

out, total = Path(sys.argv[1]), int(sys.argv[2])
fail = sys.argv[3] if len(sys.argv) > 3 else ""
component, rank = os.environ["HPCPLACE_COMPONENT"], os.environ["HPCPLACE_RANK"]
attempt = os.environ.get("SLURM_RESTART_COUNT", "0")
stem = out / f"{attempt}.{component}.{rank}"


def record(event: str, **data: object) -> None:
    tmp = stem.with_name(f"{stem.name}.{event}.tmp")
    tmp.write_text(json.dumps({"time": time.time(), "pid": os.getpid(), **data}))
    tmp.rename(stem.with_name(f"{stem.name}.{event}"))


def on_term(signum: int, _frame: object) -> None:
    record("TERM")
    time.sleep(0.5)  # a checkpoint takes a moment
    record("saved")
    sys.exit(0)


warned: list[float] = []


def on_warning(_signum: int, _frame: object) -> None:
    record("USR1")
    warned.append(time.time())


signal.signal(signal.SIGTERM, on_term)
signal.signal(signal.SIGUSR1, on_warning)
shm = os.environ.get("HPCPLACE_SHM_DIR", "")
leftover = sorted(os.listdir(shm)) if shm and os.path.isdir(shm) else None
if shm and os.path.isdir(shm):
    Path(shm, f"attempt-{attempt}-{component}-{rank}").write_text("x")  # what a requeue must remove
record("start", shm_entries=leftover, host=os.uname().nodename)
if attempt != "0":
    sys.exit(0)
if fail == f"{component}:{rank}":
    deadline = time.time() + 120
    while len(list(out.glob("0.*.start"))) < total and time.time() < deadline:
        time.sleep(0.1)
    print("failing on purpose", flush=True)
    sys.exit(7)
while True:
    time.sleep(0.2)
    if warned and time.time() > warned[0] + 3 and not stem.with_name(f"{stem.name}.after_warning").exists():
        # the warning is not the end: the node-local directory must still be there for the rest of the run
        record("after_warning", shm_exists=bool(shm) and os.path.isdir(shm))
