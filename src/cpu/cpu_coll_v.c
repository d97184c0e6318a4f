/* CPU engine: all-to-all-v, on the frame of cpu_coll.c.
 *
 * Every rank stages what it sends in its own scratch half: a table of
 * world x n_experts chunks {rows, first row in the staged data}, indexed
 * by (destination, expert), then the chunks packed in that order.  Steps:
 *  1. the table, from the host counts or the splits (memory this rank
 *     reads); a sender whose splits are bad (negative, past send_rows) says
 *     so in its verdict and stages nothing;
 *  2. it stages when its scratch half holds what it needs, publishes that
 *     need and its verdict, and syncs; the signatures must match, and a
 *     bad verdict fails every rank before any data moves;
 *  3. the largest need of any rank decides whether the scratch grows: the
 *     same size on every rank, as a collective growth must be; then every
 *     rank stages on the new scratch and syncs again;
 *  4. every receiver reads its entries of every peer's table (checked
 *     against that peer's staged bytes: a pad is read, never trusted),
 *     places them as the mode says and checks them against its capacity
 *     (device forms) or its recv_counts (host form); it publishes its
 *     verdict and syncs once more, so every rank fails alike, naming the
 *     rank that found the fault, before any data moves;
 *  5. it copies, and the device forms write out_splits_offsets.
 * No exit barrier: receivers read the senders' scratch halves, which the
 * call two numbers later reuses only after every rank left this one.
 *
 * Zero copy.  A sender whose sendbuf (its whole capacity, send_rows rows)
 * lies in a rendezvoused tensor of this comm, apart from its recvbuf,
 * publishes the tensor's group and its offset, whatever it sends, so that
 * ranks on symmetric buffers agree.  If it sends at least
 * ZERO_COPY_MIN_BYTES (or its data does not fit the scratch) it stages
 * only its table, whose entries then count rows of sendbuf, and says so
 * (detail.in_place); else it stages as usual, a copy being cheaper than
 * the exit barrier for little data.  If every rank published the same
 * group, receivers copy from the in-place senders' buffers where they lie
 * (every entry checked against the room the tensor has past the sender's
 * offset), and the call ends with an exit barrier (phase 3) when any
 * sender was read in place, since it may rewrite sendbuf once it returns.
 * If not, and no scratch growth restages everybody anyway, the in-place
 * senders stage now and every rank syncs once more (phase 2) before
 * reading tables; the counts are then checked at phase 3.
 *
 * Cross-memory attach.  A sender whose sendbuf is ordinary memory (no
 * tensor), apart from its recvbuf, on a rank whose probe showed that it
 * may read every peer (cpu_cma.c), publishes the communicator's group of
 * cross-memory attach, sendbuf's address and its size (detail.room), and
 * stages only its table where it sends at least ZERO_COPY_MIN_BYTES, as
 * in place above.  If every rank published that group, receivers read the
 * in-place senders' rows in their processes with process_vm_readv, every
 * chunk of a sender in one system call, straight into recvbuf (each entry
 * checked against the published size first), and the call ends as the
 * fixed-size kinds' cross-memory calls do (cpu_coll_cma_finish: a failed
 * read fails every rank alike).  A mix with other groups stages late. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <stdio.h>
#include <sys/uio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu_coll_int.h"

enum { V_OK = 0, V_NEGATIVE, V_SEND_OVER, V_RECV_OVER, V_COUNT, V_PROTOCOL };

typedef struct {
  uint64_t rows, off; /* off: first row, in the staged data (table) or the buffer (src) */
} chunk_t;

