"""A stand-in for `srun --disable-status` with one task, for the Ctrl-C tests of `attach.run_step`.

It handles SIGINT as srun 22.05 to 26.05 do with --disable-status (src/srun: `_handle_intr`): the first
SIGINT is passed on to the task ("sending Ctrl-C"); another within a second of the last aborts the step
(SIGKILL to the task: "forcing job termination"), and so does SIGTERM. It exits with the task's exit code,
128 + N where a signal N ended it, as srun does. Each event is a line of EVENTS; the task writes GRACEFUL
when it handled its SIGINT itself.

    python srun_interrupts.py EVENTS GRACEFUL [ignore]   (ignore: the task ignores SIGINT)
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time

TASK = """
import signal, sys, time
if sys.argv[2] == "ignore":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
else:
    signal.signal(signal.SIGINT, signal.default_int_handler)
print("started", flush=True)
try:
    time.sleep(120)
except KeyboardInterrupt:
    time.sleep(0.3)  # a driver's own cleanup
    open(sys.argv[1], "w").write("stopped by its SIGINT")
    sys.exit(130)
"""


def main() -> int:
    events, graceful = sys.argv[1], sys.argv[2]
    mode = sys.argv[3] if len(sys.argv) > 3 else "handle"
    # a session of its own: srun's tasks run on the job's nodes, out of reach of the terminal's process group
    task = subprocess.Popen([sys.executable, "-c", TASK, graceful, mode], start_new_session=True)
    last_sigint = [-10.0]

    def record(line: str) -> None:
        with open(events, "a") as f:
            f.write(line + "\n")
        print(f"srun: {line}", file=sys.stderr, flush=True)

    def on_sigint(signum: int, frame: object) -> None:
        now = time.monotonic()
        if now - last_sigint[0] < 1.0:
            record("forcing job termination (SIGINT within 1 s)")
            task.kill()
        else:
            record("sending Ctrl-C")
            task.send_signal(signal.SIGINT)
        last_sigint[0] = now

    def on_sigterm(signum: int, frame: object) -> None:
        record("forcing job termination (SIGTERM)")
        task.kill()

    signal.signal(signal.SIGINT, on_sigint)
    signal.signal(signal.SIGTERM, on_sigterm)
    rc = task.wait()
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main())
