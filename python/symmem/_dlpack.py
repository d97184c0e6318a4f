"""DLPack both ways, in ctypes: capsules out of views, buffers out of arrays.

Layouts are those of dlpack.h (legacy ``DLManagedTensor``, and
``DLManagedTensorVersioned`` of DLPack 1.x).  An exported capsule owns a
ctypes struct kept in ``_LIVE`` together with the object that owns the
memory; the struct's deleter drops that entry, so the memory outlives every
Python reference to the tensor for as long as a consumer holds the capsule's
contents.
"""
from __future__ import annotations

import ctypes
from ctypes import (CFUNCTYPE, POINTER, Structure, addressof, c_char_p, c_int, c_int32,
                    c_int64, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p, py_object)
from typing import Any, Dict, NamedTuple, Optional, Sequence, Tuple

from ._dtypes import DType, dtype_from_dlpack, dtype_from_typestr
from ._lib import LIB
from .errors import invalid

DL_CPU, DL_CUDA, DL_CUDA_HOST, DL_CUDA_MANAGED = 1, 2, 3, 13
DLPACK_VERSION = (1, 0)
FLAG_READ_ONLY = 1

_NAME_LEGACY = b"dltensor"
_NAME_VERSIONED = b"dltensor_versioned"
_NAME_USED_LEGACY = b"used_dltensor"
_NAME_USED_VERSIONED = b"used_dltensor_versioned"


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", POINTER(c_int64)),
                ("strides", POINTER(c_int64)), ("byte_offset", c_uint64)]


class DLManagedTensor(Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p), ("deleter", c_void_p)]


class DLPackVersion(Structure):
    _fields_ = [("major", c_uint32), ("minor", c_uint32)]


class DLManagedTensorVersioned(Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", c_void_p), ("deleter", c_void_p),
                ("flags", c_uint64), ("dl_tensor", DLTensor)]


_DELETER_T = CFUNCTYPE(None, c_void_p)


def _api(name: str, restype: Any, *argtypes: Any) -> Any:
    return ctypes.PYFUNCTYPE(restype, *argtypes)((name, ctypes.pythonapi))


_capsule_new = _api("PyCapsule_New", py_object, c_void_p, c_char_p, c_void_p)
_capsule_is_valid = _api("PyCapsule_IsValid", c_int, py_object, c_char_p)
_capsule_pointer = _api("PyCapsule_GetPointer", c_void_p, py_object, c_char_p)
_capsule_set_name = _api("PyCapsule_SetName", c_int, py_object, c_char_p)

# address of the managed struct -> (struct, shape, strides, owner)
_LIVE: Dict[int, Tuple[Any, Any, Any, Any]] = {}


@_DELETER_T
def _deleter(managed: int) -> None:
    _LIVE.pop(managed, None)


_DELETER_ADDR = ctypes.cast(_deleter, c_void_p).value
# The capsules' destructor is libsymmem's, in C: it may run with an
# exception pending (a consumer that refused the tensor raised, then
# dropped the capsule), which it keeps; one written in Python could not
# (every ctypes call in it trips over that exception, and it is lost).
# Unconsumed, it calls the deleter above.
_DESTRUCTOR_ADDR = ctypes.cast(LIB.symm_dlpack_capsule_destructor, c_void_p).value


def live_exports() -> int:
    """Number of exported DLPack tensors whose consumers have not released them."""
    return len(_LIVE)


def export(owner: Any, data: int, shape: Sequence[int], strides: Sequence[int],
           dtype: DType, device: int, versioned: bool) -> Any:
    """A DLPack capsule over `data` that keeps `owner` alive until released.

    device: -1 for CPU memory, else the CUDA ordinal.  versioned: a DLPack
    1.x ``dltensor_versioned`` capsule, else a legacy ``dltensor`` one.
    """
    ndim = len(shape)
    c_shape = (c_int64 * ndim)(*shape)
    c_strides = (c_int64 * ndim)(*strides)
    managed = DLManagedTensorVersioned() if versioned else DLManagedTensor()
    if versioned:
        managed.version.major, managed.version.minor = DLPACK_VERSION
        managed.flags = 0
    t = managed.dl_tensor
    t.data = data
    t.device.device_type, t.device.device_id = (DL_CPU, 0) if device < 0 else (DL_CUDA, device)
    t.ndim = ndim
    t.dtype.code, t.dtype.bits, t.dtype.lanes = dtype.dl_code, dtype.itemsize * 8, 1
    t.shape = ctypes.cast(c_shape, POINTER(c_int64))
    t.strides = ctypes.cast(c_strides, POINTER(c_int64))
    t.byte_offset = 0
    managed.manager_ctx = None
    managed.deleter = _DELETER_ADDR
    addr = addressof(managed)
    _LIVE[addr] = (managed, c_shape, c_strides, owner)
    name = _NAME_VERSIONED if versioned else _NAME_LEGACY
    return _capsule_new(addr, name, _DESTRUCTOR_ADDR)


def dlpack_device(device: int) -> Tuple[int, int]:
    """``__dlpack_device__``'s answer for a symmem device (-1: CPU)."""
    return (DL_CPU, 0) if device < 0 else (DL_CUDA, device)


class Buffer(NamedTuple):
    """A contiguous array borrowed from a Python object for one C call."""

    ptr: int
    numel: int
    dtype: DType
    device: int      # -1: CPU memory
    readonly: bool
    shape: Tuple[int, ...]  # row-major sizes; () for a 0-d array


