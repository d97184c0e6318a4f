"""Exceptions: one class per ``symm_result_t`` code, under :class:`SymmemError`.

Every failing C call raises the class of its code, carrying the code and the
detailed message of ``symm_last_error()``.  Where a built-in exception means
the same thing the class derives from it too, so that ``except ValueError``
or ``except TimeoutError`` (the built-in) still catch symmem's.
"""
from __future__ import annotations

import builtins
import enum
import threading
from typing import Dict, NoReturn, Optional, Type

from ._lib import LIB, text


class Result(enum.IntEnum):
    """The result codes of ``symm_result_t``."""

    SUCCESS = 0
    INVALID_ARG = 1
    NO_MEMORY = 2
    UNSUPPORTED = 3
    MISMATCH = 4
    TIMEOUT = 5
    PEER_LOST = 6
    SYSTEM = 7
    BACKEND = 8
    NOT_FOUND = 9
    STATE = 10
    PERMISSION = 11
    PROTOCOL = 12
    INTERNAL = 13
    BACKEND_UNAVAILABLE = 14


class SymmemError(Exception):
    """Base class of every symmem error.

    Attributes:
        code: the :class:`Result` code (an int for a code this package does
            not know).
        detail: ``symm_last_error()``'s message at the time of the failure
            ("" when the failure arose in Python, before any C call).
    """

    code: int = -1
    detail: str = ""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidArgumentError(SymmemError, ValueError):
    """SYMM_ERR_INVALID_ARG: a bad pointer, size, rank, dtype or setting."""


class NoMemoryError(SymmemError, MemoryError):
    """SYMM_ERR_NO_MEMORY: a host or device allocation failed."""


class UnsupportedError(SymmemError):
    """SYMM_ERR_UNSUPPORTED: not available with this backend, or here."""


class MismatchError(SymmemError):
    """SYMM_ERR_MISMATCH: ranks passed different arguments to a collective."""


class TimeoutError(SymmemError, builtins.TimeoutError):  # noqa: A001 (named by the API)
    """SYMM_ERR_TIMEOUT: a blocking wait ran past the communicator's timeout."""


class PeerLostError(SymmemError, ConnectionError):
    """SYMM_ERR_PEER_LOST: a peer process died or closed its connection."""


class SystemCallError(SymmemError, OSError):
    """SYMM_ERR_SYSTEM: an operating-system call failed (errno in the message)."""


class BackendError(SymmemError):
    """SYMM_ERR_BACKEND: the backend's library (CUDA, NCCL ...) failed."""


class NotFoundError(SymmemError, LookupError):
    """SYMM_ERR_NOT_FOUND: no such key, or a pointer that is no symmetric memory."""


class StateError(SymmemError):
    """SYMM_ERR_STATE: the call is not valid now (before a rendezvous, say)."""


class PermissionDeniedError(SymmemError, PermissionError):
    """SYMM_ERR_PERMISSION: refused (wrong token, a peer of another user)."""


class ProtocolError(SymmemError):
    """SYMM_ERR_PROTOCOL: a malformed message from a peer or the store."""


class InternalError(SymmemError):
    """SYMM_ERR_INTERNAL: a bug in symmem; please report it."""


class BackendUnavailableError(SymmemError):
    """SYMM_ERR_BACKEND_UNAVAILABLE: the backend's library or device is missing."""


ERROR_CLASSES: Dict[int, Type[SymmemError]] = {
    Result.INVALID_ARG: InvalidArgumentError,
    Result.NO_MEMORY: NoMemoryError,
    Result.UNSUPPORTED: UnsupportedError,
    Result.MISMATCH: MismatchError,
    Result.TIMEOUT: TimeoutError,
    Result.PEER_LOST: PeerLostError,
    Result.SYSTEM: SystemCallError,
    Result.BACKEND: BackendError,
    Result.NOT_FOUND: NotFoundError,
    Result.STATE: StateError,
    Result.PERMISSION: PermissionDeniedError,
    Result.PROTOCOL: ProtocolError,
    Result.INTERNAL: InternalError,
    Result.BACKEND_UNAVAILABLE: BackendUnavailableError,
}


def strerror(code: int) -> str:
    """``symm_strerror``: the short description of a result code."""
    return text(LIB.symm_strerror(int(code))) or "unknown error"


class _CallbackCause(threading.local):
    exc: Optional[BaseException] = None


# The exception a Python bootstrap callback raised on this thread (and
# turned into its result code for C), kept for the error of the symmem
# call it failed: that error's __cause__.
_callback_cause = _CallbackCause()


def note_callback_exception(exc: Optional[BaseException]) -> None:
    """Keeps `exc` (None: forgets the last one) as the cause of this
    thread's next error; each callback calls it as it starts and fails."""
    _callback_cause.exc = exc


def _take_callback_exception() -> Optional[BaseException]:
    exc, _callback_cause.exc = _callback_cause.exc, None
    return exc


def make_error(code: int, detail: Optional[str] = None) -> SymmemError:
    """The exception for `code`; `detail` defaults to ``symm_last_error()``.
    A failure that a Python bootstrap callback's exception caused carries
    that exception as ``__cause__`` and names it in the message."""
    if detail is None:
        detail = text(LIB.symm_last_error()) or ""
    cls = ERROR_CLASSES.get(int(code), SymmemError)
    msg = strerror(code) + (": " + detail if detail else "")
    cause = _take_callback_exception()
    if cause is not None:
        msg += " (the callback raised %s: %s)" % (type(cause).__name__, cause)
    err = cls(msg)
    err.__cause__ = cause
    try:
        err.code = Result(code)
    except ValueError:
        err.code = int(code)
    err.detail = detail
    return err


def check(code: int) -> None:
    """Raises the exception of a failing result code; nothing on success.
    A KeyboardInterrupt or SystemExit that stopped a bootstrap callback is
    raised itself, once C has returned."""
    if code != 0:
        err = make_error(code)
        cause = err.__cause__
        if cause is not None and not isinstance(cause, Exception):
            raise cause
        raise err


def invalid(message: str) -> NoReturn:
    """Raises InvalidArgumentError for an argument refused before any C call."""
    raise make_error(Result.INVALID_ARG, message)
