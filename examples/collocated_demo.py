"""Collocated demo: a tiny trainer ("actor") and generator ("rollout") take turns on the same devices.

    hpcplace run configs/collocated-demo.yaml --local

Each cycle: rollout (load the newest weights, sample sequences, publish them) -> offload -> actor
(onload, train on them with REINFORCE, publish the new weights) -> offload -> rollout onloads and
loads those weights. Weights and batches cross through the /dev/shm weight store; turns are taken
through the collocation baton. The rollout asserts it sees every new version, and that its loaded
weights have the exact fingerprint the actor published; the actor asserts its own weights survived
each offload. Runs with torch_memory_saver on GPUs (when the shim preloaded it), else on the CPU
backend, which really drops the offloaded pages.
"""

from __future__ import annotations

import argparse
import os
import sys
import zlib
from datetime import timedelta

import torch

from hpcplace.runtime import weight_store
from hpcplace.runtime.colocate import Cycle
from hpcplace.runtime.memory import CpuBackend, make_backend
from hpcplace.runtime.weight_store import WeightPublisher, WeightReader

VOCAB, HIDDEN, SEQ, BATCH, TARGET = 16, 64, 12, 256, 7
# This node's state directory (HPCPLACE_SHM_DIR = /dev/shm/hpcplace-<jobid>/node-<node>): every
# weight store and baton below is this node's own; the name only labels the output.
NODE = os.path.basename(os.environ.get("HPCPLACE_SHM_DIR", "node-?"))[len("node-") :]


def make_policy() -> torch.nn.Module:
    torch.manual_seed(0)  # version 0 = the same initial weights in both components
    return torch.nn.Sequential(torch.nn.Embedding(VOCAB, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, VOCAB))


def fingerprint(model: torch.nn.Module) -> int:
    crc = 0
    for _name, tensor in sorted(model.state_dict().items()):
        crc = zlib.crc32(tensor.detach().cpu().contiguous().view(torch.uint8).numpy().tobytes(), crc)
    return crc


def generate(
    model: torch.nn.Module, scratch: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample BATCH sequences token by token; `scratch` (the "kv cache") holds the hidden states."""
    device = scratch.device
    tokens = torch.zeros(BATCH, SEQ + 1, dtype=torch.long, device=device)
    with torch.no_grad():
        for step in range(SEQ):
            scratch[:, step] = model[1](model[0](tokens[:, step]))
            probs = torch.softmax(model[2](scratch[:, step]), dim=-1)
            tokens[:, step + 1] = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(1).to(device)
    rewards = (tokens[:, 1:] == TARGET).float().mean(dim=1)
    return tokens, rewards


def release_cached() -> None:
    """Offload hook: give back what torch's caching allocator holds outside the paused tags."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def maybe_init_distributed(world_size: int, rank: int) -> bool:
    """Average the actor's gradients over its ranks when the shim gave a rendezvous address.

    Call it after everything else is built (the optimizer above all): a module imported after the
    group exists can keep it alive past destroy_process_group (see `teardown_distributed`)."""
    if world_size < 2 or not os.environ.get("MASTER_ADDR") or not os.environ.get("MASTER_PORT"):
        return False
    import torch.distributed as dist

    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=120))
    return True


# The threads of a live gloo process group (and of rank 0's TCPStore server), by their names.
GLOO_THREADS = ("gloo_tcp_loop", "pt_gloo_runloop", "pt_tcpstore_uv")


def gloo_threads() -> list[str]:
    """This process's threads that belong to a gloo process group (Linux: /proc/self/task/*/comm)."""
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as f:
                names.append(f.read().strip())
        except FileNotFoundError:  # a thread that just ended
            continue
    return sorted(n for n in names if n.startswith(GLOO_THREADS))


def teardown_distributed() -> None:
    """Every rank done (barrier), then the group destroyed here, while every peer is still alive:
    its worker and transport threads joined, its sockets closed, rank 0's store stopped.

    A group still alive at interpreter exit is torn down by finalization instead, after its peers
    have exited: gloo's threads then abort the process ("terminate called without an active
    exception") after the work is done. destroy_process_group only drops torch.distributed's own
    references; torch._dynamo, imported by the first torch.optim optimizer, takes ten more when it
    is imported after init_process_group, which kept the group (and its threads) alive to the end.
    Hence the optimizer is built before the group, and this checks that the threads are gone."""
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
    left = gloo_threads()
    if left:
        raise RuntimeError(
            f"the gloo process group outlived destroy_process_group (threads {left}): "
            "something took a reference to it; create it after every other import"
        )


