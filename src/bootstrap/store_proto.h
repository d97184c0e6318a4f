/*
 * Wire protocol of the embedded key-value store (server: store_server*.c,
 * client: store_client*.c).  Our own design; everything little-endian.
 *
 * Every message is a 16-byte header followed by `body_len` bytes of body:
 *
 *   offset size field
 *        0    4 magic       SYMM_PROTO_MAGIC (bytes "SYMS")
 *        4    1 version     SYMM_PROTO_VERSION
 *        5    1 opcode      request opcode; a reply carries it | 0x80
 *        6    2 reserved    0
 *        8    4 request id  chosen by the client, echoed in the reply
 *       12    4 body_len    <= symm_proto_max_body(opcode) / SYMM_PROTO_MAX_REPLY
 *
 * Body fields, in order, no padding:
 *   key    u16 len (1..SYMM_STORE_MAX_KEY) + bytes
 *   value  u32 len (0..SYMM_STORE_MAX_VALUE) + bytes
 *   keys   u32 n (1..SYMM_STORE_MAX_KEYS) + n keys
 *   u8[n]  n bytes as they are
 *   i32 / i64 integers, u8 flags
 *
 * Requests                          Reply payload (only when status == 0)
 *   HELLO  u8[32] client nonce,     u8[32] server nonce,
 *          i32 rank                 u8[32] server proof
 *          [, u32 communicator
 *          [, i32 pid, u64 host hash,
 *             u64 pid namespace inode,
 *             u64 pid namespace device,
 *             u8 flags]]
 *   AUTH   u8[32] client proof      -
 *   SET    key, value               -
 *   GET    key, i32 timeout_ms      value
 *   ADD    key, i64 delta           i64 new value
 *   CAS    key, u8 expect_present,  u8 present, value (the value after the
 *          value expected, value      operation; present 0 means absent)
 *          desired
 *   WAIT   i32 timeout_ms, keys     -
 *   MGET   i32 timeout_ms, keys     u32 n, n values
 *   DEL    key                      -
 *   CHECK  keys                     u8 all_present
 *   BYE    -                        (no reply: the server closes)
 *   STATS  -                        u64 connections, u64 requests,
 *                                   u64 request bytes, u64 reply bytes
 *                                   (symm_store_stats_t, this request
 *                                   counted, its reply not yet)
 *
 * The handshake: both sides prove they hold the job's token without
 * sending it, so that whoever answers on the store's port (another user
 * who bound it first) learns nothing from a client, and a client talks to
 * no store that cannot prove the token.  The client sends HELLO with a
 * fresh random nonce; the server answers with its own nonce and its proof,
 * HMAC-SHA256(token, SYMM_PROTO_SERVER_LABEL | server nonce | client
 * nonce); the client checks it (a wrong one: SYMM_ERR_PERMISSION, and the
 * client closes without another word), then sends AUTH with its proof,
 * HMAC-SHA256(token, SYMM_PROTO_CLIENT_LABEL | server nonce | client
 * nonce), which the server checks (a wrong one: PERMISSION and close).
 * The labels keep one side's proof from passing for the other's; the
 * nonces keep a proof from being replayed.  Only AUTH may follow HELLO,
 * and nothing HELLO says (its rank, communicator, process) counts until
 * AUTH is accepted.  An empty token is a key like any other.
 *
 * HELLO's process fields say which process the connection is of (pid,
 * hash of the host name, PID namespace; 0: unknown), so that the server
 * can tell when that process is gone; flags bit 0 (SYMM_HELLO_JOB_RANKS):
 * the communicator numbers its ranks as the job does (the launcher's
 * SYMM_RANK and world size), so the process has the same rank in every
 * communicator that says so.
 *
 * Every reply body starts with u32 status (a symm_result_t) and i32
 * lost_rank (the lost rank for SYMM_ERR_PEER_LOST, else -1).  GET, WAIT and
 * MGET answered SYMM_ERR_TIMEOUT carry u32 n and the n u32 indices (in the
 * request's key list) of the keys still absent then; a client takes a
 * TIMEOUT without them as "not said".  Timeouts are
 * >= 0 on the wire (0: answer at once); the client resolves negative ones.
 *
 * ADD counters are stored as decimal ASCII text without a terminator ("42",
 * "-7"), so that a GET of a counter is readable by people and tools.
 *
 * Anything that does not parse exactly (bad magic or version, unknown
 * opcode, a length field over its limit or past the body, bytes left over
 * at the end, an opcode other than HELLO before HELLO or other than AUTH
 * after it, a second HELLO) makes the server close that connection.
 */