/* One all-to-all-v in progress on frame c. */
typedef struct {
  coll_t *c;
  const symm_coll_v_t *v;
  int ne;                 /* chunks per peer */
  size_t chunks;          /* world x ne */
  size_t row_bytes, table_bytes;
  uint64_t staged_rows;   /* rows this rank stages */
  chunk_t *src;           /* [chunks] what this rank sends, where in sendbuf */
  chunk_t *dst;           /* [chunks] what it receives (from p, expert e: p * ne + e) */
  uint64_t *from;         /* [chunks] where in p's staged data, checked */
  struct iovec *io;       /* [2 x ne] a sender's pieces, read in its process */
  coll_verdict_t verdict; /* this rank's */
  symm_tensor_t *zt;      /* the tensor of sendbuf, read in place, or NULL */
  uint64_t zgroup, zoff;  /* what this rank publishes: its group, sendbuf's offset */
  uint64_t room;          /* cross-memory attach: the bytes of sendbuf it publishes */
  bool in_place;          /* this rank's data is to be read where it lies */
  bool zero_copy;         /* every rank published the same group */
  bool cma;               /* ... that of cross-memory attach: read in the senders' processes */
  bool any_in_place;      /* ... and some are read in place: an exit barrier */
  bool late;              /* some ranks staged after the first sync */
} vcall_t;

static chunk_t *table_of(const vcall_t *x, int r) { return (chunk_t *)cpu_coll_half(x->c, r); }

/* ---------------------------------------------------------- the sender */

static void bad(vcall_t *x, int code, int peer, uint64_t a, uint64_t b) {
  if (!x->verdict.code) x->verdict = (coll_verdict_t){code, peer, a, b};
}

/* Rows and source row of chunk i = p * ne + e, from the counts. */
static chunk_t send_chunk(const vcall_t *x, size_t i) {
  const symm_coll_v_t *v = x->v;
  const size_t w = (size_t)x->c->w, ne = (size_t)x->ne;
  switch (v->mode) {
    case SYMM_V_HOST: return (chunk_t){v->send_counts[i], v->send_displs[i]};
    case SYMM_V_DEV_2D_COMBINE: {
      const size_t at = (i % ne) * w + i / ne; /* expert-major e * world + p */
      return (chunk_t){(uint64_t)v->in_splits[at], (uint64_t)v->in_splits[x->chunks + at]};
    }
    default: return (chunk_t){(uint64_t)v->in_splits[i], 0};
  }
}

/* This rank's send table; a fault goes into its verdict. */
static void build_send(vcall_t *x) {
  const bool packed = x->v->mode == SYMM_V_DEV || x->v->mode == SYMM_V_DEV_2D;
  const uint64_t cap = x->v->send_rows;
  uint64_t at = 0;
  for (size_t i = 0; i < x->chunks; i++) {
    chunk_t ch = send_chunk(x, i);
    if ((int64_t)ch.rows < 0 || (int64_t)ch.off < 0) {
      bad(x, V_NEGATIVE, -1, i, (int64_t)ch.rows < 0 ? ch.rows : ch.off);
      return;
    }
    if (packed) ch.off = at;
    if (ch.rows && (ch.rows > cap || ch.off > cap - ch.rows)) { /* empty: anywhere */
      bad(x, V_SEND_OVER, -1, packed ? at + ch.rows : ch.off + ch.rows, cap);
      return;
    }
    x->src[i] = ch;
    at += ch.rows; /* no wrap: each chunk is within cap, and there are few */
  }
  x->staged_rows = at;
}

/* Bytes this rank stages (its table even when it sends nothing). */
static uint64_t need_of(const vcall_t *x) {
  if (x->verdict.code) return 0;
  uint64_t data;
  if (__builtin_mul_overflow(x->staged_rows, (uint64_t)x->row_bytes, &data) ||
      data > UINT64_MAX - x->table_bytes)
    return UINT64_MAX;
  return x->table_bytes + data;
}

static void stage(vcall_t *x) {
  chunk_t *t = table_of(x, x->c->me);
  char *data = (char *)t + x->table_bytes;
  uint64_t at = 0;
  for (size_t i = 0; i < x->chunks; i++) {
    const chunk_t s = x->src[i];
    t[i] = (chunk_t){s.rows, at};
    if (s.rows)
      cpu_memcpy(data + at * x->row_bytes,
                 (const char *)x->c->a->sendbuf + s.off * x->row_bytes, s.rows * x->row_bytes);
    at += s.rows;
  }
}

