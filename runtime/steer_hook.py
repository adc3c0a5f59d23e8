"""hpcplace's steering hook: the framework's own Ray requests, each pinned to its planned node.

verl, NeMo-RL, OpenRLHF and slime ask Ray for placement groups of `{CPU, GPU}` bundles (and OpenRLHF, with
one GPU per node, for bare 1-GPU actors) that name no node: Ray would choose. The plan says which node each
one is for (plan.json's `steer` rules, written by the format's planner). This module, copied into the run
directory as ray/steer/sitecustomize.py and put first on PYTHONPATH of the driver and of every raylet (so of
every Ray worker: verl makes its groups in its TaskRunner actor), adds to each such bundle (or actor) the
custom resource `hpcplace_node_<rank>: 0.001` that only the planned node's raylet advertises
(runtime/ray_node.py). Custom resources are honoured by every Ray release and placement strategy
(STRICT_PACK included; bundle label selectors are not, before Ray 2.5x), and they add to what the framework
asks: a bundle's own resources and label selectors stay as they are.

How requests are recognised (steer rules, hpcplace/config/steer.py):
- by name, a regular expression on the placement group's name (verl `<pool>verl_group_<counts>:<i>`, NeMo-RL
  `<cluster>-node<i>` / `<cluster>-unified`); pin "group": every bundle of group i on nodes[i], pin "bundle":
  bundle k on nodes[k];
- unnamed, by the order the driver makes them (OpenRLHF, slime): the n-th unnamed placement group with GPU
  bundles made in a Ray driver process, if its bundle count is the plan's;
- actors by class name (pin "rank": the actor whose constructor's `rank_arg`-th argument is r on nodes[r]),
  only when the actor names no placement group or scheduling strategy of its own.

Never silently overridden: a bundle (or actor) that already asks for an `hpcplace_node_*` or `ng_*` resource is
left as the user wrote it; a request whose size differs from the plan's is not steered. Every decision is a
line in ray/steer/steer.log (the run directory), and a steered group still pending after 120 s
(HPCPLACE_STEER_PENDING_S) is said there and on stderr: its pinned node lacks what it asks for. A failure inside
the hook never fails the framework's call: the request goes to Ray unchanged, and the log says why (the driver
step's checks stay as the backstop).

Then the next sitecustomize on sys.path (a site's or a test's) runs as it would have. Stdlib only, Python 3.8+:
it runs in every Python the job starts, whatever that Python has installed.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

ENV = "HPCPLACE_STEER"  # the steer table (ray/steer/steer.json); unset: the hook does nothing
NODE_RESOURCE = "hpcplace_node_"  # + cluster node rank: each raylet advertises its own, 1
GROUP_RESOURCE = "ng_"  # + node group label: each raylet advertises its group's, 1
PIN = 0.001  # per bundle or actor: a node holds 1000 of them
PENDING_S = float(os.environ.get("HPCPLACE_STEER_PENDING_S") or 120)  # then a steered group still waiting is said
PLACEMENT_MODULE = "ray.util.placement_group"
ACTOR_MODULE = "ray.actor"


def node_resource(rank: int) -> str:
    return f"{NODE_RESOURCE}{rank}"


def user_pinned(resources: Mapping[str, Any]) -> bool:
    """The request already names an hpcplace node or node group: the user's pin is kept."""
    return any(str(k).startswith((NODE_RESOURCE, GROUP_RESOURCE)) for k in resources)


def wants_gpu(bundles: Sequence[Mapping[str, Any]]) -> bool:
    return any(float(b.get("GPU") or 0) > 0 for b in bundles)


def _nodes_text(nodes: Sequence[int]) -> str:
    return ",".join(str(n) for n in nodes)


def pin_targets(rule: Mapping[str, Any], name: str, count: int, ordinal: int | None) -> tuple[list[int] | None, str]:
    """The node rank of each of `count` bundles of a placement group named `name` (the `ordinal`-th unnamed
    GPU group of a driver; None elsewhere) under `rule`: (targets, '') when the rule steers it, (None, why)
    when it matches but cannot (said in the log), (None, '') when it does not match."""
    import re

    nodes = [int(n) for n in rule["nodes"]]
    what = str(rule.get("what") or "a planned request")
    if rule.get("name"):
        found = re.fullmatch(str(rule["name"]), name)
        if found is None:
            return None, ""
        if rule.get("pin") == "group":
            groups = found.groupdict()
            index = int(groups.get("index") or 0) + int(rule.get("stride") or 0) * int(groups.get("replica") or 0)
            if index >= len(nodes):
                return None, f"{what}: placement group {name} is number {index}; the plan has {len(nodes)}: not steered"
            return [nodes[index]] * count, ""
    elif rule.get("ordinal") is not None:
        if name or ordinal is None or ordinal != int(rule["ordinal"]):
            return None, ""
    else:
        return None, ""
    if count != len(nodes):
        label = name or f"unnamed #{ordinal}"
        return None, f"{what}: placement group {label} has {count} bundles; the plan has {len(nodes)}: not steered"
    return nodes, ""


