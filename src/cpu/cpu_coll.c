/* CPU engine: collectives over memory every rank loads and stores.
 *
 * Synchronisation.  Every call runs on the communicator's scratch tensor.
 * Each rank writes only its own signal pad of it and polls the others' (one
 * writer per cache line), holding:
 *   slot[seq & 1]    one cache line per parity:
 *   .flag            4 * seq + phase, monotonic per parity (seq = 1, 2, ...
 *                    per communicator); phase 1: arrived (descriptor published,
 *                    send data readable), 2: staged (only after a late
 *                    staging round), 3: done (two-shot: my chunk is reduced;
 *                    zero copy: I no longer read peers' buffers).  Stored
 *                    with release, polled with acquire.
 *   .brief           signature of the call and, for zero copy, the group
 *                    (peer_sig of the rendezvous) and offset of sendbuf.
 *   .data            send data of calls of at most INLINE_BYTES (not
 *                    two-shot): one cache line carries flag, signature and
 *                    data to a peer.
 *   detail[seq & 1]  the arguments, for the mismatch message.
 * Every rank publishes before waiting and compares all signatures after the
 * arrival, so ranks that disagree all return SYMM_ERR_MISMATCH before any
 * data moves.  Calls that agree over the bootstrap (barrier, rendezvous,
 * collective alloc and free) share the numbers: a rank in one arrives with
 * SYMM_COLL_SIG_HOST_CALL (cpu_host_call), and every rank in a collective
 * of that number then meets it in its bootstrap round
 * (symm_comm_meet_host_call), where all of them fail with the mismatch.  Waits poll with backoff (spin ~20 us, then sched_yield up to
 * 1 ms, then nanosleep growing to 64 us; no spinning at all when this host
 * has more ranks than CPUs) so that oversubscribed ranks still progress, and
 * end after the communicator's timeout with SYMM_ERR_TIMEOUT naming
 * the ranks that did not get there.
 *
 * Buffers.  The scratch data is cut in two halves used by seq parity, each
 * holding IN (staged send data) then OUT (two-shot's reduced chunk); the
 * halves start at 0 and at half the scratch whatever the call's size.  A rank
 * that starts collective seq has seen every rank arrive at seq - 1, so every
 * peer has finished seq - 2, the last user of this half (and of this
 * descriptor slot): staging before arriving is safe, and collectives that
 * stage need one barrier and no exit barrier.
 *
 * Zero copy.  When sendbuf lies in a rendezvoused tensor of this comm with
 * room for the data, does not overlap recvbuf, and the call sends at least
 * ZERO_COPY_MIN_BYTES, the rank publishes that tensor's group and its offset
 * instead of staging.  If every rank published the same group, peers read
 * each other's buffers in place (peer_data[r] + offset[r]) and end with an
 * exit barrier (phase 3), because a caller may rewrite sendbuf as soon as
 * the call returns.  Otherwise the ranks that did not stage copy now and
 * everybody waits for phase 2.  Two-shot all-reduce needs no exit barrier:
 * its phase 3 already follows the last read of any sendbuf, which is also
 * why it allows recvbuf to overlap sendbuf there.  Below the threshold one
 * barrier and a copy beat two barriers. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"

#define ZERO_COPY_MIN_BYTES ((size_t)64 << 10)
#define SCRATCH_ALIGN 64
#define CHUNK_ALIGN_ELEMS 16 /* two-shot chunk boundaries: whole vectors */
#define STACK_RANKS 64       /* larger worlds take their arrays from malloc */
#define REDUCE_PIECE_BYTES ((size_t)32 << 10) /* two-shot: reduce, then copy, per L1-sized piece */


enum { PHASE_ARRIVED = 1, PHASE_STAGED = 2, PHASE_DONE = 3, PHASES = 4 };

typedef struct {
  uint64_t sig;
  uint64_t group;  /* 0: this rank's send data is staged in its scratch */
  uint64_t offset; /* of sendbuf in the group's tensor on this rank */
} coll_brief_t;

