"""A bootstrap channel over an mpi4py communicator: what
include/symmem_mpi.h does in C, for Python programs that run under MPI."""
from __future__ import annotations

import os
import sys
from typing import Any, Dict, List, Optional

from ._channel import Channel, Deadline
from .errors import TimeoutError

_NOTE_TAG = 0x534E  # on the notes' own duplicate: no other message uses it
# Sends still pending when their channel was released: MPI may still read
# their buffers, so they stay (a few hundred bytes, after a failure only).
_UNSENT: List[Any] = []


def mpi_module(obj: Any) -> Any:
    """mpi4py.MPI when obj is one of its communicators, else None; mpi4py
    is never imported here (a program with a communicator has it)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and isinstance(obj, mpi.Comm):
        return mpi
    return None


class MPIChannel(Channel):
    """The ranks meet through a duplicate of an mpi4py communicator, so that
    symmem's messages never match the program's.

    Exchanges are non-blocking collectives (Iallgather, Ibcast, Ibarrier)
    polled with Test until the deadline: a rank that never comes makes the
    others raise TimeoutError instead of hanging in MPI.  The request then
    stays pending, with buffers this channel keeps (MPI may still fill them
    when the late rank arrives); the collectives of later calls pair up in
    order as usual.  A split waits for every rank in an Ibarrier polled to
    the deadline, then calls Split (MPI has no non-blocking split).
    local_rank and local_size come from Split_type(COMM_TYPE_SHARED).
    Notes travel on a second duplicate, so they never meet the
    collectives: note_put sends ``key\\0value`` to every other rank at once
    (Isend), note_get receives whatever has arrived (Iprobe, Recv) and
    answers from what this rank heard; the first value of a key stays.  No
    lost_rank: MPI does not say which rank is gone.
    :meth:`release` frees the duplicates (unless MPI is finalized by then).
    The calls come from the thread that calls into symmem
    (MPI_THREAD_FUNNELED is enough when that is the main thread).
    """

    def __init__(self, mpi: Any, dup: Any) -> None:
        """Takes `dup` (a communicator of its own, freed by release)."""
        self.mpi, self.comm = mpi, dup
        self.rank, self.size = dup.Get_rank(), dup.Get_size()
        self._pending: List[Any] = []  # (request, buffers) that timed out
        self._notes_comm = dup.Dup()
        self._heard: Dict[str, str] = {}  # notes put or received, first value kept
        self._sends: List[Any] = []  # (request, buffer) of note_put
        local = dup.Split_type(mpi.COMM_TYPE_SHARED, self.rank)
        try:
            self.local_rank, self.local_size = local.Get_rank(), local.Get_size()
        finally:
            local.Free()

    @classmethod
    def of(cls, mpi: Any, comm: Any) -> "MPIChannel":
        """A channel on a duplicate of `comm` (collective over comm: Dup)."""
        if not isinstance(comm, mpi.Intracomm):
            raise TypeError("symmem's MPI bootstrap needs an intracommunicator, not %s"
                            % type(comm).__name__)
        return cls(mpi, comm.Dup())

    def __repr__(self) -> str:
        return "<symmem MPIChannel rank %d of %d>" % (self.rank, self.size)

    def _complete(self, req: Any, keep: Any, timeout_ms: int, what: str) -> None:
        """Polls req until it completes or the deadline passes."""
        self._pending = [p for p in self._pending if not p[0].Test()]
        deadline = Deadline(timeout_ms)
        while not req.Test():
            if deadline.passed():
                self._pending.append((req, keep))
                raise TimeoutError("MPI %s on rank %d of %d: not every rank took part within "
                                   "%d ms" % (what, self.rank, self.size, timeout_ms))
            os.sched_yield()

    def allgather(self, data: bytes, timeout_ms: int) -> List[bytes]:
        n = len(data)
        send, recv = bytearray(data), bytearray(n * self.size)
        byte = self.mpi.BYTE
        req = self.comm.Iallgather([send, n, byte], [recv, n, byte])
        self._complete(req, (send, recv), timeout_ms, "Iallgather")
        return [bytes(recv[r * n:(r + 1) * n]) for r in range(self.size)]

    def broadcast(self, data: bytes, root: int, timeout_ms: int) -> bytes:  # type: ignore[override]
        buf = bytearray(data)
        req = self.comm.Ibcast([buf, len(buf), self.mpi.BYTE], root=root)
        self._complete(req, buf, timeout_ms, "Ibcast")
        return bytes(buf)

    def barrier(self, timeout_ms: int) -> None:  # type: ignore[override]
        self._complete(self.comm.Ibarrier(), None, timeout_ms, "Ibarrier")

    def _drain_notes(self) -> None:
        """Receives every note that has arrived."""
        status = self.mpi.Status()
        comm = self._notes_comm
        while comm.Iprobe(source=self.mpi.ANY_SOURCE, tag=_NOTE_TAG, status=status):
            buf = bytearray(status.Get_count(self.mpi.BYTE))
            comm.Recv([buf, self.mpi.BYTE], source=status.Get_source(), tag=_NOTE_TAG)
            key, _, value = bytes(buf).partition(b"\0")
            self._heard.setdefault(key.decode("utf-8", "replace"),
                                   value.decode("utf-8", "replace"))

    def note_put(self, key: str, value: str) -> None:  # type: ignore[override]
        self._drain_notes()
        if key in self._heard:
            return
        self._heard[key] = value
        text = bytearray(key.encode("utf-8") + b"\0" + value.encode("utf-8"))
        self._sends = [s for s in self._sends if not s[0].Test()]
        for r in range(self.size):
            if r != self.rank:
                req = self._notes_comm.Isend([text, self.mpi.BYTE], dest=r, tag=_NOTE_TAG)
                self._sends.append((req, text))

    def note_get(self, key: str) -> Optional[str]:  # type: ignore[override]
        self._drain_notes()
        return self._heard.get(key)

    def split(self, color: int, key: int,  # type: ignore[override]
              timeout_ms: int) -> Optional["MPIChannel"]:
        self.barrier(timeout_ms)
        sub = self.comm.Split(color if color >= 0 else self.mpi.UNDEFINED, key)
        if color < 0:
            return None
        return MPIChannel(self.mpi, sub)

    def release(self) -> None:
        comm, self.comm = self.comm, None
        if comm is None or self.mpi.Is_finalized():
            return
        self._drain_notes()
        for req, text in self._sends:
            if not req.Test():
                req.Free()
                _UNSENT.append(text)
        self._notes_comm.Free()
        comm.Free()