def steer_placement_group(
    rules: Sequence[Mapping[str, Any]], name: str, bundles: Sequence[Mapping[str, Any]], ordinal: int | None
) -> tuple[list[dict[str, Any]] | None, str]:
    """The bundles with their planned nodes' resources added, and the log line; (None, line) when no rule
    steers the group (line '' when none is about it)."""
    for rule in rules:
        if rule.get("pin") not in ("group", "bundle"):
            continue
        targets, why = pin_targets(rule, name, len(bundles), ordinal)
        if targets is None:
            if why:
                return None, why
            continue
        out, kept = [], []
        for k, (bundle, rank) in enumerate(zip(bundles, targets)):
            if user_pinned(bundle):
                out.append(dict(bundle))
                kept.append(k)
            else:
                out.append({**bundle, node_resource(rank): PIN})
        label = name or f"unnamed #{ordinal}"
        line = f"{rule.get('what')}: placement group {label}: bundles on node ranks {_nodes_text(targets)}"
        if kept:
            line += f" (bundles {_nodes_text(kept)} keep their own hpcplace resources)"
        return out, line
    return None, ""


def steer_actor(
    rules: Sequence[Mapping[str, Any]],
    class_name: str,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    options: Mapping[str, Any],
) -> tuple[dict[str, Any] | None, str]:
    """The actor's `resources` option with its planned node's resource added, and the log line; (None, line)
    when no rule steers it (line '' when none is about it)."""
    for rule in rules:
        if rule.get("pin") != "rank" or rule.get("actor_class") != class_name:
            continue
        what = str(rule.get("what") or class_name)
        strategy = options.get("scheduling_strategy")
        if options.get("placement_group") not in (None, "default") or strategy not in (None, "DEFAULT"):
            return None, ""  # placed by a placement group's rule, or by the user's own strategy
        where = int(rule.get("rank_arg", 1))
        rank = kwargs.get("rank", args[where] if len(args) > where else None)
        nodes = [int(n) for n in rule["nodes"]]
        if not isinstance(rank, int) or not 0 <= rank < len(nodes):
            return (
                None,
                f"{what}: actor {class_name} with rank {rank!r}; the plan has ranks 0-{len(nodes) - 1}: not steered",
            )
        resources = dict(options.get("resources") or {})
        if user_pinned(resources):
            return None, f"{what}: actor {class_name} rank {rank} keeps its own hpcplace resources"
        resources[node_resource(nodes[rank])] = PIN
        return resources, f"{what}: actor {class_name} rank {rank} on node rank {nodes[rank]}"
    return None, ""


