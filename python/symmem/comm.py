"""Communicators, their key-value store, and the collectives."""
from __future__ import annotations

import atexit
import weakref
from contextlib import ExitStack
from ctypes import (byref, c_char_p, c_int, c_int64, c_size_t, c_void_p, create_string_buffer,
                    pointer, sizeof)
from typing import (Any, Callable, Iterable, Iterator, List, MutableMapping, NamedTuple,
                    Optional, Sequence, Tuple, Union)

from . import _splits
from ._dlpack import Borrowed, Buffer
from ._dtypes import dtype_of
from ._lib import (LIB, LIB_PATH, SymmConfig, SYMM_CONFIG_VERSION, SYMM_USER_MEM_VERSION,
                   SymmUserMem, text)
from .bootstrap import Hold, channel_for
from .errors import (NotFoundError, Result, StateError, SymmemError, TimeoutError, check,
                     invalid, make_error)
from .tensor import _REGISTRY, SymmetricTensor, StreamLike, _TensorHandle, stream_handle

Shape = Union[int, Sequence[int]]
Bytes = Union[bytes, bytearray, memoryview, str]
# A splits array of the device-split all-to-alls: (name, array, the shapes
# it may have, whether C writes it).
SplitsArg = Tuple[str, Any, List[Tuple[int, ...]], bool]


class _CommHandle:
    """Owns one symm_comm_t; destroys it when the last reference goes (the
    Communicator, or a tensor of it that outlived the Communicator).
    `hold`: the Python bootstrap it was made on (its own, or its parent's
    for a group), kept until every communicator on it is destroyed."""

    __slots__ = ("ptr", "hold", "_destroy", "__weakref__")

    def __init__(self, ptr: int, hold: Optional[Hold] = None) -> None:
        self.ptr: Optional[int] = ptr
        self.hold = hold
        self._destroy = LIB.symm_comm_destroy
        if hold is not None:
            hold.acquire()
        _LIVE_COMMS.add(self)

    def close(self) -> None:
        ptr, self.ptr = self.ptr, None
        if ptr is not None:
            self._destroy(ptr)
            if self.hold is not None:
                self.hold.release()

    def __del__(self) -> None:
        self.close()


_LIVE_COMMS: "weakref.WeakSet[_CommHandle]" = weakref.WeakSet()


@atexit.register
def _destroy_all() -> None:
    # At exit, communicators that tensors kept alive are destroyed in an
    # orderly way (rank 0's store waits for its peers), not in whatever
    # order the interpreter's teardown reaches them.
    for handle in list(_LIVE_COMMS):
        handle.close()


def _bytes(value: Bytes) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _key(key: str) -> bytes:
    if not isinstance(key, str):
        invalid("store keys are str, not %s" % type(key).__name__)
    return key.encode()


def _timeout(timeout_ms: Any) -> int:
    """Milliseconds, or a datetime.timedelta (as torch's stores take)."""
    if timeout_ms is None:
        return -1
    if hasattr(timeout_ms, "total_seconds"):
        return max(int(timeout_ms.total_seconds() * 1000), 0)
    return int(timeout_ms)


_NO_DEFAULT: Any = object()


class Store(MutableMapping):
    """The job's key-value store, as a mapping of str keys to bytes values.

    ``store[key]`` reads without waiting (KeyError when absent),
    ``store[key] = value`` sets (str values are stored UTF-8 encoded),
    ``del store[key]`` deletes, ``key in store`` checks.  :meth:`get` waits
    for a key to appear (up to the communicator's timeout).  The store cannot
    list its keys, so iteration and ``len`` raise TypeError.  Keys starting
    with "symm/" are reserved.  All calls are local requests to the store.
    A communicator made on init's `bootstrap` has no such store: every call
    raises UnsupportedError.
    """

    def __init__(self, comm: "Communicator") -> None:
        self._comm = comm

    def _s(self) -> int:
        store = LIB.symm_comm_store(self._comm._ptr())
        if not store:
            raise make_error(Result.UNSUPPORTED, "this communicator was made on init's "
                             "bootstrap=, which stands in for symmem's store: it has none "
                             "(use the bootstrap's own)")
        return store

    def set(self, key: str, value: Bytes) -> None:
        """Sets `key` to `value` (bytes, or str stored as UTF-8)."""
        data = _bytes(value)
        check(LIB.symm_store_set(self._s(), _key(key), data, len(data)))

    def get(self, key: str, default: Any = _NO_DEFAULT, *,  # type: ignore[override]
            timeout_ms: Optional[int] = None) -> Any:
        """The value of `key`, waiting up to `timeout_ms` (None: the
        communicator's timeout; 0: no wait) for it to be set.  When it is
        not set in time: `default` if given, else TimeoutError."""
        if default is not _NO_DEFAULT:
            try:
                return self.get(key, timeout_ms=timeout_ms)
            except TimeoutError:
                return default
        store, k, cap = self._s(), _key(key), 4096
        while True:
            out, n = create_string_buffer(cap), c_size_t()
            code = LIB.symm_store_get(store, k, out, cap, byref(n), _timeout(timeout_ms))
            if code == Result.NO_MEMORY and n.value > cap:
                cap, timeout_ms = n.value, 0  # it exists: read it again, whole
                continue
            check(code)
            return out.raw[:n.value]

    def add(self, key: str, delta: int = 1) -> int:
        """Atomically adds `delta` to the counter at `key` (absent: 0);
        returns the new value."""
        result = c_int64()
        check(LIB.symm_store_add(self._s(), _key(key), int(delta), byref(result)))
        return result.value

    def compare_set(self, key: str, expected: Optional[Bytes], desired: Bytes) -> bytes:
        """Atomically replaces the value of `key` by `desired` if it equals
        `expected` (None: the key is absent).  Returns the value after the
        operation: equal to `desired` when the swap happened."""
        exp = None if expected is None else _bytes(expected)
        des = _bytes(desired)
        cap = max(len(des), len(exp or b""), 1)
        while True:
            out, n = create_string_buffer(cap), c_size_t()
            code = LIB.symm_store_compare_set(self._s(), _key(key), exp,
                                              0 if exp is None else len(exp), des, len(des),
                                              out, cap, byref(n))
            if code == Result.NO_MEMORY and n.value > cap:
                # The swap did not happen (a longer value is there): read it.
                cap = n.value
                continue
            check(code)
            return out.raw[:n.value]

    def wait(self, keys: Union[str, Iterable[str]], timeout_ms: Any = None) -> None:
        """Waits until every key exists (None: the communicator's timeout;
        milliseconds, or a datetime.timedelta).  TimeoutError otherwise."""
        arr = self._keys(keys)
        check(LIB.symm_store_wait(self._s(), arr, len(arr), _timeout(timeout_ms)))

    def check(self, keys: Union[str, Iterable[str]]) -> bool:
        """Whether every key exists now (no wait)."""
        arr, present = self._keys(keys), c_int()
        check(LIB.symm_store_check(self._s(), arr, len(arr), byref(present)))
        return bool(present.value)

    def delete(self, key: str) -> None:
        """Deletes `key`; NotFoundError if it did not exist."""
        check(LIB.symm_store_delete(self._s(), _key(key)))

    @staticmethod
    def _keys(keys: Union[str, Iterable[str]]) -> Any:
        seq = [keys] if isinstance(keys, str) else list(keys)
        return (c_char_p * len(seq))(*[_key(k) for k in seq])

    def __getitem__(self, key: str) -> bytes:
        try:
            return self.get(key, timeout_ms=0)
        except TimeoutError as e:
            raise KeyError(key) from e

    def __setitem__(self, key: str, value: Bytes) -> None:
        self.set(key, value)

    def __delitem__(self, key: str) -> None:
        try:
            self.delete(key)
        except NotFoundError as e:
            raise KeyError(key) from e

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.check(key)

    def __iter__(self) -> Iterator[str]:
        raise TypeError("the symmem store cannot list its keys")

    def __len__(self) -> int:
        raise TypeError("the symmem store cannot count its keys")


