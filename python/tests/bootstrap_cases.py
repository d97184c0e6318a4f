"""Multi-rank cases of test_bootstrap.py: communicators on a bootstrap of
the caller's (a store, a torch.distributed group, an mpi4py communicator),
with no symmem store anywhere.

  python bootstrap_cases.py CASE RANK SIZE ADDR   (pystore, torch_store, torch_group,
                                                   pystore_init_fails)
  mpirun -n N python bootstrap_cases.py mpi        (mpi, mpi_timeout, mpi_init_fails:
                                                   rank and size from MPI)

Every rank checks that symmem opened no listening TCP socket, that
tensors, all-reduce, all_to_all_v and groups work, and prints
"CASE ok rank R"; an assertion failure exits non-zero.
"""
import os
import sys

import numpy as np

import symmem

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

TIMEOUT_MS = int(os.environ.get("CASE_TIMEOUT_MS", "20000"))


def listening_tcp_sockets():
    """How many listening TCP sockets this process holds (its fds' socket
    inodes in /proc/self/net/tcp and tcp6 in state 0A), as tests/listening.h."""
    listening = set()
    for name in ("tcp", "tcp6"):
        try:
            with open("/proc/self/net/" + name) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if len(cols) > 9 and cols[3] == "0A":
                listening.add(cols[9])
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink("/proc/self/fd/" + fd)
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in listening:
            n += 1
    return n


def check_groups(comm):
    """Uneven groups ranked by key with the last rank out, a group of a
    group, the 2-D layout and this host's group, each one's all-reduce."""
    r, w = comm.rank, comm.size
    g = comm.split(symmem.SPLIT_NONE if r == w - 1 and w > 1 else r % 2, key=-r)
    if r == w - 1 and w > 1:
        assert g is None
    else:
        members = [p for p in range(max(w - 1, 1)) if p % 2 == r % 2]
        assert g.size == len(members) and g.rank == sorted(members, reverse=True).index(r), (
            g.size, g.rank, members)
        x = np.array([r], dtype=np.int64)
        g.all_reduce(x)
        assert x[0] == sum(members), (x, members)
        first = g.split(0 if g.rank == 0 else symmem.SPLIT_NONE)
        assert (first is not None) == (g.rank == 0)
        if first is not None:
            assert first.size == 1
            first.barrier()
            first.close()
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


def check_works(comm, rank, size):
    """Remote writes through a symmetric tensor, all-reduce, all_to_all_v
    against NumPy, then the groups."""
    r, w = comm.rank, comm.size
    assert (r, w) == (rank, size), (r, w, rank, size)
    assert comm.backend == "host"
    right, left = (r + 1) % w, (r - 1) % w
    t = comm.empty((4, 8), "int64").rendezvous()
    np.from_dlpack(t.remote(right))[:] = 1000 + r
    comm.barrier()
    assert np.all(np.from_dlpack(t) == 1000 + left)
    comm.barrier()
    t.free()
    x = np.arange(100, dtype=np.float32) + r
    comm.all_reduce(x)
    assert np.array_equal(x, sum(np.arange(100, dtype=np.float32) + p for p in range(w)))
    # all_to_all_v: rank r sends r + p + 1 elements to rank p, each
    # element 100 * r + p.
    send_counts = [r + p + 1 for p in range(w)]
    recv_counts = [p + r + 1 for p in range(w)]
    x = np.concatenate([np.full(c, 100 * r + p, dtype=np.int32)
                        for p, c in enumerate(send_counts)])
    out = np.full(sum(recv_counts), -1, dtype=np.int32)
    comm.all_to_all_v(x, send_counts, out, recv_counts)
    want = np.concatenate([np.full(c, 100 * p + r, dtype=np.int32)
                           for p, c in enumerate(recv_counts)])
    assert np.array_equal(out, want), (out, want)
    check_groups(comm)
    comm.barrier()


def run_on(bootstrap, ranks, case, **kw):
    """init on `bootstrap` (with init's arguments `kw`), expecting this
    rank and size (`ranks`), and check_works."""
    before = listening_tcp_sockets()
    with symmem.init(bootstrap=bootstrap, timeout_ms=TIMEOUT_MS, **kw) as comm:
        check_works(comm, *ranks)
        during = listening_tcp_sockets()
    assert during == before, "%d listening TCP sockets, %d before init" % (during, before)
    print("%s ok rank %d" % (case, ranks[0]), flush=True)


def case_pystore(rank, size, addr):
    """The test's pure-Python store over TCP on 127.0.0.1; no symmem store."""
    for var in ("SYMM_STORE_ADDR", "SYMM_TOKEN", "MASTER_ADDR"):
        assert var not in os.environ, var
    from pystore import StoreClient
    store = StoreClient(addr)
    run_on(store, (rank, size), "pystore", rank=rank, world_size=size)
    # A second communicator on the same store: keys of its own.
    with symmem.init(bootstrap=store, rank=rank, world_size=size, timeout_ms=TIMEOUT_MS) as c:
        y = np.ones(3, dtype=np.int64)
        c.all_reduce(y)
        assert np.all(y == size)
    print("pystore again ok rank %d" % rank, flush=True)


def case_torch_store(rank, size, addr):
    """torch.distributed.TCPStore (a client of the test's master) and a
    PrefixStore on it; rank and size from RANK / WORLD_SIZE."""
    import datetime
    import torch.distributed as dist
    host, port = addr.rsplit(":", 1)
    store = dist.TCPStore(host, int(port), size, False, timeout=datetime.timedelta(seconds=30))
    os.environ["RANK"], os.environ["WORLD_SIZE"] = str(rank), str(size)
    run_on(store, (rank, size), "torch_store")
    run_on(dist.PrefixStore("job7/", store), (rank, size), "torch_prefix_store")


