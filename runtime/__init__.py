"""The in-job side of hpcplace: what runs inside the Slurm job (or the local backend).

Never imports the login-node side (hpcplace.*). The shim's path imports the standard library only.

Python API for programs started through `hpcplace-run` (the same values as the environment):

    from hpcplace.runtime import process_info
    info = process_info()            # a frozen ProcessEnv
    info.rank, info.world_size, info.local_rank, info.master_addr, info.master_port
    info.visible_devices             # what CUDA_VISIBLE_DEVICES holds ("0", "1")
    info.physical_devices            # the planned physical GPU ids on the node
    info.collocation_group, info.weight_sync_targets, info.weight_sync_sources, info.shm_dir
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from hpcplace.runtime.process_env import ProcessEnv

__all__ = ["ProcessEnv", "ShimError", "process_info"]


def process_info(environ: Mapping[str, str] | None = None) -> ProcessEnv:
    """This process's placement, read from the variables hpcplace-run set (ShimError if it did not)."""
    import os

    from hpcplace.runtime.process_env import ProcessEnv

    return ProcessEnv.from_environ(os.environ if environ is None else environ)


def __getattr__(name: str) -> object:
    """Lazy exports: importing the package stays free for the shim."""
    if name == "ProcessEnv":
        from hpcplace.runtime.process_env import ProcessEnv

        return ProcessEnv
    if name == "ShimError":
        from hpcplace.runtime.errors import ShimError

        return ShimError
    raise AttributeError(f"module 'hpcplace.runtime' has no attribute {name!r}")
