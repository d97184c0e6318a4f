"""A bootstrap channel over a key-value store: torch.distributed's Store
(TCPStore, FileStore, PrefixStore, HashStore) or any object with
set/get/add/wait."""
from __future__ import annotations

import datetime
import struct
from typing import Any, List, Optional, Sequence

from ._channel import Channel, Deadline

_SPLIT_REC = struct.Struct("<ii")  # color, key


def looks_like_store(obj: Any) -> bool:
    """Whether obj has the four calls a store channel needs."""
    return all(callable(getattr(obj, name, None)) for name in ("set", "get", "add", "wait"))


class StoreChannel(Channel):
    """The ranks meet through a key-value store.

    `store` needs ``set(key, value: bytes)``, ``get(key) -> bytes``,
    ``add(key, delta: int) -> int`` and ``wait(keys: list, timeout:
    datetime.timedelta)`` that raises on timeout (TimeoutError, or an
    exception whose message says "timeout", as torch's DistStoreError
    does), and may have ``delete_key(key)``, as torch.distributed.Store
    has.  Keys are str, all under `prefix`.

    Every exchange is one round, numbered from 0 in this channel: an
    all-gather sets ``<prefix><round>/<rank>`` to this rank's bytes, waits
    for every rank's key until the deadline, and reads them (in one
    ``multi_get`` where the store has it, as torch's has).  Keys of a
    round are deleted as soon as every rank has read them: each rank adds
    1 to ``<prefix><round>/done`` once it has, and the rank whose add
    makes it the number of ranks deletes the round's keys (a store without
    ``delete_key`` keeps them, and no counter is kept).  A broadcast is the
    root's ``<prefix><round>/b``; a barrier counts ranks in at
    ``<prefix><round>/in`` and the last one in sets ``<prefix><round>/go``.
    A split all-gathers every rank's (color, key) and gives the members a
    channel of their own under ``<prefix>s<split number>.<color>/``, the
    same name on every member, distinct from every other group's.

    Notes (where the store has ``check(keys) -> bool``, as torch's have;
    else none, and :attr:`note_put` and :attr:`note_get` are None): a note
    is ``<prefix>note/<key>``, set by the rank whose ``add`` of 1 to
    ``<prefix>note/<key>/claim`` gave 1, so the first value stays; a rank
    reads it with ``check`` then ``get``, never ``wait``.  Notes are few
    (a failure) and stay in the store.  No lost_rank: a store cannot tell
    who is gone.

    Only `wait` is bounded by the deadline: `set`, `get`, `add`, `check`
    and `delete_key` are expected to answer at once (torch's stores bound
    them by their own timeout).  A round that failed leaves its keys.
    """

    def __init__(self, store: Any, rank: int, size: int, prefix: str) -> None:
        self.store, self.rank, self.size, self.prefix = store, int(rank), int(size), prefix
        self._round = 0
        self._splits = 0
        delete = getattr(store, "delete_key", None)
        self._delete = delete if callable(delete) else None
        multi_get = getattr(store, "multi_get", None)
        self._multi_get = multi_get if callable(multi_get) else None
        check = getattr(store, "check", None)
        self._check = check if callable(check) else None
        if self._check is None:
            self.note_put = self.note_get = None

    def __repr__(self) -> str:
        return "<symmem StoreChannel %r rank %d of %d on %r>" % (self.prefix, self.rank,
                                                                  self.size, self.store)

    def _next_round(self) -> str:
        base = "%s%d/" % (self.prefix, self._round)
        self._round += 1
        return base

    def _wait(self, keys: List[str], deadline: Deadline) -> None:
        self.store.wait(keys, datetime.timedelta(seconds=deadline.left_s()))

    def _finish(self, base: str, keys: Sequence[str]) -> None:
        """This rank has read the round: the last rank to say so deletes it."""
        if self._delete is None:
            return
        if int(self.store.add(base + "done", 1)) == self.size:
            for key in list(keys) + [base + "done"]:
                self._delete(key)

    def allgather(self, data: bytes, timeout_ms: int) -> List[bytes]:
        deadline = Deadline(timeout_ms)
        base = self._next_round()
        keys = ["%s%d" % (base, r) for r in range(self.size)]
        self.store.set(keys[self.rank], data)
        self._wait(keys, deadline)
        others = keys[:self.rank] + keys[self.rank + 1:]
        if self._multi_get is not None and others:
            got = [bytes(v) for v in self._multi_get(others)]
        else:
            got = [bytes(self.store.get(k)) for k in others]
        out = got[:self.rank] + [data] + got[self.rank:]
        self._finish(base, keys)
        return out

    def broadcast(self, data: bytes, root: int, timeout_ms: int) -> bytes:  # type: ignore[override]
        deadline = Deadline(timeout_ms)
        base = self._next_round()
        key = base + "b"
        if self.rank == root:
            self.store.set(key, data)
        else:
            self._wait([key], deadline)
            data = bytes(self.store.get(key))
        self._finish(base, [key])
        return data

    def barrier(self, timeout_ms: int) -> None:  # type: ignore[override]
        deadline = Deadline(timeout_ms)
        base = self._next_round()
        if int(self.store.add(base + "in", 1)) == self.size:
            self.store.set(base + "go", b"1")
        self._wait([base + "go"], deadline)
        self._finish(base, [base + "in", base + "go"])

    def note_put(self, key: str, value: str) -> None:  # type: ignore[override]
        name = "%snote/%s" % (self.prefix, key)
        if int(self.store.add(name + "/claim", 1)) == 1:
            self.store.set(name, value.encode("utf-8"))

    def note_get(self, key: str) -> Optional[str]:  # type: ignore[override]
        name = "%snote/%s" % (self.prefix, key)
        if not self._check([name]):  # type: ignore[misc]
            return None
        return bytes(self.store.get(name)).decode("utf-8", "replace")

    def split(self, color: int, key: int,  # type: ignore[override]
              timeout_ms: int) -> Optional["StoreChannel"]:
        number = self._splits
        self._splits += 1
        recs = [_SPLIT_REC.unpack(b)
                for b in self.allgather(_SPLIT_REC.pack(color, key), timeout_ms)]
        if color < 0:
            return None
        members = sorted((k, r) for r, (c, k) in enumerate(recs) if c == color)
        rank = members.index((key, self.rank))
        return StoreChannel(self.store, rank, len(members),
                            "%ss%d.%d/" % (self.prefix, number, color))
