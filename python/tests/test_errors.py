"""Every error class: the mapping of each result code, and each one raised
by a real failure where the host backend can provoke it (NO_MEMORY, BACKEND
and INTERNAL have no such failure here: their mapping is checked)."""
import builtins
import socket
import threading

import numpy as np
import pytest

import symmem
from symmem.errors import ERROR_CLASSES, make_error

EXPECTED = {
    1: ("InvalidArgumentError", ValueError), 2: ("NoMemoryError", MemoryError),
    3: ("UnsupportedError", None), 4: ("MismatchError", None),
    5: ("TimeoutError", builtins.TimeoutError), 6: ("PeerLostError", ConnectionError),
    7: ("SystemCallError", OSError), 8: ("BackendError", None),
    9: ("NotFoundError", LookupError), 10: ("StateError", None),
    11: ("PermissionDeniedError", PermissionError), 12: ("ProtocolError", None),
    13: ("InternalError", None), 14: ("BackendUnavailableError", None),
}


@pytest.mark.parametrize("code", sorted(EXPECTED))
def test_error_class_of_each_code(code):
    name, builtin = EXPECTED[code]
    cls = getattr(symmem, name)
    assert ERROR_CLASSES[code] is cls and issubclass(cls, symmem.SymmemError)
    assert symmem.Result(code).value == code
    err = make_error(code, "the detail")
    assert type(err) is cls and err.code == code and err.detail == "the detail"
    assert str(err) == symmem.strerror(code) + ": the detail"
    if builtin is not None:
        assert isinstance(err, builtin)
    with pytest.raises(symmem.Error):
        raise err


def test_unknown_code_is_the_base_class():
    err = make_error(99, "")
    assert type(err) is symmem.SymmemError and err.code == 99
    assert str(err) == "unknown error"


def test_detail_is_symm_last_error(comm):
    with pytest.raises(symmem.InvalidArgumentError) as info:
        comm.empty((4, 0))
    assert info.value.detail and info.value.detail in str(info.value)
    assert info.value.code == symmem.Result.INVALID_ARG


def test_raised(comm):
    t = comm.empty(8)
    with pytest.raises(symmem.InvalidArgumentError):
        comm.empty(-3)
    with pytest.raises(symmem.UnsupportedError):
        t.rendezvous().peer_ptrs_device()
    with pytest.raises(symmem.StateError):
        comm.empty(8).contiguous_view()
    with pytest.raises(symmem.NotFoundError):
        comm.lookup(np.zeros(1).ctypes.data)
    with pytest.raises(symmem.TimeoutError):
        comm.store.get("never", timeout_ms=1)


def test_backend_unavailable():
    ok, why = symmem.backend_available("native")
    if ok:
        pytest.skip("the native backend is available on this machine")
    with pytest.raises(symmem.BackendUnavailableError) as info:
        symmem.init(rank=0, world_size=1, backend="native")
    assert info.value.code == 14 and info.value.detail


@pytest.fixture
def listener():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(4)
    yield s
    s.close()


def test_system_error_port_in_use(listener):
    port = listener.getsockname()[1]
    with pytest.raises(symmem.SystemCallError, match="in use"):
        symmem.init(rank=0, world_size=2, store_addr="127.0.0.1:%d" % port,
                    store_server=True, timeout_ms=1000)


def test_protocol_error_from_a_store_that_is_none(listener):
    port = listener.getsockname()[1]

    def answer_junk():
        conn, _ = listener.accept()
        with conn:
            conn.sendall(b"\xff" * 64)
            conn.recv(100)

    threading.Thread(target=answer_junk, daemon=True).start()
    with pytest.raises(symmem.ProtocolError):
        symmem.init(rank=1, world_size=2, store_addr="127.0.0.1:%d" % port,
                    store_server=False, timeout_ms=3000)

# MismatchError, TimeoutError (a signal), PeerLostError and
# PermissionDeniedError need several ranks or a launcher: test_ranks.py.
