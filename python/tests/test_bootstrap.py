"""symmem.init(bootstrap=...): the ranks meet through the caller's store,
torch.distributed process group or mpi4py communicator, with no symmem
store and no port.  The store cases run everywhere on a pure-Python store
(pystore.py); the torch and mpi4py cases skip, saying so, where those are
not installed."""
import datetime
import importlib
import os
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import symmem
from symmem import bootstrap as sb

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pystore import LocalStore, StoreServer  # noqa: E402

# What a rank started here must not inherit: any way to find a symmem store.
_LAUNCHER_VARS = ("SYMM_STORE_ADDR", "SYMM_TOKEN", "MASTER_ADDR", "MASTER_PORT",
                  "SYMM_RANK", "SYMM_WORLD_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK",
                  "LOCAL_WORLD_SIZE", "SYMM_LOCAL_RANK", "SYMM_LOCAL_SIZE",
                  "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE",
                  "SLURM_PROCID", "SLURM_NTASKS", "SYMM_STORE_EXTERNAL", "SYMM_JOB_ID")


def _rank_env(extra=None):
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARS}
    env.update(SYMM_BACKEND="host", PYTHONUNBUFFERED="1", CASE_TIMEOUT_MS="20000")
    env.update(extra or {})
    return env


def _run_ranks(n, case, addr, timeout=120, env=None):
    """Runs bootstrap_cases.py CASE r n ADDR for every rank r (with `env`
    added to their environment); their return codes and output (stderr
    included)."""
    script = os.path.join(HERE, "bootstrap_cases.py")
    procs = [subprocess.Popen([sys.executable, script, case, str(r), str(n), addr],
                              env=_rank_env(env), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, universal_newlines=True)
             for r in range(n)]
    outs, rcs = [], []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
        outs.append(out)
        rcs.append(p.returncode)
    return rcs, "\n".join("--- rank %d (exit %s)\n%s" % (r, rc, o)
                          for r, (rc, o) in enumerate(zip(rcs, outs)))


def _failing_nccl_env():
    """The environment that makes the nccl backend's init fail on rank 1:
    the fake CUDA driver and fake NCCL of the C build beside the library
    under test (SYMMEM_LIBRARY); SKIP where they are not there."""
    lib = os.environ.get("SYMMEM_LIBRARY", "")
    fakes = os.path.join(os.path.dirname(lib), "tests", "fakes")
    cuda, nccl = (os.path.join(fakes, "libsymm-fake%s.so" % n) for n in ("cuda", "nccl"))
    if not (os.path.exists(cuda) and os.path.exists(nccl)):
        pytest.skip("no fake CUDA and NCCL beside SYMMEM_LIBRARY (%r; they are built with the "
                    "C tests): a failing NCCL init cannot be made here" % lib)
    return dict(SYMM_BACKEND="nccl", SYMM_CUDA_LIB=cuda, SYMM_NCCL_LIB=nccl,
                SYMM_ALLOW_SHARED_DEVICE="1", FAKENCCL_INIT_FAIL_RANK="1")


def _need(name):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        pytest.skip("%s is not installed here (%s): its bootstrap is not tested"
                    % (name.split(".")[0], e))


@pytest.fixture
def no_launcher(monkeypatch):
    """This process as if started by hand: no rank, size or store address."""
    for var in _LAUNCHER_VARS:
        monkeypatch.delenv(var, raising=False)


# -- many ranks on the pure-Python store ---------------------------------

@pytest.mark.parametrize("n", [2, 3, 4])
def test_store_ranks(n):
    # No SYMM_STORE_ADDR or SYMM_TOKEN, no listening TCP socket in any rank
    # (the store is served by this process); tensors, all-reduce,
    # all_to_all_v and groups work; no key is left behind.
    with StoreServer() as server:
        rcs, out = _run_ranks(n, "pystore", server.addr)
        left = [k for k in server.store.keys() if k.startswith("symmem/")]
    assert rcs == [0] * n, out
    assert out.count("pystore ok") == n and out.count("pystore again ok") == n, out
    assert left == [], left


