"""Bring your own bootstrap from Python: ``symmem.init(bootstrap=obj)``.

The ranks meet through `obj` instead of symmem's TCP store, so symmem opens
no store and no port (under torchrun, torch's own store is enough):

- a key-value store: ``torch.distributed.Store`` (TCPStore, FileStore,
  PrefixStore, HashStore), or any object with ``set(key, bytes)``,
  ``get(key) -> bytes``, ``add(key, int) -> int`` and ``wait(keys,
  timeout: datetime.timedelta)`` (:class:`StoreChannel`; notes where it
  has ``check(keys) -> bool`` too, as torch's stores do); rank and world
  size come from init's `rank` and `world_size`, else from the launcher's
  environment (SYMM_RANK, RANK, OMPI_COMM_WORLD_RANK, PMI_RANK,
  SLURM_PROCID and the matching sizes);
- a ``torch.distributed`` ProcessGroup: rank and size from the group, the
  exchange through the group's store (``_get_default_store()`` for the
  default group), else through ``all_gather_object`` on the group, whose
  own timeout then applies (:class:`ProcessGroupChannel`);
- an mpi4py communicator: a duplicate of it, non-blocking collectives
  polled to the deadline, groups from Split, notes as point-to-point
  messages on a second duplicate (:class:`MPIChannel`);
- a :class:`Channel` of your own.

Which one is told by type and by duck typing; torch and mpi4py are never
imported here.  Each is turned into ``symm_bootstrap_callbacks_t``: ctypes
callbacks that call the channel, and turn any exception into the result
code C expects (a timeout SYMM_ERR_TIMEOUT, a lost peer or closed
connection SYMM_ERR_PEER_LOST, anything else SYMM_ERR_BACKEND); the error
symmem then raises has that exception as its ``__cause__``.  The callbacks
and the channel live as long as the communicator made on them and every
group split from it; the channel is released (an MPI duplicate freed) when
the last of them is destroyed, or when init fails.
"""
from __future__ import annotations

import ctypes
import itertools
import os
import threading
from ctypes import sizeof
from typing import Any, Callable, Dict, Optional, Sequence, Tuple

from ._channel import Channel, Deadline, result_of
from ._lib import (ABORT_FN, ALLGATHER_FN, BARRIER_FN, BROADCAST_FN, LOST_RANK_FN, NOTE_GET_FN,
                   NOTE_PUT_FN, RELEASE_FN, SPLIT_FN, SYMM_BOOTSTRAP_CALLBACKS_VERSION,
                   SymmBootstrapCallbacks)
from ._mpi_channel import MPIChannel, mpi_module
from ._store_channel import StoreChannel, looks_like_store
from ._torch_channel import ProcessGroupChannel, group_channel, torch_distributed
from .errors import Result, invalid, make_error, note_callback_exception

__all__ = ["Channel", "StoreChannel", "MPIChannel", "ProcessGroupChannel", "Deadline",
           "channel_for", "result_of"]

# The live channels by the number C holds as their ctx.
_CHANNELS: Dict[int, Channel] = {}
_ctx_numbers = itertools.count(1)
# Store channels this process made for init, numbered as the ranks make
# them (in the same order on every rank, as communicators are): the
# number names each one's keys.
_store_numbers = itertools.count(0)

