"""The module names from before the stage packages stay importable.

`hpcplace.submit`, `hpcplace.planner`, `hpcplace.formats.rlinf`, ... are the same module objects as their
homes in the stage packages (`hpcplace.slurm.submit`, `hpcplace.plan.planner`, ...), so code, notebooks and
pickles written against the old names keep working. The repository itself imports the new names
(tests/test_architecture.py checks it). `hpcplace.plan` and `hpcplace.tune` are stage packages now; they hand
out the names of the modules `hpcplace.plan.plan` and `hpcplace.tune.tune` (see their __init__.py)."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
from types import ModuleType

STAGES = {
    "config": ("yaml_source", "interpolation", "hydra_config", "limits", "safe_words", "rank_syntax", "cluster",
               "launch", "slurm_options", "spec", "formats"),
    "plan": ("placement", "process_table", "strategies", "planner", "gpumap"),
    "ray": ("ray_cluster",),
    "slurm": ("slurm_job", "render", "slurm_cli", "validate", "shared_fs", "submit"),
    "local": ("local_backend", "local_ray"),
    "tune": ("tune_config", "tune_profile"),
}
# old name -> new name
MOVED = {f"hpcplace.{old}": f"hpcplace.{stage}.{old}" for stage, olds in STAGES.items() for old in olds}


def new_name(fullname: str) -> str | None:
    """The new name of an old module name (a module inside a moved package too), or None."""
    for old, new in MOVED.items():
        if fullname == old or fullname.startswith(old + "."):
            return new + fullname[len(old):]
    return None


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module of the new one (imported under its own name)."""

    def __init__(self) -> None:
        self._specs: dict[str, importlib.machinery.ModuleSpec | None] = {}

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(new_name(spec.name) or spec.name)
        self._specs[spec.name] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        module.__spec__ = self._specs.pop(module.__spec__.name, module.__spec__)  # the module keeps its own spec


_LOADER = _Alias()


def find_spec(fullname: str) -> importlib.machinery.ModuleSpec | None:
    """The spec that makes an old name the new module (None for every other name)."""
    return importlib.machinery.ModuleSpec(fullname, _LOADER) if new_name(fullname) else None
