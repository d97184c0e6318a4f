"""Symmetric tensors and their views."""
from __future__ import annotations

import ctypes
import weakref
from ctypes import POINTER, byref, c_void_p
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Tuple

from . import _dlpack
from ._dtypes import DTYPES, ML_DTYPES, DType, dtype_of
from ._lib import LIB, SymmView
from .errors import check, invalid, make_error, Result

if TYPE_CHECKING:  # pragma: no cover
    from .comm import Communicator, _CommHandle

StreamLike = Any  # None, an int cudaStream_t, or an object with .cuda_stream / .ptr


def stream_handle(stream: StreamLike) -> Optional[int]:
    """The cudaStream_t of `stream`: None, an int, or an object with a
    ``cuda_stream`` (PyTorch) or ``ptr`` (CuPy) attribute."""
    if stream is None:
        return None
    if isinstance(stream, int) and not isinstance(stream, bool):
        return stream or None
    for attr in ("cuda_stream", "ptr"):
        value = getattr(stream, attr, None)
        if isinstance(value, int):
            return value or None
    invalid("stream must be None, an int cudaStream_t or an object with .cuda_stream, "
            "not %s" % type(stream).__name__)


class _TensorHandle:
    """Owns one symm_tensor_t; frees it when the last reference goes.

    Tensors, views and exported DLPack capsules all hold it, so the memory
    lives while any of them does.  It holds the communicator's handle, so
    that the communicator outlives its tensors.
    """

    __slots__ = ("ptr", "comm", "_free", "keep", "__weakref__")

    def __init__(self, ptr: int, comm: "_CommHandle", owned: bool = True,
                 keep: Any = None) -> None:
        self.ptr: Optional[int] = ptr
        self.comm = comm
        # A registered tensor's memory is the caller's object: it lives as
        # long as the tensor and every view and capsule of it.
        self.keep = keep
        # A block of the allocator (symm_mempool_alloc) is its memory
        # manager's to free, not this handle's.
        self._free: Callable[[Any], Any] = LIB.symm_tensor_free if owned else (lambda p: 0)

    def get(self) -> int:
        if self.ptr is None or self.comm.ptr is None:
            raise make_error(Result.STATE, "the tensor has been freed")
        return self.ptr

    def close(self) -> None:
        ptr, self.ptr = self.ptr, None
        self.keep = None  # registered memory: the caller's again
        # A destroyed communicator has freed its tensors already.
        if ptr is not None and self.comm.ptr is not None:
            self._free(ptr)

    def __del__(self) -> None:
        self.close()


def _row_major(shape: Tuple[int, ...]) -> Tuple[int, ...]:
    strides, n = [], 1
    for s in reversed(shape):
        strides.append(n)
        n *= s
    return tuple(reversed(strides))


def _view_from_c(handle: _TensorHandle, v: SymmView) -> "View":
    n = v.ndim
    return View(handle, v.data or 0, tuple(v.sizes[:n]), tuple(v.strides[:n]),
                DTYPES[v.dtype], v.device, v.rank)


