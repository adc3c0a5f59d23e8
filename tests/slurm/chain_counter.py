"""A trainer for the chain tests (tests/slurm/test_chain_cluster.py): resumes a step counter from
$HPCPLACE_CHAIN_STATE/count, does up to STEPS_PER_LINK steps per link (its throughput in one time limit),
then waits for Slurm's time-limit warning (SIGTERM), checkpoints and exits 0; it exits 0 at once when the
counter reaches TOTAL (the training is done). Each link appends what it saw to $HPCPLACE_CHAIN_STATE/links.jsonl.

    chain_counter.py TOTAL STEPS_PER_LINK [EXIT_CODE]   (EXIT_CODE: exit with it at once, a failing link)
    chain_counter.py TOTAL STEPS_PER_LINK --ray         (a Ray-mode driver: ray.init() and one task on
                                                         its cluster first, recorded as `ray_task_host`)
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time

total, per_link = int(sys.argv[1]), int(sys.argv[2])
ray_host = None
if "--ray" in sys.argv[3:]:
    # SIGTERM (the time-limit warning) waits until the handler below is in place: ray.init installs its own
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    import socket

    import ray

    @ray.remote
    def host() -> str:
        return socket.gethostname()

    ray.init(logging_level="ERROR")
    ray_host = ray.get(host.remote())
state = os.environ["HPCPLACE_CHAIN_STATE"]
count_file = os.path.join(state, "count")
count = 0
if os.path.exists(count_file):
    with open(count_file) as f:
        count = int(f.read())
seen = {
    "link": os.environ["HPCPLACE_CHAIN_LINK"],
    "length": os.environ["HPCPLACE_CHAIN_LENGTH"],
    "start_count": count,
    "argv": sys.argv[3:],
    "job": os.environ.get("SLURM_JOB_ID"),
    "ray_task_host": ray_host,
    "ray_address": os.environ.get("RAY_ADDRESS"),
}
with open(os.path.join(state, "links.jsonl"), "a") as f:
    f.write(json.dumps(seen) + "\n")
codes = [a for a in sys.argv[3:] if a.isdigit()]
if codes:
    sys.exit(int(codes[0]))


def save(n: int) -> None:
    with open(count_file + ".tmp", "w") as f:
        f.write(str(n))
    os.replace(count_file + ".tmp", count_file)


stopping = False


def on_term(signum: int, frame: object) -> None:
    global stopping
    stopping = True


signal.signal(signal.SIGTERM, on_term)
signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
for _ in range(per_link):
    if count >= total:
        break
    count += 1
    save(count)
    time.sleep(0.1)
if count >= total:
    sys.exit(0)  # the training is done
while not stopping:  # the rest of this link's time: wait for the time-limit warning
    time.sleep(0.2)
save(count)
sys.exit(0)