class Steering:
    """The steer table of this process (read at the first request) and its count of unnamed GPU groups."""

    def __init__(self, path: str) -> None:
        import threading

        self.path = path
        self.rules: list[dict[str, Any]] | None = None
        self.unnamed = 0
        self.lock = threading.Lock()

    def table(self) -> list[dict[str, Any]]:
        if self.rules is None:
            import json

            try:
                with open(self.path, encoding="utf-8") as f:
                    data = json.load(f)
                self.rules = [r for r in data.get("rules") or () if isinstance(r, dict)]
            except (OSError, ValueError, AttributeError) as exc:
                self.rules = []
                self.log(f"cannot read the steer table {self.path}: {exc}; nothing is steered")
        return self.rules

    def log(self, line: str) -> None:
        text = f"hpcplace steer [pid {os.getpid()}]: {line}\n"
        try:
            with open(os.path.join(os.path.dirname(self.path), "steer.log"), "a", encoding="utf-8") as f:
                f.write(text)
        except OSError:
            sys.stderr.write(text)

    def placement_group(self, name: str, bundles: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
        with self.lock:
            ordinal = None
            if not name and wants_gpu(bundles) and in_driver():
                ordinal = self.unnamed
                self.unnamed += 1
            new, line = steer_placement_group(self.table(), name, bundles, ordinal)
        if line:
            self.log(line)
        return new

    def watch(self, group: Any, name: str, bundles: Sequence[Mapping[str, Any]]) -> None:
        """Say so when a steered group is still pending after PENDING_S (its pinned node lacks what it asks):
        the framework would wait for it without a word. It never stops or changes the job."""
        wait = getattr(group, "wait", None)
        if not callable(wait) or PENDING_S <= 0:
            return

        def check() -> None:
            try:
                if wait(PENDING_S):
                    return
            except Exception:  # noqa: BLE001 - Ray shut down meanwhile: nothing to say
                return
            pins = sorted({k for b in bundles for k in b if k.startswith(NODE_RESOURCE)})
            text = (
                f"placement group {name or '(unnamed)'} is still pending after {PENDING_S:g} s: the planned node(s) "
                f"({', '.join(pins)}) lack the free resources its bundles ask for ({bundles[0]} ...); another "
                "request holds them, or the framework asks for more than the plan gave it"
            )
            self.log(text)
            sys.stderr.write(f"hpcplace steer: warning: {text}\n")

        import threading

        threading.Thread(target=check, name="hpcplace-steer-watch", daemon=True).start()

    def actor(
        self, class_name: str, args: Sequence[Any], kwargs: Mapping[str, Any], options: Mapping[str, Any]
    ) -> dict[str, Any] | None:
        resources, line = steer_actor(self.table(), class_name, args, kwargs, options)
        if line:
            self.log(line)
        return resources


def in_driver() -> bool:
    """This process is a Ray driver (unnamed groups are counted in the framework's driver only)."""
    worker = sys.modules.get("ray._private.worker")
    mode = getattr(getattr(worker, "global_worker", None), "mode", None)
    return mode == getattr(worker, "SCRIPT_MODE", 0)


def wrap_placement_group(original: Callable[..., Any], steering: Steering) -> Callable[..., Any]:
    import functools
    import inspect

    signature = inspect.signature(getattr(original, "__wrapped__", original))

    @functools.wraps(original)
    def placement_group(*args: Any, **kwargs: Any) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
            bundles = bound.arguments.get("bundles")
            if isinstance(bundles, (list, tuple)) and all(isinstance(b, dict) for b in bundles):
                name = str(bound.arguments.get("name") or "")
                new = steering.placement_group(name, bundles)
                if new is not None:
                    bound.arguments["bundles"] = new
                    group = original(*bound.args, **bound.kwargs)
                    steering.watch(group, name, new)
                    return group
        except Exception as exc:  # noqa: BLE001 - the framework's call goes on unsteered; the log says why
            steering.log(f"placement group not steered: {type(exc).__name__}: {exc}")
        return original(*args, **kwargs)

    placement_group.__hpcplace_steer__ = True  # type: ignore[attr-defined]  # marks the wrapper (tests, repeats)
    return placement_group


def wrap_actor_remote(original: Callable[..., Any], steering: Steering) -> Callable[..., Any]:
    import functools

    @functools.wraps(original)
    def _remote(self: Any, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        try:
            meta = getattr(self, "__ray_metadata__", None)
            name = str(getattr(meta, "class_name", "") or "")
            if name:
                resources = steering.actor(name, list(args or ()), dict(kwargs or {}), options)
                if resources is not None:
                    options["resources"] = resources
        except Exception as exc:  # noqa: BLE001 - the framework's call goes on unsteered; the log says why
            steering.log(f"actor not steered: {type(exc).__name__}: {exc}")
        return original(self, args=args, kwargs=kwargs, **options)

    _remote.__hpcplace_steer__ = True  # type: ignore[attr-defined]  # marks the wrapper
    return _remote


def patch(module: Any, steering: Steering) -> None:
    """Wrap the request functions of a Ray module that has just run (before anything imported its names)."""
    if module.__name__ == PLACEMENT_MODULE:
        original = getattr(module, "placement_group", None)
        if callable(original) and not getattr(original, "__hpcplace_steer__", False):
            module.placement_group = wrap_placement_group(original, steering)
        elif not callable(original):
            steering.log(f"this Ray's {PLACEMENT_MODULE} has no placement_group(): nothing is steered")
    elif module.__name__ == ACTOR_MODULE:
        actor_class = getattr(module, "ActorClass", None)
        original = getattr(actor_class, "_remote", None)
        if callable(original) and not getattr(original, "__hpcplace_steer__", False):
            actor_class._remote = wrap_actor_remote(original, steering)  # type: ignore[union-attr]


class Finder:
    """A sys.meta_path finder that patches ray.util.placement_group and ray.actor the moment they have run:
    `import ray` binds placement_group into ray.util right after, and frameworks import it from either.
    (No importlib.abc base: importing it costs a process more than the rest of this hook.)"""

    def __init__(self, steering: Steering) -> None:
        self.steering = steering

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname not in (PLACEMENT_MODULE, ACTOR_MODULE):
            return None
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(fullname, path)
        loader = getattr(spec, "loader", None)
        if spec is None or loader is None or not hasattr(loader, "exec_module"):
            return None
        run = loader.exec_module
        steering = self.steering

        def exec_module(module: Any) -> None:
            run(module)
            try:
                patch(module, steering)
            except Exception as exc:  # noqa: BLE001 - never fail `import ray`
                steering.log(f"cannot hook {module.__name__}: {type(exc).__name__}: {exc}")

        loader.exec_module = exec_module  # this spec's loader only (a new loader per spec)
        return spec


def chain_next_sitecustomize(here: str) -> None:
    """Run the sitecustomize that the first one on sys.path after this file's directory would have been."""
    from importlib.machinery import PathFinder

    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    from importlib.util import module_from_spec

    module = module_from_spec(spec)
    spec.loader.exec_module(module)


def install(environ: Mapping[str, str]) -> None:
    path = environ.get(ENV)
    if path and not any(isinstance(f, Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, Finder(Steering(path)))


if __name__ == "sitecustomize":
    install(os.environ)
    chain_next_sitecustomize(os.path.dirname(os.path.abspath(__file__)))
