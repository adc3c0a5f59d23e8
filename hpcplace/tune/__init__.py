"""Stage 6, tune: `hpcplace tune` and `compare` — search placements over a config's node groups from measured
costs (the profile, the cost model and its branch-and-bound search, the rewrite of the winner in the input's
own format). Imports slurm (the render check), plan, config and errors (docs/architecture.md).

`hpcplace.tune.search`, ... (the names of the module `hpcplace.tune.tune`, which was `hpcplace.tune` before the
stage packages) stay reachable here, loaded on first use."""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    from hpcplace.tune import tune as _tune

    try:
        return getattr(_tune, name)
    except AttributeError:
        raise AttributeError(f"module 'hpcplace.tune' has no attribute {name!r}") from None
