"""hpcplace: exact process placement for RL post-training on heterogeneous Slurm clusters.

Stage packages (docs/architecture.md): config -> plan -> ray -> slurm -> local -> tune, the CLI and the Python
functions API on top; hpcplace.runtime is the in-job side."""

import sys

__version__ = "0.1.0"


class _OldNames:
    """Makes the module names from before the stage packages (hpcplace.submit, ...) import as the new modules
    (hpcplace/_moved.py). Only the login-node side ever loads _moved: the in-job runtime's imports are passed
    over here without importing anything, so the shim stays stdlib-only."""

    @staticmethod
    def find_spec(fullname, path=None, target=None):  # type: ignore[no-untyped-def]
        if not fullname.startswith("hpcplace.") or fullname.startswith(("hpcplace.runtime", "hpcplace._moved")):
            return None
        from hpcplace import _moved

        return _moved.find_spec(fullname)


if not any(getattr(f, "__name__", "") == "_OldNames" for f in sys.meta_path):
    sys.meta_path.insert(0, _OldNames)
