"""A driver for `hpcplace attach` tests: argv[1] = what to do, argv[2] = a JSON file to write.

create OUT   create the detached named actor `hp_keeper` (namespace hp) holding a token, report env
find OUT     find `hp_keeper` (created by an earlier driver of the same cluster), report its token
sleep OUT    report env, print `started`, then sleep until stopped (the Ctrl-C test: OUT.stopped says how)
"""

import json
import os
import sys
import time

what, out = sys.argv[1], sys.argv[2]
keys = (
    "RAY_ADDRESS",
    "RANK",
    "WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "HPCPLACE_PLAN",
    "HPCPLACE_RUN_DIR",
    "HP_LAUNCH_VAR",
    "SLURMD_NODENAME",
)
report = {"env": {k: os.environ.get(k) for k in keys}, "started": time.time()}
if what == "sleep":
    with open(out, "w") as f:
        json.dump(report, f)
    print("started", flush=True)
    try:
        time.sleep(600)
    except KeyboardInterrupt:  # Ctrl-C reached the driver as SIGINT: it stops as it chooses
        with open(out + ".stopped", "w") as f:
            f.write("KeyboardInterrupt")
        sys.exit(130)
    sys.exit(0)

import ray  # noqa: E402

ray.init(logging_level="ERROR", namespace="hp")


@ray.remote
class Keeper:
    def __init__(self, token: str) -> None:
        self.token = token

    def get(self) -> str:
        return self.token


if what == "create":
    keeper = Keeper.options(name="hp_keeper", lifetime="detached").remote(f"token-{os.getpid()}")
    report["token"] = ray.get(keeper.get.remote())
else:
    report["token"] = ray.get(ray.get_actor("hp_keeper").get.remote())
report["nodes"] = len([n for n in ray.nodes() if n["Alive"]])
with open(out, "w") as f:
    json.dump(report, f)
print(f"{what}: token {report['token']}", flush=True)
