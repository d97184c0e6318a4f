"""A small key-value store in pure Python, with torch.distributed.Store's
calls (set, get, add, wait with a timedelta, check, delete_key, num_keys),
for the bootstrap tests: `LocalStore` in one process, `StoreServer` (a
thread of the test process, on 127.0.0.1) and `StoreClient` across
processes.

Wire: a request and its reply are each a list of byte strings, sent as a
4-byte count, then for each a 4-byte length and the bytes (big-endian).
A request is [op, args...]; a reply is [b"ok", values...] or
[b"timeout"] or [b"error", message].
"""
import datetime
import socket
import socketserver
import struct
import threading
import time

_U32 = struct.Struct(">I")


def _seconds(timeout):
    if timeout is None:
        return 30.0
    if hasattr(timeout, "total_seconds"):
        return timeout.total_seconds()
    return float(timeout)


class LocalStore:
    """The store's state and its calls, in this process (thread-safe)."""

    def __init__(self):
        self.data = {}
        self.cond = threading.Condition()

    def set(self, key, value):
        with self.cond:
            self.data[key] = value.encode() if isinstance(value, str) else bytes(value)
            self.cond.notify_all()

    def get(self, key):
        self.wait([key])
        with self.cond:
            return self.data[key]

    def add(self, key, delta):
        with self.cond:
            n = int(self.data.get(key, b"0")) + int(delta)
            self.data[key] = str(n).encode()
            self.cond.notify_all()
            return n

    def wait(self, keys, timeout=None):
        with self.cond:
            if not self.cond.wait_for(lambda: all(k in self.data for k in keys),
                                      _seconds(timeout)):
                raise TimeoutError("wait timeout after %.0f ms for %s" % (
                    _seconds(timeout) * 1000, [k for k in keys if k not in self.data]))

    def check(self, keys):
        with self.cond:
            return all(k in self.data for k in keys)

    def delete_key(self, key):
        with self.cond:
            return self.data.pop(key, None) is not None

    def num_keys(self):
        with self.cond:
            return len(self.data)

    def keys(self):
        with self.cond:
            return sorted(self.data)


def _send(sock, parts):
    out = [_U32.pack(len(parts))]
    for p in parts:
        out += [_U32.pack(len(p)), p]
    sock.sendall(b"".join(out))


def _recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionResetError("the store closed the connection")
        buf += chunk
    return bytes(buf)


def _recv(sock):
    count = _U32.unpack(_recv_exact(sock, 4))[0]
    return [_recv_exact(sock, _U32.unpack(_recv_exact(sock, 4))[0]) for _ in range(count)]


class _Handler(socketserver.BaseRequestHandler):
    def handle(self):
        store = self.server.store
        while True:
            try:
                req = _recv(self.request)
            except (ConnectionError, OSError):
                return
            op, args = req[0].decode(), req[1:]
            try:
                if op == "set":
                    store.set(args[0].decode(), args[1])
                    reply = [b"ok"]
                elif op == "get":
                    reply = [b"ok", store.get(args[0].decode())]
                elif op == "add":
                    reply = [b"ok", str(store.add(args[0].decode(), int(args[1]))).encode()]
                elif op == "wait":
                    store.wait([k.decode() for k in args[1:]], float(args[0]))
                    reply = [b"ok"]
                elif op == "check":
                    reply = [b"ok", b"1" if store.check([k.decode() for k in args]) else b"0"]
                elif op == "delete":
                    reply = [b"ok", b"1" if store.delete_key(args[0].decode()) else b"0"]
                else:
                    reply = [b"error", ("unknown op %r" % op).encode()]
            except TimeoutError as e:
                reply = [b"timeout", str(e).encode()]
            _send(self.request, reply)


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class StoreServer:
    """A LocalStore served on 127.0.0.1 (an ephemeral port) by threads of
    this process; a context manager."""

    def __init__(self):
        self.store = LocalStore()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.store = self.store
        self.addr = "127.0.0.1:%d" % self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self):
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class StoreClient:
    """A connection to a StoreServer, with torch.distributed.Store's calls.
    wait raises TimeoutError when the keys are not all there in time."""

    def __init__(self, addr, connect_timeout=10.0):
        host, port = addr.rsplit(":", 1)
        end = time.monotonic() + connect_timeout
        while True:
            try:
                self.sock = socket.create_connection((host, int(port)), timeout=connect_timeout)
                break
            except ConnectionRefusedError:
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)
        self.sock.settimeout(None)

    def _call(self, *parts):
        _send(self.sock, [p if isinstance(p, bytes) else str(p).encode() for p in parts])
        reply = _recv(self.sock)
        if reply[0] == b"timeout":
            raise TimeoutError(reply[1].decode())
        if reply[0] != b"ok":
            raise RuntimeError(reply[1].decode())
        return reply[1:]

    def set(self, key, value):
        self._call("set", key, value.encode() if isinstance(value, str) else bytes(value))

    def get(self, key):
        return self._call("get", key)[0]

    def add(self, key, delta):
        return int(self._call("add", key, int(delta))[0])

    def wait(self, keys, timeout=datetime.timedelta(seconds=30)):
        self._call("wait", repr(_seconds(timeout)), *keys)

    def check(self, keys):
        return self._call("check", *keys)[0] == b"1"

    def delete_key(self, key):
        return self._call("delete", key)[0] == b"1"

    def close(self):
        self.sock.close()
