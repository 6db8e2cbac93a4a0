"""The types LMDeploy imports from dlinfer for its MoE calls (``from dlinfer.utils.type_annotation import
MoECommType, MoeMetadata``), plus the typing names upstream re-exports from here.

``MoeMetadata`` describes how one step's MoE layers are parallelised. dlinfer's kernels compute a whole MoE layer
on one device: data, tensor or expert parallelism (a size above 1), an all-to-all communication type or grouped
routing (``router_n_groups`` above 1) are refused by the operators with a one-line error naming the field, never
computed as if they were absent.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from torch import Tensor

__all__ = ["MoECommType", "MoeMetadata", "Optional", "Sequence", "Tensor", "unsupported_moe_fields"]


class MoECommType(enum.Enum):
    """How tokens reach their experts' devices."""

    ALLGATHER = enum.auto()
    ALLTOALL = enum.auto()
    MC2 = enum.auto()


@dataclass
class MoeMetadata:
    """Parallel layout of one step's MoE layers (every field optional; the defaults mean one device)."""

    max_tokens_across_dp: int = 1
    pad_size: int = 0
    dp_size: int = 1
    tp_size: int = 1
    ep_size: int = 1
    tp_rank: int = 0
    ep_rank: int = 0
    tp_group: Any = None
    ep_group: Any = None
    moe_comm_type: MoECommType | None = None
    x_active_mask: Tensor | None = None
    expert_ids_per_ep_rank: Tensor | None = None
    router_n_groups: int = -1


def unsupported_moe_fields(meta: Any) -> list[str]:
    """``field=value`` for every field of ``meta`` (a :class:`MoeMetadata` or any object with its attributes)
    that asks for more than one device's whole MoE layer."""
    found = []
    for name in ("dp_size", "tp_size", "ep_size"):
        value = getattr(meta, name, 1)
        if value is not None and int(value) > 1:
            found.append(f"{name}={value}")
    groups = getattr(meta, "router_n_groups", -1)
    if groups is not None and int(groups) > 1:
        found.append(f"router_n_groups={groups}")
    comm = getattr(meta, "moe_comm_type", None)
    if comm is not None and getattr(comm, "name", str(comm)) not in ("ALLGATHER",):
        found.append(f"moe_comm_type={getattr(comm, 'name', comm)}")
    return found
