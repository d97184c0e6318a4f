"""Loading libsymmem and declaring the C API of ``include/symmem.h`` to ctypes.

Nothing here is public: the rest of the package calls ``LIB.symm_...``
through the prototypes declared below, so that every argument is converted
(and checked) by ctypes exactly as the header types it.
"""
from __future__ import annotations

import ctypes
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char, c_char_p, c_int, c_int64,
                    c_size_t, c_uint, c_uint32, c_uint64, c_void_p)
from typing import Optional

SYMM_MAX_DIMS = 8
SYMM_CONFIG_VERSION = 3
SYMM_BOOTSTRAP_CALLBACKS_VERSION = 2

_HERE = os.path.dirname(os.path.abspath(__file__))


class SymmBootstrapCallbacks(Structure):
    """``symm_bootstrap_callbacks_t`` (version 2); its function types follow."""


# int (*allgather)(void *ctx, const void *send, void *recv, size_t len, int timeout_ms)
ALLGATHER_FN = CFUNCTYPE(c_int, c_void_p, c_void_p, c_void_p, c_size_t, c_int)
# int (*broadcast)(void *ctx, void *buf, size_t len, int root, int timeout_ms)
BROADCAST_FN = CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_int, c_int)
# int (*barrier)(void *ctx, int timeout_ms)
BARRIER_FN = CFUNCTYPE(c_int, c_void_p, c_int)
# void (*abort)(void *ctx, int code, const char *reason)
ABORT_FN = CFUNCTYPE(None, c_void_p, c_int, c_char_p)
# int (*split)(void *ctx, int color, int key, symm_bootstrap_callbacks_t *child, int timeout_ms)
SPLIT_FN = CFUNCTYPE(c_int, c_void_p, c_int, c_int, POINTER(SymmBootstrapCallbacks), c_int)
# void (*release)(void *ctx)
RELEASE_FN = CFUNCTYPE(None, c_void_p)
# int (*note_put)(void *ctx, const char *key, const char *value)
NOTE_PUT_FN = CFUNCTYPE(c_int, c_void_p, c_char_p, c_char_p)
# int (*note_get)(void *ctx, const char *key, char *value, size_t cap, int *found)
NOTE_GET_FN = CFUNCTYPE(c_int, c_void_p, c_char_p, c_void_p, c_size_t, POINTER(c_int))
# int (*lost_rank)(void *ctx)
LOST_RANK_FN = CFUNCTYPE(c_int, c_void_p)

SymmBootstrapCallbacks._fields_ = [
    ("size", c_size_t),
    ("version", c_uint),
    ("rank", c_int),
    ("world_size", c_int),
    ("local_rank", c_int),
    ("local_size", c_int),
    ("ctx", c_void_p),
    ("allgather", ALLGATHER_FN),
    ("broadcast", BROADCAST_FN),
    ("barrier", BARRIER_FN),
    ("abort", ABORT_FN),
    ("split", SPLIT_FN),
    ("release", RELEASE_FN),
    ("note_put", NOTE_PUT_FN),  # version 2
    ("note_get", NOTE_GET_FN),
    ("lost_rank", LOST_RANK_FN),
]


class SymmConfig(Structure):
    """``symm_config_t`` (members of versions 1 to 3)."""

    _fields_ = [
        ("size", c_size_t),
        ("version", c_uint),
        ("rank", c_int),
        ("world_size", c_int),
        ("local_rank", c_int),
        ("local_size", c_int),
        ("device", c_int),
        ("backend", c_int),
        ("timeout_ms", c_int),
        ("store_addr", c_char_p),
        ("token", c_char_p),
        ("job_id", c_char_p),
        ("store_server", c_int),
        ("signal_pad_bytes", c_size_t),  # version 2
        ("bootstrap", POINTER(SymmBootstrapCallbacks)),  # version 3
    ]


class SymmUserMem(Structure):
    """symm_user_mem_t: memory the caller has, for symm_tensor_register."""
    _fields_ = [("size", c_size_t), ("version", c_int), ("ptr", c_void_p), ("fd", c_int),
                ("fd_offset", c_uint64)]


SYMM_USER_MEM_VERSION = 1


class SymmView(Structure):
    """``symm_view_t``: pointer, shape, strides (elements), dtype, device, rank."""

    _fields_ = [
        ("data", c_void_p),
        ("ndim", c_int),
        ("sizes", c_int64 * SYMM_MAX_DIMS),
        ("strides", c_int64 * SYMM_MAX_DIMS),
        ("dtype", c_int),
        ("device", c_int),
        ("rank", c_int),
    ]


class SymmSettingInfo(Structure):
    """``symm_setting_info_t``."""

    _fields_ = [
        ("name", c_char_p),
        ("type", c_char_p),
        ("default_value", c_char_p),
        ("help", c_char_p),
        ("value", c_char_p),
        ("problem", c_char_p),
        ("secret", c_int),
        ("per_job", c_int),
    ]