#ifndef SYMM_STORE_PROTO_H
#define SYMM_STORE_PROTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"
#include "symm_sha256.h"

#define SYMM_PROTO_MAGIC 0x534D5953u /* "SYMS" in memory order */
#define SYMM_PROTO_VERSION 2
#define SYMM_PROTO_HEADER_BYTES 16
#define SYMM_PROTO_REPLY_FLAG 0x80
#define SYMM_PROTO_MAX_TOKEN 1024
/* The handshake's nonces and proofs (HMAC-SHA256). */
#define SYMM_PROTO_NONCE 32
#define SYMM_PROTO_PROOF SYMM_SHA256_BYTES
#define SYMM_PROTO_SERVER_LABEL "symmem store v2: server proof"
#define SYMM_PROTO_CLIENT_LABEL "symmem store v2: client proof"
/* HELLO's optional process fields: pid, host hash, namespace, flags. */
#define SYMM_PROTO_HELLO_PROCESS (4u + 8u + 8u + 8u + 1u)
#define SYMM_HELLO_JOB_RANKS 0x01u
/* Largest reply body (an MGET of many values); the server answers
 * SYMM_ERR_INVALID_ARG rather than build a bigger one. */
#define SYMM_PROTO_MAX_REPLY (256u << 20)
/* status + lost_rank at the start of every reply body. */
#define SYMM_PROTO_REPLY_PREFIX 8

enum symm_proto_op {
  SYMM_OP_HELLO = 1,
  SYMM_OP_SET = 2,
  SYMM_OP_GET = 3,
  SYMM_OP_ADD = 4,
  SYMM_OP_CAS = 5,
  SYMM_OP_WAIT = 6,
  SYMM_OP_MGET = 7,
  SYMM_OP_DEL = 8,
  SYMM_OP_CHECK = 9,
  SYMM_OP_BYE = 10,
  SYMM_OP_AUTH = 11,
  SYMM_OP_STATS = 12,
  SYMM_OP_COUNT_ = 13
};

static inline const char *symm_proto_op_name(unsigned op) {
  static const char *const names[SYMM_OP_COUNT_] = {
      "?", "HELLO", "SET", "GET", "ADD", "CAS", "WAIT", "MGET", "DEL", "CHECK", "BYE", "AUTH", "STATS"};
  return op < SYMM_OP_COUNT_ ? names[op] : "?";
}

#define SYMM_PROTO_KEY_FIELD (2u + SYMM_STORE_MAX_KEY)
#define SYMM_PROTO_VALUE_FIELD (4u + SYMM_STORE_MAX_VALUE)
#define SYMM_PROTO_KEYS_FIELD (4u + (size_t)SYMM_STORE_MAX_KEYS * SYMM_PROTO_KEY_FIELD)

/* Upper bound of a request body for op, 0 for an unknown op.  The server
 * rejects a header announcing more before reading the body, so a bogus
 * length never makes it allocate. */
static inline size_t symm_proto_max_body(unsigned op) {
  switch (op) {
    case SYMM_OP_HELLO: return SYMM_PROTO_NONCE + 4 + 4 + SYMM_PROTO_HELLO_PROCESS;
    case SYMM_OP_AUTH: return SYMM_PROTO_PROOF;
    case SYMM_OP_SET: return SYMM_PROTO_KEY_FIELD + SYMM_PROTO_VALUE_FIELD;
    case SYMM_OP_GET: return SYMM_PROTO_KEY_FIELD + 4;
    case SYMM_OP_ADD: return SYMM_PROTO_KEY_FIELD + 8;
    case SYMM_OP_CAS: return SYMM_PROTO_KEY_FIELD + 1 + 2 * (size_t)SYMM_PROTO_VALUE_FIELD;
    case SYMM_OP_WAIT:
    case SYMM_OP_MGET: return 4 + SYMM_PROTO_KEYS_FIELD;
    case SYMM_OP_DEL: return SYMM_PROTO_KEY_FIELD;
    case SYMM_OP_CHECK: return SYMM_PROTO_KEYS_FIELD;
    case SYMM_OP_BYE:
    case SYMM_OP_STATS: return 0;
    default: return 0;
  }
}

/* ------------------------------------------------------------ byte order */
static inline void symm_proto_put16(uint8_t *p, uint16_t v) {
  p[0] = (uint8_t)v;
  p[1] = (uint8_t)(v >> 8);
}
static inline void symm_proto_put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void symm_proto_put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint16_t symm_proto_get16(const uint8_t *p) {
  return (uint16_t)(p[0] | (p[1] << 8));
}
static inline uint32_t symm_proto_get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}
static inline uint64_t symm_proto_get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

