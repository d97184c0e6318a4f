"""All-to-all-v cases, each run by test_all_to_all_v.py under `symmem-run -n N`.

`python a2av_cases.py CASE`: every rank runs CASE, asserts, and prints
"CASE ok rank R" when it passed.  Every rank builds every rank's input and
counts from fixed seeds, so what it must receive is computed here with
NumPy alone, never through symmem.
"""
import os
import sys

import numpy as np

import symmem

try:
    import ml_dtypes
except ImportError:
    ml_dtypes = None


# ---- inputs and counts, the same on every rank

def modulus(dt):
    """Values below it are exact and distinct in dt."""
    if dt.itemsize == 1:
        return 251
    if dt.itemsize == 2 and dt.kind not in "iu":
        return 251 if dt.name == "bfloat16" else 2039
    return 32749


def values(rank, n, dt, salt=0):
    """Rank `rank`'s input of n elements: a pattern in which neighbours,
    ranks and calls (salt) differ."""
    v = (np.arange(n, dtype=np.int64) * 7 + rank * 1009 + salt * 31) % modulus(dt)
    return v.astype(np.float64).astype(dt)


def sentinel(dt):
    """A value no input holds (what untouched memory keeps)."""
    return np.array([modulus(dt)], dtype=np.float64).astype(dt)[0]


def count_matrix(w, seed, skew=None, silent=None, total=24):
    """C[src, dst]: what src sends dst.  Random with zeros, or skewed like
    MoE routing (every sender's hottest peer gets `skew` times its coldest,
    the hot peer the same for every sender); row `silent` all zero: a rank
    that sends nothing."""
    rng = np.random.default_rng(seed)
    if skew is None:
        c = rng.integers(0, 9, size=(w, w))
        c[rng.random((w, w)) < 0.3] = 0
    else:
        shares = float(skew) ** (rng.permutation(w) / max(w - 1, 1))
        c = np.tile(np.floor(total * shares / shares.sum()), (w, 1))
    c = c.astype(np.int64)
    if silent is not None:
        c[silent, :] = 0
    return c


def exclusive(counts):
    return np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)


def spread(counts, gap, reverse):
    """Displacements with `gap` elements before every range, ranges in
    rank order or reversed; and the elements that takes."""
    d, at = [0] * len(counts), gap
    for p in (reversed(range(len(counts))) if reverse else range(len(counts))):
        d[p] = at
        at += int(counts[p]) + gap
    return d, at


def same(a, b):
    """Bytewise equality (bf16 and FP8 included)."""
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8))


def dtypes():
    out = [np.dtype(n) for n in ("float32", "int64", "uint8", "float16", "int16")]
    if ml_dtypes is not None:
        out.append(np.dtype(ml_dtypes.bfloat16))
    return out


def check_all_reduce(comm):
    """The communicator still pairs calls up after a failed one."""
    w = comm.size
    y = np.full(7, comm.rank + 1, dtype=np.float32)
    comm.all_reduce(y)
    assert np.all(y == w * (w + 1) / 2), y


# ---- all_to_all_v: host counts

def a2av_layout(c, q, explicit, w):
    """Rank q's send displacements and x size, receive displacements and
    out size (explicit: gaps and shuffled order; else packed with slack)."""
    if explicit:
        sd, xn = spread(c[q], 2, reverse=True)
        rd, on = spread(c[:, q], 1, reverse=q % 2 == 0)
        return sd, xn, rd, on + 1
    return None, int(c[q].sum()) + 3, None, int(c[:, q].sum()) + 3


def a2av_expected(c, r, explicit, dt, salt, w):
    """What rank r's out must hold: each rank's range for r at r's
    receive displacement; sentinels everywhere else."""
    _, _, rd, on = a2av_layout(c, r, explicit, w)
    rd = exclusive(c[:, r]) if rd is None else rd
    want = np.full(on, sentinel(dt), dtype=dt)
    for p in range(w):
        sd_p, xn_p, _, _ = a2av_layout(c, p, explicit, w)
        sd_p = exclusive(c[p]) if sd_p is None else sd_p
        n = int(c[p, r])
        want[rd[p]:rd[p] + n] = values(p, xn_p, dt, salt)[sd_p[r]:sd_p[r] + n]
    return want


