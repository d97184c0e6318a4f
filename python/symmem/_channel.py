"""The Python side of a bootstrap channel: what a channel offers, and how
an exception raised in one becomes the result code that C expects."""
from __future__ import annotations

import builtins
import time
from typing import Optional, Sequence

from .errors import Result, SymmemError


class Channel:
    """A bootstrap channel written in Python: how the ranks of one
    communicator meet at init and exchange small blobs afterwards
    (``symm_bootstrap_callbacks_t``).

    ``symmem.init(bootstrap=...)`` makes one from a store, a
    ``torch.distributed`` process group or an mpi4py communicator; a
    subclass of this class may be passed as it is.  symmem calls its
    methods from the thread that calls into symmem, during calls that are
    collective over the communicator, in the same order on every rank.
    Each method gets `timeout_ms`, what is left of the calling symmem
    function's deadline (at least 1), and must return within it: raise
    :class:`TimeoutError` (the built-in or symmem's) when it passes before
    every rank took part, :class:`ConnectionError` when a rank is known to
    be gone; symmem returns SYMM_ERR_TIMEOUT, SYMM_ERR_PEER_LOST, a
    :class:`SymmemError`'s own code, or SYMM_ERR_BACKEND for any other
    exception, which becomes the ``__cause__`` of the error raised.

    Attributes: `rank` and `size` (this rank and the number of ranks),
    `local_rank` and `local_size` (on this host; -1: symmem works them out
    from the host names).  `broadcast`, `barrier`, `split`, `abort`,
    `note_put`, `note_get` and `lost_rank` are optional: None (the default)
    makes symmem do without them (broadcast and barrier through
    :meth:`allgather`; :meth:`Communicator.split
    <symmem.Communicator.split>` refused without `split`; without notes a
    rank whose NCCL init failed is known to its peers only at their
    deadline).  The note calls and lost_rank are not collective and never
    wait; what they raise counts as "nothing known".
    """

    rank: int = -1
    size: int = -1
    local_rank: int = -1
    local_size: int = -1

    def allgather(self, data: bytes, timeout_ms: int) -> Sequence[bytes]:
        """Every rank's `data` (the same length on every rank), in rank
        order, this rank's included."""
        raise NotImplementedError

    #: broadcast(data, root, timeout_ms) -> bytes: root's `data` (every
    #: rank passes a buffer of the same length).
    broadcast: Optional[object] = None
    #: barrier(timeout_ms): returns once every rank has called it.
    barrier: Optional[object] = None
    #: split(color, key, timeout_ms) -> Channel or None: a channel of the
    #: ranks that pass the same color (>= 0), ranked by key then rank; None
    #: for color -1 (this rank joins no group).  Collective over this
    #: channel's ranks.
    split: Optional[object] = None
    #: abort(code, reason): this rank failed a step its peers may still
    #: wait in; make their calls return if the channel can.
    abort: Optional[object] = None
    #: note_put(key, value): tell every rank of the channel `value` (str)
    #: under `key` (str), at once, without waiting for them; the first
    #: value put under a key stays.  Not collective: one rank calls it
    #: alone (its NCCL init failed), while its peers wait elsewhere.
    note_put: Optional[object] = None
    #: note_get(key) -> str or None: the value a rank put under `key`, or
    #: None when none reached this rank yet; returns at once.  Not
    #: collective: each rank calls it alone while it waits.
    note_get: Optional[object] = None
    #: lost_rank() -> int: a rank known to be gone (its launcher or
    #: runtime saw it exit), or -1; returns at once.
    lost_rank: Optional[object] = None

    def release(self) -> None:
        """symmem is done with the channel (every communicator on it is
        destroyed): give back what it holds.  Called once; the default
        does nothing."""


# Words of an exception's message that say it timed out or lost its peer,
# for libraries whose exceptions say so only in words (torch's store
# raises RuntimeError subclasses).
_TIMEOUT_WORDS = ("timeout", "timed out")
_LOST_WORDS = ("connection reset", "connection closed", "broken pipe", "connection refused",
               "peer closed", "end of file")


def result_of(exc: BaseException) -> int:
    """The symm_result_t a callback returns for `exc`: a symmem error's own
    code; SYMM_ERR_TIMEOUT for a timeout; SYMM_ERR_PEER_LOST for a lost
    connection; SYMM_ERR_BACKEND for anything else."""
    if isinstance(exc, SymmemError) and isinstance(exc.code, int) and \
            0 < int(exc.code) <= max(Result):
        return int(exc.code)
    if isinstance(exc, builtins.TimeoutError):  # socket.timeout and symmem's too
        return int(Result.TIMEOUT)
    if isinstance(exc, (ConnectionError, EOFError)):
        return int(Result.PEER_LOST)
    names = {cls.__name__ for cls in type(exc).__mro__}
    message = str(exc).lower()
    if isinstance(exc, RuntimeError) or "DistError" in names:
        if any(w in message for w in _TIMEOUT_WORDS):
            return int(Result.TIMEOUT)
        if "DistNetworkError" in names or any(w in message for w in _LOST_WORDS):
            return int(Result.PEER_LOST)
    return int(Result.BACKEND)


class Deadline:
    """The end of a callback's `timeout_ms`, for channels that wait in
    several steps."""

    __slots__ = ("end",)

    def __init__(self, timeout_ms: int) -> None:
        self.end = time.monotonic() + max(int(timeout_ms), 1) / 1000.0

    def left_s(self) -> float:
        """Seconds left, at least a millisecond (the last wait still asks)."""
        return max(self.end - time.monotonic(), 0.001)

    def passed(self) -> bool:
        return time.monotonic() >= self.end
