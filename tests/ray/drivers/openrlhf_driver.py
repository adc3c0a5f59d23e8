"""OpenRLHF's own `train_ppo_ray` run on a Ray cluster with fake GPUs, to see where its placement puts every
rank: its real argparse parser, its checks and `train()` with its placement groups, `create_vllm_engines`,
`get_bundle_indices` and `RayActorGroup` (openrlhf 0.11.2, installed --no-deps), none of their code changed.

What is replaced is what would touch a GPU or a model, each named here: the modules train_ppo_ray imports
that import vllm, deepspeed or flash-attn (`vllm` itself, openrlhf.models, openrlhf.utils.deepspeed,
ppo_actor/ppo_critic, the PPO trainers, get_strategy) are stand-in modules put in sys.modules before the
import, and the Ray actor classes train() places (PolicyModelActor, CriticModelActor, ReferenceModelActor,
RewardModelActor, RolloutRayActor) are probes that record their node and GPUs, named as the classes they stand
in for (Ray's actor table shows those names: runtime/openrlhf_watch.py finds the roles by them). A probe engine with tensor
parallelism does what vLLM's Ray executor does with OpenRLHF's VLLM_RAY_BUNDLE_INDICES: one worker per
bundle index of the engine's placement group, with VLLM_RAY_PER_WORKER_GPUS GPUs each. Given
`--reward.remote_url http://...`, each probe engine asks that reward server for one reward with OpenRLHF's own
HTTP client (remote_reward), as its agent does after a generation.

    python openrlhf_driver.py --report OUT.json --nodes 8,8 [--address ADDR] -- [python3 -m openrlhf.cli.train_ppo_ray] --actor.num_nodes 1 ...

Without --address it starts a ray.cluster_utils.Cluster of nodes with those GPU counts (a local fake-GPU
cluster); with it (or RAY_ADDRESS) it attaches to the cluster hpcplace started."""

from __future__ import annotations

import argparse
import json
import os
import runpy
import shutil
import sys
import tempfile
import traceback
import types
from pathlib import Path
from typing import Any

import ray
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

PROBE_DIR = "OPENRLHF_PROBE_DIR"
ENGINE_START_S = 180  # a probe engine of TP > 1 starts a Ray task per bundle: seconds on a loaded test cluster
# the OpenRLHF 0.11.2 class each probe stands in for
CLASSES = {
    "actor": "PolicyModelActor",
    "ref": "ReferenceModelActor",
    "critic": "CriticModelActor",
    "reward": "RewardModelActor",
    "vllm": "RolloutRayActor",
}


def _where() -> dict[str, Any]:
    ctx = ray.get_runtime_context()
    return {
        "node_id": ctx.get_node_id(),
        "gpus": [int(g) for g in ray.get_gpu_ids()],
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "host": os.uname().nodename,
    }


def _write(name: str, record: dict[str, Any]) -> None:
    path = Path(os.environ[PROBE_DIR]) / f"{name}.json"
    path.write_text(json.dumps(record), encoding="utf-8")


def probe_actor(role: str) -> Any:
    """A stand-in for OpenRLHF's model actor of `role`: the constructor RayActorGroup calls, the methods
    train() calls on it."""

    class Probe:
        def __init__(self, world_size: int, rank: int, master_addr: Any, master_port: Any) -> None:
            _write(f"{role}-{rank}", {"role": role, "rank": rank, "world_size": world_size, **_where()})

        def get_master_addr_port(self) -> tuple[str, int]:
            return "127.0.0.1", 29500

        def init_model_from_pretrained(self, *args: Any, **kwargs: Any) -> None:
            return None

        def save_model(self) -> None:
            return None

    Probe.__name__ = Probe.__qualname__ = CLASSES[role]
    return ray.remote(Probe)


@ray.remote
def _vllm_worker() -> dict[str, Any]:
    return _where()