def case_host_counts(comm):
    """Random and skewed counts with zeros and a rank that sends nothing,
    packed and with explicit displacements, every dtype; counts as lists,
    tuples and NumPy arrays."""
    r, w = comm.rank, comm.size
    patterns = [count_matrix(w, 11, silent=w - 1), count_matrix(w, 12, skew=8, silent=0),
                count_matrix(w, 13, skew=1)]
    salt = 0
    for dt in dtypes():
        for c in patterns:
            for explicit in (False, True):
                salt += 1
                sd, xn, rd, on = a2av_layout(c, r, explicit, w)
                x = values(r, xn, dt, salt)
                out = np.full(on, sentinel(dt), dtype=dt)
                kinds = [list, tuple, np.asarray][salt % 3]
                got = comm.all_to_all_v(x, kinds([int(v) for v in c[r]]), out,
                                        kinds([int(v) for v in c[:, r]]),
                                        None if sd is None else kinds(sd),
                                        None if rd is None else kinds(rd))
                assert got is out
                want = a2av_expected(c, r, explicit, dt, salt, w)
                assert same(out, want), (dt, c.tolist(), explicit, out, want)
    # Symmetric tensors, in place (x and out the same memory), packed.
    c = count_matrix(w, 14, silent=w // 2)
    n = int(max(c.sum(axis=0).max(), c.sum(axis=1).max())) + 1
    t = comm.empty(n, "int32").rendezvous()
    mine = np.from_dlpack(t)
    mine[:] = sentinel(np.dtype("int32"))
    mine[:c[r].sum()] = values(r, int(c[r].sum()), np.dtype("int32"), 99)
    comm.all_to_all_v(t, c[r], t, c[:, r])
    for p in range(w):
        src = values(p, int(c[p].sum()), np.dtype("int32"), 99)
        at, n_p = exclusive(c[:, r])[p], int(c[p, r])
        assert np.array_equal(mine[at:at + n_p], src[exclusive(c[p])[r]:][:n_p]), (p, mine)
    comm.barrier()


# ---- the device-split forms (their splits in NumPy arrays on the host backend)

def case_vdev(comm):
    """all_to_all_vdev: rows of several shapes, a rank that sends nothing,
    zeros; received rows packed in source order, out_splits_offsets, rows
    past the received ones untouched."""
    r, w = comm.rank, comm.size
    cases = [(np.dtype("float32"), (3,)), (np.dtype("int32"), ()), (np.dtype("uint8"), (2, 5))]
    if ml_dtypes is not None:
        cases.append((np.dtype(ml_dtypes.bfloat16), (4,)))
    for salt, (dt, row) in enumerate(cases):
        c = count_matrix(w, 21 + salt, silent=salt % w)
        elems = int(np.prod(row, dtype=np.int64))

        def rows_of(q):
            n = int(c[q].sum()) + 2  # spare rows that are not sent
            return values(q, n * elems, dt, salt).reshape((n,) + row)
        x = rows_of(r)
        cap = int(c[:, r].sum()) + 3
        out = np.full((cap,) + row, sentinel(dt), dtype=dt)
        oso = np.full((2, w), -7, dtype=np.int64)
        comm.all_to_all_vdev(x, out, c[r].copy(), oso)
        assert np.array_equal(oso[0], c[:, r]) and np.array_equal(oso[1], exclusive(c[:, r])), oso
        want = np.full_like(out, sentinel(dt))
        for p in range(w):
            at, n = int(exclusive(c[:, r])[p]), int(c[p, r])
            want[at:at + n] = rows_of(p)[exclusive(c[p])[r]:][:n]
        assert same(out, want), (dt, c.tolist(), out, want)
    comm.barrier()


def dispatch_layout(s, r, ne, align, w):
    """Rank r's out_splits_offsets of the 2-D dispatch of splits s (rows
    of global expert g from rank p: s[p, g]) and the rows it needs."""
    counts = np.zeros(ne * w, dtype=np.int64)
    offs = np.zeros(ne * w, dtype=np.int64)
    at, a = 0, max(align, 1)
    for e in range(ne):
        at = -(-at // a) * a
        for p in range(w):
            n = int(s[p, r * ne + e])
            counts[e * w + p], offs[e * w + p] = n, at
            at += n
    return counts, offs, at


def expert_splits(w, ne, seed):
    """Rows per (sender, global expert): random with zeros; local expert 1
    of every rank gets no rows at all, and rank w - 1 sends nothing."""
    s = np.random.default_rng(seed).integers(0, 6, size=(w, w * ne)).astype(np.int64)
    s[:, [q * ne + 1 for q in range(w)]] = 0
    s[w - 1, :] = 0
    return s


def case_vdev_2d(comm):
    """all_to_all_vdev_2d with major_align 1 and 8 and an expert that gets
    no rows, against NumPy; then the combine brings every row home."""
    r, w = comm.rank, comm.size
    ne = 3
    for salt, (align, dt, row, shaped) in enumerate([
            (1, np.dtype("float32"), (4,), False), (8, np.dtype("int64"), (), True),
            (8, np.dtype("float16"), (2, 3), False), (0, np.dtype("uint8"), (5,), True)]):
        s = expert_splits(w, ne, 40 + salt)
        elems = int(np.prod(row, dtype=np.int64))

        def rows_of(q):
            n = int(s[q].sum()) + 1
            return values(q, n * elems, dt, salt).reshape((n,) + row)
        x = rows_of(r)
        counts, offs, need = dispatch_layout(s, r, ne, align, w)
        cap = need + 2
        out = np.full((cap,) + row, sentinel(dt), dtype=dt)
        in_splits = s[r].reshape(w, ne).copy() if shaped else s[r].copy()
        oso = np.full((2, ne, w) if shaped else (2, ne * w), -7, dtype=np.int64)
        comm.all_to_all_vdev_2d(x, out, in_splits, oso, ne, major_align=align)
        flat = oso.reshape(2, ne * w)
        assert np.array_equal(flat[0], counts) and np.array_equal(flat[1], offs), (align, flat,
                                                                                   counts, offs)
        for e in range(ne):
            for p in range(w):
                n, at = int(counts[e * w + p]), int(offs[e * w + p])
                src = rows_of(p)[exclusive(s[p])[r * ne + e]:][:n]
                assert same(out[at:at + n], src), (align, e, p, out[at:at + n], src)
        assert same(out[need:], np.full_like(out[need:], sentinel(dt))), out[need:]
        # The combine: each expert's rows back to their senders, rank-major.
        back = np.full_like(x, sentinel(dt))
        oso2 = np.full((2, w, ne) if shaped else (2, w * ne), -7, dtype=np.int64)
        comm.all_to_all_vdev_2d_combine(out, back, oso, oso2, ne)
        sent = int(s[r].sum())
        assert same(back[:sent], x[:sent]), (back, x)
        assert same(back[sent:], np.full_like(back[sent:], sentinel(dt)))
        flat2 = oso2.reshape(2, w * ne)
        assert np.array_equal(flat2[0], s[r]) and np.array_equal(flat2[1], exclusive(s[r])), flat2
    comm.barrier()


# ---- errors

def expect_everywhere(comm, what, call, error):
    """call() must raise `error` on every rank; the next call pairs up."""
    try:
        call()
        raise AssertionError("rank %d: %s passed" % (comm.rank, what))
    except error as e:
        assert e.detail, (what, e)
    check_all_reduce(comm)


def case_over_capacity(comm):
    """Rows past out, splits past x, alignment that overflows, negative
    splits, and host counts that disagree: the mapped exception on every
    rank, no rank left behind."""
    r, w = comm.rank, comm.size
    last = w - 1
    # Rank 0 sends 5 rows to the last rank, whose out holds 4.
    x = np.ones((6, 2), dtype=np.float32)
    splits = np.zeros(w, dtype=np.int64)
    if r == 0:
        splits[last] = 5
    cap = 4 if r == last else 6
    expect_everywhere(comm, "rows past out", lambda: comm.all_to_all_vdev(
        x, np.zeros((cap, 2), np.float32), splits, np.zeros((2, w), np.int64)),
        symmem.InvalidArgumentError)
    # Rank 0's splits ask for more rows than its x holds.
    splits = np.ones(w, dtype=np.int64) * (7 if r == 0 else 1)
    expect_everywhere(comm, "splits past x", lambda: comm.all_to_all_vdev(
        np.ones((6, 2), np.float32), np.zeros((8 * w, 2), np.float32), splits,
        np.zeros((2, w), np.int64)), symmem.InvalidArgumentError)
    # A negative split.
    splits = np.zeros(w, dtype=np.int64)
    if r == last:
        splits[0] = -1
    expect_everywhere(comm, "negative split", lambda: comm.all_to_all_vdev(
        np.ones((4, 2), np.float32), np.zeros((4, 2), np.float32), splits,
        np.zeros((2, w), np.int64)), symmem.InvalidArgumentError)
    # 2-D: one row for each of the 2 experts of every rank; with major_align
    # 8 expert 1's block starts at row 8, past an out of 8 rows (1 row each
    # would fit unaligned).
    ne = 2
    s2 = np.ones(w * ne, dtype=np.int64)
    expect_everywhere(comm, "aligned past out", lambda: comm.all_to_all_vdev_2d(
        np.ones((w * ne, 3), np.int32), np.zeros((8, 3), np.int32), s2,
        np.zeros((2, ne * w), np.int64), ne, major_align=8), symmem.InvalidArgumentError)
    comm.all_to_all_vdev_2d(np.ones((w * ne, 3), np.int32), np.zeros((8 + w, 3), np.int32), s2,
                            np.zeros((2, ne * w), np.int64), ne, major_align=8)
    # Host counts: the last rank expects one element more from rank 0 than
    # rank 0 sends it.
    sc, rc = [1] * w, [1] * w
    if r == last:
        rc[0] = 2
    expect_everywhere(comm, "counts that disagree", lambda: comm.all_to_all_v(
        np.ones(w, np.float32), sc, np.zeros(w + 1, np.float32), rc), symmem.MismatchError)
    comm.barrier()


def case_refused(comm):
    """Arguments this binding refuses on rank 0 still take the call's
    place: its peers get MismatchError naming it, and the next call pairs
    up.  Rank 0 sees TypeError or ValueError with the reason."""
    r, w = comm.rank, comm.size
    f32 = np.float32
    ro = np.zeros((2, w), np.int64)
    ro.flags.writeable = False
    v, vdev = comm.all_to_all_v, comm.all_to_all_vdev
    d2, comb = comm.all_to_all_vdev_2d, comm.all_to_all_vdev_2d_combine
    ones, oso, oso2 = np.ones(w, np.int64), np.zeros((2, w), np.int64), np.zeros((2, 2 * w),
                                                                                 np.int64)
    rows, out = np.ones((4 * w, 3), f32), np.zeros((4 * w, 3), f32)
    bad = [
        ("v", TypeError, lambda: v(np.ones(w, f32), 3, np.zeros(w, f32), [1] * w)),
        ("v", ValueError, lambda: v(np.ones(w, f32), [1] * (w - 1), np.zeros(w, f32), [1] * w)),
        ("v", ValueError, lambda: v(np.ones(w, f32), [1] * w, np.zeros(w, f32),
                                    [-1] + [1] * (w - 1))),
        ("v", TypeError, lambda: v(np.ones(w, f32), [1.5] * w, np.zeros(w, f32), [1] * w)),
        ("v", ValueError, lambda: v(np.ones(w, f32), [1] * w, np.zeros(w, f32), [1] * w,
                                    send_displs=[w] * w)),
        ("v", ValueError, lambda: v(np.ones(w, f32), [1] * w, np.zeros(w - 1, f32), [1] * w)),
        ("v", ValueError, lambda: v(np.ones(w, f32), [1] * w, np.zeros(w, np.int32), [1] * w)),
        ("vdev", TypeError, lambda: vdev(rows, out, ones.astype(np.int32), oso)),
        ("vdev", ValueError, lambda: vdev(rows, out, np.ones(w + 1, np.int64), oso)),
        ("vdev", ValueError, lambda: vdev(rows, out, ones, np.zeros(2 * w, np.int64))),
        ("vdev", ValueError, lambda: vdev(rows, out, ones, ro)),
        ("vdev", ValueError, lambda: vdev(rows, out, np.ones((w, 2), np.int64)[:, 0], oso)),
        ("vdev", ValueError, lambda: vdev(np.float32(1), out, ones, oso)),
        ("vdev", ValueError, lambda: vdev(rows, np.zeros((4 * w, 2), f32), ones, oso)),
        ("vdev", ValueError, lambda: vdev(np.ones((4, 0), f32), np.zeros((4, 0), f32), ones, oso)),
        ("d2", ValueError, lambda: d2(rows, out, np.ones(2 * w, np.int64), oso2, 0)),
        ("d2", ValueError, lambda: d2(rows, out, np.ones(2 * w, np.int64), oso2, 2,
                                      major_align=-1)),
        ("d2", ValueError, lambda: d2(rows, out, ones, oso2, 2)),
        ("comb", ValueError, lambda: comb(rows, out, oso, oso2, 2)),
        ("comb", TypeError, lambda: comb(rows, out, oso2, oso2, "two")),
    ]
    good = {
        "v": lambda: v(np.ones(w, f32), [1] * w, np.zeros(w, f32), [1] * w),
        "vdev": lambda: vdev(rows, out, ones, oso),
        "d2": lambda: d2(rows, out, np.ones(2 * w, np.int64), oso2, 2),
        "comb": lambda: comb(rows, out, np.zeros((2, 2 * w), np.int64), oso2, 2),
    }
    for i, (name, error, call) in enumerate(bad):
        try:
            if r == 0:
                call()
            else:
                good[name]()
            raise AssertionError("rank %d: case %d (%s) passed where rank 0 refused" % (r, i, name))
        except symmem.MismatchError as e:
            assert r != 0 and "rank 0" in e.detail, (i, e)
        except (TypeError, ValueError) as e:
            assert r == 0 and isinstance(e, error) and str(e), (i, e)
        check_all_reduce(comm)
    comm.barrier()


def case_torch_cuda(comm):
    """The device-split forms on torch CUDA tensors (a GPU backend): splits
    written by a kernel on the stream, read by the collective."""
    import torch
    r, w = comm.rank, comm.size
    dev = torch.device("cuda", comm.device)
    stream = torch.cuda.current_stream(dev)
    c = count_matrix(w, 61, silent=w - 1)
    n = int(c[r].sum()) + 1
    x = torch.arange(n * 4, dtype=torch.float32, device=dev).reshape(n, 4) + 1000 * r
    cap = int(c[:, r].sum()) + 2
    out = torch.full((cap, 4), -1.0, device=dev)
    splits = torch.tensor(c[r], dtype=torch.int64, device=dev)
    oso = torch.zeros((2, w), dtype=torch.int64, device=dev)
    comm.all_to_all_vdev(x, out, splits, oso, stream=stream)
    torch.cuda.synchronize(dev)
    comm.check_async_error()
    got = out.cpu().numpy()
    assert np.array_equal(oso.cpu().numpy()[0], c[:, r])
    for p in range(w):
        at, k = int(exclusive(c[:, r])[p]), int(c[p, r])
        src = (np.arange(int(c[p].sum() + 1) * 4, dtype=np.float32).reshape(-1, 4) + 1000 * p)
        assert np.array_equal(got[at:at + k], src[exclusive(c[p])[r]:][:k]), (p, got)
    comm.barrier()


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def main() -> int:
    case = sys.argv[1]
    timeout = int(os.environ.get("CASE_TIMEOUT_MS", "20000"))
    with symmem.init(timeout_ms=timeout) as comm:
        assert comm.size == int(os.environ["SYMM_WORLD_SIZE"])
        CASES[case](comm)
        print("%s ok rank %d" % (case, comm.rank))
    return 0


if __name__ == "__main__":
    sys.exit(main())