/* Zero copy: the table alone, its entries counting rows of sendbuf. */
static void stage_table(vcall_t *x) {
  chunk_t *t = table_of(x, x->c->me);
  for (size_t i = 0; i < x->chunks; i++) t[i] = x->src[i];
}

/* Whether peers may read this rank's send data where it lies (zero copy:
 * x->zt, its group and sendbuf's offset in it) or in its process
 * (cross-memory attach: the communicator's group, sendbuf's address and
 * size, on a rank whose probe succeeded, run at its first such call); or
 * neither.  Either way sendbuf lies apart from recvbuf.  A miss is no
 * error. */
static void read_candidate(vcall_t *x) {
  const coll_t *c = x->c;
  const symm_coll_v_t *v = x->v;
  size_t send_bytes, recv_bytes, off;
  if (x->verdict.code || __builtin_mul_overflow(v->send_rows, x->row_bytes, &send_bytes) ||
      __builtin_mul_overflow(v->recv_rows, x->row_bytes, &recv_bytes) ||
      cpu_coll_overlap(c->a->sendbuf, send_bytes, c->a->recvbuf, recv_bytes))
    return;
  symm_tensor_t *t = cpu_coll_own_tensor(c, c->a->sendbuf, send_bytes, &off);
  if (t) {
    x->zgroup = symm_tensor_peer_sig(t); /* 0 while a peer is not mapped: staged */
    x->zt = x->zgroup ? t : NULL;
    x->zoff = off;
  } else if (cpu_cma_ready(c->comm)) {
    x->zgroup = cpu_state(c->comm)->cma_group;
    x->zoff = (uint64_t)(uintptr_t)c->a->sendbuf;
    x->room = send_bytes;
  }
}

/* ---------------------------------------------------------- the verdicts */

static void publish(vcall_t *x) {
  cpu_coll_publish(x->c, x->zgroup, x->zoff);
  coll_detail_t *d = &x->c->pads[x->c->me]->detail[x->c->h];
  d->need = need_of(x);
  d->room = x->room;
  d->in_place = x->in_place;
  d->verdict[0] = x->verdict;
}

/* The first rank's fault in verdict `which`, the same words on every rank. */
static symm_result_t verdicts(const coll_t *c, int which) {
  for (int r = 0; r < c->w; r++) {
    const coll_verdict_t *v = &c->pads[r]->detail[c->h].verdict[which];
    if (!v->code) continue;
    const char *fn = cpu_coll_kind_name(c->a->kind);
    const unsigned long long seq = (unsigned long long)c->seq, a = v->a, b = v->b;
    switch (v->code) {
      case V_NEGATIVE:
        return symm_error(SYMM_ERR_INVALID_ARG, "symm_%s #%llu: rank %d's splits entry %llu is "
                          "%lld; no rank moved any data", fn, seq, r, a, (long long)b);
      case V_SEND_OVER:
        return symm_error(SYMM_ERR_INVALID_ARG, "symm_%s #%llu: rank %d's splits reach row %llu "
                          "of sendbuf, which holds %llu rows; no rank moved any data", fn, seq, r,
                          a, b);
      case V_RECV_OVER:
        return symm_error(SYMM_ERR_INVALID_ARG, "symm_%s #%llu: rank %d would receive up to "
                          "row %llu, its recvbuf holds %llu rows; no rank moved any data", fn,
                          seq, r, a, b);
      case V_COUNT:
        return symm_error(SYMM_ERR_MISMATCH, "symm_%s #%llu: rank %d sends %llu elements to rank "
                          "%d, whose recv_counts[%d] is %llu; no rank moved any data", fn, seq,
                          v->peer, a, r, v->peer, b);
      default:
        return symm_error(SYMM_ERR_PROTOCOL, "symm_%s #%llu: rank %d's table for rank %d is "
                          "past the %llu bytes of data it offers; no rank moved any data", fn,
                          seq, v->peer, r, b);
    }
  }
  return SYMM_SUCCESS;
}