typedef struct {
  uint64_t count;
  int32_t kind, dtype, op, root;
  int32_t algo;    /* all-reduce: the algorithm that runs */
} coll_detail_t;

/* What a rank publishes for the calls of one parity, in one cache line:
 * a peer's first miss on it brings the flag, the signature and, for small
 * calls, the data. */
#define INLINE_BYTES 32
typedef struct {
  _Alignas(64) _Atomic uint64_t flag; /* 4 * seq + phase of this parity's last call */
  coll_brief_t brief;
  unsigned char data[INLINE_BYTES]; /* send data of calls that fit (inline) */
} coll_slot_t;

typedef struct {
  coll_slot_t slot[2];
  _Alignas(64) coll_detail_t detail[2];
} coll_pad_t;

_Static_assert(sizeof(coll_slot_t) == 64, "a slot is one cache line");

_Static_assert(sizeof(coll_pad_t) <= SYMM_SIGNAL_PAD_BYTES, "collective pad outgrew the signal pad");

/* One call in progress. */
typedef struct {
  symm_comm_t *comm;
  const symm_coll_args_t *a;
  const symm_coll_args_t *whole; /* the call a is a slice of (messages) */
  uint64_t sig;                  /* of the whole call (every slice carries it) */
  int w, me, h;
  uint64_t seq;
  size_t esize;
  size_t out_off, half; /* IN at 0 of each half, OUT at out_off; half: bytes needed */
  size_t half_stride;   /* where the second half starts: half the scratch */
  coll_pad_t **pads;    /* [w] */
  const char **src;     /* [w] where rank r's send data is read */
  symm_tensor_t *scratch;
} coll_t;

static const char *kind_name(int kind) {
  switch (kind) {
    case SYMM_COLL_ALL_REDUCE: return "all_reduce";
    case SYMM_COLL_ALL_GATHER: return "all_gather";
    case SYMM_COLL_REDUCE_SCATTER: return "reduce_scatter";
    case SYMM_COLL_BROADCAST: return "broadcast";
    case SYMM_COLL_ALL_TO_ALL: return "all_to_all";
  }
  return "?";
}

/* auto: two-shot from 4 KiB on (2 ranks on 2 cores, f32, symmem-bench:
 * 1.0 vs 1.85 us at 4 KiB, 172 vs 381 us at 1 MiB, in place).  There are
 * no LL protocols on the CPU: what is not two-shot is one-shot. */
symm_algo_t cpu_allreduce_algo(symm_comm_t *comm, symm_algo_t asked, size_t bytes) {
  (void)comm;
  if (asked == SYMM_ALGO_AUTO)
    return bytes <= ((size_t)2 << 10) ? SYMM_ALGO_ONE_SHOT : SYMM_ALGO_TWO_SHOT;
  return asked == SYMM_ALGO_TWO_SHOT ? SYMM_ALGO_TWO_SHOT : SYMM_ALGO_ONE_SHOT;
}

static bool two_shot(const symm_coll_args_t *a) {
  return a->kind == SYMM_COLL_ALL_REDUCE && a->algo == SYMM_ALGO_TWO_SHOT;
}

static bool rank_sends(const coll_t *c, int r) {
  return c->a->kind != SYMM_COLL_BROADCAST || r == c->a->root;
}

/* ------------------------------------------------------------- waiting */

static uint64_t flag_of(const coll_t *c, int r) {
  return atomic_load_explicit(&c->pads[r]->slot[c->h].flag, memory_order_acquire);
}

static void signal_phase(coll_t *c, int phase) {
  atomic_store_explicit(&c->pads[c->me]->slot[c->h].flag, c->seq * PHASES + (uint64_t)phase,
                        memory_order_release);
}

