"""Where each of NeMo-RL's worker groups runs: what an algorithm's `setup()` asks of `RayVirtualCluster`,
read in NVIDIA-NeMo/RL 7ea279a (nemo_rl/algorithms/{grpo,opd,ppo,distillation,sft,dpo,rm,
xtoken_off_policy_distillation}.py, single_controller_utils/setup.py, nemo_rl/evals/eval.py).

Each worker holds one GPU (one bundle, in rank order); a vLLM/TRT-LLM engine is TP*PP consecutive bundles.
Algorithms with generation make one cluster (colocated: every group shares its GPUs) or a train and an
inference cluster (whole nodes, or a split of the one node). NeMo-RL's resource asserts are refused with
their reasons at the key that set the value."""

from __future__ import annotations

from dataclasses import dataclass

from hpcplace.config import limits
from hpcplace.config.spec import NAME_RE
from hpcplace.config.yaml_source import View, did_you_mean
from hpcplace.errors import SpecError

Slots = tuple[tuple[int, int], ...]  # each rank's (job node, GPU of the node)


@dataclass(frozen=True)
class Role:
    """One worker group: its pool (the RayVirtualCluster it runs on) and each rank's (node, GPU)."""

    name: str
    pool: str
    slots: Slots
    view: View  # the key that sized it: placement errors point there
    tp: int = 1
    pp: int = 1
    cluster: str = ""  # its RayVirtualCluster's name when it is its own (CLUSTERS names the fixed ones)
    # for the fabric check (ComponentSpec's fields): its MoE all-to-all (ETP x EP consecutive ranks; None without
    # expert parallelism) and one engine's GPUs where wider than its tensor-parallel group
    ep: int | None = None
    etp: int | None = None
    engine: int | None = None


