"""A collocated rank for the hand-off tests: takes `turns` turns, optionally hangs in a turn.
Argument: one JSON object (see tests/colocate/test_colocate.py). Prints one JSON result line."""

import json
import os
import sys
import time

from hpcplace.runtime.colocate import CollocationError, Cycle, GroupSchedule
from hpcplace.runtime.memory import NoopBackend


class DiesInResume(NoopBackend):
    """What torch_memory_saver does when a resume fails (cuMemCreate out of memory): exit(1)."""

    def _resume(self, tag: str) -> None:
        os._exit(1)


def main() -> None:
    a = json.loads(sys.argv[1])
    schedule = GroupSchedule(
        a["group"],
        tuple(tuple(p) for p in a["phases"]),
        {c: tuple(r) for c, r in a["members"].items()},
        {c: tuple(d) for c, d in a["devices"].items()},
    )
    cycle = Cycle(
        a["job"],
        schedule,
        component=a["component"],
        rank=a["rank"],
        start=a.get("start"),
        on_owner_death=a.get("policy", "error"),
        event_log=a.get("events"),
    )
    memory = None
    if a.get("die_in_resume"):
        memory = DiesInResume()
        memory.add_tag("weights")
        memory.pause()
    turns = 0
    try:
        for _ in range(a["turns"]):
            with cycle.turn(a["component"], memory=memory):
                if a.get("hang_marker"):
                    with open(a["hang_marker"], "w") as fh:
                        fh.write("in turn")
                    time.sleep(3600)
                time.sleep(a.get("sleep", 0.0))
                turns += 1
    except CollocationError as exc:
        print(json.dumps({"error": exc.message, "t_error": time.monotonic_ns(), "turns": turns}), flush=True)
        sys.exit(3)
    finally:
        cycle.close()
    print(json.dumps({"turns": turns, "t_end": time.monotonic_ns()}), flush=True)


if __name__ == "__main__":
    main()
