"""`ProcessEnv`: everything the shim tells one process, as a frozen object and as environment variables.

The environment is derived from the object (`environment()`), and `from_environ()` reads it back,
so a program may use either `hpcplace.runtime.process_info()` or the variables and see the same:

    torch.distributed   RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE NODE_RANK MASTER_ADDR MASTER_PORT
    devices             CUDA_VISIBLE_DEVICES = GPU_DEVICE_ORDINAL = ROCR_VISIBLE_DEVICES, CUDA_DEVICE_ORDER
    RLinf workers       VISIBLE_DEVICES (planned physical ids) ISOLATE_ACCELERATOR (1/0)
                        LOCAL_ACCELERATOR_RANK LOCAL_HARDWARE_RANKS NODE_GROUP_LABEL CLUSTER_NODE_RANK
                        NODE_LOCAL_RANK NODE_LOCAL_WORLD_SIZE ACCELERATOR_TYPE
    hpcplace            HPCPLACE_PLAN HPCPLACE_COMPONENT HPCPLACE_RANK HPCPLACE_WORLD_SIZE HPCPLACE_JOB_ID
                        HPCPLACE_SHM_DIR HPCPLACE_NODE_RANK HPCPLACE_HET_GROUP HPCPLACE_GROUP_NODE_INDEX
                        HPCPLACE_PARTITION HPCPLACE_RESOURCE_TYPE HPCPLACE_DEVICE_MODE
                        HPCPLACE_COLLOCATION_GROUP, HPCPLACE_WEIGHT_SYNC_TARGETS (actor: "dp:tp,..."),
                        HPCPLACE_WEIGHT_SYNC_SOURCES (rollout: actor ranks) -- unset when they do not apply

NODE_RANK is the placement node rank (position among this component's nodes); CLUSTER_NODE_RANK
and HPCPLACE_NODE_RANK the node's rank in the whole cluster. CUDA_VISIBLE_DEVICES is what the
process must use (step-local ids under ConstrainDevices=yes); VISIBLE_DEVICES always the physical ones.
"""

from __future__ import annotations

from hpcplace.runtime.errors import ShimError
from hpcplace.runtime.frozen import Frozen

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping


class ProcessEnv(Frozen):
    """One process's identity, ranks and devices (see the module docstring for the variables)."""

    plan_path: str
    component: str
    job_id: str
    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int  # placement node rank
    cluster_node_rank: int
    master_addr: str
    master_port: int
    visible_devices: tuple[str, ...]  # CUDA_VISIBLE_DEVICES
    physical_devices: tuple[str, ...]  # planned physical GPU ids (RLinf's VISIBLE_DEVICES)
    device_mode: str  # see hpcplace.runtime.devices: none | physical | step-local | local-map | virtual
    isolate_accelerator: bool
    local_accelerator_rank: int
    local_hardware_ranks: tuple[int, ...]
    accelerator_type: str
    node_group_label: str
    partition: str
    het_group: int
    group_node_index: int
    resource_type: str
    shm_dir: str
    collocation_group: str | None
    weight_sync_targets: tuple[tuple[int, int], ...] | None  # rollout (dp, tp) shards this actor feeds
    weight_sync_sources: tuple[int, ...] | None  # actor ranks feeding this rollout rank

    def environment(self) -> dict[str, str | None]:
        """Variable -> value; None means "must be unset"."""
        devices = ",".join(self.visible_devices)
        return {
            "RANK": str(self.rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_RANK": str(self.local_rank),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "NODE_RANK": str(self.node_rank),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "CUDA_VISIBLE_DEVICES": devices,
            "GPU_DEVICE_ORDINAL": devices,
            "ROCR_VISIBLE_DEVICES": devices,
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "VISIBLE_DEVICES": ",".join(self.physical_devices),
            "ISOLATE_ACCELERATOR": "1" if self.isolate_accelerator else "0",
            "LOCAL_ACCELERATOR_RANK": str(self.local_accelerator_rank),
            "LOCAL_HARDWARE_RANKS": ",".join(str(r) for r in self.local_hardware_ranks),
            "NODE_GROUP_LABEL": self.node_group_label,
            "CLUSTER_NODE_RANK": str(self.cluster_node_rank),
            "NODE_LOCAL_RANK": str(self.local_rank),
            "NODE_LOCAL_WORLD_SIZE": str(self.local_world_size),
            "ACCELERATOR_TYPE": self.accelerator_type,
            "HPCPLACE_PLAN": self.plan_path,
            "HPCPLACE_COMPONENT": self.component,
            "HPCPLACE_RANK": str(self.rank),
            "HPCPLACE_WORLD_SIZE": str(self.world_size),
            "HPCPLACE_JOB_ID": self.job_id,
            "HPCPLACE_SHM_DIR": self.shm_dir,
            "HPCPLACE_NODE_RANK": str(self.cluster_node_rank),
            "HPCPLACE_HET_GROUP": str(self.het_group),
            "HPCPLACE_GROUP_NODE_INDEX": str(self.group_node_index),
            "HPCPLACE_PARTITION": self.partition,
            "HPCPLACE_RESOURCE_TYPE": self.resource_type,
            "HPCPLACE_DEVICE_MODE": self.device_mode,
            "HPCPLACE_COLLOCATION_GROUP": self.collocation_group,
            "HPCPLACE_WEIGHT_SYNC_TARGETS": None
            if self.weight_sync_targets is None
            else ",".join(f"{dp}:{tp}" for dp, tp in self.weight_sync_targets),
            "HPCPLACE_WEIGHT_SYNC_SOURCES": None
            if self.weight_sync_sources is None
            else ",".join(str(a) for a in self.weight_sync_sources),
        }

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> ProcessEnv:
        """Read back what the shim set; ShimError naming every missing variable."""
        missing = [name for name in _REQUIRED if name not in environ]
        if missing:
            raise ShimError(
                f"not started through hpcplace-run: missing {', '.join(missing)}",
                hint="start the program with `hpcplace-run --plan plan.json --component NAME -- CMD`",
            )
        try:
            return cls(
                plan_path=environ["HPCPLACE_PLAN"],
                component=environ["HPCPLACE_COMPONENT"],
                job_id=environ["HPCPLACE_JOB_ID"],
                rank=int(environ["RANK"]),
                world_size=int(environ["WORLD_SIZE"]),
                local_rank=int(environ["LOCAL_RANK"]),
                local_world_size=int(environ["LOCAL_WORLD_SIZE"]),
                node_rank=int(environ["NODE_RANK"]),
                cluster_node_rank=int(environ["CLUSTER_NODE_RANK"]),
                master_addr=environ["MASTER_ADDR"],
                master_port=int(environ["MASTER_PORT"]),
                visible_devices=_split(environ["CUDA_VISIBLE_DEVICES"]),
                physical_devices=_split(environ["VISIBLE_DEVICES"]),
                device_mode=environ["HPCPLACE_DEVICE_MODE"],
                isolate_accelerator=environ["ISOLATE_ACCELERATOR"] == "1",
                local_accelerator_rank=int(environ["LOCAL_ACCELERATOR_RANK"]),
                local_hardware_ranks=tuple(int(r) for r in _split(environ["LOCAL_HARDWARE_RANKS"])),
                accelerator_type=environ["ACCELERATOR_TYPE"],
                node_group_label=environ["NODE_GROUP_LABEL"],
                partition=environ["HPCPLACE_PARTITION"],
                het_group=int(environ["HPCPLACE_HET_GROUP"]),
                group_node_index=int(environ["HPCPLACE_GROUP_NODE_INDEX"]),
                resource_type=environ["HPCPLACE_RESOURCE_TYPE"],
                shm_dir=environ["HPCPLACE_SHM_DIR"],
                collocation_group=environ.get("HPCPLACE_COLLOCATION_GROUP"),
                weight_sync_targets=None
                if "HPCPLACE_WEIGHT_SYNC_TARGETS" not in environ
                else tuple(_pair(item) for item in _split(environ["HPCPLACE_WEIGHT_SYNC_TARGETS"])),
                weight_sync_sources=None
                if "HPCPLACE_WEIGHT_SYNC_SOURCES" not in environ
                else tuple(int(a) for a in _split(environ["HPCPLACE_WEIGHT_SYNC_SOURCES"])),
            )
        except ValueError as exc:
            raise ShimError(
                f"malformed hpcplace variable in the environment: {exc}",
                hint="do not change the variables hpcplace-run sets",
            ) from None


def _split(value: str) -> tuple[str, ...]:
    return tuple(part for part in value.split(",") if part)


def _pair(item: str) -> tuple[int, int]:
    dp, _, tp = item.partition(":")
    return int(dp), int(tp)


_REQUIRED = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "NODE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "CUDA_VISIBLE_DEVICES",
    "VISIBLE_DEVICES",
    "ISOLATE_ACCELERATOR",
    "LOCAL_ACCELERATOR_RANK",
    "LOCAL_HARDWARE_RANKS",
    "NODE_GROUP_LABEL",
    "CLUSTER_NODE_RANK",
    "ACCELERATOR_TYPE",
    "HPCPLACE_PLAN",
    "HPCPLACE_COMPONENT",
    "HPCPLACE_JOB_ID",
    "HPCPLACE_SHM_DIR",
    "HPCPLACE_HET_GROUP",
    "HPCPLACE_GROUP_NODE_INDEX",
    "HPCPLACE_PARTITION",
    "HPCPLACE_RESOURCE_TYPE",
    "HPCPLACE_DEVICE_MODE",
)
