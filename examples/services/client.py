"""A stand-in trainer for hpcplace's services examples: asks the reward service for rewards and the sandbox
pool for echoes, by the addresses hpcplace gave it (its arguments and HPCPLACE_SERVICE_* variables).

    python examples/services/client.py --reward-url URL [--sandboxes HOST:PORT,...]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import urllib.request


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reward-url", required=True)
    parser.add_argument("--sandboxes", default="")
    args = parser.parse_args()
    queries = ["a", "bb", "ccc"]
    request = urllib.request.Request(
        args.reward_url + "/get_reward",
        data=json.dumps({"query": queries}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        rewards = json.loads(answer.read())["rewards"]
    assert rewards == [1.0, 2.0, 3.0], rewards
    rank = os.environ.get("RANK", "0")
    print(f"client {rank}: rewards {rewards} from {args.reward_url}", flush=True)
    for address in filter(None, args.sandboxes.split(",")):
        host, port = address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            sock.sendall(f"rank {rank}\n".encode())
            answer = sock.makefile().readline().strip()
        assert answer == f"echo rank {rank}", answer
        print(f"client {rank}: sandbox {address} answered {answer!r}", flush=True)
    names = sorted(k for k in os.environ if k.startswith("HPCPLACE_SERVICE_"))
    print(f"client {rank}: service variables {' '.join(names)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