/* ------------------------------------------------------------- handshake */
/* The proof of the side that `label` names (SYMM_PROTO_SERVER_LABEL or
 * SYMM_PROTO_CLIENT_LABEL) for the handshake of these two nonces. */
static inline void symm_proto_proof(const char *token, size_t token_len, const char *label,
                                    const uint8_t server_nonce[SYMM_PROTO_NONCE],
                                    const uint8_t client_nonce[SYMM_PROTO_NONCE],
                                    uint8_t proof[SYMM_PROTO_PROOF]) {
  symm_hmac_t mac;
  symm_hmac_init(&mac, token, token_len);
  symm_hmac_update(&mac, label, strlen(label));
  symm_hmac_update(&mac, server_nonce, SYMM_PROTO_NONCE);
  symm_hmac_update(&mac, client_nonce, SYMM_PROTO_NONCE);
  symm_hmac_final(&mac, proof);
}

/* ---------------------------------------------------------------- header */
typedef struct symm_proto_header {
  uint32_t magic;
  uint8_t version;
  uint8_t opcode;
  uint16_t reserved;
  uint32_t id;
  uint32_t body_len;
} symm_proto_header_t;

static inline void symm_proto_encode_header(uint8_t *p, uint8_t opcode,
                                            uint32_t id, uint32_t body_len) {
  symm_proto_put32(p, SYMM_PROTO_MAGIC);
  p[4] = SYMM_PROTO_VERSION;
  p[5] = opcode;
  symm_proto_put16(p + 6, 0);
  symm_proto_put32(p + 8, id);
  symm_proto_put32(p + 12, body_len);
}

static inline void symm_proto_decode_header(const uint8_t *p,
                                            symm_proto_header_t *h) {
  h->magic = symm_proto_get32(p);
  h->version = p[4];
  h->opcode = p[5];
  h->reserved = symm_proto_get16(p + 6);
  h->id = symm_proto_get32(p + 8);
  h->body_len = symm_proto_get32(p + 12);
}

/* ---------------------------------------------------------------- reader */
/* Checked cursor over a received body.  The first failure records why in
 * `err`; later gets then fail too, so a parser can read every field and
 * test `err` once at the end. */
typedef struct symm_proto_reader {
  const uint8_t *p;
  size_t left;
  const char *err;
} symm_proto_reader_t;

static inline void symm_proto_reader_init(symm_proto_reader_t *r,
                                          const uint8_t *p, size_t len) {
  r->p = p;
  r->left = len;
  r->err = NULL;
}

static inline const uint8_t *symm_proto_take(symm_proto_reader_t *r, size_t n,
                                             const char *what) {
  if (r->err) return NULL;
  if (n > r->left) {
    r->err = what;
    return NULL;
  }
  const uint8_t *p = r->p;
  r->p += n;
  r->left -= n;
  return p;
}

static inline uint8_t symm_proto_get_u8(symm_proto_reader_t *r) {
  const uint8_t *p = symm_proto_take(r, 1, "truncated u8 field");
  return p ? p[0] : 0;
}
static inline uint32_t symm_proto_get_u32(symm_proto_reader_t *r) {
  const uint8_t *p = symm_proto_take(r, 4, "truncated u32 field");
  return p ? symm_proto_get32(p) : 0;
}
static inline int32_t symm_proto_get_i32(symm_proto_reader_t *r) {
  return (int32_t)symm_proto_get_u32(r);
}
static inline int64_t symm_proto_get_i64(symm_proto_reader_t *r) {
  const uint8_t *p = symm_proto_take(r, 8, "truncated i64 field");
  return p ? (int64_t)symm_proto_get64(p) : 0;
}

/* A key: not NUL-terminated on the wire; *len is 1..SYMM_STORE_MAX_KEY. */
static inline const char *symm_proto_get_key(symm_proto_reader_t *r,
                                             uint16_t *len) {
  const uint8_t *p = symm_proto_take(r, 2, "truncated key length");
  *len = 0;
  if (!p) return NULL;
  uint16_t n = symm_proto_get16(p);
  if (n == 0 || n > SYMM_STORE_MAX_KEY) {
    r->err = "key length 0 or over SYMM_STORE_MAX_KEY";
    return NULL;
  }
  const uint8_t *k = symm_proto_take(r, n, "truncated key");
  if (k) *len = n;
  return (const char *)k;
}

/* A value of 0..SYMM_STORE_MAX_VALUE bytes (non-NULL even when empty, unless
 * the reader failed). */
