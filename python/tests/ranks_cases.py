"""Multi-rank cases, each run by test_ranks.py under `symmem-run -n N`.

`python ranks_cases.py CASE`: every rank runs CASE, asserts, and prints
"CASE ok rank R" when it passed; an assertion failure exits non-zero, which
symmem-run returns.
"""
import os
import sys

import numpy as np

import symmem


def bf16_bits(values):
    """bfloat16 bit patterns of float32 values that bf16 holds exactly."""
    return (np.asarray(values, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def case_exchange(comm):
    """Remote views, peer pointers, contiguous view, lookup, signals, store."""
    r, w = comm.rank, comm.size
    right, left = (r + 1) % w, (r - 1) % w
    for dtype in ("uint8", "int16", "float32", "float64", "uint64"):
        t = comm.empty((3, 5), dtype).rendezvous()
        assert t.is_rendezvoused
        np.from_dlpack(t.remote(right))[:] = r + 1
        comm.barrier()
        assert np.all(np.from_dlpack(t) == left + 1), dtype
        comm.barrier()
        t.free()
    # get_buffer: a peer's bytes as another shape and dtype, from an offset.
    t = comm.empty(16, "int32").rendezvous()
    np.from_dlpack(t)[:] = np.arange(16, dtype=np.int32) + 1000 * r
    comm.barrier()
    b = t.get_buffer(right, (2, 2), "int64", storage_offset=2)
    assert b.rank == right
    assert np.array_equal(np.from_dlpack(b).view(np.int32).ravel(),
                          np.arange(4, 12, dtype=np.int32) + 1000 * right)
    comm.barrier()
    t.free()
    t = comm.empty((4, 7), "int32").rendezvous()
    ptrs = t.peer_ptrs()
    assert len(ptrs) == w and ptrs[r] == t.data_ptr
    for p in range(w):
        v = t.remote(p)
        assert v.data_ptr == ptrs[p] and v.rank == p and v.shape == (4, 7)
        found = comm.lookup(ptrs[p] + 12)
        assert found.tensor is t and found.rank == p and found.offset == 12, found
    np.from_dlpack(t)[:] = np.arange(28, dtype=np.int32).reshape(4, 7) + 100 * r
    comm.barrier()
    cv = t.contiguous_view()
    assert cv.shape == (w, 4, 7) and cv.rank == -1
    all_ranks = np.from_dlpack(cv)
    for p in range(w):
        assert np.array_equal(all_ranks[p], np.arange(28).reshape(4, 7) + 100 * p), (
            cv, all_ranks.strides, all_ranks[p])
    assert comm.lookup(cv.data_ptr).rank == -1
    comm.barrier()
    # Signals: a ring of put/wait, then the signal-pad barrier; pads end zeroed.
    np.from_dlpack(t.remote(right))[0, 0] = -r
    t.put_signal(right, channel=1)
    t.wait_signal(left, channel=1)
    assert np.from_dlpack(t)[0, 0] == -left
    t.barrier(channel=0)
    t.barrier()
    assert not np.any(np.from_dlpack(t.signal_pad()))
    assert t.signal_pad(right).shape == (symmem.signal_pad_bytes() // 4,)
    assert t.signal_channels == symmem.signal_pad_bytes() // 4 // w
    comm.barrier()
    # The store across ranks.
    assert 1 <= comm.store.add("ranks/count") <= w
    comm.store["ranks/%d" % r] = "hello from %d" % r
    comm.store.wait(["ranks/%d" % p for p in range(w)])
    assert comm.store.get("ranks/%d" % left) == ("hello from %d" % left).encode()
    won = comm.store.compare_set("ranks/winner", None, str(r))
    assert won in [str(p).encode() for p in range(w)]
    comm.barrier()
    assert comm.store.add("ranks/count", 0) == w


def case_collectives(comm):
    """Every collective, every reducible dtype, in place and into an output."""
    r, w = comm.rank, comm.size
    n = 1000
    for dtype in ("float32", "int32", "float16"):
        x = (np.arange(n) % 17 + r).astype(dtype)
        out = np.empty_like(x)
        comm.all_reduce(x, out=out)
        expect = sum((np.arange(n) % 17 + p) for p in range(w)).astype(dtype)
        assert np.array_equal(out, expect), dtype
        for op, fn in (("min", np.minimum), ("max", np.maximum)):
            y = x.copy()
            comm.all_reduce(y, op=op)
            want = (np.arange(n) % 17 + (0 if op == "min" else w - 1)).astype(dtype)
            assert np.array_equal(y, want), (dtype, op)
    # bfloat16 in a symmetric tensor, reduced in place through the tensor.
    t = comm.empty(64, "bfloat16").rendezvous()
    bits = np.from_dlpack(t.local().__class__(t.local()._handle, t.data_ptr, (64,), (1,),
                                              symmem._dtypes.dtype_of("uint16"), -1, r))
    bits[:] = bf16_bits(np.full(64, r + 1.0))
    comm.all_reduce(t)
    assert np.array_equal(bits, bf16_bits(np.full(64, w * (w + 1) / 2))), bits[:4]
    # all_gather, reduce_scatter, broadcast, all_to_all.
    x = np.full(10, r, dtype=np.float64)
    out = np.empty(10 * w, dtype=np.float64)
    comm.all_gather(x, out)
    assert np.array_equal(out, np.repeat(np.arange(w, dtype=np.float64), 10))
    x = np.arange(10 * w, dtype=np.float32) + r
    out = np.empty(10, dtype=np.float32)
    comm.reduce_scatter(x, out)
    assert np.array_equal(out, sum(np.arange(10 * w, dtype=np.float32)[r * 10:(r + 1) * 10] + p
                                   for p in range(w)))
    x = np.full(33, r, dtype=np.int64)
    comm.broadcast(x, root=w - 1)
    assert np.all(x == w - 1)
    x = np.arange(4 * w, dtype=np.uint8) + 10 * r
    out = np.empty_like(x)
    comm.all_to_all(x, out)
    for p in range(w):
        assert np.array_equal(out[p * 4:(p + 1) * 4], np.arange(r * 4, r * 4 + 4) + 10 * p)
    # A symmetric tensor's own memory (zero copy), into a symmetric output.
    a = comm.empty(256, "float32").rendezvous()
    b = comm.empty(256 * w, "float32").rendezvous()
    np.from_dlpack(a)[:] = r
    comm.all_gather(a.local(), b)
    assert np.array_equal(np.from_dlpack(b), np.repeat(np.arange(w, dtype=np.float32), 256))


def case_empty(comm):
    """Count 0 is a call like any other (symmem.h): NumPy's empty arrays,
    whose strides are (0,), are taken, in place and into an output, and
    the calls keep their places (a checked all-reduce follows)."""
    r, w = comm.rank, comm.size
    for dtype in ("float32", "int32"):
        x = np.empty(0, dtype=dtype)
        comm.all_reduce(x)
        comm.all_reduce(x, out=np.empty(0, dtype=dtype))
    for dtype in ("int64", "uint8"):
        x = np.empty(0, dtype=dtype)
        comm.all_gather(x, np.empty(0, dtype=dtype))
        comm.broadcast(x, root=w - 1)
    x = np.empty((3, 0), dtype=np.float32)
    comm.all_reduce(x)
    y = np.full(5, r + 1, dtype=np.float32)
    comm.all_reduce(y)
    assert np.all(y == w * (w + 1) / 2), y


def case_errors(comm):
    """MismatchError and TimeoutError on every rank."""
    r, w = comm.rank, comm.size
    t = comm.empty(16 + r, "float32")
    try:
        t.rendezvous()
        raise AssertionError("rendezvous of different shapes passed")
    except symmem.MismatchError as e:
        assert e.code == symmem.Result.MISMATCH and e.detail, e
    x = np.ones(8 + r, dtype=np.float32)
    try:
        comm.all_reduce(x)
        raise AssertionError("all_reduce of different counts passed")
    except symmem.MismatchError:
        pass
    comm.barrier()
    s = comm.empty(4, "int32").rendezvous()
    try:
        s.wait_signal((r + 1) % w, channel=0)  # nobody puts
        raise AssertionError("wait_signal without a put returned")
    except symmem.TimeoutError as e:
        assert isinstance(e, TimeoutError) and e.code == 5
    comm.barrier()


def case_refused(comm):
    """An argument refused in Python on rank 0 still takes the call's place:
    its peers get MismatchError naming it, and the next call pairs up."""
    r, w = comm.rank, comm.size
    x = np.full(100, r + 1, dtype=np.float32)
    ro = np.empty(100, dtype=np.float32)
    ro.flags.writeable = False
    bad = [
        ("all_reduce", lambda: comm.all_reduce(x, out=np.empty(100, dtype=np.int32))),
        ("all_reduce", lambda: comm.all_reduce(x, out=np.empty(101, dtype=np.float32))),
        ("all_reduce", lambda: comm.all_reduce(x, out=ro)),
        ("all_reduce", lambda: comm.all_reduce([1.0] * 100)),
        ("all_reduce", lambda: comm.all_reduce(x, op="mean-ish")),
        ("all_reduce", lambda: comm.all_reduce(np.ones((100, 2), dtype=np.float32)[:, 0])),
        ("all_reduce", lambda: comm.all_reduce(x, stream=object())),
        ("reduce_scatter", lambda: comm.reduce_scatter(np.ones(4 * w, np.float32),
                                                       np.empty(4, np.float32), op="nope")),
        ("broadcast", lambda: comm.broadcast(x, root="zero")),
        ("all_gather", lambda: comm.all_gather(x, np.empty(3, np.float32))),
        ("all_to_all", lambda: comm.all_to_all(np.ones(4 * w, np.float32),
                                               np.empty(4 * w, np.float64))),
        ("all_to_all", lambda: comm.all_to_all(np.ones(4 * w, np.float32),
                                               np.empty(4 * w + 1, np.float32))),
        ("reserve_scratch", lambda: comm.reserve_scratch("lots")),
    ]
    good = {
        "all_reduce": lambda: comm.all_reduce(x.copy()),
        "reduce_scatter": lambda: comm.reduce_scatter(np.ones(4 * w, np.float32),
                                                      np.empty(4, np.float32)),
        "broadcast": lambda: comm.broadcast(x.copy(), root=0),
        "all_gather": lambda: comm.all_gather(x, np.empty(100 * w, np.float32)),
        "all_to_all": lambda: comm.all_to_all(np.ones(4 * w, np.float32),
                                              np.empty(4 * w, np.float32)),
        "reserve_scratch": lambda: comm.reserve_scratch(64 << 20),
    }
    for name, call in bad:
        try:
            if r == 0:
                call()
            else:
                good[name]()
            raise AssertionError("rank %d: %s passed where rank 0 refused its argument" % (r, name))
        except symmem.MismatchError as e:
            assert r != 0 and "rank 0" in e.detail and "argument checks" in e.detail, e
        except (symmem.InvalidArgumentError, TypeError, ValueError) as e:
            if r != 0:  # a host call's round fails on every rank with rank 0's reason
                assert name == "reserve_scratch" and "rank 0 could not take part" in str(e), e
            else:
                assert not isinstance(e, symmem.MismatchError), e
        y = np.full(100, r + 1, dtype=np.float32)
        comm.all_reduce(y)
        assert np.all(y == w * (w + 1) / 2), (name, y[:4])
    comm.barrier()


def case_mempool(comm):
    """Arrays of the allocator (symm_mempool_alloc): ordinary NumPy arrays,
    rendezvoused by pointer, written by the neighbour; given back when the
    array goes."""
    import gc
    r, w = comm.rank, comm.size
    right, left = (r + 1) % w, (r - 1) % w
    for n in (1000, 3, 1 << 16):
        a = comm.empty_array((n,), "int32")
        assert isinstance(a, np.ndarray) and a.shape == (n,) and a.dtype == np.int32
        a[:] = -1
        found = comm.lookup(a.ctypes.data + 8)
        assert found.rank == r and found.offset == 8, found
        t = comm.rendezvous(a[2:])  # any pointer into the block finds it
        assert t is comm.rendezvous(a)
        np.from_dlpack(t.remote(right)).view(np.int32)[:n] = np.arange(n) + 1000 * r
        comm.barrier()
        assert np.array_equal(a, np.arange(n, dtype=np.int32) + 1000 * left)
        comm.barrier()
        ptr = a.ctypes.data
        del a, t, found
        gc.collect()
        try:
            comm.lookup(ptr)
            raise AssertionError("the block outlived its array")
        except symmem.NotFoundError:
            pass
    try:
        comm.rendezvous(np.zeros(4))
        raise AssertionError("plain memory rendezvoused")
    except symmem.NotFoundError:
        pass
    comm.barrier()


def case_peer_lost(comm):
    """Rank 1 dies; rank 0's barrier raises PeerLostError."""
    if comm.rank == 1:
        os._exit(0)
    try:
        comm.barrier()
        raise AssertionError("barrier with a dead peer returned")
    except (symmem.PeerLostError, symmem.TimeoutError) as e:
        assert isinstance(e, symmem.PeerLostError), "expected PeerLostError, got %r" % e
        assert "rank 1" in e.detail or e.detail, e


def _np_reduce(xs, op, dt, w):
    """NumPy's reduction of the ranks' arrays xs as symmem computes it: in
    rank order, f16/bf16/FP8 in float32 and rounded once, integers wrapping,
    avg the sum divided by w (integers truncating)."""
    narrow = dt.itemsize <= 2 and dt.kind not in "iu"
    acc = xs[0].astype(np.float32) if narrow else xs[0].copy()
    for x in xs[1:]:
        x = x.astype(np.float32) if narrow else x
        with np.errstate(over="ignore"):
            acc = {"sum": acc + x, "avg": acc + x, "prod": acc * x,
                   "min": np.minimum(acc, x), "max": np.maximum(acc, x)}[op]
    if op == "avg":
        if dt.kind in "iu":
            s = acc.astype(np.int64) if dt.kind == "i" else acc.astype(np.uint64)
            q = np.where(s < 0, -((-s) // w), s // w) if dt.kind == "i" else s // w
            acc = q.astype(dt)
        else:
            acc = acc / np.asarray(w, dtype=acc.dtype)
    return acc.astype(dt)


def case_all_ops(comm):
    """Every dtype NumPy (or ml_dtypes) has with every op, against NumPy."""
    r, w = comm.rank, comm.size
    names = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
             "float16", "float32", "float64"]
    try:
        import ml_dtypes
        names += ["bfloat16", "float8_e4m3fn", "float8_e5m2"]
    except ImportError:
        ml_dtypes = None
    n = 37
    for name in names:
        dt = np.dtype(getattr(ml_dtypes, name)) if name in ("bfloat16", "float8_e4m3fn",
                                                            "float8_e5m2") else np.dtype(name)
        for op in ("sum", "prod", "min", "max", "avg"):
            rng = [np.random.default_rng(1000 * p + len(op)) for p in range(w)]
            if dt.kind in "iu":
                xs = [g.integers(0 if dt.kind == "u" else -100, 100, n).astype(dt) for g in rng]
            elif op == "prod":
                xs = [g.choice([-2.0, -1.0, -0.5, 0.5, 1.0, 1.5, 2.0], n).astype(dt) for g in rng]
            else:
                xs = [g.integers(-4, 5, n).astype(np.float32).astype(dt) for g in rng]
            x = xs[r].copy()
            comm.all_reduce(x, op)
            want = _np_reduce(xs, op, dt, w)
            assert np.array_equal(x.view(np.uint8), want.view(np.uint8)), (name, op, x, want)
            out = np.zeros(n // w if n >= w else 1, dtype=dt)
            m = out.size
            y = np.concatenate([xx[:m * w] for xx in [xs[r]]])
            comm.reduce_scatter(y, out, op)
            part = _np_reduce([xx[:m * w] for xx in xs], op, dt, w)[r * m:(r + 1) * m]
            assert np.array_equal(out.view(np.uint8), part.view(np.uint8)), (name, op, out, part)
    comm.barrier()


def case_split(comm):
    """Groups: uneven colors ranked by key with the last rank out, the 2-D
    layout, a group outliving its parent's handle, each group's all-reduce
    against NumPy."""
    r, w = comm.rank, comm.size
    g = comm.split(symmem.SPLIT_NONE if r == w - 1 else r % 2, key=-r)
    if r == w - 1:
        assert g is None
    else:
        members = [p for p in range(w - 1) if p % 2 == r % 2]
        assert g.size == len(members) and g.rank == sorted(members, reverse=True).index(r)
        x = np.array([r], dtype=np.int64)
        g.all_reduce(x)
        assert x[0] == sum(members), (x, members)
        g.close()
    if w % 2 == 0:
        row, col = comm.split_2d(2)
        assert row.size == 2 and row.rank == r % 2 and col.size == w // 2 and col.rank == r // 2
        y = np.array([1.0, r], dtype=np.float32)
        row.all_reduce(y, "avg")
        assert y[0] == 1.0 and y[1] == (r // 2 * 2) + 0.5, y
        row.close()
        col.close()
    host = comm.split(symmem.SPLIT_BY_HOST)
    assert host.size == w and host.rank == r
    host.barrier()
    host.close()
    comm.barrier()


def case_pad_size(comm):
    """set_signal_pad_size / init(signal_pad_bytes=...): a communicator's
    own pad size, its channels, and ranks that disagree."""
    r, w = comm.rank, comm.size
    right, left = (r + 1) % w, (r - 1) % w
    timeout = comm.timeout_ms
    assert comm.signal_pad_bytes == symmem.signal_pad_bytes() == 4096
    try:
        symmem.set_signal_pad_size(5000)
        raise AssertionError("a pad of 5000 bytes was taken")
    except symmem.InvalidArgumentError as e:
        assert "multiple of 4096" in str(e), e
    symmem.set_signal_pad_size(16384)
    try:
        with symmem.init(timeout_ms=timeout) as c2:
            assert c2.signal_pad_bytes == 16384
            t = c2.empty(8, "int32").rendezvous()
            assert t.signal_pad(right).shape == (4096,)
            top = t.signal_channels - 1
            assert top == 4096 // w - 1
            t.put_signal(right, channel=top)
            t.wait_signal(left, channel=top)
            t.barrier(channel=top)
            assert not np.any(np.from_dlpack(t.signal_pad()))
            t.free()
    finally:
        symmem.set_signal_pad_size(None)
    with symmem.init(timeout_ms=timeout, signal_pad_bytes=8192) as c3:
        assert c3.signal_pad_bytes == 8192
    try:
        symmem.init(timeout_ms=timeout, signal_pad_bytes=8192 if r == 1 else None)
        raise AssertionError("ranks with different pads made a communicator")
    except symmem.MismatchError as e:
        assert "signal pads" in str(e), e


def case_put_get(comm):
    # One-sided: every rank puts into its right neighbour at an odd offset,
    # with a signal; the neighbour waits and checks; then gets it back.
    import numpy as np
    r, n = comm.rank, comm.size
    right, left = (r + 1) % n, (r - 1) % n
    with comm.empty((1001,), "uint8").rendezvous() as t:
        t.local().numpy()[:] = 0
        comm.barrier()
        data = (np.arange(200, dtype=np.uint8) * 3 + r).astype(np.uint8)
        t.put(right, data, offset=7, signal=0)
        t.wait_signal(left, 0)
        want = (np.arange(200, dtype=np.uint8) * 3 + left).astype(np.uint8)
        got = t.local().numpy()
        assert (got[7:207] == want).all() and not got[:7].any() and not got[207:].any()
        back = np.zeros(200, dtype=np.uint8)
        comm.barrier()  # the left neighbour's own data came from its left: landed by now
        assert t.get(left, back, offset=7) is back
        assert (back == (np.arange(200, dtype=np.uint8) * 3 + (left - 1) % n)).all()
        try:
            t.put(right, data, offset=900)
        except symmem.InvalidArgumentError as e:
            assert "not inside the tensor's 1001 bytes" in str(e), e
        else:
            raise AssertionError("a put past the end was not refused")
        comm.barrier()


def case_register(comm):
    # The caller's memfd mapping made symmetric: stores through remote
    # views land in every rank's own mapping, which outlives the tensor;
    # private memory is refused on every rank, naming the reason.
    import mmap
    import numpy as np
    r, n = comm.rank, comm.size
    fd = os.memfd_create("register-case")
    os.ftruncate(fd, 2 * mmap.PAGESIZE)
    mm = mmap.mmap(fd, 2 * mmap.PAGESIZE)
    mine = np.frombuffer(mm, dtype=np.int32, offset=mmap.PAGESIZE, count=100)
    try:
        comm.register(np.zeros(100, dtype=np.int32), fd=fd)
    except symmem.InvalidArgumentError as e:
        assert "cannot be shared" in str(e), e
    else:
        raise AssertionError("private memory was registered")
    with comm.register(mine, fd=fd, fd_offset=mmap.PAGESIZE).rendezvous() as t:
        os.close(fd)  # symmem keeps its own
        assert t.shape == (100,) and t.local().data_ptr == mine.ctypes.data
        t.remote((r + 1) % n).numpy()[:] = np.arange(100, dtype=np.int32) * 10 + r
        comm.barrier()
        assert (mine == np.arange(100, dtype=np.int32) * 10 + (r - 1) % n).all()
        comm.barrier()
    assert (mine == np.arange(100, dtype=np.int32) * 10 + (r - 1) % n).all()
    del t, mine
    mm.close()


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def main() -> int:
    case = sys.argv[1]
    if case == "permission":
        # symmem-run's store refuses any other token.
        try:
            symmem.init(token="not-the-job-token", timeout_ms=5000)
        except symmem.PermissionDeniedError as e:
            assert e.code == symmem.Result.PERMISSION and isinstance(e, PermissionError)
            print("permission ok rank %s: %s" % (os.environ.get("SYMM_RANK"), e))
            return 0
        raise AssertionError("a wrong token was accepted")
    timeout = int(os.environ.get("CASE_TIMEOUT_MS", "20000"))
    with symmem.init(timeout_ms=timeout) as comm:
        assert comm.size == int(os.environ["SYMM_WORLD_SIZE"]) and comm.backend == "host"
        CASES[case](comm)
        print("%s ok rank %d" % (case, comm.rank))
    return 0


if __name__ == "__main__":
    sys.exit(main())
