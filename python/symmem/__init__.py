"""symmem: symmetric memory across processes and GPUs, from Python.

Every rank allocates a tensor of the same shape; after a collective
rendezvous every rank loads from and stores to every peer's buffer
directly, signals through the tensor's signal pads, and runs all-reduce and
the other collectives on direct loads and stores::

    import numpy as np, symmem

    with symmem.init() as comm:              # rank/size from symmem-run, torchrun, ...
        t = comm.empty((1024,), "float32").rendezvous()
        right = np.from_dlpack(t.remote((comm.rank + 1) % comm.size))
        right[:] = comm.rank                 # writes the neighbour's memory
        comm.barrier()
        comm.all_reduce(np.from_dlpack(t))   # in place, zero copy

Run with ``symmem-run -n 4 python script.py``.  Under torchrun or mpirun
the ranks can meet through what the job has already, with no symmem store
or port: ``symmem.init(bootstrap=store_or_group_or_mpi_comm)`` (see
:mod:`symmem.bootstrap`).

The binding is written with :mod:`ctypes` over the public C API
(``include/symmem.h``) of the ``libsymmem.so`` shipped inside this package.
ctypes rather than cffi: it is part of the standard library, so the package
has no dependency at all and needs no compiler or build step of its own
(only CMake's build of the C library); the API is small and plain C (opaque
handles, a few flat structs), which ctypes declares exactly; and DLPack
capsules, which need the CPython capsule API, are reachable through
``ctypes.pythonapi`` just as well.  The cost, a slower call than cffi's
(about a microsecond), is small next to a collective or a rendezvous.

Errors: every failing C call raises the subclass of :class:`SymmemError`
for its result code, carrying ``.code`` and ``.detail`` (symm_last_error()).
"""
from __future__ import annotations

from ctypes import byref, c_int
from typing import Dict, List, NamedTuple, Optional, Tuple

from ._dlpack import live_exports
from ._dtypes import DTYPES
from ._lib import LIB, LIB_PATH, SymmSettingInfo, c_string_buffer, text
from ._tools import cmake_dir, include_dir, pkgconfig_dir, tool_path
from . import bootstrap
from .comm import (SPLIT_BY_HOST, SPLIT_NONE, Communicator, Lookup, Store, init,
                   set_signal_pad_size)
from .errors import (BackendError, BackendUnavailableError, InternalError,
                     InvalidArgumentError, MismatchError, NoMemoryError, NotFoundError,
                     PeerLostError, PermissionDeniedError, ProtocolError, Result, StateError,
                     SymmemError, SystemCallError, TimeoutError, UnsupportedError, check,
                     strerror)
from .tensor import SymmetricTensor, View

Error = SymmemError

__all__ = [
    "init", "bootstrap", "Communicator", "Store", "SPLIT_NONE", "SPLIT_BY_HOST", "SymmetricTensor", "View", "Lookup",
    "version", "__version__", "backends", "backend_available", "multicast_status",
    "settings", "Setting", "dtypes", "signal_pad_bytes", "set_signal_pad_size",
    "tool_path", "library_path",
    "include_dir", "cmake_dir", "pkgconfig_dir",
    "SymmemError", "Error", "Result", "InvalidArgumentError", "NoMemoryError",
    "UnsupportedError", "MismatchError", "TimeoutError", "PeerLostError",
    "SystemCallError", "BackendError", "NotFoundError", "StateError",
    "PermissionDeniedError", "ProtocolError", "InternalError", "BackendUnavailableError",
    "strerror",
]


def version() -> Tuple[int, int, int]:
    """(major, minor, patch) of the loaded libsymmem (``symm_version``)."""
    v = int(LIB.symm_version())
    return (v // 10000, v // 100 % 100, v % 100)


__version__: str = "%d.%d.%d" % version()


def library_path() -> str:
    """Path of the libsymmem.so in use."""
    return LIB_PATH


def dtypes() -> List[str]:
    """The element types symmem knows, by their NumPy-style names."""
    return [d.name for d in DTYPES]


def signal_pad_bytes() -> int:
    """The smallest and default signal pad, in bytes (``symm_signal_pad_bytes``);
    a communicator's own is ``Communicator.signal_pad_bytes``."""
    return int(LIB.symm_signal_pad_bytes())


def backend_available(name: str) -> Tuple[bool, str]:
    """Whether backend `name` can be used in this process, and if not why.
    InvalidArgumentError for an unknown name."""
    code = c_int()
    check(LIB.symm_backend_from_name(str(name).encode(), byref(code)))
    why = c_string_buffer(512)
    result = LIB.symm_backend_available(code.value, why, len(why))
    if result not in (0, Result.BACKEND_UNAVAILABLE):
        check(result)
    return result == 0, text(why.value) or ""


def backends() -> Dict[str, Tuple[bool, str]]:
    """Every backend of this library, in ``auto``'s order of preference,
    with :func:`backend_available`'s answer."""
    out: Dict[str, Tuple[bool, str]] = {}
    i = 0
    while True:
        b = LIB.symm_backend_preferred(i)
        if b == 0:
            return out
        name = text(LIB.symm_backend_name(b)) or "?"
        out[name] = backend_available(name)
        i += 1


def multicast_status() -> str:
    """Why symmem creates no NVLink multicast objects, and the variables that
    keep other libraries off NVLS (``symm_multicast_status``)."""
    why = c_string_buffer(1024)
    LIB.symm_multicast_status(why, len(why))
    return text(why.value) or ""


class Setting(NamedTuple):
    """One SYMM_* setting with the environment's value (``symm_setting_get``)."""

    name: str
    type: str
    default: Optional[str]
    help: str
    value: Optional[str]
    problem: Optional[str]
    secret: bool
    per_job: bool


def settings() -> List[Setting]:
    """Every SYMM_* setting, judged by the parser symm_comm_init uses."""
    out = []
    for i in range(int(LIB.symm_setting_count())):
        info = SymmSettingInfo()
        check(LIB.symm_setting_get(i, byref(info)))
        out.append(Setting(text(info.name) or "", text(info.type) or "",
                           text(info.default_value), text(info.help) or "",
                           text(info.value), text(info.problem), bool(info.secret),
                           bool(info.per_job)))
    return out
