"""hpcplace's plans against RLinf 0.3.0's own placement code (tests/rlinf_offline.py runs RLinf's
NodeProbe, node groups and ComponentPlacement classes in-process): random clusters with arbitrary
(non-contiguous, unordered) node ranks x random placements must be accepted by both or refused by
both, and where accepted, every node, group and process must be where RLinf puts it. The upstream
structures of tests/fixtures/ (SFT, eval, multi-agent) are compared with the RLinf class RLinf's own
entry scripts use for them."""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from hpcplace.errors import HpcplaceError
from hpcplace.plan.plan import plan_to_json
from hpcplace.plan.planner import plan_from_file
from tests.planner.test_properties import mutated, valid_looking
from tests.ray.framework_checks import node_table, rlinf_mismatches

pytest.importorskip("rlinf")
omegaconf = pytest.importorskip("omegaconf")

from tests.rlinf_offline import placement_report, rlinf_cluster  # noqa: E402

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
# RLINF_REFERENCE_EXAMPLES=20000 for a long hunt; CI runs 300 (about 10 s).
SETTINGS = settings(
    max_examples=int(os.environ.get("RLINF_REFERENCE_EXAMPLES", "300")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
WORK: list[Path] = []  # where hpcplace_view writes its config files: this module's own temporary folder


@pytest.fixture(scope="module", autouse=True)
def _work_folder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    WORK.append(tmp_path_factory.mktemp("rlinf-ref"))
    yield
    WORK.clear()


def planned_gpus(plan: dict[str, Any]) -> list[int]:
    table = node_table(plan)
    return [table[r]["gpus"] for r in range(len(table))]


def rlinf_view(
    text: str,
    node_gpus: list[int],
    order: list[int] | None = None,
    placement_class: str = "ComponentPlacement",
    engines: tuple[str, ...] = (),
) -> dict[str, Any] | str:
    """RLinf's report for the config text, or the error RLinf raised (a refusal)."""
    cfg = omegaconf.OmegaConf.create(text)
    try:
        return placement_report(cfg, rlinf_cluster(cfg.cluster, node_gpus, order), placement_class, engines)
    except Exception as exc:  # noqa: BLE001 - any exception in RLinf's code is RLinf refusing the config
        return f"{type(exc).__name__}: {exc}"


def hpcplace_view(text: str) -> dict[str, Any] | str:
    path = Path(tempfile.mkstemp(suffix=".yaml", dir=WORK[0])[1])
    path.write_text(text, encoding="utf-8")
    try:
        return json.loads(plan_to_json(plan_from_file(path)))
    except HpcplaceError as exc:
        return str(exc)
    finally:
        path.unlink()


# ================================================================================================
# random clusters x random placements


@st.composite
def rlinf_configs(draw) -> tuple[str, list[int], list[int]]:
    """(config text, GPUs of each cluster node rank, the order Ray lists the nodes in)."""
    sizes = draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))
    spare = draw(st.integers(0, 2))  # nodes in no declared group: reached through `cluster`/`node` only
    num_nodes = sum(sizes) + spare
    ranks = draw(st.permutations(range(num_nodes)))
    default_gpus = draw(st.sampled_from([0, 2, 8]))
    node_gpus = [default_gpus] * num_nodes
    groups: list[dict[str, Any]] = []
    at = 0
    for i, size in enumerate(sizes):
        mine = list(ranks[at : at + size])
        at += size
        gpus = draw(st.sampled_from([0, 1, 2, 4, 8]))
        for r in mine:
            node_gpus[r] = gpus
        if sorted(mine) == list(range(min(mine), max(mine) + 1)) and size > 1 and draw(st.booleans()):
            text = f"{min(mine)}-{max(mine)}"
        else:
            text = ",".join(map(str, mine))  # in the drawn (unordered) order
        groups.append(
            {
                "label": f"g{i}",
                "node_ranks": text,
                "gpus": gpus,
                "size": size,
                "ignore": gpus > 0 and draw(st.integers(0, 7)) == 0,
            }
        )
    placements: dict[str, Any] = {}
    for c in range(draw(st.integers(1, 3))):
        choice = draw(st.integers(0, 4))
        if choice == 0:  # plain string: RLinf's `cluster` group
            selected, label = None, None
        elif choice == 1:
            selected, label = None, draw(st.sampled_from(["cluster", "node"]))
        else:
            selected = draw(st.lists(st.sampled_from(groups), min_size=1, max_size=len(groups), unique_by=id))
            label = ",".join(g["label"] for g in selected)
        if label == "node":
            total = num_nodes
        elif selected is None:
            total = sum(node_gpus) or num_nodes
        else:
            total = sum(g["size"] * (1 if g["ignore"] or not g["gpus"] else g["gpus"]) for g in selected)
        kind = draw(st.integers(0, 5))
        text = draw(valid_looking(total))
        if kind == 0:
            text = draw(mutated(text))
        assume(not re.search(r"[0-9]{3}", text))  # keep process counts small
        placements[f"c{c}"] = text if label is None else {"node_group": label, "placement": text}
    slurm_groups = {g["label"]: {"partition": f"p{g['label']}", "gpus_per_node": g["gpus"]} for g in groups}
    config = {
        "cluster": {
            "num_nodes": num_nodes,
            "component_placement": placements,
            "node_groups": [
                {
                    "label": g["label"],
                    "node_ranks": g["node_ranks"],
                    **({"ignore_hardware": True} if g["ignore"] else {}),
                }
                for g in groups
            ],
        },
        "slurm": {"partition": "pdefault", "gpus_per_node": default_gpus, "node_groups": slurm_groups},
    }
    order = list(draw(st.permutations(range(num_nodes))))
    return json.dumps(config), node_gpus, order  # JSON is YAML


