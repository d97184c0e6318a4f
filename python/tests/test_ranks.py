"""Multi-rank tests: ranks_cases.py under `symmem-run -n N` on the host backend."""
import pytest


@pytest.mark.parametrize("n", [2, 3, 4])
def test_exchange(run_ranks, n):
    res = run_ranks(n, "exchange")
    assert res.rc == 0 and res.out.count("exchange ok") == n, res


@pytest.mark.parametrize("n", [2, 3, 4])
def test_collectives(run_ranks, n):
    res = run_ranks(n, "collectives")
    assert res.rc == 0 and res.out.count("collectives ok") == n, res


@pytest.mark.parametrize("n", [2, 3])
def test_empty_numpy_arrays(run_ranks, n):
    # Count 0 works (symmem.h); NumPy exports empty arrays with strides (0,).
    res = run_ranks(n, "empty", env={"CASE_TIMEOUT_MS": "5000"})
    assert res.rc == 0 and res.out.count("empty ok") == n, res


@pytest.mark.parametrize("n", [2, 3])
def test_mempool_arrays(run_ranks, n):
    # The allocator route on the host backend: symm_mempool_alloc's blocks as
    # NumPy arrays, rendezvoused by pointer (torch.cuda.MemPool is the GPU's).
    res = run_ranks(n, "mempool", env={"CASE_TIMEOUT_MS": "5000"})
    assert res.rc == 0 and res.out.count("mempool ok") == n, res


@pytest.mark.parametrize("n", [2, 3])
def test_every_dtype_and_op(run_ranks, n):
    # sum, prod, min, max, avg on every NumPy dtype (and ml_dtypes' bfloat16
    # and FP8 where installed), all-reduce and reduce-scatter, against NumPy.
    res = run_ranks(n, "all_ops", env={"CASE_TIMEOUT_MS": "10000"})
    assert res.rc == 0 and res.out.count("all_ops ok") == n, res


@pytest.mark.parametrize("n", [2, 3, 4])
def test_split(run_ranks, n):
    # Communicator.split and split_2d, each group's all-reduce against NumPy.
    res = run_ranks(n, "split", env={"CASE_TIMEOUT_MS": "10000"})
    assert res.rc == 0 and res.out.count("split ok") == n, res


@pytest.mark.parametrize("n", [2, 3])
def test_signal_pad_size(run_ranks, n):
    # PyTorch's set_signal_pad_size, per communicator: more channels.
    res = run_ranks(n, "pad_size", env={"CASE_TIMEOUT_MS": "5000"})
    assert res.rc == 0 and res.out.count("pad_size ok") == n, res


def test_mismatch_and_timeout(run_ranks):
    res = run_ranks(2, "errors", env={"CASE_TIMEOUT_MS": "1000"})
    assert res.rc == 0 and res.out.count("errors ok") == 2, res


def test_peer_lost(run_ranks):
    res = run_ranks(2, "peer_lost", env={"CASE_TIMEOUT_MS": "10000"})
    assert res.rc == 0 and res.out.count("peer_lost ok") == 1, res


def test_permission(run_ranks):
    res = run_ranks(1, "permission")
    assert res.rc == 0 and "permission ok" in res.out, res


@pytest.mark.parametrize("n", [2, 3])
def test_refused_in_python_takes_its_place(run_ranks, n):
    # Rank 0's arguments are refused by the binding; its peers must get
    # MismatchError (never pair with rank 0's next call: 101 for 200), and
    # the next all-reduce must be right on every rank.
    res = run_ranks(n, "refused", env={"CASE_TIMEOUT_MS": "5000"})
    assert res.rc == 0 and res.out.count("refused ok") == n, res


@pytest.mark.parametrize("n", [2, 3])
def test_put_get(run_ranks, n):
    # symm_put_signal / symm_get: data there at the signal, read back, refusals.
    res = run_ranks(n, "put_get")
    assert res.rc == 0 and res.out.count("put_get ok") == n, res


@pytest.mark.parametrize("n", [2, 3])
def test_register_memfd(run_ranks, n):
    # The caller's memfd mapping registered on the host backend (issue 28).
    res = run_ranks(n, "register", env={"CASE_TIMEOUT_MS": "10000"})
    assert res.rc == 0 and res.out.count("register ok") == n, res
