"""A bootstrap channel from a torch.distributed process group: through the
group's store where torch has one for it, else through the group's own
all_gather_object."""
from __future__ import annotations

import sys
from typing import Any, List

from ._channel import Channel
from ._store_channel import StoreChannel


def torch_distributed(obj: Any) -> Any:
    """torch.distributed when obj is one of its process groups, else None;
    torch is never imported here (a program with a group has it)."""
    dist = sys.modules.get("torch.distributed")
    group_type = getattr(dist, "ProcessGroup", None) if dist is not None else None
    if group_type is not None and isinstance(obj, group_type):
        return dist
    return None


def group_store(dist: Any, group: Any) -> Any:
    """The store torch keeps for `group` (the default store for the default
    group, a PrefixStore of it for the others), or None."""
    c10d = dist.distributed_c10d
    try:
        if group is c10d._get_default_group():
            return c10d._get_default_store()
        getter = getattr(c10d, "_get_process_group_store", None)
        return getter(group) if getter is not None else None
    except (RuntimeError, ValueError, KeyError, AttributeError):
        return None


def group_channel(dist: Any, group: Any, prefix: str) -> Channel:
    """The channel for a process group: a StoreChannel on the group's store
    under `prefix`, ranked as in the group; else a ProcessGroupChannel."""
    rank, size = group.rank(), group.size()
    store = group_store(dist, group)
    if store is not None:
        return StoreChannel(store, rank, size, prefix)
    return ProcessGroupChannel(dist, group)


class ProcessGroupChannel(Channel):
    """The ranks exchange through ``torch.distributed.all_gather_object`` on
    the group, for a group that has no store torch can give.  The exchange
    is the group's own collective, bounded by the group's timeout (that of
    init_process_group / new_group), not by symmem's: a rank that never
    comes makes the others wait that long, and the group is unusable
    afterwards as after any timed-out collective.  No split: use the store
    (the default group's, or one of your own) for Communicator.split."""

    def __init__(self, dist: Any, group: Any) -> None:
        self.dist, self.group = dist, group
        self.rank, self.size = group.rank(), group.size()

    def allgather(self, data: bytes, timeout_ms: int) -> List[bytes]:
        out: List[Any] = [None] * self.size
        self.dist.all_gather_object(out, bytes(data), group=self.group)
        return [bytes(b) for b in out]