@dataclass(frozen=True)
class Layout:
    """The job's nodes (each node's pool, in hpcplace's node order) and the roles placed on them."""

    node_pools: tuple[str, ...]
    gpus_per_node: int
    gpn_view: View
    roles: tuple[Role, ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Clusters:
    """The policy's train cluster and the inference cluster (the same GPUs when colocated)."""

    node_pools: tuple[str, ...]
    train: Slots
    gen: Slots
    gen_gpn: int  # the inference cluster's bundles per node
    colocated: bool
    extra: tuple[Role, ...] = ()  # the reward model environment's cluster


def _req(view: View, path: str) -> View:
    node = view
    for part in path.split("."):
        child = node.deref().get(part)
        if child is None:
            raise node.error(
                f"missing key {path!r} (NeMo-RL reads it to place its workers)",
                hint=f"set it in the config, or override it: {path}=...",
            )
        node = child
    return node.deref()


def _opt(view: View, path: str) -> View | None:
    node: View | None = view
    for part in path.split("."):
        if node is None or not isinstance(node.deref().value, dict):
            return None
        node = node.deref().get(part)
    return node.deref() if node is not None else None


def _int(view: View, minimum: int | None = None) -> int:
    return view.int(minimum=minimum)


def _enabled(view: View | None) -> bool:
    return view is not None and view.value is not None and view.bool()


def _per_node(n: int, gpus: range) -> Slots:
    return tuple((n, g) for g in gpus)


def _whole(first: int, nodes: int, gpus: int) -> Slots:
    return tuple((first + n, g) for n in range(nodes) for g in range(gpus))


def _cluster_size(root: View) -> tuple[View, View, int, int]:
    nodes_v, gpn_v = _req(root, "cluster.num_nodes"), _req(root, "cluster.gpus_per_node")
    total, gpn = _int(nodes_v, 1), _int(gpn_v, 1)
    limits.nodes(total, nodes_v.location(), "cluster.num_nodes")
    limits.gpus_per_node(gpn, gpn_v.location(), "cluster.gpus_per_node")
    return nodes_v, gpn_v, total, gpn


def model_parallel(
    cfg: View, world: int, where: View, key: str = "policy", mcore: View | None = None
) -> tuple[int, int]:
    """lm_policy.Policy / lm_value.Value: megatron's TP*PP*CP or DTensor's TP*CP must divide the world size.
    `mcore`: mcore_generation_config, whose keys win over megatron_cfg's (merged_inference_megatron_cfg)."""
    megatron = _enabled(_opt(cfg, "megatron_cfg.enabled"))
    dtensor = _enabled(_opt(cfg, "dtensor_cfg.enabled"))
    if megatron and dtensor:
        raise _req(cfg, "megatron_cfg.enabled").error(
            f"NeMo-RL refuses {key}.megatron_cfg.enabled and {key}.dtensor_cfg.enabled both true "
            "(configure either Megatron or DTensor, not both)"
        )
    if megatron:

        def mcfg(name: str) -> View:
            over = _opt(mcore, name) if mcore is not None else None
            return over if over is not None and over.value is not None else _req(cfg, f"megatron_cfg.{name}")

        tp_v = mcfg("tensor_model_parallel_size")
        tp, pp = _int(tp_v, 1), _int(mcfg("pipeline_model_parallel_size"), 1)
        cp = _int(mcfg("context_parallel_size"), 1)
    elif dtensor:
        tp_v = _req(cfg, "dtensor_cfg.tensor_parallel_size")
        tp, pp, cp = _int(tp_v, 1), 1, _int(_req(cfg, "dtensor_cfg.context_parallel_size"), 1)
    else:
        raise cfg.error(
            f"NeMo-RL refuses a {key} with neither {key}.megatron_cfg.enabled nor {key}.dtensor_cfg.enabled",
            hint=f"set {key}.dtensor_cfg.enabled=true or {key}.megatron_cfg.enabled=true",
        )
    size = tp * pp * cp
    if world < size or world % size:
        raise tp_v.error(
            f"the {key}'s {world} workers (one per GPU) are not a multiple of PP({pp}) * CP({cp}) * TP({tp}) = "
            f"{size}: NeMo-RL refuses it (world size must be divisible by PP * CP * TP)",
            hint=f"size {where.dotted()} so the {key}'s GPUs are a multiple of {size}, or reduce the parallelism",
        )
    return tp * cp, pp


def experts(cfg: View, mcore: View | None = None) -> tuple[int | None, int | None]:
    """(EP, ETP) of a policy-like section's MoE layers as its backend groups its ranks, (None, None) without expert
    parallelism. Megatron (models/megatron/setup.py _apply_moe_config): megatron_cfg's expert_model_parallel_size and
    expert_tensor_parallel_size, null ETP being Megatron-core's TP (parallel_state.initialize_model_parallel), not
    TP*CP; its all-to-all spans ETP x EP consecutive ranks. `mcore`: mcore_generation_config, whose keys win.
    DTensor v2 (models/automodel/setup.py: Automodel's create_device_mesh): dtensor_cfg.expert_parallel_size, the
    innermost dimension of the non-PP ranks with experts whole (ETP 1); DTensor v1 has no expert parallelism."""
    if _enabled(_opt(cfg, "megatron_cfg.enabled")):

        def mcfg(name: str) -> View | None:
            over = _opt(mcore, name) if mcore is not None else None
            view = over if over is not None and over.value is not None else _opt(cfg, f"megatron_cfg.{name}")
            return view if view is not None and view.value is not None else None

        ep_v = mcfg("expert_model_parallel_size")
        ep = _int(ep_v, 1) if ep_v is not None else 1
        if ep == 1:
            return None, None
        etp_v = mcfg("expert_tensor_parallel_size") or mcfg("tensor_model_parallel_size")
        return ep, _int(etp_v, 1) if etp_v is not None else 1
    if _enabled(_opt(cfg, "dtensor_cfg.enabled")) and _enabled(_opt(cfg, "dtensor_cfg._v2")):
        ep_v = _opt(cfg, "dtensor_cfg.expert_parallel_size")
        ep = _int(ep_v, 1) if ep_v is not None and ep_v.value is not None else 1
        return (ep, 1) if ep > 1 else (None, None)
    return None, None


def _engine_fabric(gen: View, backend: str, tp: int, pp: int) -> tuple[int | None, int | None, int | None]:
    """(EP, ETP, GPUs of an engine) of vLLM/Dynamo generation for the fabric check. An engine (one tied worker group:
    VllmGeneration, grpo.py's gpus_per_instance) is TP*PP consecutive GPUs; with expert_parallel_size > TP NeMo-RL
    runs EP/TP engines as one vLLM data-parallel group (VLLM_DP_SIZE, vllm_worker.py: its ranks are consecutive) whose
    MoE all-to-all spans EP GPUs with experts whole: EP, ETP 1 (EP = TP keeps it inside the engine)."""
    engine = tp * pp if pp > 1 else None  # as wide as its tensor-parallel group otherwise
    if backend not in ("vllm", "dynamo"):
        return None, None, engine
    ep_v = _opt(gen, "vllm_cfg.expert_parallel_size")
    ep = _int(ep_v, 1) if ep_v is not None and ep_v.value is not None else 1
    return (ep, 1, engine) if ep > 1 else (None, None, engine)


def _generation(gen: View) -> tuple[str, int, int, View]:
    """The generation backend and its engines' TP and PP (vLLM/TRT-LLM: *_cfg, SGLang: gpus per engine)."""
    backend_v = _req(gen, "backend")
    backend = backend_v.str()
    if backend in ("vllm", "trtllm"):
        cfg = f"{backend}_cfg"
        tp_v = _req(gen, f"{cfg}.tensor_parallel_size")
        pp_v = _opt(gen, f"{cfg}.pipeline_parallel_size")
        tp, pp = _int(tp_v, 1), (_int(pp_v, 1) if pp_v is not None and pp_v.value is not None else 1)
        if backend == "vllm" and pp > 1 and not _enabled(_opt(gen, f"{cfg}.async_engine")):
            raise (pp_v or tp_v).error(
                "NeMo-RL refuses vLLM pipeline_parallel_size > 1 without async_engine",
                hint=f"add {gen.dotted()}.vllm_cfg.async_engine=true",
            )
        if backend == "trtllm" and pp > 1:
            raise (pp_v or tp_v).error(
                f"NeMo-RL refuses TRT-LLM pipeline_parallel_size {pp}: the TRT-LLM backend does not support pipeline "
                "parallelism yet (it must be 1)"
            )
        ep_v = _opt(gen, f"{cfg}.expert_parallel_size")
        ep = _int(ep_v, 1) if ep_v is not None and ep_v.value is not None else 1
        if backend == "vllm" and ep > 1 and ep % tp:
            raise (ep_v or tp_v).error(
                f"NeMo-RL refuses vLLM expert_parallel_size {ep}: it must be a multiple of tensor_parallel_size {tp}"
            )
        if backend == "vllm" and ep > tp and _enabled(_opt(gen, f"{cfg}.async_engine")):
            raise (ep_v or tp_v).error(
                f"NeMo-RL refuses vLLM expert_parallel_size {ep} > tensor_parallel_size {tp} with async_engine: "
                "vLLM runs EP/TP engines as one data-parallel group then, which its async engine does not support",
                hint=f"set {gen.dotted()}.vllm_cfg.async_engine=false, or expert_parallel_size to 1 or {tp}",
            )
        return backend, tp, pp, tp_v
    if backend == "sglang":  # SGLangGeneration: sglang_server_config.num_gpus_per_engine
        per = _req(gen, "sglang_cfg.sglang_server_config.num_gpus_per_engine")
        return backend, _int(per, 1), 1, per
    if backend == "megatron":
        return backend, 1, 1, backend_v
    if backend == "dynamo":  # DynamoConfig (models/generation/dynamo/config.py): its vllm_cfg's TP and PP
        _refuse_enabled(
            _opt(gen, "colocated.enabled"),
            "NeMo-RL refuses policy.generation.colocated.enabled=true with policy.generation.backend='dynamo' "
            "(DynamoConfig: it must be false; managed Dynamo runs on its own inference cluster)",
            "set policy.generation.colocated.enabled=false and size colocated.resources",
        )
        tp_v = _req(gen, "vllm_cfg.tensor_parallel_size")
        tp, pp = _int(tp_v, 1), _int(_req(gen, "vllm_cfg.pipeline_parallel_size"), 1)
        ep_v = _req(gen, "vllm_cfg.expert_parallel_size")
        if _int(ep_v, 1) not in (1, tp):
            raise ep_v.error(
                f"NeMo-RL refuses expert_parallel_size {_int(ep_v, 1)}: backend='dynamo' requires "
                f"expert_parallel_size to be 1 or equal tensor_parallel_size ({tp})"
            )
        return backend, tp, pp, tp_v
    raise backend_v.error(
        f"generation backend {backend!r} is not planned by hpcplace"
        + did_you_mean(backend, ("vllm", "sglang", "trtllm", "megatron", "dynamo")),
        hint="hpcplace plans vllm, sglang, trtllm, megatron and dynamo generation",
    )


def _refuse_enabled(view: View | None, message: str, hint: str) -> None:
    """A setting NeMo-RL refuses when true, refused at its key."""
    if view is not None and _enabled(view):
        raise view.error(message, hint=hint)


def _only(backend_v: View, backend: str, allowed: tuple[str, ...], why: str) -> None:
    """An algorithm's own refusal of a backend, at `policy.generation.backend`."""
    if backend not in allowed:
        raise backend_v.error(why, hint="use " + " or ".join(allowed) + " generation")


def _data_configs(root: View) -> list[View]:
    out: list[View] = []
    for key in ("train", "validation", "default"):
        view = _opt(root, f"data.{key}")
        if view is None:
            continue
        if isinstance(view.value, list):
            out.extend(v.deref() for v in view.elements())
        elif isinstance(view.value, dict):
            out.append(view)
    return out


def _clusters(root: View, algorithm: str, teacher_nodes: int = 0, teachers_v: View | None = None) -> _Clusters:
    """The train and inference clusters of grpo.py / ppo.py / distillation.py setup() (single_controller has
    its own: _sc_clusters): the reward model environment's nodes (GRPO, PPO), then colocated or split.
    `teacher_nodes`: GRPO's non-colocated OPD teachers' nodes, taken from the policy's (after them in the
    plan's node order, before the reward model's)."""
    _, gpn_v, total, gpn = _cluster_size(root)
    rm = algorithm in ("grpo", "ppo") and any(
        (v := _opt(c, "env_name")) is not None and str(v.value) == "reward_model" for c in _data_configs(root)
    )
    rm_nodes = rm_gpn = 0
    rm_nodes_v = rm_gpn_v = None
    if rm:
        rm_nodes_v = _req(root, "env.reward_model.resources.num_nodes")
        rm_gpn_v = _req(root, "env.reward_model.resources.gpus_per_node")
        rm_nodes, rm_gpn = _int(rm_nodes_v, 0), _int(rm_gpn_v, 0)
    if total == 1:
        policy_nodes = 1
    else:
        policy_nodes = total - rm_nodes
        if policy_nodes <= 0:
            assert rm_nodes_v is not None
            raise rm_nodes_v.error(
                f"NeMo-RL asserts policy_nodes > 0: cluster.num_nodes {total} - reward model nodes {rm_nodes} = "
                f"{policy_nodes}",
                hint="give the cluster more nodes than the reward model takes",
            )
    policy_nodes -= teacher_nodes
    if teacher_nodes and policy_nodes <= 0:
        assert teachers_v is not None
        raise teachers_v.error(
            f"NeMo-RL asserts policy_nodes > 0 after reserving OPD teacher nodes: cluster.num_nodes {total}"
            + (f" - reward model {rm_nodes}" if total > 1 and rm_nodes else "")
            + f" - teachers {teacher_nodes} = {policy_nodes}",
            hint="give the cluster more nodes than the teachers (and the reward model) take",
        )
    teacher_pools = ["teacher"] * teacher_nodes
    colocated = _req(root, "policy.generation.colocated.enabled").bool()
    rm_role: tuple[Role, ...] = ()
    if colocated:
        if total == 1:
            policy_gpn = gpn - rm_gpn
            if policy_gpn <= 0:
                assert rm_gpn_v is not None
                raise rm_gpn_v.error(
                    f"NeMo-RL asserts the policy's GPUs on the one node are > 0: cluster.gpus_per_node {gpn} - "
                    f"reward model gpus_per_node {rm_gpn} = {policy_gpn}",
                    hint="leave the policy at least one GPU of the node",
                )
            train = _per_node(0, range(policy_gpn))
            pools = ["training"]
            if rm:
                rm_role = (
                    Role("reward_model", "reward_model", _per_node(0, range(policy_gpn, gpn)), rm_gpn_v or gpn_v),
                )
        else:
            train = _whole(0, policy_nodes, gpn)
            pools = ["training"] * policy_nodes + teacher_pools + ["reward_model"] * rm_nodes
            if rm:
                rm_role = (
                    Role(
                        "reward_model",
                        "reward_model",
                        _whole(policy_nodes + teacher_nodes, rm_nodes, rm_gpn),
                        rm_gpn_v or gpn_v,
                    ),
                )
        return _Clusters(tuple(pools), train, train, gpn if total > 1 else len(train), True, rm_role)
    res = "policy.generation.colocated.resources"
    inf_gpn_v, inf_nodes_v = _req(root, f"{res}.gpus_per_node"), _req(root, f"{res}.num_nodes")
    inf_gpn = None if inf_gpn_v.value is None else _int(inf_gpn_v)
    inf_nodes = None if inf_nodes_v.value is None else _int(inf_nodes_v)
    if policy_nodes == 1:
        if inf_gpn is None or inf_gpn <= 0:
            raise inf_gpn_v.error(
                f"NeMo-RL asserts {res}.gpus_per_node is set and > 0 when the policy has one node and "
                f"generation is not colocated, got {inf_gpn}",
                hint=f"set {res}.gpus_per_node to the GPUs of the node that generation takes",
            )
        if inf_nodes not in (None, 1):
            raise inf_nodes_v.error(
                f"NeMo-RL asserts {res}.num_nodes is 1 or null when the policy has one node and generation "
                f"is not colocated, got {inf_nodes}"
            )
        sub = rm_gpn if total == 1 and rm else 0
        train_gpn = gpn - inf_gpn - sub
        if train_gpn <= 0:
            raise inf_gpn_v.error(
                f"NeMo-RL asserts GPUs are left for training: cluster.gpus_per_node {gpn} - generation "
                f"{inf_gpn}" + (f" - reward model {sub}" if sub else "") + f" = {train_gpn}",
                hint="give generation fewer GPUs of the node",
            )
        pools = ["training", *teacher_pools]
        if rm and total == 1:
            rm_slots = _per_node(0, range(train_gpn + inf_gpn, gpn))
            rm_role = (Role("reward_model", "reward_model", rm_slots, rm_gpn_v or gpn_v),)
        elif rm:
            pools += ["reward_model"] * rm_nodes
            rm_role = (
                Role("reward_model", "reward_model", _whole(1 + teacher_nodes, rm_nodes, rm_gpn), rm_gpn_v or gpn_v),
            )
        train, gen = _per_node(0, range(train_gpn)), _per_node(0, range(train_gpn, train_gpn + inf_gpn))
        return _Clusters(tuple(pools), train, gen, inf_gpn, False, rm_role)
    if inf_nodes is None or inf_nodes <= 0:
        raise inf_nodes_v.error(
            f"NeMo-RL asserts {res}.num_nodes > 0 when cluster.num_nodes > 1 and generation is not "
            f"colocated, got {inf_nodes}",
            hint=f"set {res}.num_nodes to the nodes generation takes",
        )
    if inf_gpn != gpn:
        raise inf_gpn_v.error(
            f"NeMo-RL asserts {res}.gpus_per_node is set and equal to cluster.gpus_per_node ({gpn}) when "
            f"cluster.num_nodes > 1 and generation is not colocated, got {inf_gpn}",
            hint=f"set {res}.gpus_per_node={gpn}: non-colocated generation takes whole nodes",
        )
    train_nodes = policy_nodes - inf_nodes
    if train_nodes <= 0:
        raise inf_nodes_v.error(
            f"NeMo-RL asserts train_nodes > 0: cluster.num_nodes {total}"
            + (f" - reward model {rm_nodes}" if rm_nodes else "")
            + f" - generation {inf_nodes} = {train_nodes}",
            hint="give the cluster more nodes than generation takes",
        )
    pools = ["training"] * train_nodes + ["generation"] * inf_nodes + teacher_pools + ["reward_model"] * rm_nodes
    if rm:
        rm_role = (
            Role(
                "reward_model",
                "reward_model",
                _whole(policy_nodes + teacher_nodes, rm_nodes, rm_gpn),
                rm_gpn_v or gpn_v,
            ),
        )
    return _Clusters(
        tuple(pools), _whole(0, train_nodes, gpn), _whole(train_nodes, inf_nodes, gpn), gpn, False, rm_role
    )


def _sc_clusters(root: View) -> _Clusters:
    """single_controller_utils/setup.py _build_clusters: one cluster when colocated, else the one node split
    or `num_nodes - resources.num_nodes` training nodes (no reward model cluster, no equal-GPUs assert)."""
    _, _, total, gpn = _cluster_size(root)
    if _req(root, "policy.generation.colocated.enabled").bool():
        slots = _whole(0, total, gpn)
        return _Clusters(("training",) * total, slots, slots, gpn, True)
    res = "policy.generation.colocated.resources"
    inf_gpn_v, inf_nodes_v = _req(root, f"{res}.gpus_per_node"), _req(root, f"{res}.num_nodes")
    if inf_gpn_v.value is None:
        raise inf_gpn_v.error(
            f"NeMo-RL refuses non-colocated generation without {res}.gpus_per_node (ValueError)",
            hint=f"set {res}.gpus_per_node",
        )
    inf_gpn = _int(inf_gpn_v, 1)
    inf_nodes = (_int(inf_nodes_v, 0) if inf_nodes_v.value is not None else 0) or 1
    if inf_gpn > gpn:
        raise inf_gpn_v.error(
            f"the inference cluster asks {inf_gpn} GPUs of each node, which has {gpn} (cluster.gpus_per_node): "
            "Ray cannot place such a placement group and NeMo-RL would wait for it forever",
            hint=f"set {res}.gpus_per_node to at most {gpn}",
        )
    if total == 1:
        if inf_nodes != 1:
            raise inf_nodes_v.error(
                f"the one node cannot hold an inference cluster of {inf_nodes} nodes: Ray would never place it",
                hint=f"set {res}.num_nodes=1, or give the cluster more nodes",
            )
        train_gpn = gpn - inf_gpn
        if train_gpn <= 0:
            raise inf_gpn_v.error(
                f"NeMo-RL asserts GPUs are left for training: {gpn} - {inf_gpn} = {train_gpn}",
                hint="give generation fewer GPUs of the node",
            )
        return _Clusters(
            ("training",), _per_node(0, range(train_gpn)), _per_node(0, range(train_gpn, gpn)), inf_gpn, False
        )
    train_nodes = total - inf_nodes
    if train_nodes <= 0:
        raise inf_nodes_v.error(
            f"NeMo-RL asserts train_nodes > 0: cluster.num_nodes {total} - generation {inf_nodes} = {train_nodes}",
            hint="give the cluster more nodes than generation takes",
        )
    return _Clusters(
        ("training",) * train_nodes + ("generation",) * inf_nodes,
        _whole(0, train_nodes, gpn),
        _whole(train_nodes, inf_nodes, inf_gpn),
        inf_gpn,
        False,
    )


def _engines(gen: Slots, gen_gpn: int, mp: int, view: View, backend: str, colocated: bool, notes: list[str]) -> None:
    """VllmGeneration / TrtllmGeneration: TP*PP consecutive bundles an engine, per node or one unified group."""
    if len(gen) % mp:
        raise view.error(
            f"NeMo-RL refuses generation on {len(gen)} GPUs with TP*PP = {mp}: the world size must be a multiple "
            "of the model parallel size",
            hint="change the engines' parallelism or the generation GPUs",
        )
    if mp <= gen_gpn and gen_gpn % mp:
        raise view.error(
            f"generation TP*PP = {mp} does not divide the {gen_gpn} GPUs of each generation node: NeMo-RL fills "
            f"each node's placement group with {gen_gpn // mp} engine(s), leaves {gen_gpn % mp} GPU(s) idle and "
            "asserts (data parallel size mismatch)",
            hint=f"make TP*PP a divisor of {gen_gpn}, or larger than it (engines spanning nodes)",
        )
    if mp > gen_gpn and colocated and backend == "trtllm":
        raise view.error(
            f"NeMo-RL refuses TRT-LLM engines of TP {mp} over {gen_gpn}-GPU nodes with colocated generation "
            "(cross-node tensor parallelism is only supported for non-colocated generation)",
            hint="use a TP that fits a node, or policy.generation.colocated.enabled=false",
        )
    if mp > gen_gpn:
        notes.append(
            f"generation engines span nodes (TP*PP {mp} > {gen_gpn} GPUs per node): NeMo-RL makes one placement "
            "group for them and orders its bundles by (topo_rank, GPU id); hpcplace's raylets carry topo_rank = "
            "node rank + 1, so engine e takes the plan's nodes in node rank order"
        )


def _dynamo_engines(gen_gpn: int, mp: int, view: View, notes: list[str]) -> None:
    """FixedDynamoWorkerPool (models/generation/dynamo/worker_pool.py): per placement group of the inference
    cluster (one per node), an engine of TP*PP consecutive bundles at a time, each bundle held by a one-GPU
    reservation actor and the engine run by one DynamoVllmWorker on its first; an engine never spans nodes."""
    if mp > gen_gpn:
        raise view.error(
            f"NeMo-RL's managed Dynamo requires each TP/PP engine group to fit on one node: tp*pp={mp} exceeds "
            f"cluster.num_gpus_per_node={gen_gpn} (of the inference cluster)",
            hint=f"make TP*PP at most {gen_gpn}, or use the vllm backend (engines spanning nodes)",
        )
    if gen_gpn % mp:
        raise view.error(
            f"NeMo-RL's managed Dynamo: the inference placement group has {gen_gpn} GPU bundles, which is not "
            f"divisible by engine_world_size={mp}",
            hint=f"make TP*PP a divisor of {gen_gpn}",
        )
    notes.append(
        f"generation backend dynamo: one managed Dynamo vLLM worker per engine of {mp} consecutive GPU(s) of a "
        "generation node (a one-GPU reservation actor holds each); the driver runs etcd, NATS and the Dynamo "
        "frontend as its own subprocesses, on the driver's node"
    )


def _sglang(root: View, gen: Slots, gen_gpn: int, per: int, notes: list[str]) -> Slots:
    """SGLangGeneration: one PACK placement group over the generation cluster, bundles sorted by (topo_rank, GPU
    id), topo_rank being node rank + 1 on hpcplace's raylets; num_gpus // min(num_gpus_per_engine, GPUs per node)
    engines take the first bundles."""
    num_v = _req(root, "policy.generation.sglang_cfg.sglang_server_config.num_gpus")
    num = _int(num_v, 1)
    local = min(per, gen_gpn)
    used = (num // local) * local
    if used > len(gen) or used == 0:
        raise num_v.error(
            f"SGLang's {num} GPUs make {num // local} engine(s) of {local} GPU(s) per node, but the generation "
            f"cluster has {len(gen)} GPUs",
            hint=f"set sglang_server_config.num_gpus to at most {len(gen)} (and at least {local})",
        )
    notes.append(
        f"SGLang: {num // local} engine(s) on the first {used} of the generation cluster's {len(gen)} GPUs; NeMo-RL "
        "orders them by (topo_rank, GPU id) in one placement group: the plan's node order (hpcplace's raylets carry "
        "topo_rank = node rank + 1)"
    )
    return gen[:used]


def _generation_role(root: View, c: _Clusters, notes: list[str]) -> Role | None:
    """The generation workers on the inference cluster, as the backend's class makes them; None when the
    policy's own workers generate (colocated Megatron)."""
    gen_root = _req(root, "policy.generation")
    backend, gtp, gpp, gview = _generation(gen_root)
    pool = "training" if c.colocated else "generation"
    if backend == "megatron":
        if c.colocated:
            notes.append(
                "generation backend megatron: the policy's own workers generate (no separate generation workers)"
            )
            return None
        # MegatronGeneration(cluster=inference_cluster): a dedicated inference Policy ("megatron_generation")
        # of one worker per bundle, megatron_cfg merged with mcore_generation_config
        mcore = _opt(gen_root, "mcore_generation_config")
        where = _req(gen_root, "colocated.resources")
        tp, pp = model_parallel(_req(root, "policy"), len(c.gen), where, "generation", mcore)
        ep, etp = experts(_req(root, "policy"), mcore)
        notes.append(
            f"generation backend megatron, not colocated: a dedicated inference Policy of {len(c.gen)} Megatron "
            f"workers (TP {tp}, PP {pp}) on the inference cluster, weights refit from the training workers"
        )
        return Role("generation", pool, c.gen, gview, tp, pp, ep=ep, etp=etp)
    gen = c.gen
    if backend == "sglang":
        gen = _sglang(root, gen, c.gen_gpn, gtp, notes)
    elif backend == "dynamo":
        _dynamo_engines(c.gen_gpn, gtp * gpp, gview, notes)
    else:
        _engines(gen, c.gen_gpn, gtp * gpp, gview, backend, c.colocated, notes)
    ep, etp, engine = _engine_fabric(gen_root, backend, gtp, gpp)
    return Role("generation", pool, gen, gview, gtp, gpp, ep=ep, etp=etp, engine=engine)


def _on_train(root: View, c: _Clusters, name: str, key: str) -> Role:
    """A Policy (or Value) worker group of the config's `key` section on the train cluster."""
    nodes_v = _req(root, "cluster.num_nodes")
    tp, pp = model_parallel(_req(root, key), len(c.train), nodes_v, key)
    ep, etp = experts(_req(root, key))
    return Role(name, "training", c.train, nodes_v, tp, pp, ep=ep, etp=etp)


def _layout(root: View, c: _Clusters, roles: list[Role | None], notes: list[str]) -> Layout:
    gpn_v = _req(root, "cluster.gpus_per_node")
    placed = tuple(r for r in roles if r is not None) + c.extra
    return Layout(c.node_pools, _int(gpn_v, 1), gpn_v, placed, tuple(notes))


def _no_gym_nodes(root: View) -> None:
    """env.nemo_gym.num_gpu_nodes: NeMo-Gym's GPU services on nodes outside NeMo-RL's clusters."""
    gym = _opt(root, "env.nemo_gym.num_gpu_nodes")
    if gym is not None and gym.value:
        raise gym.error(
            f"NeMo-Gym's own GPU services on {gym.value} more node(s) are placed by NeMo-Gym, not by NeMo-RL's "
            "clusters: hpcplace does not plan them",
            hint="plan the job with env.nemo_gym.num_gpu_nodes=0",
        )


_TEACHER_DEFAULTS = {  # opd.py TeacherResourceConfig
    "tensor_model_parallel_size": 1,
    "pipeline_model_parallel_size": 1,
    "context_parallel_size": 1,
    "num_nodes": 1,
    "gpus_per_node": 8,
}


@dataclass(frozen=True)
class _Teacher:
    """One non-colocated OPD teacher: its alias, cluster `teacher_<alias>` of num_nodes x gpus_per_node."""

    alias: str
    view: View  # its entry of teacher_model_by_agent_name
    num_nodes: int
    gpus_per_node: int
    tp: int
    pp: int


def _teacher_field(name: str, sections: tuple[View | None, ...], fallback: View) -> tuple[int, View]:
    """A teacher's resource: the first section that sets it (its override, then the default), else
    TeacherResourceConfig's default (located at the teacher's alias)."""
    for section in sections:
        view = _opt(section, name) if section is not None else None
        if view is not None and view.value is not None:
            return _int(view, 1), view
    return _TEACHER_DEFAULTS[name], fallback


def _opd_teachers(root: View, gpn: int) -> list[_Teacher]:
    """create_teacher_configs_from_opd_config: one teacher per alias of teacher_model_by_agent_name (aliases
    sharing a checkpoint give one, with deduplicate_shared_teacher_checkpoints), its resources
    default_teacher_cfg updated by teacher_overrides[alias]; TeacherWorkerGroup's world-size rule."""
    opd = _req(root, "on_policy_distillation")
    names = _req(opd, "teacher_model_by_agent_name")
    dedupe_v = _opt(opd, "deduplicate_shared_teacher_checkpoints")
    dedupe = True if dedupe_v is None or dedupe_v.value is None else dedupe_v.bool()
    default = _opt(opd, "non_colocated_teachers.default_teacher_cfg")
    overrides = _opt(opd, "non_colocated_teachers.teacher_overrides")
    seen: set[str] = set()
    out: list[_Teacher] = []
    for alias, model in names.items():
        model_name = model.deref().str()
        if dedupe and model_name in seen:
            continue
        seen.add(model_name)
        if not NAME_RE.match(f"teacher_{alias}"):
            raise model.key_error(
                f"teacher alias {alias!r} cannot name a component (teacher_<alias>): hpcplace's component names are "
                "letters, digits, `_`, `.` and `-`",
                hint="rename the alias",
            )
        sections = (_opt(overrides, str(alias)) if overrides is not None else None, default)
        nodes, nodes_v = _teacher_field("num_nodes", sections, model)
        tgpn, tgpn_v = _teacher_field("gpus_per_node", sections, model)
        if tgpn > gpn:
            raise tgpn_v.error(
                f"NeMo-RL asserts OPD teacher {alias!r}'s gpus_per_node {tgpn} <= cluster.gpus_per_node {gpn}: each "
                "teacher placement group must fit on one node"
            )
        (tp, tp_v), (pp, _), (cp, _) = (
            _teacher_field(k, sections, model) for k in _TEACHER_DEFAULTS if k.endswith("parallel_size")
        )
        world = nodes * tgpn
        if world % (tp * pp * cp):
            raise tp_v.error(
                f"NeMo-RL refuses teacher {alias!r}: world_size ({world}) not divisible by TP({tp}) * PP({pp}) * "
                f"CP({cp}) = {tp * pp * cp}",
                hint=f"size its num_nodes x gpus_per_node ({nodes_v.dotted()}) to a multiple of {tp * pp * cp}",
            )
        out.append(_Teacher(str(alias), model, nodes, tgpn, tp * cp, pp))
    return out


def grpo_layout(root: View) -> Layout:
    """grpo.py setup(): policy on the train cluster, generation on the inference cluster; non-colocated
    on-policy-distillation teachers (opd.reserve_teacher_clusters) on nodes taken from the policy's."""
    _no_gym_nodes(root)
    notes: list[str] = []
    opd = _opt(root, "on_policy_distillation.non_colocated_teachers.enabled")
    teachers: list[_Teacher] = []
    if _enabled(_opt(root, "on_policy_distillation.enabled")) and _enabled(opd):
        assert opd is not None
        gen = _req(root, "policy.generation")
        backend = _req(gen, "backend").str()
        flag = {"vllm": "vllm_cfg.async_engine", "sglang": "use_async_rollouts"}.get(backend)
        if flag is not None and not _enabled(_opt(gen, flag)):
            raise opd.error(
                "NeMo-RL asserts non-colocated OPD teachers require async GRPO (vLLM backend with async_engine "
                f"enabled); policy.generation.{flag} is not true",
                hint=f"set policy.generation.{flag}=true",
            )
        teachers = _opd_teachers(root, _int(_req(root, "cluster.gpus_per_node"), 1))
    if _req(root, "policy.generation.backend").str() == "dynamo":
        _refuse_enabled(
            _opt(root, "grpo.async_grpo.in_flight_weight_updates"),
            "NeMo-RL refuses grpo.async_grpo.in_flight_weight_updates=true with policy.generation.backend='dynamo' "
            "(managed Dynamo drains rollouts before layerwise weight refit)",
            "set grpo.async_grpo.in_flight_weight_updates=false",
        )
    c = _clusters(root, "grpo", sum(t.num_nodes for t in teachers), opd)
    roles = [_on_train(root, c, "policy", "policy"), _generation_role(root, c, notes)]
    first = c.node_pools.index("teacher") if teachers else 0
    for t in teachers:
        slots = _whole(first, t.num_nodes, t.gpus_per_node)
        roles.append(Role(f"teacher_{t.alias}", "teacher", slots, t.view, t.tp, t.pp, cluster=f"teacher_{t.alias}"))
        first += t.num_nodes
        notes.append(
            f"on-policy distillation teacher {t.alias!r}: cluster teacher_{t.alias} of {t.num_nodes} node(s) x "
            f"{t.gpus_per_node} GPU(s), Megatron TP {t.tp} PP {t.pp}"
        )
    return _layout(root, c, roles, notes)


def ppo_layout(root: View) -> Layout:
    """ppo.py setup(): policy and the value model ("lm_value") on the train cluster, vLLM or SGLang on the
    inference cluster, the reward model environment's cluster as GRPO's."""
    notes: list[str] = []
    backend_v = _req(root, "policy.generation.backend")
    backend = backend_v.str()
    colocated = _req(root, "policy.generation.colocated.enabled").bool()
    if not colocated:
        _only(
            backend_v,
            backend,
            ("vllm",),
            f"NeMo-RL's PPO refuses non-colocated {backend!r} generation "
            "(NotImplementedError: non-colocated PPO generation currently supports only vLLM)",
        )
    _only(backend_v, backend, ("vllm", "sglang"), f"NeMo-RL's PPO requires vllm or sglang generation, got {backend!r}")
    c = _clusters(root, "ppo")
    value = _on_train(root, c, "value", "value")
    if not _enabled(_opt(root, "value.megatron_cfg.enabled")) and not _enabled(_opt(root, "value.dtensor_cfg._v2")):
        raise _req(root, "value.dtensor_cfg").error(
            "NeMo-RL refuses a DTensor value model without value.dtensor_cfg._v2=true"
        )
    return _layout(root, c, [_on_train(root, c, "policy", "policy"), value, _generation_role(root, c, notes)], notes)


def distillation_layout(root: View) -> Layout:
    """distillation.py setup(): the teacher and the student on the train cluster, the student's vLLM generation
    on the inference cluster (Megatron: the student generates, colocated only)."""
    notes: list[str] = []
    backend_v = _req(root, "policy.generation.backend")
    backend = backend_v.str()
    if backend == "megatron" and not _req(root, "policy.generation.colocated.enabled").bool():
        raise backend_v.error(
            "NeMo-RL asserts non-colocated inference is not supported for Megatron generation backends in distillation",
            hint="use the vllm backend, or policy.generation.colocated.enabled=true",
        )
    _only(
        backend_v,
        backend,
        ("vllm", "megatron"),
        f"NeMo-RL's distillation makes generation only for vllm or "
        f"megatron; with {backend!r} its setup() never sets the student's generation",
    )
    _no_gym_nodes(root)
    c = _clusters(root, "distillation")
    roles = [_on_train(root, c, "teacher", "teacher"), _on_train(root, c, "policy", "policy")]
    return _layout(root, c, [*roles, _generation_role(root, c, notes)], notes)


def single_controller_layout(root: View) -> Layout:
    """single_controller_utils/setup.py: the trainer (TQPolicy) on the train cluster, vLLM or SGLang."""
    notes: list[str] = []
    backend_v = _req(root, "policy.generation.backend")
    backend = backend_v.str()
    if backend == "megatron" and not _req(root, "policy.generation.colocated.enabled").bool():
        raise backend_v.error(
            "NeMo-RL asserts the Megatron generation backend does not support non-colocated inference in "
            "SingleController",
            hint="use vllm or sglang generation",
        )
    _only(
        backend_v,
        backend,
        ("vllm", "sglang"),
        f"NeMo-RL's single controller only supports vllm or sglang generation, got {backend!r} (ValueError)",
    )
    c = _sc_clusters(root)
    return _layout(root, c, [_on_train(root, c, "policy", "policy"), _generation_role(root, c, notes)], notes)


def eval_layout(root: View) -> Layout:
    """evals/eval.py setup(): vLLM on one cluster of cluster.gpus_per_node bundles on each node."""
    _, gpn_v, total, gpn = _cluster_size(root)
    gen_root = _req(root, "generation")
    backend_v = _req(gen_root, "backend")
    _only(backend_v, backend_v.str(), ("vllm",), "NeMo-RL asserts only the vLLM backend is supported for evaluation")
    _, tp, pp, view = _generation(gen_root)
    _req(gen_root, "colocated.enabled").bool()  # VllmGeneration reads it: PACK groups when false
    notes: list[str] = []
    slots = _whole(0, total, gpn)
    _engines(slots, gpn, tp * pp, view, "vllm", True, notes)
    ep, etp, engine = _engine_fabric(gen_root, "vllm", tp, pp)
    role = Role("generation", "generation", slots, view, tp, pp, ep=ep, etp=etp, engine=engine)
    return Layout(("generation",) * total, gpn, gpn_v, (role,), tuple(notes))


def xtoken_layout(root: View) -> Layout:
    """xtoken_off_policy_distillation.py setup(): one cluster; teacher_<i> for each of `teachers`, then the
    student, each one worker per GPU (DTensor V2 only)."""
    nodes_v, gpn_v, total, gpn = _cluster_size(root)
    slots = _whole(0, total, gpn)
    teachers_v = _req(root, "teachers")
    if not isinstance(teachers_v.value, list) or not teachers_v.value:
        raise teachers_v.error("NeMo-RL requires `teachers` to be a list of at least one teacher config")
    roles: list[Role] = []
    for i, teacher in enumerate(teachers_v.elements()):
        teacher = teacher.deref()
        tp, pp = model_parallel(teacher, len(slots), nodes_v, f"teachers[{i}]")
        ep, etp = experts(teacher)
        roles.append(Role(f"teacher_{i}", "training", slots, teacher, tp, pp, ep=ep, etp=etp))
    tp, pp = model_parallel(_req(root, "policy"), len(slots), nodes_v)
    ep, etp = experts(_req(root, "policy"))
    roles.append(Role("policy", "training", slots, _req(root, "policy"), tp, pp, ep=ep, etp=etp))
    return Layout(("training",) * total, gpn, gpn_v, tuple(roles))


def single_cluster_layout(root: View) -> Layout:
    """sft.py/dpo.py/rm.py setup(): one cluster of cluster.gpus_per_node bundles on each of num_nodes."""
    nodes_v, gpn_v, total, gpn = _cluster_size(root)
    slots = _whole(0, total, gpn)
    tp, pp = model_parallel(_req(root, "policy"), len(slots), nodes_v)
    ep, etp = experts(_req(root, "policy"))
    return Layout(
        ("training",) * total, gpn, gpn_v, (Role("policy", "training", slots, nodes_v, tp, pp, ep=ep, etp=etp),)
    )


LAYOUTS = {
    "grpo": grpo_layout,
    "ppo": ppo_layout,
    "distillation": distillation_layout,
    "single_controller": single_controller_layout,
    "eval": eval_layout,
    "xtoken": xtoken_layout,
    "sft": single_cluster_layout,
    "dpo": single_cluster_layout,
    "rm": single_cluster_layout,
}


def layout(root: View, algorithm: str) -> Layout:
    """The layout of `algorithm`'s setup() for the config `root`."""
    if algorithm not in LAYOUTS:
        raise SpecError(f"no NeMo-RL algorithm {algorithm!r}")
    return LAYOUTS[algorithm](root)
