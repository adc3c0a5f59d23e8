import sys

from hpcplace.functions import submit_functions
from hpcplace.runtime import process_info


def train(steps, lr=1e-3):  # runs on every rank of `actor`
    info = process_info()  # rank, world size, devices, MASTER_ADDR/PORT, ... as the shim set them
    loss = 1.0 / (1.0 + steps * lr * (info.rank + 1))  # stands in for the training loop
    return {"rank": info.rank, "devices": info.visible_devices, "loss": loss}


def generate(steps, lr=1e-3):  # every rank of `rollout`; every component gets the same args/kwargs
    info = process_info()
    return f"sample {info.rank} of {info.world_size}"


if __name__ == "__main__":  # run from the repo root: python docs/snippets/functions.py [--local]
    local = "--local" in sys.argv  # every rank on this machine through the local backend; returns when done
    job = submit_functions(
        "configs/model-parallel-disaggregated.yaml",
        {"actor": train, "rollout": generate},
        args=(100,),
        kwargs={"lr": 3e-4},
        local=local,
    )  # else one het job, like `hpcplace submit`
    job.wait(timeout=3600)  # polls Slurm until every het component is done (local: already done)
    results = job.results()  # {"actor": [rank 0's value, rank 1's, ...], "rollout": [...]}
    print(job.run_dir, results)  # run_dir: a new runs/<name>-... unless run_dir= names one (never reused)