def test_store_notes_carry_a_failure():
    # Rank 1's NCCL init fails; the others, waiting in NCCL, read its note
    # from the pure-Python store and fail naming rank 1, well before their
    # deadline (without notes they would time out).
    env = _failing_nccl_env()
    with StoreServer() as server:
        rcs, out = _run_ranks(3, "pystore_init_fails", server.addr, env=env)
        notes = [k for k in server.store.keys() if "/note/" in k]
    assert rcs == [0] * 3, out
    assert out.count("pystore_init_fails ok") == 3, out
    assert any(k.endswith("note/nccl-failed") for k in notes), notes


# -- one process: the store's behaviour and its failures ------------------

def test_local_store_one_rank(no_launcher):
    store = LocalStore()
    with symmem.init(bootstrap=store, rank=0, world_size=1, timeout_ms=5000) as comm:
        assert (comm.rank, comm.size, comm.backend) == (0, 1, "host")
        t = comm.empty(8, "float32").rendezvous()
        np.from_dlpack(t)[:] = 3
        comm.barrier()
        g = comm.split(0)
        assert g.size == 1
        g.close()
        with pytest.raises(symmem.UnsupportedError, match="no symmem store|has none"):
            comm.store["k"] = b"v"
    del t  # it kept the communicator, and so the channel
    assert [k for k in store.keys() if k.startswith("symmem/")] == []
    assert sb._CHANNELS == {}, sb._CHANNELS


