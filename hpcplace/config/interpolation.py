"""OmegaConf interpolations (`${subtract:a,b}`, `${oc.env:X}`, `x-${y}`) of a YAML document's data, with
RLinf's resolvers. Imported lazily by `hpcplace.config.yaml_source` (only for values placement reads) and by
`hpcplace.config.hydra_config`; it imports neither (it takes plain data and a key path), so the loader and Hydra
composition do not import each other."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def register_resolvers() -> None:
    """The resolvers the frameworks register and placement values use (RLinf's omega_resolver)."""
    from omegaconf import OmegaConf

    for name, fn in (
        ("multiply", lambda x, y: x * y),
        ("int_div", lambda x, y: x // y),
        ("subtract", lambda x, y: x - y),
        ("not", lambda x: not bool(x)),
    ):
        if not OmegaConf.has_resolver(name):
            OmegaConf.register_new_resolver(name, fn)


_LAST_CFG: list[Any] = []  # (document's data, its OmegaConf view): several values of one document resolve in a row


def resolve_value(data: object, path: Sequence[Any]) -> Any:
    """Resolve the interpolation at `path` of a document's `data` with OmegaConf (only called for values
    placement reads)."""
    from omegaconf import OmegaConf

    register_resolvers()
    if _LAST_CFG and _LAST_CFG[0] is data:
        cfg = _LAST_CFG[1]
    else:
        cfg = OmegaConf.create(data if isinstance(data, dict) else {})
        _LAST_CFG[:] = [data, cfg]
    node: Any = cfg
    for key in path[:-1]:
        node = node[key]
    return node[path[-1]]