static symm_result_t timeout_error(const coll_t *c, uint64_t target, const char *what) {
  char list[200] = "";
  size_t n = 0;
  int missing = 0;
  for (int r = 0; r < c->w; r++) {
    if (r == c->me || flag_of(c, r) >= target) continue;
    if (n + 16 < sizeof list) {
      int k = snprintf(list + n, sizeof list - n, "%s%d", missing ? ", " : "", r);
      n += k > 0 ? (size_t)k : 0;
    } else if (n + 4 < sizeof list) {
      n += (size_t)snprintf(list + n, sizeof list - n, "...");
    }
    missing++;
  }
  return symm_error(SYMM_ERR_TIMEOUT, "symm_%s #%llu: timed out after %d ms waiting for rank%s "
                    "%s to %s", kind_name(c->a->kind), (unsigned long long)c->seq,
                    symm_comm_timeout_ms(c->comm), missing > 1 ? "s" : "", list, what);
}

/* Waits until every other rank's flag reached `phase` of this call.  Peers
 * are visited from rank + 1 on, which spreads the polling across pads. */
static symm_result_t wait_phase(coll_t *c, int phase, const char *what) {
  uint64_t target = c->seq * PHASES + (uint64_t)phase;
  symm_backoff_t b;
  bool started = false;
  for (int k = 1; k < c->w; k++) {
    int r = (c->me + k) % c->w;
    if (flag_of(c, r) >= target) continue;
    if (started)
      symm_backoff_watch(&b, symm_comm_peer_pid(c->comm, r));
    else
      cpu_backoff_start(&b, c->comm, r);
    started = true;
    while (flag_of(c, r) < target) {
      if (symm_backoff_pause(&b)) continue;
      if (b.lost)
        return symm_error(SYMM_ERR_PEER_LOST, "symm_%s #%llu: rank %d (pid %d) is gone; it "
                          "did not %s", kind_name(c->a->kind), (unsigned long long)c->seq, r,
                          (int)symm_comm_peer_pid(c->comm, r), what);
      return timeout_error(c, target, what);
    }
    symm_backoff_reset(&b);
  }
  return SYMM_SUCCESS;
}

/* --------------------------------------------- descriptors, mismatches */

static void publish(coll_t *c, uint64_t group, uint64_t offset) {
  const symm_coll_args_t *a = c->a;
  coll_pad_t *p = c->pads[c->me];
  p->slot[c->h].brief = (coll_brief_t){c->sig, group, offset};
  p->detail[c->h] = (coll_detail_t){c->whole->count, (int32_t)a->kind, (int32_t)a->dtype,
                                    (int32_t)a->op, (int32_t)a->root, (int32_t)a->algo};
  signal_phase(c, PHASE_ARRIVED);
}

/* The call of detail d; with `algo`, the all-reduce algorithm too. */
static void describe(const coll_detail_t *d, bool algo, char *out, size_t cap) {
  const char *dt = symm_dtype_name((symm_dtype_t)d->dtype);
  int n = snprintf(out, cap, "symm_%s(count %llu, %s", kind_name(d->kind),
                   (unsigned long long)d->count, dt ? dt : "?");
  if (n < 0 || (size_t)n >= cap) return;
  const char *op = symm_redop_name((symm_redop_t)d->op);
  const char *an = symm_algo_name((symm_algo_t)d->algo);
  if (d->kind == SYMM_COLL_ALL_REDUCE && algo)
    snprintf(out + n, cap - (size_t)n, ", %s, algorithm %s)", op ? op : "?", an ? an : "?");
  else if (symm_coll_reduces(d->kind))
    snprintf(out + n, cap - (size_t)n, ", %s)", op ? op : "?");
  else if (d->kind == SYMM_COLL_BROADCAST)
    snprintf(out + n, cap - (size_t)n, ", root %d)", d->root);
  else
    snprintf(out + n, cap - (size_t)n, ")");
}

/* Whether some rank arrived in a host call of this number (cpu_host_call)
 * rather than a collective: every rank sees the same table once all
 * arrived, so every rank in a collective decides alike and meets it. */
static bool peer_in_host_call(const coll_t *c) {
  for (int r = 0; r < c->w; r++)
    if (c->pads[r]->slot[c->h].brief.sig == SYMM_COLL_SIG_HOST_CALL) return true;
  return false;
}

/* Every rank compares the same table against rank 0, so every rank reaches
 * the same verdict and the same message. */