def case_torch_group(rank, size, addr):
    """A gloo process group: the default group (through its store), a new
    group (through its PrefixStore), and all_gather_object."""
    import torch.distributed as dist
    from symmem.bootstrap import ProcessGroupChannel
    dist.init_process_group("gloo", init_method="tcp://" + addr, rank=rank, world_size=size)
    run_on(dist.group.WORLD, (rank, size), "torch_world")
    run_on(dist.distributed_c10d._get_default_store(), (rank, size), "torch_default_store",
           rank=rank, world_size=size)
    group = dist.new_group(list(range(size)))
    run_on(group, (rank, size), "torch_new_group")
    with symmem.init(bootstrap=ProcessGroupChannel(dist, group), timeout_ms=TIMEOUT_MS) as c:
        y = np.ones(3, dtype=np.int64)
        c.all_reduce(y)
        assert np.all(y == size)
        try:
            c.split(0)
            raise AssertionError("a split without a split callback passed")
        except symmem.UnsupportedError:
            pass
    print("torch_all_gather_object ok rank %d" % rank, flush=True)
    dist.destroy_process_group()


def case_mpi():
    """An mpi4py communicator (COMM_WORLD, duplicated), groups from Split."""
    from mpi4py import MPI
    from symmem.bootstrap import MPIChannel
    world = MPI.COMM_WORLD
    r, w = world.Get_rank(), world.Get_size()
    run_on(world, (r, w), "mpi")
    # The operations the host backend's core does not call.
    ch = MPIChannel.of(MPI, world)
    assert (ch.rank, ch.size, ch.local_rank, ch.local_size) == (r, w, r, w)
    assert ch.broadcast(b"root" if r == w - 1 else b"????", w - 1, 5000) == b"root"
    ch.barrier(5000)
    assert ch.allgather(bytes([r]), 5000) == [bytes([p]) for p in range(w)]
    assert ch.split(-1, 0, 5000) is None if r == 0 else ch.split(0, -r, 5000).rank == w - 1 - r
    ch.release()
    world.Barrier()


def case_mpi_timeout():
    """The last rank comes late: every rank's init raises TimeoutError
    within its deadline (the late one's when its peers gave up), and MPI
    goes on working."""
    import time
    from mpi4py import MPI
    from symmem.bootstrap import MPIChannel
    world = MPI.COMM_WORLD
    r, w = world.Get_rank(), world.Get_size()
    channel = MPIChannel.of(MPI, world)  # Dup blocks: made before the delay
    if r == w - 1:
        time.sleep(2.0)
    start = time.monotonic()
    try:
        symmem.init(bootstrap=channel, timeout_ms=1000)
        raise AssertionError("init passed with a late rank")
    except symmem.TimeoutError as e:
        took = time.monotonic() - start
        assert took < 1.5, took
        assert "Iallgather" in str(e), e
    world.Barrier()
    print("mpi_timeout ok rank %d" % r, flush=True)


def expect_init_failure(bootstrap, me, case, **kw):
    """The backend is made to fail on rank 1 (the fake NCCL's
    FAKENCCL_INIT_FAIL_RANK): init must fail on every rank, each naming
    rank 1, within half the deadline: the peers that wait in NCCL learn of
    it through the bootstrap's notes, else only at their deadline."""
    import time
    start = time.monotonic()
    try:
        symmem.init(bootstrap=bootstrap, timeout_ms=TIMEOUT_MS, **kw).close()
        raise AssertionError("init passed with a failing rank")
    except symmem.SymmemError as e:
        took = time.monotonic() - start
        assert "rank 1" in str(e), e
        assert took <= TIMEOUT_MS / 2000.0, "init failed after %.1f s: %s" % (took, e)
    print("%s ok rank %d" % (case, me), flush=True)


def case_pystore_init_fails(rank, size, addr):
    """The pure-Python store's notes carry rank 1's failure."""
    from pystore import StoreClient
    expect_init_failure(StoreClient(addr), rank, "pystore_init_fails", rank=rank,
                        world_size=size)


def case_mpi_notes():
    """The mpi4py channel's notes: the last rank's note reaches every
    rank, its second value does not replace the first; then init with a
    failing rank 1 (with more than one rank)."""
    import time
    from mpi4py import MPI
    from symmem.bootstrap import MPIChannel
    world = MPI.COMM_WORLD
    r, w = world.Get_rank(), world.Get_size()
    ch = MPIChannel.of(MPI, world)
    if r == w - 1:
        ch.note_put("k", "first")
        ch.note_put("k", "second")
    end = time.monotonic() + TIMEOUT_MS / 1000.0
    while ch.note_get("k") is None and time.monotonic() < end:
        time.sleep(0.001)
    assert ch.note_get("k") == "first", ch.note_get("k")
    assert ch.note_get("absent") is None
    world.Barrier()
    ch.release()
    if w > 1:
        expect_init_failure(world, r, "mpi_init_fails")
    print("mpi_notes ok rank %d" % r, flush=True)


def main():
    case = sys.argv[1]
    mpi_cases = {"mpi": case_mpi, "mpi_timeout": case_mpi_timeout, "mpi_notes": case_mpi_notes}
    if case in mpi_cases:
        mpi_cases[case]()
        return 0
    rank, size, addr = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    {"pystore": case_pystore, "torch_store": case_torch_store,
     "torch_group": case_torch_group,
     "pystore_init_fails": case_pystore_init_fails}[case](rank, size, addr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