class View:
    """A strided view of symmetric memory: this rank's, a peer's, or all
    ranks' back to back.

    It does not copy: ``numpy.from_dlpack(view)``, ``torch.from_dlpack(view)``,
    ``cupy.from_dlpack(view)`` and ``jax.dlpack.from_dlpack(view)`` see the
    memory itself, and keep it alive while they hold it.  CPU views also
    offer ``__array_interface__`` (``numpy.asarray(view)``), CUDA views
    ``__cuda_array_interface__``.
    """

    __slots__ = ("_handle", "data_ptr", "shape", "strides", "_dtype", "device", "rank")

    def __init__(self, handle: _TensorHandle, data_ptr: int, shape: Tuple[int, ...],
                 strides: Tuple[int, ...], dtype: DType, device: int, rank: int) -> None:
        self._handle = handle
        self.data_ptr: int = data_ptr          #: address of element 0
        self.shape: Tuple[int, ...] = shape    #: sizes per dimension
        self.strides: Tuple[int, ...] = strides  #: strides in elements, as in DLPack
        self._dtype = dtype
        self.device: int = device              #: CUDA ordinal, -1 for CPU memory
        self.rank: int = rank                  #: whose memory; -1 for all ranks' (contiguous view)

    @property
    def dtype(self) -> str:
        """Element type as a NumPy-style name ("float32", "bfloat16")."""
        return self._dtype.name

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return self._dtype.itemsize

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        """Number of elements."""
        n = 1
        for s in self.shape:
            n *= s
        return n

    def is_contiguous(self) -> bool:
        """Whether the elements are row-major without gaps."""
        return _dlpack._contiguous(self.shape, self.strides, 1)

    def __dlpack__(self, *, stream: Optional[int] = None,
                   max_version: Optional[Tuple[int, int]] = None,
                   dl_device: Optional[Tuple[int, int]] = None,
                   copy: Optional[bool] = None) -> Any:
        """A DLPack capsule of this view (Python array API standard).

        A versioned (DLPack 1.x) capsule when `max_version` allows one, a
        legacy capsule otherwise.  `stream` is accepted and not waited on:
        symmem enqueues no work of its own on a view's memory, so ordering
        against other work is the caller's.  A `dl_device` other than the
        view's, or ``copy=True``, raise BufferError: views never copy.
        """
        self._handle.get()
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError("symmem views are zero-copy: no transfer to DLPack device %r" %
                              (tuple(dl_device),))
        if copy:
            raise BufferError("symmem views are zero-copy: copy=True is not supported")
        versioned = max_version is not None and int(max_version[0]) >= 1
        return _dlpack.export(self._handle, self.data_ptr, self.shape, self.strides,
                              self._dtype, self.device, versioned)

    def __dlpack_device__(self) -> Tuple[int, int]:
        """(kDLCPU, 0) for CPU memory, (kDLCUDA, ordinal) for GPU memory."""
        return _dlpack.dlpack_device(self.device)

    def _interface(self) -> dict:
        if self._dtype.typestr is None:
            raise AttributeError("the array interface has no %s; use DLPack" % self._dtype.name)
        self._handle.get()
        return {"version": 3, "shape": self.shape, "typestr": self._dtype.typestr,
                "data": (self.data_ptr, False),
                "strides": tuple(s * self.itemsize for s in self.strides)}

    @property
    def __array_interface__(self) -> dict:
        if self.device >= 0:
            raise AttributeError("a CUDA view has __cuda_array_interface__, not __array_interface__")
        return self._interface()

    @property
    def __cuda_array_interface__(self) -> dict:
        if self.device < 0:
            raise AttributeError("a CPU view has __array_interface__, not __cuda_array_interface__")
        iface = self._interface()
        iface["stream"] = None
        return iface

    def numpy(self) -> Any:
        """This view as a NumPy array, without a copy (CPU views; needs NumPy).

        bfloat16 and the FP8 types, which NumPy lacks, come as ``ml_dtypes``
        arrays (``ml_dtypes.bfloat16``, ``float8_e4m3fn``, ``float8_e5m2``)
        where ml_dtypes is installed (ImportError saying so otherwise)."""
        import numpy
        name = self._dtype.name
        if name not in ML_DTYPES:
            return numpy.from_dlpack(self)
        try:
            import ml_dtypes
        except ImportError as e:
            raise ImportError("a %s view as a NumPy array needs ml_dtypes "
                              "(pip install ml-dtypes); DLPack consumers with %s "
                              "(torch.from_dlpack, jax) take the view as it is" % (name, name)) from e
        if self.device >= 0:
            raise BufferError("a CUDA view is no NumPy array; use DLPack (cupy, torch)")
        same_size = {1: DTYPES[8], 2: DTYPES[9]}[self._dtype.itemsize]  # uint8, uint16
        raw = View(self._handle, self.data_ptr, self.shape, self.strides, same_size,
                   self.device, self.rank)
        return numpy.asarray(raw).view(getattr(ml_dtypes, name))

    def view(self, dtype: Any) -> "View":
        """The same bytes as another element type (``torch.Tensor.view(dtype)``):
        the last dimension scales by the ratio of the element sizes.  Needs a
        contiguous view whose last dimension's bytes divide by the new
        element size; InvalidArgumentError otherwise.  No copy."""
        dt = dtype_of(dtype)
        if not self.is_contiguous():
            _dlpack._not_contiguous("the view")
        shape = self.shape or (1,)
        last = shape[-1] * self.itemsize
        if last % dt.itemsize:
            invalid("view(%s): the last dimension holds %d bytes, no multiple of %d" %
                    (dt.name, last, dt.itemsize))
        shape = shape[:-1] + (last // dt.itemsize,)
        return View(self._handle, self.data_ptr, shape, _row_major(shape), dt, self.device,
                    self.rank)

    def _symmem_buffer(self) -> _dlpack.Buffer:
        self._handle.get()
        if not self.is_contiguous():
            _dlpack._not_contiguous("this view")
        return _dlpack.Buffer(self.data_ptr, self.numel, self._dtype, self.device, False,
                              tuple(self.shape))

    def __repr__(self) -> str:
        where = "cpu" if self.device < 0 else "cuda:%d" % self.device
        return "<symmem.View rank=%d shape=%s strides=%s dtype=%s device=%s>" % (
            self.rank, self.shape, self.strides, self.dtype, where)


# symm_tensor_t address -> the SymmetricTensor owning it, for Communicator.lookup.
_REGISTRY: "weakref.WeakValueDictionary[int, SymmetricTensor]" = weakref.WeakValueDictionary()


class SymmetricTensor:
    """A tensor of the same shape on every rank, which every rank can reach.

    Made by :meth:`Communicator.empty`.  After :meth:`rendezvous` (collective)
    every rank reads and writes every peer's buffer through :meth:`remote`
    views, signals through the signal pads, and passes the tensor to the
    collectives without staging.  The tensor itself is a DLPack producer of
    its local view.
    """

    def __init__(self, comm: "Communicator", handle: _TensorHandle) -> None:
        self._comm = comm
        self._handle: Optional[_TensorHandle] = handle
        local = self._view(LIB.symm_tensor_local_view)
        self.shape: Tuple[int, ...] = local.shape      #: sizes per dimension
        self.strides: Tuple[int, ...] = local.strides  #: row-major, in elements
        self._dtype = local._dtype
        self.device: int = local.device                #: CUDA ordinal, -1 for CPU
        _REGISTRY[handle.ptr] = self

    def _h(self) -> int:
        if self._handle is None:
            raise make_error(Result.STATE, "the tensor has been freed")
        return self._handle.get()

    def _view(self, fn: Any, *args: Any) -> View:
        v = SymmView()
        check(fn(self._h(), *args, byref(v)))
        return _view_from_c(self._handle, v)

    @property
    def comm(self) -> "Communicator":
        """The communicator this tensor belongs to."""
        return self._comm

    @property
    def dtype(self) -> str:
        """Element type as a NumPy-style name."""
        return self._dtype.name

    @property
    def numel(self) -> int:
        """Number of elements per rank."""
        return int(LIB.symm_tensor_numel(self._h()))

    @property
    def nbytes(self) -> int:
        """Bytes of data per rank (before the backend's rounding)."""
        return int(LIB.symm_tensor_nbytes(self._h()))

    @property
    def data_ptr(self) -> int:
        """Address of this rank's data."""
        return int(LIB.symm_tensor_data(self._h()) or 0)

    @property
    def is_rendezvoused(self) -> bool:
        return bool(LIB.symm_tensor_is_rendezvoused(self._h()))

    def rendezvous(self) -> "SymmetricTensor":
        """Maps every rank's buffer on every rank.  Collective (the first
        call; later ones return at once).  Raises MismatchError when the
        ranks' shapes or dtypes differ.  Returns the tensor."""
        check(LIB.symm_tensor_rendezvous(self._h()))
        return self

    def local(self) -> View:
        """This rank's buffer."""
        return self._view(LIB.symm_tensor_local_view)

    def remote(self, peer: int) -> View:
        """Rank `peer`'s buffer, loadable and storable from here.  Needs a
        rendezvous (StateError); InvalidArgumentError for a rank out of range."""
        return self._view(LIB.symm_tensor_remote_view, int(peer))

    def get_buffer(self, rank: int, sizes: Any, dtype: Any = None,
                   storage_offset: int = 0) -> View:
        """Rank `rank`'s memory as a contiguous view of another shape, dtype
        or offset (PyTorch symm_mem's ``get_buffer``): `sizes` an int or a
        sequence, `dtype` default this tensor's, `storage_offset` in elements
        of `dtype`.  It must lie inside the tensor's bytes
        (InvalidArgumentError naming both); a peer's needs a rendezvous
        (StateError).  No copy."""
        base = self.remote(rank)
        dt = self._dtype if dtype is None else dtype_of(dtype)
        dims = (int(sizes),) if isinstance(sizes, int) else tuple(int(s) for s in sizes)
        if any(d < 0 for d in dims) or int(storage_offset) < 0:
            invalid("get_buffer: sizes %s and storage_offset %d must not be negative" %
                    (dims, storage_offset))
        n = 1
        for d in dims:
            n *= d
        start, end = int(storage_offset) * dt.itemsize, (int(storage_offset) + n) * dt.itemsize
        if end > self.nbytes:
            invalid("get_buffer: %d %s elements at offset %d (bytes %d..%d) run past the "
                    "tensor's %d bytes" % (n, dt.name, storage_offset, start, end, self.nbytes))
        return View(self._handle, base.data_ptr + start, dims, _row_major(dims), dt,
                    self.device, base.rank)

    def contiguous_view(self) -> View:
        """All ranks' buffers back to back, shape ``(size, *shape)``; rank r's
        starts at ``strides[0] * r`` elements.  Needs a rendezvous."""
        return self._view(LIB.symm_tensor_contiguous_view)

    def peer_ptrs(self) -> List[int]:
        """Every rank's data address as seen from here (index = rank)."""
        ptrs = POINTER(c_void_p)()
        check(LIB.symm_tensor_peer_ptrs(self._h(), byref(ptrs)))
        return [int(ptrs[r] or 0) for r in range(self._comm.size)]

    def peer_ptrs_device(self) -> int:
        """Address of a device array of the peers' data pointers (``void **``
        for kernels; GPU backends).  UnsupportedError on the host backend."""
        ptrs = POINTER(c_void_p)()
        check(LIB.symm_tensor_peer_ptrs_device(self._h(), byref(ptrs)))
        return ctypes.cast(ptrs, c_void_p).value or 0

    def signal_pad_ptrs_device(self) -> int:
        """Address of a device array of every rank's signal pad (``void **``
        for kernels; PyTorch's ``signal_pad_ptrs_dev``; GPU backends).
        UnsupportedError on the host backend (use :meth:`signal_pad`)."""
        ptrs = POINTER(c_void_p)()
        check(LIB.symm_tensor_signal_pad_ptrs_device(self._h(), byref(ptrs)))
        return ctypes.cast(ptrs, c_void_p).value or 0

    def signal_pad(self, rank: Optional[int] = None) -> View:
        """The signal pad of `rank` (default: this rank) as a uint32 view
        (slot = channel * size + sender).  Peers' pads need a rendezvous."""
        rank = self._comm.rank if rank is None else int(rank)
        pad = c_void_p()
        check(LIB.symm_tensor_signal_pad(self._h(), rank, byref(pad)))
        words = self._comm.signal_pad_bytes // 4
        return View(self._handle, pad.value or 0, (words,), (1,), DTYPES[10], self.device, rank)

    @property
    def signal_channels(self) -> int:
        """Number of signal channels of the pads."""
        return int(LIB.symm_signal_channels(self._h()))

    def put_signal(self, peer: int, channel: int = 0, stream: StreamLike = None) -> None:
        """Signals rank `peer` on `channel` after everything this rank wrote
        before (release).  Pairs with the peer's :meth:`wait_signal`."""
        check(LIB.symm_signal_put(self._h(), int(peer), int(channel), stream_handle(stream)))

    def wait_signal(self, peer: int, channel: int = 0, stream: StreamLike = None) -> None:
        """Waits for rank `peer`'s signal on `channel` and consumes it
        (acquire).  TimeoutError after the communicator's timeout."""
        check(LIB.symm_signal_wait(self._h(), int(peer), int(channel), stream_handle(stream)))

    def barrier(self, channel: int = 0, stream: StreamLike = None) -> None:
        """Signal-pad barrier: put to every peer, then wait for every peer.
        Collective."""
        check(LIB.symm_signal_barrier(self._h(), int(channel), stream_handle(stream)))

    def put(self, peer: int, data: Any, *, offset: int = 0, signal: Optional[int] = None,
            stream: StreamLike = None) -> None:
        """Copies `data` (any contiguous array on this rank: NumPy, torch,
        CuPy) into rank `peer`'s data of this tensor from byte `offset`,
        one-sided and stream-ordered (``symm_put``; GPU backends: the copy
        engine, no kernel).  `signal`: then signal the peer on that channel
        (``symm_put_signal``): its :meth:`wait_signal` returns only once the
        data has landed.  Host backend: at once, `stream` None."""
        s = stream_handle(stream)
        with _dlpack.Borrowed(data, "data", s) as b:
            nbytes = b.numel * b.dtype.itemsize
            if signal is None:
                check(LIB.symm_put(self._h(), int(peer), int(offset), c_void_p(b.ptr), nbytes, s))
            else:
                check(LIB.symm_put_signal(self._h(), int(peer), int(offset), c_void_p(b.ptr),
                                          nbytes, int(signal), s))

    def get(self, peer: int, out: Any, *, offset: int = 0, stream: StreamLike = None) -> Any:
        """Copies rank `peer`'s data of this tensor from byte `offset` into
        `out` (a writable contiguous array on this rank, filled whole),
        one-sided and stream-ordered (``symm_get``).  Returns `out`."""
        s = stream_handle(stream)
        with _dlpack.Borrowed(out, "out", s) as b:
            if b.readonly:
                invalid("get: out is read-only")
            check(LIB.symm_get(self._h(), int(peer), int(offset), c_void_p(b.ptr),
                               b.numel * b.dtype.itemsize, s))
        return out

    def free(self) -> None:
        """Releases this object's hold on the memory.  The memory goes back
        to the communicator's pool once no view or DLPack consumer holds it
        either.  Local.  Later calls on this object raise StateError."""
        handle, self._handle = self._handle, None
        if handle is not None:
            _REGISTRY.pop(handle.ptr, None)

    def __enter__(self) -> "SymmetricTensor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.free()

    def __dlpack__(self, **kwargs: Any) -> Any:
        """DLPack capsule of the local view (see :meth:`View.__dlpack__`)."""
        return self.local().__dlpack__(**kwargs)

    def __dlpack_device__(self) -> Tuple[int, int]:
        return _dlpack.dlpack_device(self.device)

    def _symmem_buffer(self) -> _dlpack.Buffer:
        return self.local()._symmem_buffer()

    def __repr__(self) -> str:
        if self._handle is None:
            return "<symmem.SymmetricTensor (freed)>"
        return "<symmem.SymmetricTensor shape=%s dtype=%s rank=%d/%d%s>" % (
            self.shape, self.dtype, self._comm.rank, self._comm.size,
            " rendezvoused" if self.is_rendezvoused else "")