static symm_result_t check_match(const coll_t *c) {
  if (peer_in_host_call(c)) return symm_comm_meet_host_call(c->comm);
  for (int r = 0; r < c->w; r++) {
    if (c->pads[r]->slot[c->h].brief.sig != SYMM_COLL_SIG_REFUSED) continue;
    return symm_error(SYMM_ERR_MISMATCH, "collective #%llu: rank %d's symm_%s failed its "
                      "argument checks there (SYMM_ERR_INVALID_ARG); no rank ran the call",
                      (unsigned long long)c->seq, r, kind_name(c->pads[r]->detail[c->h].kind));
  }
  uint64_t sig0 = c->pads[0]->slot[c->h].brief.sig;
  for (int r = 1; r < c->w; r++) {
    if (c->pads[r]->slot[c->h].brief.sig == sig0) continue;
    const coll_detail_t *d = &c->pads[r]->detail[c->h], *d0 = &c->pads[0]->detail[c->h];
    char mine[160], theirs[160];
    const bool algo = d->algo != d0->algo;
    describe(d, algo, theirs, sizeof theirs);
    describe(d0, algo, mine, sizeof mine);
    return symm_error(SYMM_ERR_MISMATCH, "collective #%llu: rank %d called %s, rank 0 called %s%s",
                      (unsigned long long)c->seq, r, theirs, mine,
                      algo ? " (set the same SYMM_ALLREDUCE_ALGO or "
                             "symm_comm_set_allreduce_algo on every rank)"
                           : "");
  }
  return SYMM_SUCCESS;
}

/* ------------------------------------------------------------- scratch */

/* Elements of each rank's two-shot chunk of n elements over w ranks. */
static size_t chunk_elems(size_t n, size_t w) {
  return symm_round_up((n + w - 1) / w, CHUNK_ALIGN_ELEMS);
}

static size_t two_shot_chunk(const coll_t *c) { return chunk_elems(c->a->count, (size_t)c->w); }

/* Bytes of one scratch half: the staged send data, then the two-shot
 * output chunk, each aligned.  The one place that sizes a half, for the
 * calls and for symm_comm_scratch_bytes. */
static size_t half_bytes(size_t send_bytes, size_t out_bytes) {
  return symm_round_up(send_bytes, SCRATCH_ALIGN) + symm_round_up(out_bytes, SCRATCH_ALIGN);
}

/* Elements [*lo, *hi) of rank r's two-shot chunk (empty for tiny counts). */
static void chunk_range(const coll_t *c, int r, size_t *lo, size_t *hi) {
  size_t cs = two_shot_chunk(c), n = c->a->count;
  *lo = (size_t)r * cs < n ? (size_t)r * cs : n;
  *hi = n - *lo < cs ? n : *lo + cs;
}

static void layout(coll_t *c) {
  size_t out = two_shot(c->a) ? two_shot_chunk(c) * c->esize : 0;
  c->out_off = symm_round_up(c->a->send_bytes, SCRATCH_ALIGN);
  c->half = half_bytes(c->a->send_bytes, out);
}

/* The halves sit at fixed places (not at multiples of this call's need),
 * so that a call of another size never lands on the half the previous call
 * may still be read from. */
static size_t half_capacity(const symm_tensor_t *s) {
  return symm_tensor_nbytes(s) / 2 & ~(size_t)(SCRATCH_ALIGN - 1);
}

static char *scratch_half(const coll_t *c, int r) {
  return (char *)symm_tensor_peer_data(c->scratch)[r] + (size_t)c->h * c->half_stride;
}

static symm_result_t attach(coll_t *c, symm_tensor_t *s) {
  c->scratch = s;
  c->half_stride = half_capacity(s);
  for (int r = 0; r < c->w; r++) {
    void *p;
    SYMM_CHECK(symm_tensor_signal_pad(s, r, &p));
    c->pads[r] = p;
  }
  return SYMM_SUCCESS;
}

/* The scratch must hold both halves.  Its size depends only on the
 * arguments, so matching ranks grow it together; the ranks first agree on
 * the arguments over the current scratch, because growing is collective and
 * ranks that disagree would otherwise wait for each other in different
 * places (one in the rendezvous, the others on the pads). */