class Lookup(NamedTuple):
    """What :meth:`Communicator.lookup` found for a pointer."""

    tensor: Optional[SymmetricTensor]  #: None: the library's own (the scratch)
    rank: int                          #: whose memory; -1: a contiguous view
    offset: int                        #: bytes from the start of that rank's data (rank -1: of the view)


class _Block:
    """A block of symm_mempool_alloc as an array-interface owner: NumPy
    keeps it as the array's base, and it gives the block back when the
    last view goes."""

    def __init__(self, ptr: int, nbytes: int, shape: Tuple[int, ...], typestr: str,
                 comm: _CommHandle) -> None:
        self.ptr, self.nbytes, self._comm = ptr, nbytes, comm
        self._free = LIB.symm_mempool_free
        self.__array_interface__ = {"version": 3, "shape": shape, "typestr": typestr,
                                    "data": (ptr, False)}

    def __del__(self) -> None:
        if self._comm.ptr is not None:  # a destroyed communicator freed it already
            self._free(self.ptr, self.nbytes, -1, None)


def _redop(op: Union[str, int]) -> int:
    """A reduction by symmem's name ("sum", "prod", "avg" ...), PyTorch's
    ReduceOp (SUM, PRODUCT, MIN, MAX, AVG) or code."""
    if isinstance(op, int):
        return op
    name = str(getattr(op, "name", op)).lower()
    name = name.rpartition(".")[2]  # "ReduceOp.SUM" as str() writes it
    name = {"product": "prod"}.get(name, name)
    code = c_int()
    check(LIB.symm_redop_from_name(name.encode(), byref(code)))
    return code.value