def test_rank_from_environment(no_launcher, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    with symmem.init(bootstrap=LocalStore(), timeout_ms=5000) as comm:
        assert (comm.rank, comm.size) == (0, 1)


def test_store_needs_rank_and_size(no_launcher):
    with pytest.raises(symmem.InvalidArgumentError, match="rank= and world_size="):
        symmem.init(bootstrap=LocalStore())
    with pytest.raises(symmem.InvalidArgumentError, match="rank 2 of 2"):
        symmem.init(bootstrap=LocalStore(), rank=2, world_size=2)


def test_store_arguments_refused_with_bootstrap(no_launcher):
    with pytest.raises(symmem.InvalidArgumentError, match="store_addr"):
        symmem.init(bootstrap=LocalStore(), rank=0, world_size=1, store_addr="127.0.0.1:1")


def test_not_a_bootstrap():
    with pytest.raises(TypeError, match="set/get/add/wait"):
        symmem.init(bootstrap=object())


def test_wait_times_out_within_the_deadline(no_launcher):
    # Rank 1 of 2 never comes: the store's wait raises TimeoutError, init
    # raises symmem's within the timeout plus the slack.
    timeout_ms = 1000
    start = time.monotonic()
    with pytest.raises(symmem.TimeoutError) as info:
        symmem.init(bootstrap=LocalStore(), rank=0, world_size=2, timeout_ms=timeout_ms)
    took = time.monotonic() - start
    assert took < timeout_ms / 1000 + 0.5, took
    err = info.value
    assert err.code == symmem.Result.TIMEOUT and isinstance(err, TimeoutError)
    assert "allgather callback" in str(err) and isinstance(err.__cause__, TimeoutError), err
    assert sb._CHANNELS == {}


def _on_threads(n, fn):
    """fn(rank) on n threads at once; their results in rank order (the
    first exception raised again)."""
    import threading
    results, errors = [None] * n, []

    def run(r):
        try:
            results[r] = fn(r)
        except BaseException as e:  # noqa: BLE001 (raised again below)
            errors.append(e)
    threads = [threading.Thread(target=run, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    if errors:
        raise errors[0]
    return results


@pytest.mark.parametrize("multi_get", [False, True])
def test_store_channel_operations(multi_get):
    # Every operation of the store channel on ranks as threads (the C core
    # calls only allgather and split on the host backend): results, the
    # groups' ranking, and no key left once every rank has read a round.
    store = LocalStore()
    if multi_get:
        store.multi_get = lambda keys: [store.get(k) for k in keys]
    n = 4

    def rank(r):
        ch = sb.StoreChannel(store, r, n, "t/")
        got = ch.allgather(bytes([r]) * 3, 5000)
        assert got == [bytes([p]) * 3 for p in range(n)], got
        assert ch.broadcast(b"root" if r == 2 else b"????", 2, 5000) == b"root"
        ch.barrier(5000)
        sub = ch.split(-1 if r == 0 else r % 2, -r, 5000)
        if r == 0:
            assert sub is None
        else:
            members = sorted((-p, p) for p in range(1, n) if p % 2 == r % 2)
            assert (sub.rank, sub.size) == (members.index((-r, r)), len(members))
            assert sub.prefix == "t/s0.%d/" % (r % 2)
            assert sub.allgather(b"x%d" % r, 5000) == [b"x%d" % p for _, p in members]
        ch.barrier(5000)
        return sub and sub.rank
    assert _on_threads(n, rank) == [None, 1, 0, 0]
    assert store.keys() == [], store.keys()


def _c_note_get(hold, key, cap=64):
    """note_get called as C calls it: (return code, found, value)."""
    import ctypes
    buf, found = ctypes.create_string_buffer(cap), ctypes.c_int(-1)
    rc = hold.struct.note_get(hold.struct.ctx, key, ctypes.addressof(buf), cap,
                              ctypes.byref(found))
    return rc, found.value, buf.value


def test_store_channel_notes_through_the_callbacks():
    # Two ranks' channels on one store, their notes called through the C
    # struct: the first value of a key stays, a missing key is not found
    # (at once, no wait), a long value is cut to the reader's buffer.
    store = LocalStore()
    holds = [sb.Hold(sb.StoreChannel(store, r, 2, "n/")) for r in range(2)]
    try:
        put = holds[1].struct
        assert put.version == 2 and not put.lost_rank
        assert put.note_put(put.ctx, b"k", b"first") == 0
        assert put.note_put(put.ctx, b"k", b"second") == 0
        assert holds[0].channel.note_get("k") == "first"
        assert _c_note_get(holds[0], b"k") == (0, 1, b"first")
        assert _c_note_get(holds[0], b"absent") == (0, 0, b"")
        assert holds[0].struct.note_put(holds[0].struct.ctx, b"long", b"x" * 100) == 0
        assert _c_note_get(holds[1], b"long", cap=8) == (0, 1, b"x" * 7)
    finally:
        for h in holds:
            h.close()
    assert store.keys() == ["n/note/k", "n/note/k/claim", "n/note/long", "n/note/long/claim"]


def test_store_without_check_keeps_no_notes():
    store = LocalStore()
    store.check = None  # not callable: no way to ask without waiting
    hold = sb.Hold(sb.StoreChannel(store, 0, 1, "n/"))
    try:
        assert not hold.struct.note_put and not hold.struct.note_get
    finally:
        hold.close()


def test_channel_note_exceptions_mean_nothing_known():
    class Broken(sb.Channel):
        rank, size = 0, 1

        def note_get(self, key):
            raise ConnectionResetError("gone")

        def lost_rank(self):
            return 3

    hold = sb.Hold(Broken())
    try:
        assert _c_note_get(hold, b"k")[0] == int(symmem.Result.PEER_LOST)
        assert hold.struct.lost_rank(hold.struct.ctx) == 3
        assert not hold.struct.note_put
    finally:
        hold.close()


def test_store_channel_without_delete_key():
    store = LocalStore()
    store.delete_key = None  # not callable: the channel keeps its keys, and counts nothing
    ch = sb.StoreChannel(store, 0, 1, "k/")
    assert ch.allgather(b"a", 1000) == [b"a"]
    assert store.keys() == ["k/0/0"]


class _Failing(LocalStore):
    """A LocalStore whose call `where` raises `exc`."""

    def __init__(self, where, exc):
        super().__init__()
        self.where, self.exc = where, exc

    def set(self, key, value):
        if self.where == "set":
            raise self.exc
        super().set(key, value)

    def wait(self, keys, timeout=None):
        if self.where == "wait":
            raise self.exc
        super().wait(keys, timeout)


@pytest.mark.parametrize("where,exc,error", [
    ("wait", RuntimeError("Wait timeout after 5ms, keys: /x"), symmem.TimeoutError),
    ("wait", TimeoutError("timed out"), symmem.TimeoutError),
    ("set", ConnectionResetError("connection reset by peer"), symmem.PeerLostError),
    ("set", BrokenPipeError("broken pipe"), symmem.PeerLostError),
    ("wait", EOFError(), symmem.PeerLostError),
    ("set", ValueError("not today"), symmem.BackendError),
    ("set", KeyError("x"), symmem.BackendError),
    ("set", symmem.errors.make_error(symmem.Result.NO_MEMORY, "full"), symmem.NoMemoryError),
])
def test_store_exception_becomes_the_error(no_launcher, where, exc, error):
    with pytest.raises(error) as info:
        symmem.init(bootstrap=_Failing(where, exc), rank=0, world_size=1, timeout_ms=2000)
    assert info.value.__cause__ is exc, info.value
    assert type(exc).__name__ in str(info.value), info.value
    assert sb._CHANNELS == {}


def test_keyboard_interrupt_in_a_callback(no_launcher):
    # C is never unwound: the callback returns a code, and the interrupt is
    # raised once C has returned; the library works on.
    with pytest.raises(KeyboardInterrupt):
        symmem.init(bootstrap=_Failing("set", KeyboardInterrupt()), rank=0, world_size=1,
                    timeout_ms=2000)
    with symmem.init(bootstrap=LocalStore(), rank=0, world_size=1, timeout_ms=2000) as comm:
        comm.barrier()


class _Loopback(sb.Channel):
    """A channel of one rank, counting releases; `bad` returns too few bytes."""

    released = 0

    def __init__(self, bad=False):
        self.rank, self.size, self.bad = 0, 1, bad

    def allgather(self, data, timeout_ms):
        return [data[:-1] if self.bad and data else data]

    def split(self, color, key, timeout_ms):
        return _Loopback() if color >= 0 else None

    def release(self):
        _Loopback.released += 1


def test_channel_of_the_caller_and_its_release():
    _Loopback.released = 0
    comm = symmem.init(bootstrap=_Loopback(), timeout_ms=2000)
    group = comm.split(0)
    comm.close()
    import gc
    gc.collect()
    # The group keeps its parent's channel.
    assert _Loopback.released == 0
    group.barrier()
    group.close()
    gc.collect()
    assert _Loopback.released == 2, _Loopback.released  # the group's and the parent's
    assert sb._CHANNELS == {}


def test_channel_that_returns_the_wrong_length():
    with pytest.raises(symmem.ProtocolError, match="allgather gave"):
        symmem.init(bootstrap=_Loopback(bad=True), timeout_ms=2000)


def test_channel_rank_must_match_the_config():
    with pytest.raises(symmem.InvalidArgumentError, match="config says rank"):
        symmem.init(bootstrap=_Loopback(), rank=0, world_size=2, timeout_ms=2000)


def test_result_codes_of_exceptions():
    class DistNetworkError(RuntimeError):
        pass

    class DistStoreError(RuntimeError):
        pass

    R = symmem.Result
    assert sb.result_of(socket.timeout()) == R.TIMEOUT
    assert sb.result_of(DistStoreError("Socket Timeout")) == R.TIMEOUT
    assert sb.result_of(DistNetworkError("failed to recv, got 0 bytes")) == R.PEER_LOST
    assert sb.result_of(RuntimeError("Connection closed by peer")) == R.PEER_LOST
    assert sb.result_of(RuntimeError("something else")) == R.BACKEND
    assert sb.result_of(MemoryError()) == R.BACKEND


def test_symmem_store_as_the_bootstrap(comm):
    # Another implementation of the calls: symmem's own Store (wait takes
    # a timedelta too); its keys are not symmem's reserved "symm/".
    with symmem.init(bootstrap=comm.store, rank=0, world_size=1, timeout_ms=5000) as c:
        c.barrier()
    comm.store.set("mine", b"1")
    comm.store.wait(["mine"], timeout_ms=datetime.timedelta(milliseconds=10))


# -- torch.distributed and mpi4py: skipped where they are absent ----------

def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("n", [2])
def test_torch_store(n):
    _need("torch")
    import torch.distributed as dist
    master = dist.TCPStore("127.0.0.1", 0, n + 1, True, timeout=datetime.timedelta(seconds=60),
                           wait_for_workers=False)
    rcs, out = _run_ranks(n, "torch_store", "127.0.0.1:%d" % master.port)
    assert rcs == [0] * n, out
    assert out.count("torch_store ok") == n and out.count("torch_prefix_store ok") == n, out
    if hasattr(master, "list_keys"):  # every round's keys deleted by its last reader
        left = [k for k in master.list_keys() if "symmem/" in k]
        assert left == [], left


@pytest.mark.parametrize("n", [2])
def test_torch_process_group(n):
    _need("torch")
    rcs, out = _run_ranks(n, "torch_group", "127.0.0.1:%d" % _free_port())
    assert rcs == [0] * n, out
    for case in ("torch_world", "torch_default_store", "torch_new_group",
                 "torch_all_gather_object"):
        assert out.count(case + " ok") == n, out


def _mpirun(n, case, env=None):
    _need("mpi4py.MPI")
    mpirun = shutil.which("mpirun.openmpi") or shutil.which("mpirun")
    if not mpirun:
        pytest.skip("no mpirun here: the mpi4py bootstrap is not tested")
    cmd = [mpirun, "--oversubscribe", "--allow-run-as-root", "-n", str(n), sys.executable,
           os.path.join(HERE, "bootstrap_cases.py"), case]
    proc = subprocess.run(cmd, env=_rank_env(env), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True, timeout=180)
    return proc.returncode, proc.stdout


@pytest.mark.parametrize("n", [2, 3])
def test_mpi4py_communicator(n):
    rc, out = _mpirun(n, "mpi")
    assert rc == 0 and out.count("mpi ok") == n, out


@pytest.mark.parametrize("n", [1, 3])
def test_mpi4py_notes(n):
    # Notes on the channel's own duplicate; with 3 ranks, rank 1's failing
    # NCCL init is named by every rank well within the deadline.
    env = _failing_nccl_env() if n > 1 else None
    rc, out = _mpirun(n, "mpi_notes", env)
    assert rc == 0 and out.count("mpi_notes ok") == n, out
    assert out.count("mpi_init_fails ok") == (n if n > 1 else 0), out


def test_mpi4py_late_rank_times_out():
    rc, out = _mpirun(2, "mpi_timeout")
    assert rc == 0 and out.count("mpi_timeout ok") == 2, out


def test_torch_store_errors(no_launcher):
    # torch's own exceptions: DistStoreError "wait timeout" is a timeout,
    # DistNetworkError (the store's server gone) a lost peer.
    _need("torch")
    import torch.distributed as dist
    with pytest.raises(symmem.TimeoutError) as info:
        symmem.init(bootstrap=dist.HashStore(), rank=0, world_size=2, timeout_ms=500)
    assert type(info.value.__cause__).__name__ == "DistStoreError", info.value
    master = dist.TCPStore("127.0.0.1", 0, 2, True, timeout=datetime.timedelta(seconds=5),
                           wait_for_workers=False)
    client = dist.TCPStore("127.0.0.1", master.port, 2, False,
                           timeout=datetime.timedelta(seconds=5))
    del master
    with pytest.raises(symmem.PeerLostError) as info:
        symmem.init(bootstrap=client, rank=0, world_size=2, timeout_ms=2000)
    assert type(info.value.__cause__).__name__ == "DistNetworkError", info.value