static symm_result_t prepare_scratch(coll_t *c) {
  size_t need = 2 * c->half;
  symm_tensor_t *s = symm_comm_scratch_current(c->comm);
  if (s && half_capacity(s) >= c->half) return attach(c, s);
  if (s) {
    SYMM_CHECK(attach(c, s));
    publish(c, 0, 0);
    SYMM_CHECK(wait_phase(c, PHASE_ARRIVED, "arrive"));
    SYMM_CHECK(check_match(c));
  }
  SYMM_CHECK(symm_comm_scratch(c->comm, need ? need : 1, &s));
  return attach(c, s);
}

/* Both halves for the largest call on max_bytes: a send buffer that size
 * and, for two-shot, the output chunk of the most elements it holds (the
 * smallest dtype). */
symm_result_t cpu_scratch_bytes(symm_comm_t *comm, size_t max_bytes, size_t *bytes) {
  if (max_bytes > SIZE_MAX / 5) /* 2 halves of at most 2 x max_bytes + 256 */
    return symm_error(SYMM_ERR_INVALID_ARG, "symm_comm_scratch_bytes: %zu bytes overflow",
                      max_bytes);
  size_t most = 0;
  for (int dt = 0; dt < SYMM_DTYPE_COUNT_; dt++) {
    const size_t es = symm_dtype_size((symm_dtype_t)dt);
    const size_t half = half_bytes(max_bytes, chunk_elems(max_bytes / es, (size_t)symm_comm_size(comm)) * es);
    if (half > most) most = half;
  }
  *bytes = 2 * most;
  return SYMM_SUCCESS;
}

/* ------------------------------------------------------------ zero copy */

typedef struct {
  symm_tensor_t *t;
  uint64_t group, offset;
} zero_copy_t;

static bool overlap(const void *a, size_t an, const void *b, size_t bn) {
  uintptr_t x = (uintptr_t)a, y = (uintptr_t)b;
  return an && bn && x < y + bn && y < x + an;
}

/* Whether peers may read this rank's send data where it lies.  A broadcast
 * non-root sends nothing but must be able to map the root's buffer: it
 * qualifies through the tensor of its recvbuf. */
static zero_copy_t zero_copy_candidate(const coll_t *c) {
  zero_copy_t z = {NULL, 0, 0};
  const symm_coll_args_t *a = c->a;
  if (a->send_bytes < ZERO_COPY_MIN_BYTES) return z;
  bool sends = rank_sends(c, c->me);
  const void *ptr = sends ? a->sendbuf : a->recvbuf;
  symm_tensor_t *t;
  int rank;
  size_t off;
  /* A miss is no error worth a last-error message. */
  if (!symm_tensor_find(ptr, &t, &rank, &off)) return z;
  if (symm_tensor_comm(t) != c->comm || !symm_tensor_is_rendezvoused(t) || rank != c->me)
    return z;
  const size_t nbytes = symm_tensor_nbytes(t);
  if (sends) {
    if (off > nbytes || a->send_bytes > nbytes - off) return z;
    bool same = a->kind == SYMM_COLL_BROADCAST && a->sendbuf == a->recvbuf;
    if (!same && !two_shot(a) &&
        overlap(a->sendbuf, a->send_bytes, a->recvbuf, a->recv_bytes))
      return z;
  }
  z.t = t;
  z.group = symm_tensor_peer_sig(t);
  z.offset = off;
  return z;
}

/* ----------------------------------------------------------- operations */

static void all_reduce_one_shot(coll_t *c) {
  const symm_coll_args_t *a = c->a;
  cpu_reduce(a->recvbuf, (const void *const *)c->src, c->w, a->count, a->dtype, a->op);
}

/* Rank r reduces chunk r into its OUT, then everybody gathers the chunks,
 * starting with rank + 1's so that the ranks read different pads at once. */
