"""Upper limits on what a config may ask for, in one place (docs/safety.md, "Safety and limits").

Every input format calls these where it reads a count, before anything is built from it, so a typo
such as `num_nodes: 1e9` is a clear error naming the cap instead of minutes of work and gigabytes of
memory on the login node. The caps are far above any cluster hpcplace targets.
"""

from __future__ import annotations

from hpcplace.errors import SourceLocation, SpecError

MAX_CONFIG_BYTES = 4 * 1024 * 1024  # a config file larger than this is refused before parsing
MAX_YAML_VALUES = 50_000  # values in a document after YAML aliases are expanded
MAX_YAML_DEPTH = 100  # nesting of mappings/lists
MAX_NODES = 16_384  # nodes in the whole cluster (every node group together)
MAX_GPUS_PER_NODE = 64
MAX_HARDWARE_PER_NODE = 1024  # robots, cameras, ... per node
MAX_CPUS_PER_NODE = 65_536
MAX_MEM_PER_NODE_MB = 64 * 1024 * 1024  # 64 TiB: above the largest single-node machines
MAX_DEVICE_ID = MAX_NODES * MAX_GPUS_PER_NODE - 1  # ROLL's global GPU ids
MAX_PROCESSES = (
    4_194_304  # processes of one component, and of the whole plan (16,384 nodes x 8 GPUs is ~1.3M: planned in seconds)
)
MAX_COMPONENTS = 1024

# name -> (cap, what it counts): the table docs/safety.md shows and errors quote.
CAPS: dict[str, tuple[int, str]] = {
    "config file size (bytes)": (MAX_CONFIG_BYTES, "bytes of one config file"),
    "YAML values after alias expansion": (MAX_YAML_VALUES, "values in one document, aliases expanded"),
    "YAML nesting depth": (MAX_YAML_DEPTH, "nested mappings/lists"),
    "nodes": (MAX_NODES, "nodes in the cluster, all node groups together"),
    "GPUs per node": (MAX_GPUS_PER_NODE, "GPUs on one node"),
    "hardware per node": (MAX_HARDWARE_PER_NODE, "non-GPU hardware units (robots...) on one node"),
    "CPUs per node": (MAX_CPUS_PER_NODE, "CPUs on one node"),
    "memory per node (MB)": (MAX_MEM_PER_NODE_MB, "megabytes of memory on one node"),
    "device id": (MAX_DEVICE_ID, "ROLL global GPU id"),
    "processes": (MAX_PROCESSES, "processes of one component and of the whole plan"),
    "components": (MAX_COMPONENTS, "components of one experiment"),
}


class LimitError(SpecError):
    """A value is above one of hpcplace's documented caps."""


def check_cap(value: int, cap: int, what: str, location: SourceLocation | None = None) -> int:
    """`value` if it is at most `cap`, else a LimitError naming the cap."""
    if value > cap:
        raise LimitError(
            f"{what} is {value}; hpcplace supports at most {cap}",
            location=location,
            hint='check for a typo; the caps are listed in docs/safety.md ("Safety and limits")',
        )
    return value


def nodes(value: int, location: SourceLocation | None = None, what: str = "number of nodes") -> int:
    return check_cap(value, MAX_NODES, what, location)


def gpus_per_node(value: int, location: SourceLocation | None = None, what: str = "GPUs per node") -> int:
    return check_cap(value, MAX_GPUS_PER_NODE, what, location)


def hardware_per_node(value: int, location: SourceLocation | None = None, what: str = "hardware per node") -> int:
    return check_cap(value, MAX_HARDWARE_PER_NODE, what, location)


def cpus_per_node(value: int, location: SourceLocation | None = None, what: str = "CPUs per node") -> int:
    return check_cap(value, MAX_CPUS_PER_NODE, what, location)


def device_id(value: int, location: SourceLocation | None = None, what: str = "device id") -> int:
    return check_cap(value, MAX_DEVICE_ID, what, location)


def processes(value: int, location: SourceLocation | None = None, what: str = "number of processes") -> int:
    return check_cap(value, MAX_PROCESSES, what, location)
