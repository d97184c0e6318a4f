"""Communicator.all_to_all_v and the device-split forms (all_to_all_vdev,
all_to_all_vdev_2d and its combine): a2av_cases.py under `symmem-run -n N`
on the host backend against NumPy, and the argument checks of the binding
on one rank."""
import importlib

import numpy as np
import pytest

import symmem


def _run(run_ranks, n, case, timeout_ms="10000", env=None):
    full = {"CASE_TIMEOUT_MS": timeout_ms}
    full.update(env or {})
    res = run_ranks(n, case, env=full, script="a2av_cases.py")
    assert res.rc == 0 and res.out.count("%s ok" % case) == n, res
    return res


@pytest.mark.parametrize("n", [2, 3, 4])
def test_host_counts(run_ranks, n):
    # Random and skewed counts, zeros, a rank that sends nothing, packed and
    # explicit displacements, every dtype, in place in a symmetric tensor.
    _run(run_ranks, n, "host_counts")


@pytest.mark.parametrize("n", [2, 3, 4])
def test_vdev(run_ranks, n):
    _run(run_ranks, n, "vdev")


@pytest.mark.parametrize("n", [2, 3, 4])
def test_vdev_2d_and_combine(run_ranks, n):
    # major_align 1, 8 and 0, an expert with no rows, the combine as the
    # inverse of the dispatch.
    _run(run_ranks, n, "vdev_2d")


@pytest.mark.parametrize("n", [2, 3])
def test_over_capacity_on_every_rank(run_ranks, n):
    _run(run_ranks, n, "over_capacity", timeout_ms="5000")


@pytest.mark.parametrize("n", [2, 3])
def test_refused_in_python_takes_its_place(run_ranks, n):
    _run(run_ranks, n, "refused", timeout_ms="5000")


def test_torch_cuda(run_ranks):
    try:
        torch = importlib.import_module("torch")
    except ImportError as e:
        pytest.skip("PyTorch is not installed (%s); the host backend's runs cover the "
                    "binding" % e)
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("the device-split forms on CUDA tensors need 2 GPUs; torch sees %d" %
                    torch.cuda.device_count())
    _run(run_ranks, 2, "torch_cuda", env={"SYMM_BACKEND": "native"})


# ---- one rank: what the binding refuses before C, and a rank's own copy

def test_one_rank_copies(comm):
    x = np.arange(10, dtype=np.int16)
    out = np.full(12, -1, dtype=np.int16)
    comm.all_to_all_v(x, [4], out, [4], send_displs=[3], recv_displs=[8])
    assert out.tolist() == [-1] * 8 + [3, 4, 5, 6]
    rows = np.arange(12, dtype=np.float64).reshape(4, 3)
    got = np.zeros((5, 3))
    oso = np.full((2, 1), -1, dtype=np.int64)
    assert comm.all_to_all_vdev(rows, got, np.array([3]), oso) is got
    assert oso.tolist() == [[3], [0]] and np.array_equal(got[:3], rows[:3]) and not got[3:].any()


def _refused(call, error, *words):
    with pytest.raises(error) as info:
        call()
    for w in words:
        assert w in str(info.value), str(info.value)
    return info.value