/* ---------------------------------------------------------- the receiver */

/* Whether sender p's rows are read where they lie this call. */
static bool read_in_place(const vcall_t *x, int p) {
  return x->zero_copy && x->c->pads[p]->detail[x->c->h].in_place;
}

/* Bytes of p's data its table may point into: what it staged, or (zero
 * copy) the room of the tensor past p's sendbuf (a pad is read, never
 * trusted); false when even that is inconsistent. */
static bool data_room(const vcall_t *x, int p, uint64_t *room) {
  const coll_t *c = x->c;
  if (read_in_place(x, p) && x->cma) {
    *room = c->pads[p]->detail[c->h].room;
    return true;
  }
  if (read_in_place(x, p)) {
    const uint64_t off = cpu_coll_brief(c, p)->offset, nbytes = symm_tensor_nbytes(x->zt);
    *room = off <= nbytes ? nbytes - off : 0;
    return off <= nbytes;
  }
  const uint64_t need = c->pads[p]->detail[c->h].need;
  *room = need >= x->table_bytes ? need - x->table_bytes : 0;
  return need >= x->table_bytes;
}

/* Peer p's entry for this rank's chunk e, checked against p's data. */
static bool read_entry(vcall_t *x, int p, int e, chunk_t *out) {
  const coll_t *c = x->c;
  *out = table_of(x, p)[(size_t)c->me * (size_t)x->ne + (size_t)e];
  uint64_t end, room;
  if (data_room(x, p, &room) && !__builtin_add_overflow(out->off, out->rows, &end) &&
      !__builtin_mul_overflow(end, (uint64_t)x->row_bytes, &end) && end <= room)
    return true;
  bad(x, V_PROTOCOL, p, (uint64_t)e, room);
  return false;
}

/* Where chunk (p, e) lands, as the mode places it; *at runs on. */
static uint64_t place(const vcall_t *x, int p, uint64_t *at) {
  const symm_coll_v_t *v = x->v;
  if (v->mode == SYMM_V_HOST) return v->recv_displs[p];
  if (v->mode == SYMM_V_DEV_2D && p == 0) /* a new expert block */
    *at = (*at + v->major_align - 1) / v->major_align * v->major_align;
  return *at;
}

/* Reads this rank's column of every table, places it and checks it. */
static void build_recv(vcall_t *x) {
  const coll_t *c = x->c;
  const symm_coll_v_t *v = x->v;
  const bool expert_major = v->mode == SYMM_V_DEV_2D;
  uint64_t at = 0, furthest = 0;
  for (int i = 0; i < c->w * x->ne && !x->verdict.code; i++) {
    /* expert-major visits (e, p); every other mode (p, e) */
    const int p = expert_major ? i % c->w : i / x->ne, e = expert_major ? i / c->w : i % x->ne;
    chunk_t ch;
    if (!read_entry(x, p, e, &ch)) return;
    if (v->mode == SYMM_V_HOST && ch.rows != v->recv_counts[p]) {
      bad(x, V_COUNT, p, ch.rows, v->recv_counts[p]);
      return;
    }
    const uint64_t dst = place(x, p, &at);
    if (ch.rows && dst + ch.rows > furthest) furthest = dst + ch.rows;
    if (v->mode != SYMM_V_HOST) at = dst + ch.rows;
    x->dst[(size_t)p * (size_t)x->ne + (size_t)e] = (chunk_t){ch.rows, dst};
    x->from[(size_t)p * (size_t)x->ne + (size_t)e] = ch.off;
  }
  if (furthest > v->recv_rows) bad(x, V_RECV_OVER, -1, furthest, v->recv_rows);
}

/* Cross-memory attach: sender p's chunks for this rank, read in its
 * process, all in one system call (pieces: the caller's, x->ne of them);
 * a failed read ends this rank's reads and is kept for the exit. */
