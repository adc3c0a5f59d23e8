from hpcplace.functions import submit_functions

def train(steps, lr=1e-3):               # runs on every rank of `actor`
    from hpcplace.runtime import process_info
    info = process_info()                # rank, world size, devices, MASTER_ADDR/PORT, ... as the shim set them
    ...
    return {"rank": info.rank, "loss": loss}

job = submit_functions("configs/x.yaml", {"actor": train, "rollout": generate}, run_dir="runs/x",
                       args=(100,), kwargs={"lr": 3e-4})      # one het job, like `hpcplace submit`
job.wait(timeout=3600)                   # polls Slurm until every het component is done
results = job.results()                  # {"actor": [rank 0's value, rank 1's, ...], "rollout": [...]}
# local=True (or run_functions_local): every rank on this machine through the local backend; returns when done