def test_host_counts_refused(comm):
    x, out = np.ones(4, np.float32), np.zeros(4, np.float32)
    v = comm.all_to_all_v
    _refused(lambda: v(x, 4, out, [4]), TypeError, "send_counts", "sequence")
    _refused(lambda: v(x, "4", out, [4]), TypeError, "send_counts")
    _refused(lambda: v(x, [4, 0], out, [4]), ValueError, "send_counts has 2 entries",
             "one per rank (1)")
    _refused(lambda: v(x, [4], out, [-1]), ValueError, "recv_counts[0] is -1")
    _refused(lambda: v(x, [2.0], out, [2]), TypeError, "send_counts[0]", "not an int")
    e = _refused(lambda: v(x, [3], out, [3], send_displs=[2]), ValueError, "ends at element 5",
                 "x holds 4")
    assert isinstance(e, symmem.InvalidArgumentError) and e.code == symmem.Result.INVALID_ARG
    _refused(lambda: v(x, [4], np.zeros(3, np.float32), [4]), ValueError, "out holds 3",
             "packed")
    _refused(lambda: v(x, [4], out, [4], recv_displs=[1, 2]), ValueError, "recv_displs")
    _refused(lambda: v(x, [4], np.zeros(4, np.int32), [4]), ValueError, "x is float32",
             "out is int32")
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    _refused(lambda: v(x, [4], ro, [4]), ValueError, "read-only")
    _refused(lambda: v(np.ones((4, 2), np.float32)[:, 0], [4], out, [4]), ValueError,
             "not contiguous")
    _refused(lambda: v(x, [4], out, [4], stream=object()), ValueError, "stream must be")
    # Nothing was called wrongly on the way: the next call works.
    v(x, [4], out, [4])
    assert out.tolist() == [1.0] * 4


def test_split_arrays_refused(comm):
    rows, out = np.ones((4, 2), np.float32), np.zeros((4, 2), np.float32)
    one, oso = np.array([2], np.int64), np.zeros((2, 1), np.int64)
    vdev, d2 = comm.all_to_all_vdev, comm.all_to_all_vdev_2d
    comb = comm.all_to_all_vdev_2d_combine
    _refused(lambda: vdev(rows, out, one.astype(np.int32), oso), TypeError,
             "in_splits is int32", "int64")
    _refused(lambda: vdev(rows, out, one, oso.astype(np.float64)), TypeError,
             "out_splits_offsets is float64")
    _refused(lambda: vdev(rows, out, np.array([1, 1], np.int64), oso), ValueError,
             "in_splits has shape (2,)", "(1,)")
    _refused(lambda: vdev(rows, out, one, np.zeros(2, np.int64)), ValueError,
             "out_splits_offsets has shape (2,)", "(2, 1)")
    ro = np.zeros((2, 1), np.int64)
    ro.flags.writeable = False
    _refused(lambda: vdev(rows, out, one, ro), ValueError, "out_splits_offsets is read-only")
    _refused(lambda: vdev(rows, out, [2], oso), ValueError, "in_splits", "no array")
    _refused(lambda: vdev(np.float32(1), out, one, oso), ValueError, "x is 0-d")
    _refused(lambda: vdev(rows, np.zeros((4, 3), np.float32), one, oso), ValueError,
             "holds 2 elements", "(4, 3)")
    _refused(lambda: vdev(np.zeros((4, 0)), np.zeros((4, 0)), one, oso), ValueError,
             "rows of 0 elements")
    _refused(lambda: vdev(rows, out.astype(np.float16), one, oso), ValueError,
             "x is float32 but out is float16")
    _refused(lambda: d2(rows, out, one, oso, 0), ValueError, "n_experts is 0")
    _refused(lambda: d2(rows, out, one, oso, 1.0), TypeError, "n_experts")
    _refused(lambda: d2(rows, out, one, oso, 1, major_align=-8), ValueError, "major_align")
    _refused(lambda: d2(rows, out, np.ones(3, np.int64), np.zeros((2, 2), np.int64), 2),
             ValueError, "in_splits has shape (3,)", "(2,) or (1, 2)")
    _refused(lambda: comb(rows, out, np.zeros((2, 1), np.int64), np.zeros((2, 2), np.int64), 2),
             ValueError, "in_splits_offsets has shape (2, 1)", "(2, 2) or (2, 2, 1)")
    # The shapes with an experts dimension work too.
    out6 = np.zeros((6, 2), np.float32)
    oso3 = np.zeros((2, 2, 1), np.int64)
    got = d2(rows, out6, np.array([[1, 2]], np.int64), oso3, 2, major_align=4)
    assert got is out6 and out6[:1].tolist() == [[1, 1]] and out6[4:].tolist() == [[1, 1]] * 2
    assert oso3.reshape(2, 2).tolist() == [[1, 2], [0, 4]]