class ProbeEngine:
    """A stand-in for OpenRLHF's RolloutRayActor (which starts vLLM)."""

    def __init__(self, *args: Any, bundle_indices: list[int] | None = None, **kwargs: Any) -> None:
        engine = int(kwargs["seed"]) - int(os.environ["OPENRLHF_PROBE_SEED"])
        record: dict[str, Any] = {"engine": engine, "bundle_indices": bundle_indices, **_where()}
        if bundle_indices is not None:  # vLLM's Ray executor: a worker per bundle, on the captured group
            pg = ray.util.get_current_placement_group()
            record["workers"] = ray.get(
                [
                    _vllm_worker.options(
                        num_cpus=0,
                        num_gpus=float(kwargs["num_gpus"]),
                        scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=b),
                    ).remote()
                    for b in bundle_indices
                ]
            )
        urls = kwargs.get("remote_rm_url")  # train_ppo_ray makes --reward.remote_url a list of endpoints
        if urls and all(
            str(u).startswith(("http://", "https://")) for u in ([urls] if isinstance(urls, str) else urls)
        ):
            record["remote_rm"] = remote_reward(urls)
        _write(f"vllm-{engine}", record)

    def sleep(self, *args: Any, **kwargs: Any) -> None:
        return None


def remote_reward(urls: str | list[str]) -> dict[str, Any]:
    """One request to the remote reward model by OpenRLHF's own client (SingleTurnAgentExecutor's HTTP path,
    openrlhf/utils/agent.py, what each engine's agent runs after a generation), for the query "query"."""
    import asyncio

    from openrlhf.utils.agent import SingleTurnAgentExecutor

    executor = SingleTurnAgentExecutor(urls)
    try:
        answers = asyncio.run(executor._fetch_rewards_via_http(["query"], ["prompt"], ["label"]))
    except Exception as exc:  # noqa: BLE001  # recorded for the test, which reads it
        return {"endpoints": executor.reward_endpoints, "error": f"{type(exc).__name__}: {exc}"}
    return {"endpoints": executor.reward_endpoints, "answers": answers}


def probe_engine() -> Any:
    """ProbeEngine as a Ray actor class named RolloutRayActor (a subclass made here: Ray ships it by value)."""
    return ray.remote(type(CLASSES["vllm"], (ProbeEngine,), {"__qualname__": CLASSES["vllm"]}))


@ray.remote(num_cpus=0)
class ProbeTrainer:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def get_max_steps(self) -> int:
        return 1

    def fit(self) -> None:
        return None


class _Strategy:
    def __init__(self, args: Any) -> None:
        self.args = args

    def print(self, *args: Any) -> None:
        return None


