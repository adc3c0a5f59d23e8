"""Run inside `unshare -m` by test_full_shm.py: /dev/shm here is a private 4 MiB tmpfs. Fills it
the way another tenant would, then checks what still works and what fails cleanly; prints JSON."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys

import torch

from hpcplace.runtime import shm_dir, weight_store
from hpcplace.runtime.colocate import CollocationError, Cycle, GroupSchedule
from hpcplace.runtime.weight_store import WeightPublisher, WeightReader, WeightStoreError

NODE = "/dev/shm/hpcplace-full/node-n1"


def schedule(name: str) -> GroupSchedule:
    return GroupSchedule(name=name, phases=(("actor",),), members={"actor": (0,)}, devices={"actor": ("0",)})


def fill() -> None:
    with open("/dev/shm/filler", "ab", buffering=0) as fh:
        chunk = b"x" * 4096
        while True:
            try:
                fh.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                return


def killed_first_publish() -> None:
    """A publisher SIGKILLed during its first publish, after reserving its temporary slots."""
    real = os.posix_fallocate

    def fallocate_then_die(fd: int, offset: int, length: int) -> None:
        real(fd, offset, length)
        if sum(n.endswith(".tmp") for n in os.listdir(os.path.join(NODE, "weights-killed"))) == 2:
            os.kill(os.getpid(), signal.SIGKILL)

    os.posix_fallocate = fallocate_then_die
    WeightPublisher(NODE, "killed").publish({"w": torch.zeros(64 << 10)})


def main() -> int:
    if len(sys.argv) > 1:
        killed_first_publish()
        return 1
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=1777", "tmpfs", "/dev/shm"], check=True)
    out: dict[str, object] = {}
    shm_dir.make_node_dir(NODE)
    child = subprocess.run([sys.executable, __file__, "killed"])
    out["killed_rc"] = child.returncode
    out["temps_after_kill"] = sorted(os.listdir(os.path.join(NODE, "weights-killed")))
    cycle = Cycle(NODE, schedule("g"), component="actor", rank=0)
    publisher = WeightPublisher(NODE, "actor-0")
    publisher.publish({"w": torch.arange(1000.0)})
    reader = WeightReader(NODE, "actor-0")
    fill()
    out["free_after_fill"] = os.statvfs("/dev/shm").f_bavail
    # what was set up before keeps working: publish in place, hand the turn on
    versions = []
    for i in range(2, 5):
        versions.append(publisher.publish({"w": torch.arange(1000.0) + i}))
        with reader.consume(min_version=i) as snap:
            assert float(snap.tensors["w"][0]) == i
    out["versions"] = versions
    generations = []
    for _ in range(3):
        with cycle.turn("actor") as generation:
            generations.append(generation)
    out["generations"] = generations
    # what needs new space fails with a clear error and leaves nothing behind
    errors = {}
    try:
        WeightPublisher(NODE, "late").publish({"w": torch.zeros(1000)})
    except WeightStoreError as exc:
        errors["new store"] = str(exc)
    try:
        Cycle(NODE, schedule("late"), component="actor", rank=0)
    except CollocationError as exc:
        errors["new group"] = str(exc)
    out["errors"] = errors
    # the killed publisher's reserved temporary slots: the next publisher of that store removes them
    os.unlink("/dev/shm/filler")
    WeightPublisher(NODE, "killed").close()
    out["temps_after_reopen"] = sorted(os.listdir(os.path.join(NODE, "weights-killed")))
    listing = []
    for root, dirs, files in os.walk("/dev/shm"):
        listing += [os.path.relpath(os.path.join(root, n), "/dev/shm") for n in dirs + files]
    out["listing"] = sorted(listing)
    reader.close()
    publisher.close()
    cycle.close()
    weight_store.cleanup(NODE)
    out["after_cleanup"] = os.listdir("/dev/shm")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