_RANK_VARS = ("SYMM_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
_SIZE_VARS = ("SYMM_WORLD_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
              "SLURM_NTASKS")


def _guarded(fn: Callable[..., None]) -> Callable[..., int]:
    """A callback body that returns 0, or the code of what it raised
    (kept as the cause of the error C then returns): nothing raised in
    Python ever unwinds through C."""
    def call(*args: Any) -> int:
        note_callback_exception(None)
        try:
            fn(*args)
            return 0
        except BaseException as e:  # KeyboardInterrupt too: check() raises it after C
            note_callback_exception(e)
            try:
                return result_of(e)
            except BaseException:
                return int(Result.BACKEND)
    return call


def _protocol(ch: Channel, what: str) -> BaseException:
    return make_error(Result.PROTOCOL, "bootstrap: %r's %s" % (ch, what))


def _allgather(ctx: int, send: Optional[int], recv: Optional[int], length: int,
               timeout_ms: int) -> None:
    ch = _CHANNELS[ctx]
    data = ctypes.string_at(send, length) if length else b""
    parts = ch.allgather(data, timeout_ms)
    if len(parts) != ch.size or any(len(p) != length for p in parts):
        raise _protocol(ch, "allgather gave %d parts of %s bytes for %d of %d bytes" % (
            len(parts), sorted({len(p) for p in parts}), ch.size, length))
    if length:
        blob = b"".join(bytes(p) for p in parts)
        ctypes.memmove(recv, blob, len(blob))


def _broadcast(ctx: int, buf: Optional[int], length: int, root: int, timeout_ms: int) -> None:
    ch = _CHANNELS[ctx]
    data = ch.broadcast(ctypes.string_at(buf, length) if length else b"", root,  # type: ignore
                        timeout_ms)
    if len(data) != length:
        raise _protocol(ch, "broadcast gave %d bytes for %d" % (len(data), length))
    if length:
        ctypes.memmove(buf, bytes(data), length)


def _barrier(ctx: int, timeout_ms: int) -> None:
    _CHANNELS[ctx].barrier(timeout_ms)  # type: ignore[misc]


def _split(ctx: int, color: int, key: int, child: Any, timeout_ms: int) -> None:
    ch = _CHANNELS[ctx]
    sub = ch.split(color, key, timeout_ms)  # type: ignore[misc]
    if color < 0:
        if sub is not None:
            sub.release()
        return
    if not isinstance(sub, Channel):
        raise _protocol(ch, "split(color %d) gave %r, not a Channel" % (color, sub))
    _fill(child.contents, sub, _register(sub))


def _abort(ctx: int, code: int, reason: Optional[bytes]) -> None:
    ch = _CHANNELS.get(ctx)
    if ch is not None and ch.abort is not None:
        ch.abort(code, (reason or b"").decode("utf-8", "replace"))  # type: ignore[misc]


def _release(ctx: int) -> None:
    ch = _CHANNELS.pop(ctx, None)
    if ch is not None:
        ch.release()


def _note_put(ctx: int, key: bytes, value: bytes) -> int:
    _CHANNELS[ctx].note_put(key.decode("utf-8", "replace"),  # type: ignore[misc]
                            value.decode("utf-8", "replace"))
    return 0


def _note_get(ctx: int, key: bytes, buf: int, cap: int, found: Any) -> int:
    value = _CHANNELS[ctx].note_get(key.decode("utf-8", "replace"))  # type: ignore[misc]
    found[0] = 0 if value is None else 1
    if value is not None and cap > 0:
        data = str(value).encode("utf-8")[:cap - 1] + b"\0"
        ctypes.memmove(buf, data, len(data))
    return 0


def _lost_rank(ctx: int) -> int:
    rank = _CHANNELS[ctx].lost_rank()  # type: ignore[misc]
    return int(rank) if rank is not None and int(rank) >= 0 else -1


def _aside(fn: Callable[..., int]) -> Callable[..., int]:
    """A note or lost_rank body: its result, or the code of what it
    raised, which C takes as "nothing known"; the cause kept for a failing
    call stays as it is (these are called while other calls wait)."""
    def call(*args: Any) -> int:
        try:
            return fn(*args)
        except BaseException as e:  # noqa: BLE001 (C has no way to hear of it)
            try:
                return result_of(e)
            except BaseException:
                return int(Result.BACKEND)
    return call


def _quiet(fn: Callable[..., None]) -> Callable[..., None]:
    """A callback body with no result (abort, release): what it raises is
    dropped, and the cause kept for the failing call stays as it is."""
    def call(*args: Any) -> None:
        try:
            fn(*args)
        except BaseException:  # noqa: BLE001 (C has no way to hear of it)
            pass
    return call


# One C function pointer per callback for every channel (ctx tells them
# apart), alive as long as the module.
_C_ALLGATHER = ALLGATHER_FN(_guarded(_allgather))
_C_BROADCAST = BROADCAST_FN(_guarded(_broadcast))
_C_BARRIER = BARRIER_FN(_guarded(_barrier))
_C_SPLIT = SPLIT_FN(_guarded(_split))
_C_ABORT = ABORT_FN(_quiet(_abort))
_C_RELEASE = RELEASE_FN(_quiet(_release))
_C_NOTE_PUT = NOTE_PUT_FN(_aside(_note_put))
_C_NOTE_GET = NOTE_GET_FN(_aside(_note_get))
_C_LOST_RANK = LOST_RANK_FN(_aside(_lost_rank))


def _register(ch: Channel) -> int:
    number = next(_ctx_numbers)
    _CHANNELS[number] = ch
    return number


def _fill(cb: SymmBootstrapCallbacks, ch: Channel, ctx: int) -> None:
    """cb (initialised by C or here) calls `ch`, which is registered as ctx."""
    cb.size, cb.version = sizeof(SymmBootstrapCallbacks), SYMM_BOOTSTRAP_CALLBACKS_VERSION
    cb.rank, cb.world_size = int(ch.rank), int(ch.size)
    cb.local_rank, cb.local_size = int(ch.local_rank), int(ch.local_size)
    cb.ctx = ctx
    cb.allgather = _C_ALLGATHER
    cb.broadcast = _C_BROADCAST if ch.broadcast is not None else BROADCAST_FN()
    cb.barrier = _C_BARRIER if ch.barrier is not None else BARRIER_FN()
    cb.abort = _C_ABORT if ch.abort is not None else ABORT_FN()
    cb.split = _C_SPLIT if ch.split is not None else SPLIT_FN()
    cb.release = _C_RELEASE
    cb.note_put = _C_NOTE_PUT if ch.note_put is not None else NOTE_PUT_FN()
    cb.note_get = _C_NOTE_GET if ch.note_get is not None else NOTE_GET_FN()
    cb.lost_rank = _C_LOST_RANK if ch.lost_rank is not None else LOST_RANK_FN()


def _env_int(names: Sequence[str]) -> Optional[int]:
    for name in names:
        value = os.environ.get(name)
        if value:
            try:
                return int(value)
            except ValueError:
                invalid("%s=%r is not an integer" % (name, value))
    return None


def _store_identity(rank: Optional[int], world_size: Optional[int]) -> Tuple[int, int]:
    r = _env_int(_RANK_VARS) if rank is None else int(rank)
    w = _env_int(_SIZE_VARS) if world_size is None else int(world_size)
    if r is None or w is None:
        invalid("a store bootstrap needs this rank and the world size: pass rank= and "
                "world_size= to init, or run under a launcher that sets them (%s / %s)"
                % (", ".join(_RANK_VARS), ", ".join(_SIZE_VARS)))
    if not 0 <= r < w:  # type: ignore[operator]
        invalid("a store bootstrap with rank %d of %d" % (r, w))
    return r, w  # type: ignore[return-value]


def _store_prefix() -> str:
    return "symmem/%d/" % next(_store_numbers)


def channel_for(obj: Any, rank: Optional[int] = None,
                world_size: Optional[int] = None) -> Channel:
    """The channel init uses for `obj` (see the module): a Channel as it
    is; an mpi4py communicator's duplicate (collective over it); a
    torch.distributed process group's store or the group itself; a store,
    with rank and world size from the arguments or the environment.
    TypeError for anything else."""
    if isinstance(obj, Channel):
        return obj
    mpi = mpi_module(obj)
    if mpi is not None:
        return MPIChannel.of(mpi, obj)
    dist = torch_distributed(obj)
    if dist is not None:
        return group_channel(dist, obj, _store_prefix())
    if looks_like_store(obj):
        r, w = _store_identity(rank, world_size)
        return StoreChannel(obj, r, w, _store_prefix())
    raise TypeError("symmem.init(bootstrap=...) takes a store (set/get/add/wait), a "
                    "torch.distributed ProcessGroup, an mpi4py communicator or a "
                    "symmem.bootstrap.Channel, not %s" % type(obj).__name__)


class Hold:
    """The callbacks of the channel a communicator was made on, shared by
    that communicator and every group split from it: the struct C points
    to and the channel stay until the last of them is destroyed, and the
    channel is released then."""

    def __init__(self, channel: Channel) -> None:
        self.channel = channel
        self.struct = SymmBootstrapCallbacks()
        self._ctx = _register(channel)
        self._users = 0
        self._lock = threading.Lock()
        _fill(self.struct, channel, self._ctx)

    def acquire(self) -> None:
        with self._lock:
            self._users += 1

    def release(self) -> None:
        with self._lock:
            self._users -= 1
            last = self._users <= 0
        if last:
            self.close()

    def close(self) -> None:
        """Releases the channel now (init failed, or nothing uses it)."""
        if _CHANNELS.pop(self._ctx, None) is not None:
            try:
                self.channel.release()
            except Exception:  # noqa: BLE001 (nothing to report it to at teardown)
                pass