def _module(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module
    return module


def install_stand_ins(patch: bool = True) -> None:
    """The modules that would import vllm/deepspeed/flash-attn, before OpenRLHF is imported; `patch`: also
    the probe actor classes (the driver; a Ray worker only needs the modules to unpickle what train()
    passes, e.g. the RayActorGroup objects given to the PPO trainer)."""
    import importlib.util

    spec = importlib.util.find_spec("openrlhf")
    assert spec is not None and spec.submodule_search_locations, "openrlhf is not installed"
    root = Path(next(iter(spec.submodule_search_locations)))
    vllm = _module("vllm", __version__="0.29.0", __path__=[])
    vllm.inputs = _module("vllm.inputs", TokensPrompt=dict)  # type: ignore[attr-defined]
    vllm.utils = _module("vllm.utils", random_uuid=lambda: "0")  # type: ignore[attr-defined]
    _module("openrlhf.models", Actor=object, get_llm_for_sequence_regression=None)
    # the utils package without its __init__ (which imports math/grading code): its files load as they are
    _module("openrlhf.utils", __path__=[str(root / "utils")], get_strategy=_Strategy, get_tokenizer=None)
    _module("openrlhf.utils.deepspeed", __path__=[], DeepspeedStrategy=object)
    _module("openrlhf.trainer.ray.ppo_actor", PolicyModelActor=probe_actor("actor"))
    _module("openrlhf.trainer.ray.ppo_critic", CriticModelActor=probe_actor("critic"))
    _module("openrlhf.trainer.ppo_trainer", PPOTrainer=ProbeTrainer)
    _module("openrlhf.trainer.ppo_trainer_async", PPOTrainerAsync=ProbeTrainer)
    if not patch:
        return
    import openrlhf.trainer.ray.launcher as launcher
    import openrlhf.trainer.ray.vllm_engine as vllm_engine

    launcher.ReferenceModelActor = probe_actor("ref")  # type: ignore[attr-defined]
    launcher.RewardModelActor = probe_actor("reward")  # type: ignore[attr-defined]
    vllm_engine.RolloutRayActor = probe_engine()  # type: ignore[attr-defined]


def keep_engines(engines: list[Any]) -> None:
    """Wrap OpenRLHF's create_vllm_engines to keep its engine handles in `engines`: train() never waits for an
    engine to finish starting (its constructor runs while train() goes on), so the driver waits for them before
    it reads the records."""
    import openrlhf.trainer.ray as ray_pkg

    create = ray_pkg.create_vllm_engines

    def create_and_keep(*args: Any, **kwargs: Any) -> Any:
        made = create(*args, **kwargs)
        engines.extend(made or [])
        return made

    ray_pkg.create_vllm_engines = create_and_keep


def worker_setup() -> None:
    """Ray's worker_process_setup_hook: every worker gets the stand-in modules."""
    install_stand_ins(patch=False)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--report", required=True)
    parser.add_argument("--nodes", default="")
    parser.add_argument("--address", default=os.environ.get("RAY_ADDRESS"))
    ours, rest = sys.argv[1:], []
    if "--" in ours:
        cut = ours.index("--")
        ours, rest = ours[:cut], ours[cut + 1 :]
    opts = parser.parse_args(ours)
    if "openrlhf.cli.train_ppo_ray" in rest:  # `-- python3 -m openrlhf.cli.train_ppo_ray ARGS`: the command as planned
        rest = rest[rest.index("openrlhf.cli.train_ppo_ray") + 1 :]
    report: dict[str, Any] = {"error": None, "argv": rest}
    probe_dir = tempfile.mkdtemp(prefix="openrlhf-probe-", dir=os.environ.get("OPENRLHF_PROBE_PARENT"))
    os.environ[PROBE_DIR] = probe_dir
    seed = rest[rest.index("--train.seed") + 1] if "--train.seed" in rest else "42"
    os.environ["OPENRLHF_PROBE_SEED"] = seed
    cluster = None
    try:
        path = os.pathsep.join(p for p in (str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if p)
        env = {
            "env_vars": {PROBE_DIR: probe_dir, "OPENRLHF_PROBE_SEED": seed, "PYTHONPATH": path},
            "worker_process_setup_hook": "openrlhf_driver.worker_setup",
        }
        if opts.address:
            ray.init(address=opts.address, runtime_env=env)
        else:
            from ray.cluster_utils import Cluster

            cluster = Cluster()
            for gpus in opts.nodes.split(","):
                cluster.add_node(num_gpus=int(gpus), num_cpus=int(gpus) * 2 + 4)
            ray.init(address=cluster.address, runtime_env=env)
        report["nodes"] = [
            {
                "node_id": n["NodeID"],
                "host": n.get("NodeManagerHostname"),
                "gpus": int(n["Resources"].get("GPU", 0)),
                "resources": n["Resources"],
            }
            for n in ray.nodes()
            if n["Alive"]
        ]
        install_stand_ins()
        engines: list[Any] = []
        keep_engines(engines)
        sys.argv = ["train_ppo_ray", *rest]
        try:
            runpy.run_module("openrlhf.cli.train_ppo_ray", run_name="__main__")
        except SystemExit as exc:  # argparse's error exit
            report["error"] = f"SystemExit({exc.code})"
        except AssertionError as exc:
            report["error"] = f"AssertionError: {exc}"
        ray.get([engine.__ray_ready__.remote() for engine in engines], timeout=ENGINE_START_S)
        report["records"] = [json.loads(p.read_text()) for p in sorted(Path(probe_dir).glob("*.json"))]
    except Exception as exc:  # noqa: BLE001  # the report names any failure: the test reads it, not a traceback
        report["error"] = f"{type(exc).__name__}: {exc}"
        report["traceback"] = traceback.format_exc()
    finally:
        Path(opts.report).write_text(json.dumps(report, indent=1), encoding="utf-8")
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        shutil.rmtree(probe_dir, ignore_errors=True)  # its records are in the report
    return 0


if __name__ == "__main__":
    sys.exit(main())