def _contiguous(shape: Sequence[int], strides: Optional[Sequence[int]], unit: int) -> bool:
    # No elements: nothing to lay out (NumPy gives an empty array strides (0,)).
    if strides is None or any(int(size) == 0 for size in shape):
        return True
    expect = unit
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1 and stride != expect:
            return False
        expect *= size
    return True


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for s in shape:
        n *= int(s)
    return n


def _device_of(device_type: int, device_id: int, what: str) -> int:
    if device_type in (DL_CPU, DL_CUDA_HOST, DL_CUDA_MANAGED):
        return -1
    if device_type == DL_CUDA:
        return device_id
    invalid("%s is on DLPack device type %d; symmem takes CPU or CUDA memory" %
            (what, device_type))


def _not_contiguous(what: str) -> None:
    invalid("%s is not contiguous (row-major); pass a contiguous copy "
            "(numpy.ascontiguousarray(x), x.contiguous())" % what)


class Borrowed:
    """Context manager: the Buffer of an array-like for the duration of a call.

    Takes, in this order: a symmem tensor or view; ``__dlpack__`` (versioned
    capsule first, then legacy); ``__cuda_array_interface__``;
    ``__array_interface__``.  Nothing is copied.  On exit a consumed DLPack
    capsule is released to its producer.
    """

    def __init__(self, obj: Any, what: str, stream: Optional[int] = None) -> None:
        self.obj, self.what, self.stream = obj, what, stream
        self._capsule: Any = None
        self._managed = 0
        self._used_name = b""

    def __enter__(self) -> Buffer:
        direct = getattr(self.obj, "_symmem_buffer", None)
        if direct is not None:
            return direct()
        if hasattr(self.obj, "__dlpack__"):
            buf = self._from_dlpack()
            if buf is not None:
                return buf
        for attr, cuda in (("__cuda_array_interface__", True), ("__array_interface__", False)):
            iface = getattr(self.obj, attr, None)
            if iface is not None:
                return self._from_interface(iface, cuda)
        invalid("%s (%s) is no array: it has neither __dlpack__ nor the array interface" %
                (self.what, type(self.obj).__name__))

    def _from_dlpack(self) -> Optional[Buffer]:
        kwargs: Dict[str, Any] = {}
        try:
            dev_type, _ = self.obj.__dlpack_device__()
        except (AttributeError, TypeError):
            dev_type = DL_CPU
        if dev_type == DL_CUDA and self.stream:
            kwargs["stream"] = self.stream
        try:
            try:
                capsule = self.obj.__dlpack__(max_version=DLPACK_VERSION, **kwargs)
            except TypeError:
                capsule = self.obj.__dlpack__(**kwargs)
        except BufferError:
            return None  # read-only NumPy arrays refuse legacy DLPack: array interface
        if _capsule_is_valid(capsule, _NAME_VERSIONED):
            ptr = _capsule_pointer(capsule, _NAME_VERSIONED)
            m = DLManagedTensorVersioned.from_address(ptr)
            if m.version.major > DLPACK_VERSION[0]:
                invalid("%s: DLPack version %d.%d is newer than symmem reads" %
                        (self.what, m.version.major, m.version.minor))
            readonly = bool(m.flags & FLAG_READ_ONLY)
            self._used_name = _NAME_USED_VERSIONED
        elif _capsule_is_valid(capsule, _NAME_LEGACY):
            ptr = _capsule_pointer(capsule, _NAME_LEGACY)
            m = DLManagedTensor.from_address(ptr)
            readonly = False
            self._used_name = _NAME_USED_LEGACY
        else:
            invalid("%s.__dlpack__() gave no DLPack capsule" % self.what)
        # From here the capsule's contents are ours to release (__exit__).
        _capsule_set_name(capsule, self._used_name)
        self._capsule, self._managed, self._deleter = capsule, ptr, m.deleter
        t = m.dl_tensor
        dtype = dtype_from_dlpack(t.dtype.code, t.dtype.bits, t.dtype.lanes)
        shape = [t.shape[i] for i in range(t.ndim)]
        strides = [t.strides[i] for i in range(t.ndim)] if t.strides else None
        if not _contiguous(shape, strides, 1):
            _not_contiguous(self.what)
        device = _device_of(t.device.device_type, t.device.device_id, self.what)
        return Buffer((t.data or 0) + t.byte_offset, _numel(shape), dtype, device, readonly,
                      tuple(int(s) for s in shape))

    def _from_interface(self, iface: Dict[str, Any], cuda: bool) -> Buffer:
        data = iface.get("data")
        if not isinstance(data, tuple):
            invalid("%s: an array interface without a (pointer, read-only) pair" % self.what)
        dtype = dtype_from_typestr(iface["typestr"], getattr(self.obj, "dtype", None))
        shape = tuple(iface["shape"])
        if not _contiguous(shape, iface.get("strides"), dtype.itemsize):
            _not_contiguous(self.what)
        device = -1
        if cuda:
            # The interface names no device: ask the object, else the first GPU.
            try:
                device = int(self.obj.__dlpack_device__()[1])
            except (AttributeError, TypeError):
                device = 0
        return Buffer(int(data[0] or 0), _numel(shape), dtype, device, bool(data[1]),
                      tuple(int(s) for s in shape))

    def __exit__(self, *exc: Any) -> None:
        if self._managed and self._deleter:
            _DELETER_T(self._deleter)(self._managed)
        self._capsule = None
        self._managed = 0