static void cma_read_sender(vcall_t *x, int p, struct iovec *local, struct iovec *remote) {
  coll_t *c = x->c;
  const uint64_t base = cpu_coll_brief(c, p)->offset;
  size_t n = 0;
  for (int e = 0; e < x->ne; e++) {
    const size_t i = (size_t)p * (size_t)x->ne + (size_t)e;
    if (!x->dst[i].rows) continue;
    local[n] = (struct iovec){(char *)c->a->recvbuf + x->dst[i].off * x->row_bytes,
                              x->dst[i].rows * x->row_bytes};
    remote[n++] = (struct iovec){(void *)(uintptr_t)(base + x->from[i] * x->row_bytes),
                                 x->dst[i].rows * x->row_bytes};
  }
  if (!n || c->read_errno) return;
  c->read_errno = cpu_cma_readv(c->comm, p, local, remote, n);
  if (c->read_errno) c->read_peer = p;
}

static void copy_in(vcall_t *x) {
  const coll_t *c = x->c;
  for (int k = 1; k <= c->w; k++) {
    const int p = (c->me + k) % c->w;
    if (read_in_place(x, p) && x->cma && p != c->me) {
      cma_read_sender(x, p, x->io, x->io + x->ne);
      continue;
    }
    const char *data = !read_in_place(x, p) ? (const char *)table_of(x, p) + x->table_bytes
                       : x->cma             ? (const char *)c->a->sendbuf /* my own rows */
                                            : (const char *)symm_tensor_peer_data(x->zt)[p] +
                                                  cpu_coll_brief(c, p)->offset;
    for (int e = 0; e < x->ne; e++) {
      const size_t i = (size_t)p * (size_t)x->ne + (size_t)e;
      if (x->dst[i].rows)
        cpu_memcpy((char *)c->a->recvbuf + x->dst[i].off * x->row_bytes,
                   data + x->from[i] * x->row_bytes, x->dst[i].rows * x->row_bytes);
    }
  }
}

/* out_splits_offsets of the device forms: [2][chunks], in the mode's order. */
static void write_splits(const vcall_t *x) {
  const symm_coll_v_t *v = x->v;
  if (v->mode == SYMM_V_HOST) return;
  const size_t w = (size_t)x->c->w, ne = (size_t)x->ne;
  for (size_t p = 0; p < w; p++)
    for (size_t e = 0; e < ne; e++) {
      const size_t at = v->mode == SYMM_V_DEV_2D ? e * w + p : p * ne + e;
      v->out_splits_offsets[at] = (int64_t)x->dst[p * ne + e].rows;
      v->out_splits_offsets[x->chunks + at] = (int64_t)x->dst[p * ne + e].off;
    }
}

/* ---------------------------------------------------------- the call */

/* Steps 2 and 3: every rank staged on a scratch that holds every rank's
 * need, and every verdict so far is clean. */