def run_actor(cycle: Cycle, job_dir: str, rank: int, world_size: int, cycles: int, lr: float) -> None:
    model = make_policy()
    memory = make_backend("auto")
    device = "cpu" if isinstance(memory, CpuBackend) else "cuda"
    print(f"actor[{rank}]: memory backend {type(memory).__name__} on {device}", flush=True)
    memory.adopt("weights", model, backup=True)  # the trainer keeps its weights across offloads
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)  # before the group: it imports torch._dynamo
    distributed = maybe_init_distributed(world_size, rank)
    publisher = WeightPublisher(job_dir, f"actor-{rank}")
    targets = os.environ.get("HPCPLACE_WEIGHT_SYNC_TARGETS", "")
    rollout_rank = int(targets.split(",")[0].split(":")[0]) if targets else rank
    batches = WeightReader(job_dir, f"rollout-{rollout_rank}")
    kept = fingerprint(model)
    for i in range(cycles):
        with cycle.turn("actor", memory=memory, offload=release_cached) as generation:
            assert fingerprint(model) == kept, "actor weights changed across an offload"
            with batches.consume(min_version=i + 1, timeout=300) as batch:
                assert batch.version == i + 1 and int(batch.tensors["policy_version"]) == i
                tokens = batch.tensors["tokens"].to(device, copy=True)  # own copies: the views end with the `with`
                rewards = batch.tensors["rewards"].to(device, copy=True)
            logits = model[2](model[1](model[0](tokens[:, :-1])))
            logp = torch.log_softmax(logits, dim=-1).gather(-1, tokens[:, 1:, None]).squeeze(-1).sum(dim=1)
            loss = -((rewards - rewards.mean()) * logp).mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if distributed:
                import torch.distributed as dist

                for p in model.parameters():
                    dist.all_reduce(p.grad)
                    p.grad /= world_size
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)  # no gradient memory outside the offloaded tag
            kept = fingerprint(model)
            version = publisher.publish({**model.state_dict(), "fingerprint": torch.tensor(kept)})
            assert version == i + 1, (version, i)
            print(
                f"actor[{rank}] gen {generation}: trained on batch {i} (mean reward "
                f"{float(rewards.mean()):.3f}), published weights v{version} fp={kept:08x} "
                f"(node {NODE})",
                flush=True,
            )
    batches.close()
    publisher.close()
    if distributed:
        teardown_distributed()


def run_rollout(cycle: Cycle, job_dir: str, rank: int, cycles: int) -> None:
    model = make_policy()
    memory = make_backend("auto")
    print(f"rollout[{rank}]: memory backend {type(memory).__name__}", flush=True)
    memory.adopt("weights", model, backup=False)  # reloaded from the weight store every turn
    memory.add_tag("kv_cache", nbytes=BATCH * SEQ * HIDDEN * 4, backup=False)
    scratch = memory.empty("kv_cache", (BATCH, SEQ, HIDDEN), torch.float32)
    sources = weight_store.weight_sources(os.environ) or [rank]
    weights = WeightReader(job_dir, f"actor-{sources[0]}")
    publisher = WeightPublisher(job_dir, f"rollout-{rank}")
    generator = torch.Generator().manual_seed(1000 + rank)
    params = dict(model.named_parameters())
    for i in range(cycles + 1):
        with cycle.turn("rollout", memory=memory, offload=release_cached) as generation:
            if i > 0:
                with weights.consume(min_version=i, timeout=300) as snap:
                    assert snap.version == i, f"rollout expected weights v{i}, got v{snap.version}"
                    with torch.no_grad():
                        for name, param in params.items():
                            param.copy_(snap.tensors[name])
                    assert fingerprint(model) == int(snap.tensors["fingerprint"]), "weights differ from the actor's"
            tokens, rewards = generate(model, scratch, generator)
            print(
                f"rollout[{rank}] gen {generation}: weights v{i} fp={fingerprint(model):08x}, "
                f"mean reward {float(rewards.mean()):.3f} (node {NODE}, from actor-{sources[0]})",
                flush=True,
            )
            if i < cycles:
                publisher.publish({"tokens": tokens.cpu(), "rewards": rewards.cpu(), "policy_version": torch.tensor(i)})
    weights.close()
    publisher.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="collocated actor/rollout demo")
    parser.add_argument("--role", choices=("actor", "rollout"), required=True)
    parser.add_argument("--cycles", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.5)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    rank = int(os.environ.get("HPCPLACE_RANK", "0"))
    world_size = int(os.environ.get("HPCPLACE_WORLD_SIZE", "1"))
    job_dir = weight_store.job_dir_from_env(os.environ)
    cycle = Cycle.from_env(start="rollout")  # rollout goes first: both sides start from version 0
    if args.role == "actor":
        run_actor(cycle, job_dir, rank, world_size, args.cycles, args.lr)
    else:
        run_rollout(cycle, job_dir, rank, args.cycles)
    if cycle.close():  # the last rank of the group on this node removes this node's shm directory
        weight_store.cleanup(job_dir)
        print(f"{args.role}[{rank}]: last to leave, removed {job_dir}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