static inline const uint8_t *symm_proto_get_value(symm_proto_reader_t *r,
                                                  uint32_t *len) {
  *len = 0;
  uint32_t n = symm_proto_get_u32(r);
  if (r->err) return NULL;
  if (n > SYMM_STORE_MAX_VALUE) {
    r->err = "value length over SYMM_STORE_MAX_VALUE";
    return NULL;
  }
  const uint8_t *v = symm_proto_take(r, n, "truncated value");
  if (v) *len = n;
  return v;
}

/* Key count of a keys field: 1..SYMM_STORE_MAX_KEYS, and no more keys than
 * the remaining bytes could hold, so a count never drives an allocation
 * larger than the body. */
static inline uint32_t symm_proto_get_count(symm_proto_reader_t *r) {
  uint32_t n = symm_proto_get_u32(r);
  if (r->err) return 0;
  if (n == 0 || n > SYMM_STORE_MAX_KEYS || n > r->left / 3) {
    r->err = "key count 0, over SYMM_STORE_MAX_KEYS or past the body";
    return 0;
  }
  return n;
}

/* True if the body was consumed exactly and nothing failed. */
static inline bool symm_proto_end(symm_proto_reader_t *r) {
  if (!r->err && r->left != 0) r->err = "trailing bytes after the last field";
  return r->err == NULL;
}

/* ---------------------------------------------------------------- writer */
/* Growable output buffer.  An allocation failure sets `failed` and makes
 * later puts no-ops; the caller checks once. */
typedef struct symm_proto_buf {
  uint8_t *data;
  size_t len, cap;
  bool failed;
} symm_proto_buf_t;

static inline uint8_t *symm_proto_reserve(symm_proto_buf_t *b, size_t n) {
  if (b->failed) return NULL;
  if (n > b->cap - b->len) {
    size_t need = b->len + n;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    uint8_t *p = (uint8_t *)realloc(b->data, cap);
    if (!p) {
      b->failed = true;
      return NULL;
    }
    b->data = p;
    b->cap = cap;
  }
  uint8_t *p = b->data + b->len;
  b->len += n;
  return p;
}

static inline void symm_proto_put_u8(symm_proto_buf_t *b, uint8_t v) {
  uint8_t *p = symm_proto_reserve(b, 1);
  if (p) *p = v;
}
static inline void symm_proto_put_u32(symm_proto_buf_t *b, uint32_t v) {
  uint8_t *p = symm_proto_reserve(b, 4);
  if (p) symm_proto_put32(p, v);
}
static inline void symm_proto_put_i32(symm_proto_buf_t *b, int32_t v) {
  symm_proto_put_u32(b, (uint32_t)v);
}
static inline void symm_proto_put_i64(symm_proto_buf_t *b, int64_t v) {
  uint8_t *p = symm_proto_reserve(b, 8);
  if (p) symm_proto_put64(p, (uint64_t)v);
}
static inline void symm_proto_put_bytes(symm_proto_buf_t *b, const void *v,
                                        size_t n) {
  uint8_t *p = symm_proto_reserve(b, n);
  if (p && n) memcpy(p, v, n);
}
/* Key: u16 length prefix (callers check the limits). */
static inline void symm_proto_put_key(symm_proto_buf_t *b, const char *k,
                                      size_t n) {
  uint8_t *p = symm_proto_reserve(b, 2);
  if (p) symm_proto_put16(p, (uint16_t)n);
  symm_proto_put_bytes(b, k, n);
}
static inline void symm_proto_put_value(symm_proto_buf_t *b, const void *v,
                                        size_t n) {
  symm_proto_put_u32(b, (uint32_t)n);
  symm_proto_put_bytes(b, v, n);
}

/* Starts a message: writes a header whose body length symm_proto_finish
 * fills in.  Returns the header's offset in the buffer. */
static inline size_t symm_proto_begin(symm_proto_buf_t *b, uint8_t opcode,
                                      uint32_t id) {
  size_t at = b->len;
  uint8_t *p = symm_proto_reserve(b, SYMM_PROTO_HEADER_BYTES);
  if (p) symm_proto_encode_header(p, opcode, id, 0);
  return at;
}

static inline void symm_proto_finish(symm_proto_buf_t *b, size_t at) {
  if (b->failed) return;
  symm_proto_put32(b->data + at + 12,
                   (uint32_t)(b->len - at - SYMM_PROTO_HEADER_BYTES));
}

static inline void symm_proto_buf_free(symm_proto_buf_t *b) {
  free(b->data);
  b->data = NULL;
  b->len = b->cap = 0;
  b->failed = false;
}

#endif /* SYMM_STORE_PROTO_H */
