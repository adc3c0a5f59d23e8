"""A publisher process for the weight-store tests.

argv: JOB NAME MODE COUNT. MODE "flood": publish versions 1..COUNT, every tensor filled with the
version. MODE "killed": publish version 1, then write half of version 2, print "mid" and hang."""

import sys
import time

import torch

from hpcplace.runtime.weight_store import WeightPublisher


def state_dict(value: float) -> dict[str, torch.Tensor]:
    return {f"layer{i}.weight": torch.full((64, 1024), value, dtype=torch.bfloat16) for i in range(8)} | {
        "embed": torch.full((1000, 64), value, dtype=torch.float32)
    }


def main() -> None:
    torch.set_num_threads(1)
    job, name, mode, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    publisher = WeightPublisher(job, name, checksum="full")
    if mode == "flood":
        for version in range(1, count + 1):
            assert publisher.publish(state_dict(float(version))) == version
        print("done", flush=True)
        return
    publisher.publish(state_dict(1.0))
    sd = state_dict(2.0)
    writer = publisher.begin(sd)
    for i, (key, tensor) in enumerate(sd.items()):
        if i == len(sd) // 2:
            print("mid", flush=True)
            time.sleep(3600)
        writer.write(key, tensor)


if __name__ == "__main__":
    main()