static symm_result_t all_reduce_two_shot(coll_t *c) {
  const symm_coll_args_t *a = c->a;
  size_t lo, hi;
  chunk_range(c, c->me, &lo, &hi);
  for (int r = 0; r < c->w; r++) c->src[r] += lo * c->esize;
  /* My own chunk straight into recvbuf too, piece by piece while the piece
   * is still in L1, where writing recvbuf cannot touch send data not yet
   * read: recvbuf is sendbuf itself (each piece of it is read before it is
   * written) or lies apart from it. */
  char *out = scratch_half(c, c->me) + c->out_off;
  char *mine = (char *)a->recvbuf + lo * c->esize;
  bool direct = a->recvbuf == a->sendbuf ||
                !overlap(a->sendbuf, a->send_bytes, a->recvbuf, a->recv_bytes);
  size_t n = hi - lo, step = direct ? REDUCE_PIECE_BYTES / c->esize : n;
  const char *in[STACK_RANKS], **ip = c->w <= STACK_RANKS ? in : c->src;
  for (size_t p = 0; p < n; p += step) {
    size_t len = n - p < step ? n - p : step, off = p * c->esize;
    if (ip != c->src)
      for (int r = 0; r < c->w; r++) ip[r] = c->src[r] + off;
    cpu_reduce(out + off, (const void *const *)ip, c->w, len, a->dtype, a->op);
    if (direct && p + len < n) memcpy(mine + off, out + off, len * c->esize);
    if (ip == c->src)
      for (int r = 0; r < c->w; r++) ip[r] += len * c->esize;
  }
  signal_phase(c, PHASE_DONE);
  /* The last piece after the signal: peers need not wait for it. */
  if (direct && n) {
    size_t last = (n - 1) / step * step;
    memcpy(mine + last * c->esize, out + last * c->esize, (n - last) * c->esize);
  }
  SYMM_CHECK(wait_phase(c, PHASE_DONE, "reduce its chunk"));
  for (int k = 1; k <= c->w; k++) {
    int r = (c->me + k) % c->w;
    if (direct && r == c->me) continue;
    chunk_range(c, r, &lo, &hi);
    if (hi > lo)
      memcpy((char *)a->recvbuf + lo * c->esize, scratch_half(c, r) + c->out_off,
             (hi - lo) * c->esize);
  }
  return SYMM_SUCCESS;
}

static void reduce_scatter(coll_t *c) {
  const symm_coll_args_t *a = c->a;
  for (int r = 0; r < c->w; r++) c->src[r] += (size_t)c->me * a->recv_bytes;
  cpu_reduce(a->recvbuf, (const void *const *)c->src, c->w, a->count, a->dtype, a->op);
}

static void all_gather(coll_t *c) {
  size_t bytes = c->a->send_bytes;
  for (int k = 1; k <= c->w; k++) {
    int r = (c->me + k) % c->w;
    memcpy((char *)c->a->recvbuf + (size_t)r * bytes, c->src[r], bytes);
  }
}

static void all_to_all(coll_t *c) {
  size_t bytes = c->a->send_bytes / (size_t)c->w;
  for (int k = 1; k <= c->w; k++) {
    int r = (c->me + k) % c->w;
    memcpy((char *)c->a->recvbuf + (size_t)r * bytes, c->src[r] + (size_t)c->me * bytes, bytes);
  }
}

static void broadcast(coll_t *c) {
  const symm_coll_args_t *a = c->a;
  if (c->me != a->root) memcpy(a->recvbuf, c->src[a->root], a->recv_bytes);
  else if (a->recvbuf != a->sendbuf) memmove(a->recvbuf, a->sendbuf, a->recv_bytes);
}

/* ----------------------------------------------------------------- call */

/* Whether this call's send data travels in the pad slot (every rank
 * decides alike: the sizes agree, or the call is a mismatch). */
static bool inline_data(const coll_t *c) {
  return !two_shot(c->a) && c->a->send_bytes <= INLINE_BYTES;
}

/* Copies this rank's send data into its IN (or its slot, inline).  Two-shot stages only what
 * peers read: every chunk but its own, which it reduces from sendbuf. */