@SETTINGS
@given(rlinf_configs())
def test_random_placements_equal_rlinf(case: tuple[str, list[int], list[int]]) -> None:
    text, node_gpus, order = case
    ours = hpcplace_view(text)
    theirs = rlinf_view(text, node_gpus, order)
    event(
        f"hpcplace {'plans' if isinstance(ours, dict) else 'refuses'}, "
        f"RLinf {'places' if isinstance(theirs, dict) else 'refuses'}"
    )
    assert isinstance(ours, dict) == isinstance(theirs, dict), (
        f"hpcplace: {ours if isinstance(ours, str) else 'plans'}"
        f"\nRLinf: {theirs if isinstance(theirs, str) else 'places'}\n{text}"
    )
    if isinstance(ours, dict) and isinstance(theirs, dict):
        assert planned_gpus(ours) == node_gpus
        assert rlinf_mismatches(theirs, ours) == [], text


# ================================================================================================
# upstream structures, each against the RLinf class RLinf's entry scripts build for it

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


@pytest.mark.parametrize(
    "path, placement_class, engines",
    [
        (FIXTURES / "rlinf_sft.yaml", "HybridComponentPlacement", ()),  # examples/sft/train_*_sft.py
        (FIXTURES / "rlinf_eval.yaml", "ModelParallelEvalComponentPlacement", ()),  # examples/agent/searchr1/eval.py
        # examples/agent/wideseek_r1/train.py: engines through get_strategy(name, PackedPlacementStrategy)
        (FIXTURES / "rlinf_multiagent.yaml", "MultiAgentModelParallelComponentPlacement", ("rollout_judge",)),
        (
            FIXTURES / "rlinf_mp_collocated.yaml",
            "ModelParallelComponentPlacement",
            (),
        ),  # examples/reasoning/main_grpo.py
        (FIXTURES / "rlinf_mp_disaggregated.yaml", "ModelParallelComponentPlacement", ()),
        (FIXTURES / "rlinf-ray-hetero.yaml", "HybridComponentPlacement", ()),  # examples/embodiment/*.py
        # examples/embodiment/config/realworld_*: a robot group whose nodes have 2, 0 and 1 Franka arms
        (FIXTURES / "rlinf_robots_uneven.yaml", "HybridComponentPlacement", ()),
        (CONFIGS / "rlinf-hybrid.yaml", "HybridComponentPlacement", ()),
        (CONFIGS / "rlinf-collocated.yaml", "HybridComponentPlacement", ()),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else None,
)
def test_upstream_structures_equal_rlinf(path: Path, placement_class: str, engines: tuple[str, ...]) -> None:
    ours = json.loads(plan_to_json(plan_from_file(path)))
    theirs = rlinf_view(path.read_text(encoding="utf-8"), planned_gpus(ours), None, placement_class, engines)
    assert isinstance(theirs, dict), theirs
    assert rlinf_mismatches(theirs, ours) == []
