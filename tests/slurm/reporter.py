"""Run by every task of the real-cluster tests (through hpcplace-run): write what this process got
(host, component, rank, environment, argv, which fake GPU device files it may open) as JSON.

    python3 reporter.py OUT_DIR [ARGS...]     (ARGS are recorded verbatim: hostile-input checks)

Device files: $DIR/dev/<host>/nvidia<k> of the test cluster (its $HPCPLACE_GPU_DEVICE_DIR, which the tests
pass on to every job) are character devices without a driver, so
opening one fails with ENXIO when the device cgroup allows it and EPERM when it does not
(ConstrainDevices=yes); under ConstrainDevices=no every device opens (ENXIO).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import sys
import time
import urllib.parse

DEVICE_DIR = os.environ.get("HPCPLACE_GPU_DEVICE_DIR", "/tmp/hpcplace-slurm/dev/{node}")
VARIABLES = (
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "CUDA_VISIBLE_DEVICES",
    "VISIBLE_DEVICES",
    "GPU_DEVICE_ORDINAL",
    "ROCR_VISIBLE_DEVICES",
    "SLURM_JOB_GPUS",
    "SLURM_STEP_GPUS",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_STEP_ID",
    "SLURM_JOB_ID",
    "SLURMD_NODENAME",
    "LOCAL_HARDWARE_RANKS",
    "NODE_GROUP_LABEL",
    "EMBODIED_PATH",
    "SLURM_CPUS_PER_TASK",
    "SLURM_TRES_PER_TASK",
    "SLURM_CPUS_ON_NODE",
    "SRUN_CPUS_PER_TASK",
)


def openable_devices(host: str) -> tuple[list[int], dict[str, str]]:
    granted, other = [], {}
    folder = DEVICE_DIR.replace("{node}", host)
    names = sorted(os.listdir(folder), key=lambda n: int(n[6:])) if os.path.isdir(folder) else []
    for name in names:
        try:
            os.close(os.open(os.path.join(folder, name), os.O_RDWR))
            granted.append(int(name[6:]))  # a driver would answer; there is none
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                granted.append(int(name[6:]))
            elif exc.errno != errno.EPERM:
                other[name] = errno.errorcode.get(exc.errno, str(exc.errno))
    return granted, other


def os_release() -> str:
    try:
        with open("/etc/os-release", encoding="utf-8") as f:
            fields = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
    except OSError:
        return ""
    return fields.get("PRETTY_NAME", "").strip('"')


def main() -> int:
    out_dir, args = sys.argv[1], sys.argv[2:]
    host = socket.gethostname()
    granted, other = openable_devices(host)
    env = {k: v for k, v in os.environ.items() if k.startswith("HPCPLACE_") or k in VARIABLES}
    report = {
        "host": host,
        "argv": args,
        "env": env,
        "devices": granted,
        "device_errors": other,
        "shm_dir_exists": os.path.isdir(env.get("HPCPLACE_SHM_DIR", "/nonexistent")),
        "time": time.time(),
        # which image it ran in (the container tests): the Python and the system it found
        "python": sys.version.split()[0],
        "os_release": os_release(),
    }
    comp = urllib.parse.quote(env.get("HPCPLACE_COMPONENT", "unknown"), safe="")
    path = os.path.join(out_dir, f"{comp}.{env.get('HPCPLACE_RANK', 'x')}.json")
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(report, f, sort_keys=True)
    os.replace(path + ".tmp", path)
    fail = os.environ.get("HPCPLACE_TEST_FAIL", "")
    if fail and fail == f"{env.get('HPCPLACE_COMPONENT')}:{env.get('HPCPLACE_RANK')}":
        print(f"reporter: failing on purpose as {fail}", file=sys.stderr)
        return 7
    hold = float(os.environ.get("HPCPLACE_TEST_HOLD", "0"))
    if hold:
        time.sleep(hold)
    return 0


if __name__ == "__main__":
    sys.exit(main())
