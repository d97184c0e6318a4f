#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora (tests/fuzz/corpus/<target>/): valid
messages and edge cases of each input format.  The committed seeds are its
output; run it again after a change of a format (it rewrites the seeds it
makes and leaves other files, such as crash reproducers, alone)."""
import hashlib
import hmac
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN = b"fuzz-token"  # fuzz-store.c's FUZZ_TOKEN

# ---------------------------------------------------------------- store
MAGIC, VERSION = 0x534D5953, 2
OPS = dict(HELLO=1, SET=2, GET=3, ADD=4, CAS=5, WAIT=6, MGET=7, DEL=8, CHECK=9, BYE=10, AUTH=11)
# store_proto.h's handshake: fuzz-store.c's server answers every HELLO
# with an all-zero nonce, so a seed can carry the AUTH that proves TOKEN.
SERVER_NONCE = bytes(32)
CLIENT_LABEL = b"symmem store v2: client proof"


def msg(op, body=b"", rid=1, magic=MAGIC, version=VERSION, length=None):
    n = len(body) if length is None else length
    return struct.pack("<IBBHII", magic, version, OPS.get(op, op) if isinstance(op, str) else op,
                       0, rid, n) + body


def key(k):
    return struct.pack("<H", len(k)) + k


def val(v):
    return struct.pack("<I", len(v)) + v


def keys(*ks):
    return struct.pack("<I", len(ks)) + b"".join(key(k) for k in ks)


def hello(rank=0, comm=0, nonce=b"\x5a" * 32, process=b""):
    body = nonce + struct.pack("<i", rank)
    return msg("HELLO", body + (b"" if comm is None else struct.pack("<I", comm)) + process)


def auth(token=TOKEN, nonce=b"\x5a" * 32, rid=1):
    proof = hmac.new(token, CLIENT_LABEL + SERVER_NONCE + nonce, hashlib.sha256).digest()
    return msg("AUTH", proof, rid)


def login(rank=0, comm=0):
    """HELLO and the AUTH that proves TOKEN."""
    return hello(rank, comm) + auth()


def i32(v):
    return struct.pack("<i", v)


STORE = {
    "set-get-bye": login() + msg("SET", key(b"k") + val(b"v"), 2) +
                   msg("GET", key(b"k") + i32(0), 3) + msg("BYE", rid=4),
    "hello-tool-no-comm": login(-1, None) + msg("CHECK", keys(b"a"), 2),
    "auth-empty-token": hello(0, 0) + auth(b"") + msg("SET", key(b"k") + val(b""), 2),
    "wrong-token": hello(1, 0) + auth(b"not-the-token") + msg("SET", key(b"k") + val(b"v"), 2),
    "hello-process": hello(2, 7, process=struct.pack("<iQQQB", 1234, 99, 1, 1, 1)) + auth() +
                     msg("WAIT", i32(10) + keys(b"w"), 2),
    "auth-before-hello": auth() + login(),
    "request-before-auth": hello() + msg("SET", key(b"k") + val(b"v"), 2),
    "second-auth": login() + auth(rid=2),
    "auth-short": hello() + msg("AUTH", b"\0" * 31),
    "add-counter": login() + msg("ADD", key(b"n") + struct.pack("<q", 5), 2) +
                   msg("ADD", key(b"n") + struct.pack("<q", -7), 3) +
                   msg("GET", key(b"n") + i32(0), 4),
    "add-overflow": login() + msg("ADD", key(b"n") + struct.pack("<q", 2**63 - 1), 2) +
                    msg("ADD", key(b"n") + struct.pack("<q", 1), 3),
    "add-not-counter": login() + msg("SET", key(b"n") + val(b"12x"), 2) +
                       msg("ADD", key(b"n") + struct.pack("<q", 1), 3),
    "cas": login() + msg("CAS", key(b"c") + b"\0" + val(b"") + val(b"one"), 2) +
           msg("CAS", key(b"c") + b"\1" + val(b"one") + val(b"two"), 3) +
           msg("CAS", key(b"c") + b"\1" + val(b"one") + val(b"three"), 4),
    "cas-bad-expect": login() + msg("CAS", key(b"c") + b"\0" + val(b"x") + val(b"y"), 2),
    "wait-parks": login() + msg("WAIT", i32(1000) + keys(b"a", b"b"), 2) +
                  msg("SET", key(b"a") + val(b"1"), 3),
    "mget": login() + msg("SET", key(b"a") + val(b"1"), 2) + msg("SET", key(b"b") + val(b"22"), 3) +
            msg("MGET", i32(0) + keys(b"a", b"b"), 4) + msg("MGET", i32(50) + keys(b"a", b"c"), 5),
    "get-missing-timeout-0": login() + msg("GET", key(b"none") + i32(0), 2),
    "get-parks": login(2, 7) + msg("GET", key(b"later") + i32(60000), 2) + msg("BYE", rid=3),
    "del": login() + msg("SET", key(b"d") + val(b"x"), 2) + msg("DEL", key(b"d"), 3) +
           msg("DEL", key(b"d"), 4) + msg("CHECK", keys(b"d"), 5),
    "pipelined": login() + b"".join(msg("SET", key(b"k%d" % i) + val(b"v" * i), 10 + i)
                                    for i in range(20)),
    "bad-magic": msg("HELLO", b"", magic=0x12345678),
    "bad-version": hello()[:4] + bytes([VERSION - 1]) + hello()[5:],
    "truncated-header": hello()[:10],
    "before-hello": msg("SET", key(b"k") + val(b"v")),
    "second-hello": login() + hello(),
    "hello-twice-before-auth": hello() + hello() + auth(),
    "body-over-limit": login() + msg("DEL", b"", length=1000),
    "trailing-bytes": login() + msg("DEL", key(b"k") + b"\0", 2),
    "negative-timeout": login() + msg("GET", key(b"k") + i32(-1), 2),
    "key-count-zero": login() + msg("CHECK", struct.pack("<I", 0), 2),
    "unknown-opcode": login() + msg(42, b"", 2),
    "rank-below-minus-one": hello(-5, 0) + auth(),
}

# ---------------------------------------------------------------- fdx
FDX_MAGIC = 0x73464458


def fdx_msg(kind, body, length=None):
    return bytes([kind, len(body) if length is None else length]) + body


def fdx_req(op=1, rid=7, magic=FDX_MAGIC):
    return struct.pack("<IIQ", magic, op, rid)


def fdx_rep(status=0, rid=7, magic=FDX_MAGIC):
    return struct.pack("<IIQ", magic, status, rid)


def reply_kind(nfds, trunc=False, ctrunc=False):
    return 1 | (nfds << 1) | (0x10 if trunc else 0) | (0x20 if ctrunc else 0)


FDX = {
    "request": fdx_msg(0, fdx_req()),
    "request-unknown-op": fdx_msg(0, fdx_req(op=2)),
    "request-short": fdx_msg(0, fdx_req()[:12]),
    "request-long": fdx_msg(0, fdx_req() + b"\0" * 8, 24),
    "request-with-fd": fdx_msg(0x20, fdx_req()),
    "reply-ok": fdx_msg(reply_kind(1), fdx_rep()),
    "reply-ok-no-fd": fdx_msg(reply_kind(0), fdx_rep()),
    "reply-ok-two-fds": fdx_msg(reply_kind(2), fdx_rep()),
    "reply-not-found": fdx_msg(reply_kind(0), fdx_rep(1)),
    "reply-refused": fdx_msg(reply_kind(0), fdx_rep(2, 0)),
    "reply-other-id": fdx_msg(reply_kind(1), fdx_rep(0, 8)),
    "reply-truncated": fdx_msg(reply_kind(1, trunc=True), fdx_rep()),
    "mixed": fdx_msg(0, fdx_req()) + fdx_msg(reply_kind(1), fdx_rep()) +
             fdx_msg(reply_kind(4, ctrunc=True), fdx_rep(1)),
}

# ---------------------------------------------------------------- settings
# A line: the setting's index in the table (symm_setting_get's order: the
# build's collected list, build/generated/symm_settings.def), then its value.
S = dict(BACKEND=0, TIMEOUT_MS=1, RANK=2, WORLD_SIZE=3, POOL_BYTES=8, SCRATCH_BYTES=9,
         ALLREDUCE_ALGO=11, DEBUG=13, DEBUG_SUBSYS=14, STORE_ADDR=16, STORE_PORT=17,
         STORE_EXTERNAL=19, HANDSHAKE_MS=20, BOOTSTRAP_SHM=21, TOKEN=22,
         HOST_SLICE_BYTES=27, NATIVE_HANDLE=29)


def lines(*pairs):
    return b"".join(bytes([S[n]]) + v + b"\n" for n, v in pairs)


SETTINGS = {
    "sizes": lines(("POOL_BYTES", b"64M"), ("SCRATCH_BYTES", b"1GiB"),
                   ("HOST_SLICE_BYTES", b"4096")),
    "size-suffixes": lines(("POOL_BYTES", b"2kb"), ("SCRATCH_BYTES", b"3 T")),
    "size-too-big": lines(("POOL_BYTES", b"99999999999999999999")),
    "size-overflow-suffix": lines(("SCRATCH_BYTES", b"9223372036854775807K")),
    "size-negative": lines(("POOL_BYTES", b"-1")),
    "size-fraction": lines(("POOL_BYTES", b"1.5G")),
    "ints": lines(("TIMEOUT_MS", b"5000"), ("RANK", b"+3"), ("WORLD_SIZE", b"4")),
    "int-range": lines(("STORE_PORT", b"70000"), ("TIMEOUT_MS", b"0")),
    "int-junk": lines(("HANDSHAKE_MS", b"5s")),
    "int-huge": lines(("TIMEOUT_MS", b"-99999999999999999999")),
    "bools": lines(("STORE_EXTERNAL", b"yes"), ("BOOTSTRAP_SHM", b"OFF")),
    "bool-bad": lines(("BOOTSTRAP_SHM", b"2")),
    "enums": lines(("ALLREDUCE_ALGO", b"ll128"), ("DEBUG", b"info"),
                   ("NATIVE_HANDLE", b"fabric")),
    "enum-bad": lines(("ALLREDUCE_ALGO", b"fast")),
    "strings": lines(("BACKEND", b"host"), ("DEBUG_SUBSYS", b"^STORE,COLL"),
                     ("STORE_ADDR", b"[::1]:29500"), ("TOKEN", b"secret")),
    "string-bad": lines(("BACKEND", b"bogus"), ("DEBUG_SUBSYS", b"NOPE")),
    "empty-value": lines(("TIMEOUT_MS", b"")),
    "twice": lines(("TIMEOUT_MS", b"abc"), ("TIMEOUT_MS", b"100")),
}

# ---------------------------------------------------------------- bench
BENCH = {
    "sizes": b"\0".join([b"-b", b"8", b"-e", b"4M", b"-f", b"4"]),
    "long-options": b"\0".join([b"--minbytes=1K", b"--maxbytes=1G", b"--iters", b"5",
                                b"--warmup_iters=0", b"--check", b"0"]),
    "coll": b"\0".join([b"--coll", b"all_gather", b"--dtype", b"i64", b"--root", b"1"]),
    "reduce-dtype": b"\0".join([b"--coll=reduce_scatter", b"--dtype=u8"]),
    "op-algo": b"\0".join([b"--op", b"max", b"--algo", b"two_shot", b"--inplace", b"0"]),
    "formats": b"\0".join([b"--csv", b"--json"]),
    "plot": b"\0".join([b"--plot", b"out.png", b"--nccl", b"0", b"--graph"]),
    "plot-empty": b"\0".join([b"--plot", b""]),
    "inject": b"\0".join([b"--inject-errors", b"3", b"-c", b"1"]),
    "help": b"-h",
    "missing-value": b"-b",
    "unknown": b"\0".join([b"-x", b"--nope"]),
    "order": b"\0".join([b"-b", b"1G", b"-e", b"1K"]),
    "stray": b"\0".join([b"-n", b"3", b"stray"]),
    "bad-numbers": b"\0".join([b"-f", b"1", b"-n", b"0x10", b"-b", b"0"]),
}


def write(target, seeds):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    for name, data in seeds.items():
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    write("store", STORE)
    write("fdx", FDX)
    write("settings", SETTINGS)
    write("bench-options", BENCH)