static symm_result_t stage_all(vcall_t *x) {
  coll_t *c = x->c;
  symm_tensor_t *s = symm_comm_scratch_current(c->comm);
  if (!s) SYMM_CHECK(cpu_coll_grow(c, 1, &s)); /* as any first call of nothing */
  SYMM_CHECK(cpu_coll_attach(c, s, false));
  const uint64_t mine = need_of(x), cap = cpu_coll_half_capacity(s);
  if (x->table_bytes <= cap) read_candidate(x);
  x->in_place = x->zgroup && (mine - x->table_bytes >= ZERO_COPY_MIN_BYTES || mine > cap);
  if (x->in_place) stage_table(x);
  else if (!x->verdict.code && mine <= cap) stage(x);
  publish(x);
  SYMM_CHECK(cpu_coll_sync(c, PHASE_ARRIVED, "arrive"));
  SYMM_CHECK(cpu_coll_check_match(c));
  SYMM_CHECK(verdicts(c, 0));
  const uint64_t group0 = cpu_coll_brief(c, 0)->group;
  uint64_t most = 0;
  x->zero_copy = group0 != 0;
  for (int r = 0; r < c->w; r++) {
    x->zero_copy &= cpu_coll_brief(c, r)->group == group0;
    x->any_in_place |= c->pads[r]->detail[c->h].in_place != 0;
    if (c->pads[r]->detail[c->h].need > most) most = c->pads[r]->detail[c->h].need;
  }
  x->cma = x->zero_copy && group0 == cpu_state(c->comm)->cma_group;
  if (x->zero_copy) return SYMM_SUCCESS; /* every table fits: each rank checked */
  const bool offered = x->in_place;
  x->zt = NULL;
  x->zgroup = x->zoff = x->room = 0;
  x->in_place = false;
  if (most <= cap) {
    if (!x->any_in_place) return SYMM_SUCCESS;
    /* Some ranks' data is where it lies but not every rank can read it
     * there: they stage now (it fits: most is the largest need), and every
     * rank waits for them. */
    x->any_in_place = false;
    if (offered) stage(x); /* its pad stays: peers may still be reading it */
    x->late = true;
    return cpu_coll_sync(c, PHASE_STAGED, "stage its data");
  }
  x->any_in_place = false;
  if (most > (uint64_t)INT64_MAX / 2)
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_all_to_all_v #%llu: a rank stages %llu bytes, "
                      "more than a scratch tensor can hold", (unsigned long long)c->seq,
                      (unsigned long long)most);
  SYMM_CHECK(cpu_coll_grow(c, 2 * (size_t)most, &s));
  SYMM_CHECK(cpu_coll_attach(c, s, true));
  stage(x);
  publish(x);
  return cpu_coll_sync(c, PHASE_ARRIVED, "arrive");
}

static symm_result_t run(vcall_t *x) {
  SYMM_CHECK(stage_all(x));
  build_recv(x);
  x->c->pads[x->c->me]->detail[x->c->h].verdict[1] = x->verdict;
  SYMM_CHECK(cpu_coll_sync(x->c, x->late ? PHASE_DONE : PHASE_STAGED, "check its counts"));
  SYMM_CHECK(verdicts(x->c, 1));
  SYMM_TRACE(COLL, "symm_all_to_all_v #%llu: %s", (unsigned long long)x->c->seq,
             x->any_in_place ? (x->cma ? "cma" : "zero copy") : x->late ? "staged late" : "staged");
  copy_in(x);
  if (x->any_in_place && x->cma) SYMM_CHECK(cpu_coll_cma_finish(x->c));
  else if (x->any_in_place) SYMM_CHECK(cpu_coll_sync(x->c, PHASE_DONE, "finish reading"));
  write_splits(x);
  return SYMM_SUCCESS;
}

symm_result_t cpu_coll_v_run(coll_t *c) {
  const symm_coll_v_t *v = c->a->v;
  vcall_t x = {.c = c, .v = v, .ne = v->n_experts, .chunks = (size_t)c->w * (size_t)v->n_experts,
               .row_bytes = v->row_elems * c->esize};
  x.table_bytes = symm_round_up(x.chunks * sizeof(chunk_t), SCRATCH_ALIGN);
  /* One block for the call: src and dst, from, and the iovec lists of a
   * read in a sender's process (allocated here, so that a read never
   * fails for memory mid-call).  Every part's alignment is 8. */
  const size_t parts = 2 * x.chunks * sizeof(chunk_t) + x.chunks * sizeof *x.from +
                       2 * (size_t)x.ne * sizeof *x.io;
  char *block = calloc(1, parts);
  if (!block) return symm_error(SYMM_ERR_NO_MEMORY, "symm_all_to_all_v: out of memory");
  x.src = (chunk_t *)(void *)block;
  x.dst = x.src + x.chunks;
  x.from = (uint64_t *)(void *)(x.dst + x.chunks);
  x.io = (struct iovec *)(void *)(x.from + x.chunks);
  build_send(&x);
  symm_result_t res = run(&x);
  free(block);
  return res;
}