class Communicator:
    """A group of ranks sharing symmetric memory (``symm_comm_t``).

    Made by :func:`init`.  A context manager: leaving the ``with`` block
    closes it.  Closing releases this object's hold; the C communicator is
    destroyed once no tensor or view of it is left (they keep it alive), and
    at interpreter exit at the latest.
    """

    def __init__(self, handle: _CommHandle) -> None:
        self._handle: Optional[_CommHandle] = handle
        self.store: Store = Store(self)  #: the job's key-value store
        p = handle.ptr
        self.rank: int = LIB.symm_comm_rank(p)              #: this process's rank
        self.size: int = LIB.symm_comm_size(p)              #: number of ranks
        self.local_rank: int = LIB.symm_comm_local_rank(p)  #: rank among this host's ranks
        self.local_size: int = LIB.symm_comm_local_size(p)  #: ranks on this host
        self.device: int = LIB.symm_comm_device(p)          #: GPU ordinal, -1: host backend
        self.backend: str = text(LIB.symm_backend_name(LIB.symm_comm_backend(p))) or "?"
        self.timeout_ms: int = LIB.symm_comm_timeout_ms(p)  #: bound of every blocking wait
        #: bytes of every signal pad of its tensors (the same on every rank)
        self.signal_pad_bytes: int = int(LIB.symm_comm_signal_pad_bytes(p))
        self._torch_pool: Any = None

    def _ptr(self) -> int:
        if self._handle is None or self._handle.ptr is None:
            raise StateError("communicator is closed")
        return self._handle.ptr

    @property
    def closed(self) -> bool:
        return self._handle is None or self._handle.ptr is None

    def close(self) -> None:
        """Closes the communicator (see the class).  Local; idempotent."""
        # Its torch MemPool first: deleting the pool gives its cached
        # blocks back while the communicator still holds them.
        self._torch_pool = None
        self._handle = None

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        state = " closed" if self.closed else ""
        return "<symmem.Communicator rank=%d size=%d backend=%s%s>" % (
            self.rank, self.size, self.backend, state)

    # -- communicator calls ------------------------------------------------
    def barrier(self) -> None:
        """Host-side barrier over all ranks.  Collective."""
        check(LIB.symm_comm_barrier(self._ptr()))

    def split(self, color: int, key: Optional[int] = None) -> Optional["Communicator"]:
        """The group of the ranks that pass the same `color`, ranked by `key`
        (default: this rank), as a new Communicator (``symm_comm_split``,
        MPI_Comm_split's contract); None for ``SPLIT_NONE``, this host's ranks
        for ``SPLIT_BY_HOST``.  Collective.  The group lives on after this
        communicator is closed; close it too."""
        out = c_void_p()
        check(LIB.symm_comm_split(self._ptr(), int(color), self.rank if key is None else int(key),
                                  byref(out)))
        return Communicator(self._group_handle(out.value)) if out.value else None

    def split_2d(self, group_size: int) -> Tuple["Communicator", "Communicator"]:
        """(row, column): this rank's group of `group_size` consecutive ranks
        (tensor parallel) and the ranks at its place in every row (data
        parallel) (``symm_comm_split_2d``).  Collective."""
        row, column = c_void_p(), c_void_p()
        check(LIB.symm_comm_split_2d(self._ptr(), int(group_size), byref(row), byref(column)))
        return (Communicator(self._group_handle(row.value)),
                Communicator(self._group_handle(column.value)))

    def _group_handle(self, ptr: int) -> _CommHandle:
        """The handle of a group split from this communicator: it keeps the
        bootstrap this one was made on."""
        return _CommHandle(ptr, self._handle.hold if self._handle is not None else None)

    def empty(self, shape: Shape, dtype: Any = "float32") -> SymmetricTensor:
        """Allocates a symmetric tensor (row-major, uninitialised).

        `shape`: an int or a sequence of positive ints (at most 8).
        `dtype`: a NumPy-style name ("float32", "bfloat16", "uint8" ...),
        symmem's short name ("bf16"), a NumPy dtype or a PyTorch dtype.
        Local on the host and native backends; call :meth:`SymmetricTensor.rendezvous`
        (collective) before reaching peers.
        """
        ptr, out = self._ptr(), c_void_p()
        try:
            dims = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
            dt = dtype_of(dtype)
            sizes = (c_int64 * max(len(dims), 1))(*dims)
        except BaseException:
            # Refused here, it is refused by C too: on backends that
            # allocate collectively the call then keeps its place on every
            # rank (its peers get MismatchError naming this rank).
            LIB.symm_tensor_alloc(ptr, None, 0, 0, byref(out))
            raise
        check(LIB.symm_tensor_alloc(ptr, sizes, len(dims), dt.code, byref(out)))
        return SymmetricTensor(self, _TensorHandle(out.value, self._handle))

    def register(self, array: Any, fd: Optional[int] = None, fd_offset: int = 0
                 ) -> SymmetricTensor:
        """Makes memory the caller already has symmetric (``symm_tensor_register``):
        a tensor of `array`'s shape and dtype whose data is `array`'s memory,
        which the tensor keeps alive and never frees.  Collective: every rank
        registers the same shape and dtype; then :meth:`SymmetricTensor.rendezvous`
        as for :meth:`empty`.

        `array`: a contiguous, writable array with ``__dlpack__`` or the array
        interface.  On the host backend it must lie in a ``MAP_SHARED``
        mapping of a memfd or regular file, passed as `fd` (symmem keeps a
        duplicate), with `fd_offset` the file offset of its first byte, e.g.
        ``numpy.frombuffer(mmap.mmap(fd, n), "float32")`` over
        ``os.memfd_create``; private memory (a plain NumPy array) is refused
        with that reason.  On GPU backends a tensor of the communicator's
        device (PyTorch, CuPy): native, nccl and nvshmem take VMM memory
        (``cuMemCreate``), cuda ``cudaMalloc`` memory.  A rank whose
        arguments are refused fails every rank (InvalidArgumentError).
        """
        ptr, out = self._ptr(), c_void_p()
        um = SymmUserMem(sizeof(SymmUserMem), SYMM_USER_MEM_VERSION, None,
                         -1 if fd is None else int(fd), int(fd_offset))
        with ExitStack() as stack:
            try:
                buf = stack.enter_context(Borrowed(array, "register's array"))
                if buf.readonly:
                    invalid("register's array is read-only; its peers write to it")
                dims = buf.shape if buf.shape else (1,)
                sizes = (c_int64 * len(dims))(*dims)
            except BaseException:
                # Refused here, it is refused by C too, so that the call
                # keeps its place on every rank (its peers fail naming it).
                LIB.symm_tensor_register(ptr, None, None, 0, 0, byref(out))
                raise
            um.ptr = buf.ptr
            check(LIB.symm_tensor_register(ptr, byref(um), sizes, len(dims), buf.dtype.code,
                                           byref(out)))
        return SymmetricTensor(self, _TensorHandle(out.value, self._handle, keep=array))

    # -- the allocator for memory managers -----------------------------------
    def empty_array(self, shape: Shape, dtype: Any = "float32") -> Any:
        """A NumPy array in a symmetric block of the allocator
        (``symm_mempool_alloc``; host backend): an ordinary array, which
        :meth:`rendezvous` makes reachable by every rank.  The block goes
        back when the array (and every view of it) is gone.  Local."""
        import numpy
        dims = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
        dt = dtype_of(dtype)
        if self.device >= 0:
            invalid("empty_array gives NumPy arrays of CPU memory; the %s backend's memory is "
                    "on cuda:%d (use torch_mem_pool)" % (self.backend, self.device))
        if dt.typestr is None:
            same = "uint16" if dt.itemsize == 2 else "uint8"
            invalid("empty_array: NumPy has no %s (use ml_dtypes' arrays through "
                    "empty_array(shape, '%s').view(ml_dtypes.%s))" % (dt.name, same, dt.name))
        n = dt.itemsize
        for d in dims:
            n *= d
        check(LIB.symm_mempool_set_comm(self._ptr()))
        ptr = LIB.symm_mempool_alloc(max(n, 1), -1, None)
        if not ptr:
            raise make_error(Result.NO_MEMORY, text(LIB.symm_last_error()) or
                             "symm_mempool_alloc failed")
        return numpy.asarray(_Block(ptr, max(n, 1), dims, dt.typestr, self._handle))

    def torch_mem_pool(self) -> Any:
        """A ``torch.cuda.MemPool`` whose allocations are symmetric blocks of
        this communicator (PyTorch's ``get_mem_pool``): tensors made under
        ``torch.cuda.use_mem_pool(pool)`` are ordinary torch tensors that
        :meth:`rendezvous` makes reachable by every rank.  GPU backends that
        allocate locally (native, cuda); one per communicator.  Needs
        PyTorch with CUDA."""
        if self._torch_pool is not None:
            return self._torch_pool
        import torch
        check(LIB.symm_mempool_set_comm(self._ptr()))
        alloc = torch.cuda.memory.CUDAPluggableAllocator(
            LIB_PATH, "symm_mempool_alloc", "symm_mempool_free")
        self._torch_pool = torch.cuda.MemPool(alloc.allocator())
        return self._torch_pool

    def rendezvous(self, x: Any) -> SymmetricTensor:
        """The symmetric block that holds array `x` (made by
        :meth:`empty_array` or in :meth:`torch_mem_pool`), rendezvoused:
        collective, as :meth:`SymmetricTensor.rendezvous`.  The result's
        views reach every rank's block; it does not own the block (the
        array's memory manager does).  NotFoundError when `x` is no
        symmetric memory, MismatchError when it is another communicator's."""
        with Borrowed(x, "x") as b:
            ptr = b.ptr
        tensor, rank, offset = c_void_p(), c_int(), c_size_t()
        check(LIB.symm_tensor_lookup(c_void_p(ptr), byref(tensor), byref(rank), byref(offset)))
        if LIB.symm_tensor_comm(tensor) != self._ptr():
            raise make_error(Result.MISMATCH, "x (%#x) is symmetric memory of another "
                             "communicator" % ptr)
        found = _REGISTRY.get(tensor.value)
        if found is None:
            found = SymmetricTensor(self, _TensorHandle(tensor.value, self._handle, owned=False))
        return found.rendezvous()

    def lookup(self, ptr: int) -> Lookup:
        """The symmetric tensor containing address `ptr` (local data, a peer
        mapping, or a contiguous view), the rank and the byte offset.
        NotFoundError when no live tensor contains it.  Thread-safe."""
        tensor, rank, offset = c_void_p(), c_int(), c_size_t()
        check(LIB.symm_tensor_lookup(c_void_p(int(ptr)), byref(tensor), byref(rank),
                                     byref(offset)))
        return Lookup(_REGISTRY.get(tensor.value), rank.value, offset.value)

    def validate(self, ptr: int, nbytes: int) -> None:
        """Raises the reason why [ptr, ptr + nbytes) is no usable symmetric
        memory of this communicator; returns None when it is."""
        check(LIB.symm_validate(self._ptr(), c_void_p(int(ptr)), int(nbytes)))

    def pool_trim(self) -> int:
        """Releases the pooled (freed) allocations; returns the bytes released."""
        released = c_size_t()
        check(LIB.symm_comm_pool_trim(self._ptr(), byref(released)))
        return released.value

    def backend_handle(self) -> int:
        """The provider's own communicator (ncclComm_t for nccl) as an int.
        UnsupportedError for backends without one."""
        h = c_void_p()
        check(LIB.symm_comm_backend_handle(self._ptr(), byref(h)))
        return h.value or 0

    def check_async_error(self) -> None:
        """Raises the error of finished device-side work (GPU backends), if any."""
        check(LIB.symm_comm_check_async_error(self._ptr()))

    def reserve_scratch(self, nbytes: int) -> None:
        """Grows the scratch tensor to `nbytes` per rank up front.  Collective."""
        ptr = self._ptr()
        try:
            n = int(nbytes)
            if n < 0:
                invalid("reserve_scratch: %d bytes" % n)
        except BaseException:
            # Refused here, refused by C too (no tensor holds that many
            # bytes): the call keeps its place on every rank.
            LIB.symm_comm_reserve_scratch(ptr, (1 << 64) - 1)
            raise
        check(LIB.symm_comm_reserve_scratch(ptr, n))

    def set_allreduce_algo(self, algo: str) -> None:
        """All-reduce algorithm: "auto", "one_shot", "two_shot", "ll", "ll128"
        ("ce" raises UnsupportedError: the copy engines do not reduce)."""
        code = c_int()
        check(LIB.symm_algo_from_name(str(algo).encode(), byref(code)))
        check(LIB.symm_comm_set_allreduce_algo(self._ptr(), code.value))

    def set_copy_algo(self, algo: str) -> None:
        """Algorithm of all_gather, broadcast, all_to_all(_v): "auto" (the
        GPU's kernels) or "ce" (the GPU's copy engines, no SM moves data; on
        the host backend the same CPU copies as auto)."""
        code = c_int()
        check(LIB.symm_algo_from_name(str(algo).encode(), byref(code)))
        check(LIB.symm_comm_set_copy_algo(self._ptr(), code.value))

    @property
    def copy_algo(self) -> str:
        """The copy algorithm set (set_copy_algo, else SYMM_COPY_ALGO)."""
        code = c_int()
        check(LIB.symm_comm_copy_algo(self._ptr(), byref(code)))
        return text(LIB.symm_algo_name(code.value)) or "?"

    def allreduce_algo(self, count: int, dtype: Any = "float32") -> str:
        """The algorithm all_reduce runs for `count` elements of `dtype`."""
        code = c_int()
        check(LIB.symm_all_reduce_algo(self._ptr(), int(count), dtype_of(dtype).code,
                                       byref(code)))
        return text(LIB.symm_algo_name(code.value)) or "?"

    # -- stream-ordered writes ----------------------------------------------
    def _write32(self, what: str, target: Any, offset: int, value: int, count: int,
                 stream: StreamLike) -> None:
        # `count` 32-bit words of target from word `offset`, checked, then C.
        offset, count, v = int(offset), int(count), int(value)
        if not -(1 << 31) <= v < (1 << 32):
            invalid("%s: %d does not fit 32 bits" % (what, v))
        s = stream_handle(stream)
        with Borrowed(target, "target", s) as b:
            self._where(b, "target")
            if b.dtype.itemsize != 4:
                invalid("%s: the target is %s; it takes 32-bit elements (int32, uint32, "
                        "float32)" % (what, b.dtype.name))
            if b.readonly:
                invalid("%s: the target is read-only" % what)
            if offset < 0 or count < 0 or offset + count > b.numel:
                invalid("%s: elements %d..%d are outside the target's %d" %
                        (what, offset, offset + count, b.numel))
            # One word is symm_write_value32's write (the same engine call).
            check(LIB.symm_memset32(self._ptr(), b.ptr + 4 * offset, v & 0xFFFFFFFF, count, s))

    def stream_write_value32(self, target: Any, offset: int, value: int, *,
                             stream: StreamLike = None) -> None:
        """Writes `value` to 32-bit element `offset` of `target` after the
        work on `stream` before it, that work's writes made visible first:
        a flag after data (PyTorch's ``stream_write_value32_``).  `target`:
        any array of 32-bit elements on this rank's device (a signal pad
        view, a tensor, a peer's view).  Host backend: at once, `stream`
        None.  Local."""
        self._write32("stream_write_value32", target, offset, value, 1, stream)

    def memset32(self, target: Any, offset: int, value: int, count: int, *,
                 stream: StreamLike = None) -> None:
        """Writes `value` to `count` 32-bit elements of `target` from element
        `offset`, in `stream`'s order (PyTorch's ``memset32_``).  Local."""
        self._write32("memset32", target, offset, value, count, stream)

    # -- collectives -------------------------------------------------------
    def _where(self, buf: Buffer, what: str) -> None:
        if (buf.device < 0) != (self.device < 0):
            have = "CPU memory" if buf.device < 0 else "CUDA memory"
            want = "CPU memory" if self.device < 0 else "memory of cuda:%d" % self.device
            invalid("%s is %s; the %s backend's collectives take %s" %
                    (what, have, self.backend, want))

    # What the C entry point of each collective takes between comm and
    # stream when this binding refuses the call: NULL buffers and arrays
    # (and rows of 0 elements), which C refuses as it refuses any bad
    # argument.
    _REFUSAL_ARGS = {
        "all_reduce": (None, None, 1, 0, 0), "reduce_scatter": (None, None, 1, 0, 0),
        "broadcast": (None, None, 1, 0, 0), "all_gather": (None, None, 1, 0),
        "all_to_all": (None, None, 1, 0),
        "all_to_all_v": (None, None, None, None, None, None, 0),
        "all_to_all_vdev": (None, 1, None, 1, 0, 0, None, None),
        "all_to_all_vdev_2d": (None, 1, None, 1, 0, 0, None, None, 0, 0),
        "all_to_all_vdev_2d_combine": (None, 1, None, 1, 0, 0, None, None, 0),
    }

    def _refuse(self, name: str, s: Optional[int]) -> None:
        # An argument this binding refuses still counts as this rank's call,
        # as C's own refusals do: C takes its place in the communicator's
        # order and the peers get MismatchError naming this rank, instead
        # of pairing their call with this rank's next one.
        try:
            ptr = self._ptr()
        except SymmemError:
            return  # a destroyed communicator: no call at all, as in C
        getattr(LIB, "symm_" + name)(ptr, *self._REFUSAL_ARGS[name], s)

    def _pair(self, name: str, bx: Buffer, bo: Buffer) -> None:
        # The input and output of a collective: this rank's memory, the
        # output writable, one dtype.
        self._where(bx, "x")
        self._where(bo, "out")
        if bo.readonly:
            invalid("%s: out is read-only" % name)
        if bo.dtype != bx.dtype:
            invalid("%s: x is %s but out is %s" % (name, bx.dtype.name, bo.dtype.name))

    def _run(self, name: str, x: Any, out: Any, stream: StreamLike,
             prepare: Callable[[], Tuple[Callable[[int, int], int], Any]]) -> Any:
        """Runs collective `name`; prepare() gives the count from the
        element counts of x and out, and the C call.  Whatever is refused
        before the C call is refused through it too (_refuse)."""
        s, called = None, False
        try:
            s = stream_handle(stream)
            counts, call = prepare()
            target = x if out is None else out
            with Borrowed(x, "x", s) as bx, Borrowed(target, "out", s) as bo:
                self._pair(name, bx, bo)
                count = counts(bx.numel, bo.numel)
                called = True
                check(call(self._ptr(), bx.ptr, bo.ptr, count, bx.dtype.code, s))
            return target
        except BaseException:
            if not called:
                self._refuse(name, s)
            raise

    def _sized(self, name: str, n_in: int, n_out: int, ratio_in: int, ratio_out: int) -> int:
        # The count of a collective whose input holds ratio_in x count and
        # output ratio_out x count elements.
        if n_in % ratio_in or n_out % ratio_out or n_in // ratio_in != n_out // ratio_out:
            invalid("%s: x has %d and out %d elements; they must be %d and %d times one "
                    "count" % (name, n_in, n_out, ratio_in, ratio_out))
        return n_in // ratio_in

    def all_reduce(self, x: Any, op: Union[str, int] = "sum", *, out: Any = None,
                   stream: StreamLike = None) -> Any:
        """out[i] = op over ranks of x[i]; in place without `out`.

        `x`, `out`: any contiguous array with ``__dlpack__`` or the array
        interface (NumPy, PyTorch, CuPy, JAX, symmem tensors and views), of
        this rank's device; nothing is copied.  `op`: "sum", "min", "max",
        "prod", "avg" (the sum over the ranks; integers truncate), any dtype
        on the host backend.
        `stream`: None, a cudaStream_t int, or an object with ``cuda_stream``
        (GPU backends; None on the host backend).  Collective.  Returns out
        (or x)."""
        def prepare() -> Tuple[Callable[[int, int], int], Any]:
            rop = _redop(op)
            return (lambda a, b: self._sized("all_reduce", a, b, 1, 1),
                    lambda c, sp, rp, n, dt, s: LIB.symm_all_reduce(c, sp, rp, n, dt, rop, s))
        return self._run("all_reduce", x, out, stream, prepare)

    def all_gather(self, x: Any, out: Any, *, stream: StreamLike = None) -> Any:
        """out[r * n + i] = rank r's x[i] (n = x's elements).  Collective."""
        w = self.size
        return self._run("all_gather", x, out, stream,
                         lambda: (lambda a, b: self._sized("all_gather", a, b, 1, w),
                                  LIB.symm_all_gather))

    def reduce_scatter(self, x: Any, out: Any, op: Union[str, int] = "sum", *,
                       stream: StreamLike = None) -> Any:
        """out[i] = op over ranks of x[rank * n + i] (n = out's elements).
        Collective."""
        w = self.size

        def prepare() -> Tuple[Callable[[int, int], int], Any]:
            rop = _redop(op)
            return (lambda a, b: self._sized("reduce_scatter", a, b, w, 1),
                    lambda c, sp, rp, n, dt, s: LIB.symm_reduce_scatter(c, sp, rp, n, dt, rop, s))
        return self._run("reduce_scatter", x, out, stream, prepare)

    def broadcast(self, x: Any, root: int = 0, *, out: Any = None,
                  stream: StreamLike = None) -> Any:
        """out[i] = root's x[i]; in place without `out`.  Collective."""
        def prepare() -> Tuple[Callable[[int, int], int], Any]:
            r = int(root)
            return (lambda a, b: self._sized("broadcast", a, b, 1, 1),
                    lambda c, sp, rp, n, dt, s: LIB.symm_broadcast(c, sp, rp, n, dt, r, s))
        return self._run("broadcast", x, out, stream, prepare)

    def all_to_all(self, x: Any, out: Any, *, stream: StreamLike = None) -> Any:
        """out[r * n + i] = rank r's x[rank * n + i] (x and out: size * n
        elements).  Collective."""
        w = self.size
        return self._run("all_to_all", x, out, stream,
                         lambda: (lambda a, b: self._sized("all_to_all", a, b, w, w),
                                  LIB.symm_all_to_all))

    # -- all-to-all with a different amount for every pair of ranks ---------
    def all_to_all_v(self, x: Any, send_counts: Sequence[int], out: Any,
                     recv_counts: Sequence[int], send_displs: Optional[Sequence[int]] = None,
                     recv_displs: Optional[Sequence[int]] = None, *,
                     stream: StreamLike = None) -> Any:
        """MPI_Alltoallv (``symm_all_to_all_v``): this rank sends
        ``send_counts[p]`` elements of x from element ``send_displs[p]`` to
        rank p, and receives ``recv_counts[p]`` elements from rank p into out
        from element ``recv_displs[p]``.

        Counts and displacements: sequences of ``size`` ints >= 0 (lists,
        tuples, NumPy arrays), in elements of x's dtype; displacements None:
        packed (each range right after the previous one).  ``recv_counts[p]``
        must equal rank p's ``send_counts[rank]``: MismatchError on every
        rank otherwise, naming both, and out is not written.  `x`, `out`:
        contiguous arrays of one dtype on this rank's device, each range
        inside its array (checked here: InvalidArgumentError before any data
        moves); receive ranges must not overlap; x and out may.  The counts
        are read during the call only (GPU: a CUDA graph replays those it
        captured).  Collective.  Returns out."""
        name = "all_to_all_v"
        s, called, w = None, False, self.size
        try:
            s = stream_handle(stream)
            sc = _splits.host_counts(name, "send_counts", send_counts, w)
            rc = _splits.host_counts(name, "recv_counts", recv_counts, w)
            sd = None if send_displs is None else _splits.host_counts(
                name, "send_displs", send_displs, w)
            rd = None if recv_displs is None else _splits.host_counts(
                name, "recv_displs", recv_displs, w)
            with Borrowed(x, "x", s) as bx, Borrowed(out, "out", s) as bo:
                self._pair(name, bx, bo)
                _splits.check_ranges(name, "x", bx.numel, sc, sd, "send")
                _splits.check_ranges(name, "out", bo.numel, rc, rd, "receive")
                args = [_splits.as_size_t(v) for v in (sc, sd, rc, rd)]
                called = True
                check(LIB.symm_all_to_all_v(self._ptr(), bx.ptr, args[0], args[1], bo.ptr,
                                            args[2], args[3], bx.dtype.code, s))
            return out
        except BaseException:
            if not called:
                self._refuse(name, s)
            raise

    def _run_rows(self, name: str, x: Any, out: Any, stream: StreamLike,
                  prepare: Callable[[], Tuple[List[SplitsArg], Callable[..., int]]]) -> Any:
        """Runs device-split collective `name` on arrays of rows.  prepare()
        checks the scalars and gives the splits arrays, each (name, array,
        allowed shapes, written by C), and the C call: call(comm, send,
        send_rows, recv, recv_rows, row_elems, dtype, *split addresses,
        stream).  Whatever is refused before the C call is refused through
        it too (_refuse)."""
        s, called = None, False
        try:
            s = stream_handle(stream)
            splits, call = prepare()
            with ExitStack() as held:
                bx = held.enter_context(Borrowed(x, "x", s))
                bo = held.enter_context(Borrowed(out, "out", s))
                self._pair(name, bx, bo)
                send_rows, recv_rows, row_elems = _splits.rows_of(name, bx, bo)
                addrs = []
                for what, arr, shapes, writes in splits:
                    b = held.enter_context(Borrowed(arr, what, s))
                    self._where(b, what)
                    _splits.check_splits(name, what, b, shapes, writes)
                    addrs.append(b.ptr)
                called = True
                check(call(self._ptr(), bx.ptr, send_rows, bo.ptr, recv_rows, row_elems,
                           bx.dtype.code, *addrs, s))
            return out
        except BaseException:
            if not called:
                self._refuse(name, s)
            raise

    def all_to_all_vdev(self, x: Any, out: Any, in_splits: Any, out_splits_offsets: Any, *,
                        stream: StreamLike = None) -> Any:
        """Mixture-of-experts all-to-all with counts in device memory
        (``symm_all_to_all_vdev``, PyTorch's ``all_to_all_vdev``).

        `x`, `out`: contiguous arrays of rows (a row: shape[1:], the same in
        both; x's shape[0] rows are what this rank can send, out's what it
        can receive), one dtype, this rank's device.  `in_splits`: int64,
        shape (size,): ``in_splits[p]`` rows go to rank p, taken packed in
        rank order from x.  `out_splits_offsets`: int64, shape (2, size),
        written: row 0 the rows received from each rank, row 1 where they
        start in out (packed in source-rank order).  Splits live where the
        data does: device tensors on GPU backends, which the call reads
        without synchronising the host (capturable in a CUDA graph); NumPy
        arrays on the host backend.  Splits that are negative, exceed x, or
        land past out are refused before any data moves: host backend
        InvalidArgumentError on every rank; GPU backends nothing written and
        the error from :meth:`check_async_error`.  Shapes, dtypes and places
        are checked here (TypeError, InvalidArgumentError) before C is
        called.  Collective.  Returns out."""
        w = self.size

        def prepare() -> Tuple[List[SplitsArg], Callable[..., int]]:
            return ([("in_splits", in_splits, [(w,)], False),
                     ("out_splits_offsets", out_splits_offsets, [(2, w)], True)],
                    LIB.symm_all_to_all_vdev)
        return self._run_rows("all_to_all_vdev", x, out, stream, prepare)

    def all_to_all_vdev_2d(self, x: Any, out: Any, in_splits: Any, out_splits_offsets: Any,
                           n_experts: int, major_align: int = 1, *,
                           stream: StreamLike = None) -> Any:
        """Mixture-of-experts dispatch (``symm_all_to_all_vdev_2d``, PyTorch's
        ``all_to_all_vdev_2d``): `n_experts` experts per rank, expert e of
        rank p being global expert ``p * n_experts + e``.

        `in_splits`: int64, shape (size * n_experts,) or (size, n_experts):
        the rows for each global expert, taken packed from x in that order.
        Every rank receives expert-major: its local expert e's rows from rank
        0, 1, ... in one block starting at a multiple of `major_align` rows
        (an expert that got no rows has an empty, aligned block; 0 or 1: no
        padding), and writes `out_splits_offsets`, int64 of shape
        (2, n_experts * size) or (2, n_experts, size): [0][e * size + p] the
        rows of expert e from rank p, [1][...] their first row in out.
        `x`, `out`, where the splits live, errors: as
        :meth:`all_to_all_vdev`; `n_experts` and `major_align` the same on
        every rank.  Collective.  Returns out."""
        name, w = "all_to_all_vdev_2d", self.size

        def prepare() -> Tuple[List[SplitsArg], Callable[..., int]]:
            ne = _splits.whole(name, "n_experts", n_experts, 1)
            align = _splits.whole(name, "major_align", major_align, 0, (1 << 63) - 1)
            return ([("in_splits", in_splits, [(w * ne,), (w, ne)], False),
                     ("out_splits_offsets", out_splits_offsets, [(2, ne * w), (2, ne, w)], True)],
                    lambda *a: LIB.symm_all_to_all_vdev_2d(*a[:-1], ne, align, a[-1]))
        return self._run_rows(name, x, out, stream, prepare)

    def all_to_all_vdev_2d_combine(self, x: Any, out: Any, in_splits_offsets: Any,
                                   out_splits_offsets: Any, n_experts: int, *,
                                   stream: StreamLike = None) -> Any:
        """Mixture-of-experts combine, the inverse of :meth:`all_to_all_vdev_2d`
        (``symm_all_to_all_vdev_2d_combine``, PyTorch's
        ``all_to_all_vdev_2d_offset``).

        `in_splits_offsets`: int64, shape (2, n_experts * size) or
        (2, n_experts, size), as the dispatch's out_splits_offsets left it:
        [0][e * size + p] rows at row [1][e * size + p] of x (local expert
        e's rows for rank p) go back to rank p.  Every rank receives
        rank-major and packed (rank 0's experts 0, 1, ..., then rank 1's:
        the order of its dispatch input) and writes `out_splits_offsets`,
        int64 of shape (2, size * n_experts) or (2, size, n_experts):
        [0][q * n_experts + e] the rows from rank q's expert e, [1][...]
        where they start in out.  Everything else as :meth:`all_to_all_vdev`.
        Collective.  Returns out."""
        name, w = "all_to_all_vdev_2d_combine", self.size

        def prepare() -> Tuple[List[SplitsArg], Callable[..., int]]:
            ne = _splits.whole(name, "n_experts", n_experts, 1)
            return ([("in_splits_offsets", in_splits_offsets, [(2, ne * w), (2, ne, w)], False),
                     ("out_splits_offsets", out_splits_offsets, [(2, w * ne), (2, w, ne)], True)],
                    lambda *a: LIB.symm_all_to_all_vdev_2d_combine(*a[:-1], ne, a[-1]))
        return self._run_rows(name, x, out, stream, prepare)