static void stage(coll_t *c) {
  const symm_coll_args_t *a = c->a;
  char *in = inline_data(c) ? (char *)c->pads[c->me]->slot[c->h].data : scratch_half(c, c->me);
  if (!two_shot(a)) {
    memcpy(in, a->sendbuf, a->send_bytes);
    return;
  }
  size_t lo, hi;
  chunk_range(c, c->me, &lo, &hi);
  lo *= c->esize;
  hi *= c->esize;
  memcpy(in, a->sendbuf, lo);
  memcpy(in + hi, (const char *)a->sendbuf + hi, a->send_bytes - hi);
}

static symm_result_t run(coll_t *c) {
  const symm_coll_args_t *a = c->a;
  layout(c);
  SYMM_CHECK(prepare_scratch(c));
  bool sends = rank_sends(c, c->me);
  zero_copy_t z = zero_copy_candidate(c);
  if (sends && !z.group && a->send_bytes) stage(c);
  publish(c, z.group, z.offset);
  SYMM_CHECK(wait_phase(c, PHASE_ARRIVED, "arrive"));
  SYMM_CHECK(check_match(c));
  if (!a->count) return SYMM_SUCCESS;

  /* Same table on every rank, same decision. */
  uint64_t group0 = c->pads[0]->slot[c->h].brief.group;
  bool zero_copy = group0 != 0, late = false;
  for (int r = 0; r < c->w; r++) {
    uint64_t g = c->pads[r]->slot[c->h].brief.group;
    zero_copy &= g == group0;
    late |= g != 0 && rank_sends(c, r);
  }
  if (!zero_copy && late) {
    if (sends && z.group) stage(c);
    signal_phase(c, PHASE_STAGED);
    SYMM_CHECK(wait_phase(c, PHASE_STAGED, "stage its data"));
  }
  for (int r = 0; r < c->w; r++)
    c->src[r] = zero_copy ? (const char *)symm_tensor_peer_data(z.t)[r] + c->pads[r]->slot[c->h].brief.offset
                : inline_data(c) ? (const char *)c->pads[r]->slot[c->h].data
                                 : scratch_half(c, r);
  if (!zero_copy && two_shot(a)) c->src[c->me] = a->sendbuf;
  SYMM_TRACE(COLL, "symm_%s #%llu: %s", kind_name(a->kind), (unsigned long long)c->seq,
             zero_copy ? "zero copy" : late ? "staged late" : "staged");

  switch (a->kind) {
    case SYMM_COLL_ALL_REDUCE:
      if (two_shot(a)) return all_reduce_two_shot(c);
      all_reduce_one_shot(c);
      break;
    case SYMM_COLL_REDUCE_SCATTER: reduce_scatter(c); break;
    case SYMM_COLL_ALL_GATHER: all_gather(c); break;
    case SYMM_COLL_ALL_TO_ALL: all_to_all(c); break;
    case SYMM_COLL_BROADCAST: broadcast(c); break;
  }
  if (zero_copy) {
    signal_phase(c, PHASE_DONE);
    SYMM_CHECK(wait_phase(c, PHASE_DONE, "finish reading"));
  }
  return SYMM_SUCCESS;
}

/*
 * Large all-reduces run as a sequence of slices of SYMM_HOST_SLICE_BYTES,
 * each a complete collective with its own sequence number: a slice's
 * buffers (send, recv, scratch, of every rank) stay in the caches, where a
 * whole 16 MiB call spills to DRAM (measured: 2.7x faster out of place at
 * 16 MiB on 2 ranks).  All-reduce is elementwise, so slicing changes no
 * result.  Every slice carries the whole call's signature: ranks that
 * disagree on the count fail at the first slice, before any data moves.
 */