def library_path() -> str:
    """Path of the libsymmem.so this package loads.

    ``SYMMEM_LIBRARY`` names one explicitly (a build tree, say); otherwise the
    copy installed inside the package (``symmem/lib``) is used, so that an
    installed package needs no ``LD_LIBRARY_PATH``.
    """
    explicit = os.environ.get("SYMMEM_LIBRARY")
    if explicit:
        return explicit
    for sub in ("lib", "lib64"):
        cand = os.path.join(_HERE, sub, "libsymmem.so")
        if os.path.exists(cand):
            return cand
    raise ImportError(
        "symmem: libsymmem.so is not inside the package (%s/lib); install the "
        "package with `pip install .` from the repository, or set SYMMEM_LIBRARY "
        "to the path of a built libsymmem.so" % _HERE)


# (name, result type, argument types): the prototypes of symmem.h, one a line.
_R = c_int  # symm_result_t
_PROTOTYPES = [
    ("symm_version", c_int, []),
    ("symm_strerror", c_char_p, [c_int]),
    ("symm_last_error", c_char_p, []),
    ("symm_backend_name", c_char_p, [c_int]),
    ("symm_backend_from_name", _R, [c_char_p, POINTER(c_int)]),
    ("symm_backend_available", _R, [c_int, c_void_p, c_size_t]),
    ("symm_backend_preferred", c_int, [c_int]),
    ("symm_multicast_status", None, [c_void_p, c_size_t]),
    ("symm_dtype_size", c_size_t, [c_int]),
    ("symm_dtype_name", c_char_p, [c_int]),
    ("symm_dtype_from_name", _R, [c_char_p, POINTER(c_int)]),
    ("symm_setting_count", c_size_t, []),
    ("symm_setting_get", _R, [c_size_t, POINTER(SymmSettingInfo)]),
    ("symm_comm_init", _R, [POINTER(SymmConfig), POINTER(c_void_p)]),
    ("symm_comm_destroy", None, [c_void_p]),
    ("symm_comm_rank", c_int, [c_void_p]),
    ("symm_comm_size", c_int, [c_void_p]),
    ("symm_comm_local_rank", c_int, [c_void_p]),
    ("symm_comm_local_size", c_int, [c_void_p]),
    ("symm_comm_device", c_int, [c_void_p]),
    ("symm_comm_backend", c_int, [c_void_p]),
    ("symm_comm_timeout_ms", c_int, [c_void_p]),
    ("symm_comm_barrier", _R, [c_void_p]),
    ("symm_comm_split", _R, [c_void_p, c_int, c_int, POINTER(c_void_p)]),
    ("symm_comm_split_2d", _R, [c_void_p, c_int, POINTER(c_void_p), POINTER(c_void_p)]),
    ("symm_comm_backend_handle", _R, [c_void_p, POINTER(c_void_p)]),
    ("symm_comm_pool_trim", _R, [c_void_p, POINTER(c_size_t)]),
    ("symm_comm_store", c_void_p, [c_void_p]),
    ("symm_store_set", _R, [c_void_p, c_char_p, c_char_p, c_size_t]),
    ("symm_store_get", _R, [c_void_p, c_char_p, c_void_p, c_size_t, POINTER(c_size_t), c_int]),
    ("symm_store_add", _R, [c_void_p, c_char_p, c_int64, POINTER(c_int64)]),
    ("symm_store_compare_set", _R, [c_void_p, c_char_p, c_char_p, c_size_t, c_char_p,
                                    c_size_t, c_void_p, c_size_t, POINTER(c_size_t)]),
    ("symm_store_wait", _R, [c_void_p, POINTER(c_char_p), c_size_t, c_int]),
    ("symm_store_delete", _R, [c_void_p, c_char_p]),
    ("symm_store_check", _R, [c_void_p, POINTER(c_char_p), c_size_t, POINTER(c_int)]),
    ("symm_tensor_alloc", _R, [c_void_p, POINTER(c_int64), c_int, c_int, POINTER(c_void_p)]),
    ("symm_tensor_register", _R, [c_void_p, POINTER(SymmUserMem), POINTER(c_int64), c_int, c_int,
                                  POINTER(c_void_p)]),
    ("symm_tensor_rendezvous", _R, [c_void_p]),
    ("symm_tensor_is_rendezvoused", c_int, [c_void_p]),
    ("symm_tensor_data", c_void_p, [c_void_p]),
    ("symm_tensor_ndim", c_int, [c_void_p]),
    ("symm_tensor_dtype", c_int, [c_void_p]),
    ("symm_tensor_numel", c_size_t, [c_void_p]),
    ("symm_tensor_nbytes", c_size_t, [c_void_p]),
    ("symm_tensor_local_view", _R, [c_void_p, POINTER(SymmView)]),
    ("symm_tensor_remote_view", _R, [c_void_p, c_int, POINTER(SymmView)]),
    ("symm_tensor_peer_ptrs", _R, [c_void_p, POINTER(POINTER(c_void_p))]),
    ("symm_tensor_peer_ptrs_device", _R, [c_void_p, POINTER(POINTER(c_void_p))]),
    ("symm_tensor_signal_pad", _R, [c_void_p, c_int, POINTER(c_void_p)]),
    ("symm_signal_pad_bytes", c_size_t, []),
    ("symm_comm_signal_pad_bytes", c_size_t, [c_void_p]),
    ("symm_signal_put", _R, [c_void_p, c_int, c_int, c_void_p]),
    ("symm_put", _R, [c_void_p, c_int, c_size_t, c_void_p, c_size_t, c_void_p]),
    ("symm_get", _R, [c_void_p, c_int, c_size_t, c_void_p, c_size_t, c_void_p]),
    ("symm_put_signal", _R, [c_void_p, c_int, c_size_t, c_void_p, c_size_t, c_int, c_void_p]),
    ("symm_signal_wait", _R, [c_void_p, c_int, c_int, c_void_p]),
    ("symm_signal_barrier", _R, [c_void_p, c_int, c_void_p]),
    ("symm_signal_channels", c_int, [c_void_p]),
    ("symm_tensor_signal_pad_ptrs_device", _R, [c_void_p, POINTER(POINTER(c_void_p))]),
    ("symm_memset32", _R, [c_void_p, c_void_p, c_uint32, c_size_t, c_void_p]),
    ("symm_tensor_contiguous_view", _R, [c_void_p, POINTER(SymmView)]),
    ("symm_tensor_lookup", _R, [c_void_p, POINTER(c_void_p), POINTER(c_int),
                                POINTER(c_size_t)]),
    ("symm_validate", _R, [c_void_p, c_void_p, c_size_t]),
    ("symm_tensor_free", _R, [c_void_p]),
    ("symm_tensor_comm", c_void_p, [c_void_p]),
    ("symm_mempool_set_comm", _R, [c_void_p]),
    ("symm_mempool_alloc", c_void_p, [c_int64, c_int, c_void_p]),
    ("symm_mempool_free", None, [c_void_p, c_int64, c_int, c_void_p]),
    ("symm_redop_from_name", _R, [c_char_p, POINTER(c_int)]),
    ("symm_algo_name", c_char_p, [c_int]),
    ("symm_algo_from_name", _R, [c_char_p, POINTER(c_int)]),
    ("symm_comm_reserve_scratch", _R, [c_void_p, c_size_t]),
    ("symm_comm_set_allreduce_algo", _R, [c_void_p, c_int]),
    ("symm_comm_allreduce_algo", _R, [c_void_p, POINTER(c_int)]),
    ("symm_comm_set_copy_algo", _R, [c_void_p, c_int]),
    ("symm_comm_copy_algo", _R, [c_void_p, POINTER(c_int)]),
    ("symm_all_reduce_algo", _R, [c_void_p, c_size_t, c_int, POINTER(c_int)]),
    ("symm_all_reduce", _R, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p]),
    ("symm_all_gather", _R, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_void_p]),
    ("symm_reduce_scatter", _R, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int,
                                 c_void_p]),
    ("symm_broadcast", _R, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_int, c_void_p]),
    ("symm_all_to_all", _R, [c_void_p, c_void_p, c_void_p, c_size_t, c_int, c_void_p]),
    ("symm_all_to_all_v", _R, [c_void_p, c_void_p, POINTER(c_size_t), POINTER(c_size_t),
                               c_void_p, POINTER(c_size_t), POINTER(c_size_t), c_int, c_void_p]),
    # The splits of the device-split forms are addresses of arrays (device
    # memory on GPU backends), passed as they are.
    ("symm_all_to_all_vdev", _R, [c_void_p, c_void_p, c_size_t, c_void_p, c_size_t, c_size_t,
                                  c_int, c_void_p, c_void_p, c_void_p]),
    ("symm_all_to_all_vdev_2d", _R, [c_void_p, c_void_p, c_size_t, c_void_p, c_size_t,
                                     c_size_t, c_int, c_void_p, c_void_p, c_int, c_size_t,
                                     c_void_p]),
    ("symm_all_to_all_vdev_2d_combine", _R, [c_void_p, c_void_p, c_size_t, c_void_p, c_size_t,
                                             c_size_t, c_int, c_void_p, c_void_p, c_int,
                                             c_void_p]),
    ("symm_comm_check_async_error", _R, [c_void_p]),
    ("symm_dlpack_capsule_destructor", None, [c_void_p]),
]


def _load(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    for name, restype, argtypes in _PROTOTYPES:
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


LIB_PATH: str = library_path()
LIB: ctypes.CDLL = _load(LIB_PATH)


def text(value: Optional[bytes]) -> Optional[str]:
    """A C string from the library as str (None stays None)."""
    return None if value is None else value.decode("utf-8", "replace")


def c_string_buffer(size: int) -> ctypes.Array:
    """A zeroed char buffer for calls that write a reason (``why``)."""
    return (c_char * size)()