def _backend_code(name: Optional[str]) -> int:
    if name is None:
        return 0
    code = c_int()
    check(LIB.symm_backend_from_name(str(name).encode(), byref(code)))
    return code.value


def _opt(value: Optional[int], unset: int) -> int:
    return unset if value is None else int(value)


_signal_pad_size: Optional[int] = None

SPLIT_NONE = -1       #: Communicator.split: join no group
SPLIT_BY_HOST = -2    #: Communicator.split: the ranks of this host


def set_signal_pad_size(size: Optional[int]) -> None:
    """The signal-pad size, in bytes, of communicators that :func:`init`
    creates from now on in this process without their own
    `signal_pad_bytes` (PyTorch's ``set_signal_pad_size``); None: back to
    SYMM_SIGNAL_PAD_BYTES.  A multiple of 4096 in [4096, 1 MiB], the same
    on every rank (checked at init).  Existing communicators keep theirs."""
    global _signal_pad_size
    if size is not None and (int(size) <= 0 or int(size) % 4096 or int(size) > 1 << 20):
        raise make_error(Result.INVALID_ARG, "set_signal_pad_size: %r is not a multiple of 4096 "
                         "in [4096, 1 MiB]" % (size,))
    _signal_pad_size = None if size is None else int(size)


def init(*, rank: Optional[int] = None, world_size: Optional[int] = None,
         backend: Optional[str] = None, timeout_ms: Optional[int] = None,
         device: Optional[int] = None, store_addr: Optional[str] = None,
         token: Optional[str] = None, job_id: Optional[str] = None,
         local_rank: Optional[int] = None, local_size: Optional[int] = None,
         store_server: Optional[bool] = None,
         signal_pad_bytes: Optional[int] = None, bootstrap: Any = None) -> Communicator:
    """Creates a communicator (``symm_comm_init``).  Collective over every rank.

    Every argument left None comes from the environment as in C: rank and
    size from symmem-run, torchrun, Open MPI, PMI or Slurm (else 0 of 1);
    the store address from SYMM_STORE_ADDR or MASTER_ADDR + SYMM_STORE_PORT;
    `backend` from SYMM_BACKEND ("auto", "host", "native", "cuda", "nccl",
    "nvshmem"); `timeout_ms` from SYMM_TIMEOUT_MS.  `store_server`: whether
    this rank serves the store (None: rank 0 unless symmem-run serves it).
    `signal_pad_bytes`: every tensor's signal pad (None: what
    :func:`set_signal_pad_size` set, else SYMM_SIGNAL_PAD_BYTES).

    `bootstrap`: the ranks meet through it instead of symmem's store, which
    is then neither started nor reached (no port, no token; `store_addr`,
    `token` and `store_server` are refused with it): a store with
    set/get/add/wait such as ``torch.distributed``'s (rank and world size
    from the arguments or the environment), a ``torch.distributed``
    ProcessGroup, an mpi4py communicator, or a
    :class:`symmem.bootstrap.Channel` (see :mod:`symmem.bootstrap`).  Under
    torchrun::

        import torch.distributed as dist
        dist.init_process_group("gloo")
        comm = symmem.init(bootstrap=dist.distributed_c10d._get_default_store())

    A bootstrap's exceptions become this call's errors: TimeoutError when
    the ranks did not all take part within `timeout_ms`, PeerLostError for
    a lost connection, BackendError otherwise, each with the original
    exception as ``__cause__``.  The communicator's :attr:`Communicator.store`
    is symmem's own store, which a communicator on a bootstrap does not
    have.

    Use it as a context manager::

        with symmem.init() as comm:
            t = comm.empty((1024,), "float32").rendezvous()
    """
    keep = [None if v is None else str(v).encode() for v in (store_addr, token, job_id)]
    cfg = SymmConfig()
    cfg.size, cfg.version = sizeof(SymmConfig), SYMM_CONFIG_VERSION
    cfg.rank, cfg.world_size = _opt(rank, -1), _opt(world_size, -1)
    cfg.local_rank, cfg.local_size = _opt(local_rank, -1), _opt(local_size, -1)
    cfg.device = _opt(device, -1)
    cfg.backend = _backend_code(backend)
    cfg.timeout_ms = _opt(timeout_ms, 0)
    cfg.store_addr, cfg.token, cfg.job_id = keep
    cfg.store_server = -1 if store_server is None else int(bool(store_server))
    cfg.signal_pad_bytes = _opt(signal_pad_bytes if signal_pad_bytes is not None
                                else _signal_pad_size, 0)
    hold = None
    if bootstrap is not None:
        unused = [n for n, v in (("store_addr", store_addr), ("token", token),
                                 ("store_server", store_server)) if v is not None]
        if unused:
            invalid("init: %s has no use with bootstrap= (the ranks meet through it)"
                    % " and ".join(unused))
        hold = Hold(channel_for(bootstrap, rank, world_size))
        cfg.bootstrap = pointer(hold.struct)
    out = c_void_p()
    try:
        check(LIB.symm_comm_init(byref(cfg), byref(out)))
    except BaseException:
        if hold is not None:
            hold.close()
        raise
    return Communicator(_CommHandle(out.value, hold))