static symm_result_t run_sliced(coll_t *c) {
  const symm_coll_args_t *a = c->a;
  /* Every rank slices alike: cpu_startup checked SYMM_HOST_SLICE_BYTES. */
  size_t slice = cpu_state(c->comm)->slice_bytes / c->esize;
  c->sig = symm_coll_signature(a);
  if (a->kind != SYMM_COLL_ALL_REDUCE || !slice || a->count <= slice) return run(c);
  symm_coll_args_t s = *a;
  for (size_t off = 0; off < a->count; off += slice) {
    s.count = a->count - off < slice ? a->count - off : slice;
    s.sendbuf = (const char *)a->sendbuf + off * c->esize;
    s.recvbuf = (char *)a->recvbuf + off * c->esize;
    s.send_bytes = s.recv_bytes = s.count * c->esize;
    if (off) s.seq = symm_comm_next_coll_seq(c->comm);
    c->a = &s;
    c->seq = s.seq;
    c->h = (int)(s.seq & 1);
    symm_result_t res = run(c);
    c->a = a;
    if (res != SYMM_SUCCESS) return res;
  }
  return SYMM_SUCCESS;
}

/* This rank's side of a call that failed its argument checks (in the core,
 * engine->abstain): it arrives with SYMM_COLL_SIG_REFUSED and leaves once every
 * rank has arrived, so that the peers see a mismatch naming it.  The peers' first
 * call makes the scratch (collectively), so a rank without one makes it as
 * a call of nothing would: the same size unless the peers' call needs more
 * than SYMM_SCRATCH_BYTES, where the rendezvous itself reports the
 * mismatch.  No buffer of the call is touched. */
static symm_result_t refuse(coll_t *c) {
  c->sig = SYMM_COLL_SIG_REFUSED;
  SYMM_CHECK(prepare_scratch(c)); /* c->half is 0: any scratch, or the smallest */
  publish(c, 0, 0);
  SYMM_CHECK(wait_phase(c, PHASE_ARRIVED, "arrive"));
  return peer_in_host_call(c) ? symm_comm_meet_host_call(c->comm) : SYMM_SUCCESS;
}

/* Host call `seq` (engine->host_call): an arrival no collective makes,
 * in the slot of its parity.  The slot is free: every rank arrived at
 * seq - 1, so none still reads what this rank published for seq - 2. */
void cpu_host_call(symm_comm_t *comm, uint64_t seq) {
  void *p;
  if (symm_tensor_signal_pad(symm_comm_scratch_current(comm), symm_comm_rank(comm), &p) !=
      SYMM_SUCCESS) {
    symm_error_clear(); /* the peers' collective then waits: no worse than no scratch */
    return;
  }
  coll_pad_t *pad = p;
  const int h = (int)(seq & 1);
  pad->slot[h].brief = (coll_brief_t){SYMM_COLL_SIG_HOST_CALL, 0, 0};
  memset(&pad->detail[h], 0, sizeof pad->detail[h]);
  atomic_store_explicit(&pad->slot[h].flag, seq * PHASES + PHASE_ARRIVED, memory_order_release);
}

/* Runs body on a frame for one call of comm. */
static symm_result_t with_frame(symm_comm_t *comm, const symm_coll_args_t *args,
                                symm_result_t (*body)(coll_t *)) {
  coll_pad_t *pads_stack[STACK_RANKS];
  const char *src_stack[STACK_RANKS];
  const int world = symm_comm_size(comm);
  coll_t c = {comm, args, args, 0, world, symm_comm_rank(comm), (int)(args->seq & 1), args->seq,
              symm_dtype_size(args->dtype), 0, 0, 0, pads_stack, src_stack, NULL};
  if (world > STACK_RANKS) {
    c.pads = malloc(sizeof *c.pads * (size_t)world);
    c.src = malloc(sizeof *c.src * (size_t)world);
    if (!c.pads || !c.src) {
      free(c.pads);
      free((void *)c.src);
      return symm_error(SYMM_ERR_NO_MEMORY, "CPU collectives: out of memory");
    }
  }
  symm_result_t res = body(&c);
  if (c.pads != pads_stack) {
    free(c.pads);
    free((void *)c.src);
  }
  return res;
}

symm_result_t cpu_abstain(symm_comm_t *comm, const symm_coll_args_t *args) {
  return with_frame(comm, args, refuse);
}

/* The dtypes and ops reached here are the core's reducible ones
 * (check_args), which cpu_reduce.c implements every one of. */
symm_result_t cpu_collective(symm_comm_t *comm, const symm_coll_args_t *args) {
  return with_frame(comm, args, run_sliced);
}
