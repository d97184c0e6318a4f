/* CPU engine: collectives over memory every rank loads and stores.
 *
 * Synchronisation.  Every call runs on the communicator's scratch tensor.
 * Each rank writes its own signal pad of it, holding:
 *   slot[seq & 1]    one cache line per parity:
 *   .flag            4 * seq + phase of this rank's last arrival (phase 1:
 *                    arrived, descriptor published, send data readable;
 *                    2: staged, only after a late staging round; 3: done,
 *                    two-shot: my chunk is reduced, zero copy: I no longer
 *                    read peers' buffers), or 4 * seq: call seq was given
 *                    up before this rank arrived.
 *   .brief           signature of the call and, for zero copy, the group
 *                    (peer_sig of the rendezvous) and offset of sendbuf.
 *   .data            send data of calls of at most INLINE_BYTES (not
 *                    two-shot): one cache line carries flag, signature and
 *                    data, so a small call costs each rank one cache-line
 *                    handoff per peer.
 *   detail[seq & 1]  the arguments, for the mismatch message.
 *   left             the last call this rank has left (returned from,
 *                    whatever the result, or given up before arriving).
 * A call synchronises by arriving (after publishing what it publishes: a
 * compare-and-swap of its own flag) and waiting until every peer's flag
 * shows that phase, once per phase.  The call is all or nothing: a rank
 * that stops waiting (its deadline, a lost peer) marks the flag of the
 * rank it waits for given up, a compare-and-swap that succeeds only while
 * that rank has not arrived; that rank's own arrival is a compare-and-swap
 * too, so it either arrives first or finds the mark and fails.  Once a
 * flag is marked no rank can see every arrival, and every rank fails (at
 * once where it reads the mark); once every rank arrived no mark can be
 * made, and every rank succeeds.  A rank that leaves a call without
 * arriving (its gate timed out) never arrives later, and its `left` tells
 * the peers waiting for it.  So no call succeeds on some ranks and fails
 * on others, and a rank resumed after its peers gave up never pairs with
 * their later calls.  Every rank publishes before it arrives and compares
 * all signatures after the first phase, so ranks that disagree all return
 * SYMM_ERR_MISMATCH before any data moves.  Calls that agree over the
 * bootstrap (barrier, rendezvous, collective alloc and free) share the
 * numbers: a rank in one arrives with SYMM_COLL_SIG_HOST_CALL
 * (cpu_host_call), and every rank in a collective of that number then
 * meets it in its bootstrap round (symm_comm_meet_host_call), where all of
 * them fail with the mismatch.  Waits spin with `pause`, then back off
 * (base/backoff.c: sched_yield up to 1 ms, then nanosleep growing to
 * 64 us; no spinning at all when this host has more ranks than the CPUs
 * its ranks run on) so that oversubscribed ranks still progress, and end
 * at the call's deadline (its operation's, the timeout from its entry:
 * one for the whole call; a wait reads the clock only after a few dozen
 * spins) with SYMM_ERR_TIMEOUT naming the ranks that did not get there.
 * Nothing on the way takes a lock or makes a system call until a wait has
 * spun for ~20 us.
 *
 * Reuse.  Call seq reuses the slot and the scratch half of call seq - 2.
 * A rank may write them only once every rank has left seq - 2 (gate):
 * known at once when every rank arrived at seq - 1 (so every rank left
 * seq - 2), else read from the peers' `left` and waited for.  A rank that
 * cannot pass the gate in time gives the call up without arriving.
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
 * ZERO_COPY_MIN_BYTES (reductions) or ZERO_COPY_MIN_MOVE_BYTES (the
 * others), the rank publishes that tensor's group and its offset
 * instead of staging.  If every rank published the same group, peers read
 * each other's buffers in place (peer_data[r] + offset[r]) and end with an
 * exit barrier (phase 3), because a caller may rewrite sendbuf as soon as
 * the call returns.  In place counts too where nobody writes a rank's send
 * data during the call: an all-gather's piece `me` of recvbuf, and an
 * all-to-all on every rank in place, which exchanges block r of rank me
 * with block me of rank r in the peers' memory (each pair splits the work;
 * every block is moved once, with no staging), published under a group of
 * its own so that it never meets ranks that pull.  Otherwise the ranks that did not stage copy now and
 * everybody waits for phase 2.  Two-shot all-reduce needs no exit barrier:
 * its phase 3 already follows the last read of any sendbuf, which is also
 * why it allows recvbuf to overlap sendbuf there.  Below the threshold one
 * barrier and a copy beat two barriers.
 *
 * Cross-memory attach (all-to-all-v: cpu_coll_v.c, the same way).  An
 * all-gather, broadcast or all-to-all whose send data lies in this rank's ordinary memory (not read in place as above),
 * read from each peer in pieces of at least CMA_MIN_BYTES, and which
 * leaves that data alone while it runs (recvbuf apart from it, or an
 * all-gather's or a broadcast's in place), publishes a group of its own
 * (per communicator, the same on every rank, never 0) and sendbuf's
 * address, on a rank whose probe (at its first such call) showed that it
 * may read every peer's memory (cpu_cma.c; SYMM_HOST_CMA=off says no).  A
 * broadcast non-root publishes it as a reader.  If every rank published it, every
 * rank can read every peer, and each reads its pieces with
 * process_vm_readv from the peer's sendbuf straight into its recvbuf: one
 * copy instead of two.  Otherwise the ranks that did not stage stage late,
 * as above: a mix is never wrong, only slower.  The call ends with the
 * exit barrier (phase 3), since a caller may rewrite sendbuf once the call
 * returns, and that barrier also carries failures.  A read can fail in
 * the middle of the call (a peer's process gone: ESRCH, also where its pid
 * is found gone just after the read; a bad address: EFAULT); the rank
 * stops reading and still arrives at phase 3, having published its errno
 * and the peer it read in its detail first.  Every rank reads every rank's
 * mark once all arrived, so all fail alike (PEER_LOST for ESRCH, SYSTEM
 * else), naming the first rank marked.  A peer that died before arriving
 * at phase 3 never arrives: the others fail in that wait with PEER_LOST
 * (its process is watched) or at the deadline, as at any phase.
 * Reductions stay staged: there every rank reads every peer's data, which
 * staged is copied once by its owner and then read where it lies, where
 * process_vm_readv would copy each piece once per reader. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_COLL
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu/cpu.h"
#include "cpu/cpu_coll_int.h"

/* Zero copy from this much send data: reductions, where every rank reads
 * every peer's whole buffer; the others (moving data), whose staged lines
 * would travel between caches twice (docs/tuning.md). */
#define ZERO_COPY_MIN_MOVE_BYTES ((size_t)8 << 10)
#define CMA_MIN_BYTES ((size_t)32 << 10)
#define CHUNK_ALIGN_ELEMS 16 /* two-shot chunk boundaries: whole vectors */
#define STACK_RANKS 64       /* larger worlds take their arrays from malloc */
#define REDUCE_PIECE_BYTES ((size_t)32 << 10) /* two-shot: reduce, then copy, per L1-sized piece */
#define SWAP_PIECE_BYTES 4096                 /* in-place all-to-all: bounce buffer on the stack */


/* auto: two-shot from 4 KiB on, where it was faster than one-shot
 * (docs/tuning.md).  There are no LL protocols on the CPU: what is not
 * two-shot is one-shot. */
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

/* Whether this rank's call is in place: its send data is where its own
 * piece of the result goes (all-gather: piece `me` of recvbuf; all-to-all,
 * broadcast: recvbuf itself). */
static bool in_place(const coll_t *c) {
  const symm_coll_args_t *a = c->a;
  switch (a->kind) {
    case SYMM_COLL_ALL_GATHER:
      return a->sendbuf == (const char *)a->recvbuf + (size_t)c->me * a->send_bytes;
    case SYMM_COLL_ALL_TO_ALL:
    case SYMM_COLL_BROADCAST: return a->sendbuf == a->recvbuf;
    default: return false;
  }
}

/* The group an in-place all-to-all publishes: never that of an
 * out-of-place one, so that ranks zero-copy together only when all of them
 * swap in place or all of them pull (never 0, which means staged). */
static uint64_t swap_group(uint64_t group) {
  uint64_t g = group ^ 0x9e3779b97f4a7c15ull;
  return g ? g : 1;
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

/* The scratch must hold both halves.  Its size depends only on the
 * arguments, so matching ranks grow it together; the ranks first agree on
 * the arguments over the current scratch, because growing is collective and
 * ranks that disagree would otherwise wait for each other in different
 * places (one in the rendezvous, the others on the pads). */
static symm_result_t prepare_scratch(coll_t *c) {
  size_t need = 2 * c->half;
  symm_tensor_t *s = symm_comm_scratch_current(c->comm);
  if (s && cpu_coll_half_capacity(s) >= c->half) return cpu_coll_attach(c, s, false);
  if (s) {
    SYMM_CHECK(cpu_coll_attach(c, s, false));
    cpu_coll_publish(c, 0, 0);
    SYMM_CHECK(cpu_coll_sync(c, PHASE_ARRIVED, "arrive"));
    SYMM_CHECK(cpu_coll_check_match(c));
  }
  SYMM_CHECK(cpu_coll_grow(c, need ? need : 1, &s));
  return cpu_coll_attach(c, s, true);
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


/* Whether peers may read this rank's send data where it lies.  A broadcast
 * non-root sends nothing but must be able to map the root's buffer: it
 * qualifies through the tensor of its recvbuf. */
static zero_copy_t zero_copy_candidate(const coll_t *c) {
  zero_copy_t z = {NULL, 0, 0};
  const symm_coll_args_t *a = c->a;
  if (a->send_bytes < (symm_coll_reduces(a->kind) ? ZERO_COPY_MIN_BYTES : ZERO_COPY_MIN_MOVE_BYTES))
    return z;
  bool sends = rank_sends(c, c->me);
  size_t off;
  symm_tensor_t *t = cpu_coll_own_tensor(c, sends ? a->sendbuf : a->recvbuf,
                                         sends ? a->send_bytes : 0, &off);
  if (!t) return z;
  /* In place, nobody writes this rank's send data during the call:
   * all-gather ranks write the other pieces of their own recvbuf, and an
   * all-to-all's pairwise swap moves each block exactly once. */
  if (sends && !in_place(c) && !two_shot(a) &&
      cpu_coll_overlap(a->sendbuf, a->send_bytes, a->recvbuf, a->recv_bytes))
    return z;
  z.t = t;
  z.group = symm_tensor_peer_sig(t);
  if (a->kind == SYMM_COLL_ALL_TO_ALL && in_place(c)) z.group = swap_group(z.group);
  z.offset = off;
  return z;
}

/* Whether a call of this kind and size reads in the peers' processes
 * (the same answer on every rank: sizes agree, or the call is a mismatch).
 * A reader's one read of a peer (its piece, an all-to-all's block) must
 * reach CMA_MIN_BYTES, below which the system call costs more than the
 * copy it saves.  A broadcast saves less: staged, the root copies once for
 * every reader, where each reader's kernel copy costs more CPU than a
 * plain one; it reads in the root's process from twice that, and only
 * while this host's ranks have a CPU each (docs/tuning.md). */
static bool cma_suits(const coll_t *c) {
  const symm_coll_args_t *a = c->a;
  const cpu_state_t *st = cpu_state(c->comm);
  switch (a->kind) {
    case SYMM_COLL_ALL_GATHER: return a->send_bytes >= CMA_MIN_BYTES;
    case SYMM_COLL_ALL_TO_ALL: return a->send_bytes / (size_t)c->w >= CMA_MIN_BYTES;
    case SYMM_COLL_BROADCAST:
      return a->send_bytes >= 2 * CMA_MIN_BYTES &&
             (!st->host_cpus || symm_comm_local_size(c->comm) <= st->host_cpus);
    default: return false; /* reductions: see the top */
  }
}

/* Whether peers may read this rank's send data in its own process
 * (cross-memory attach): a call that cma_suits, from this rank's ordinary
 * memory (not read in place: zero_copy_candidate found no group), on a
 * rank whose probe succeeded (run at its first such call).  Peers read
 * sendbuf while this rank writes recvbuf: the two lie apart, or nobody writes what is read (an
 * all-gather's piece `me` in place; a broadcast in place).  A broadcast
 * non-root sends nothing and qualifies as a reader. */
static zero_copy_t cma_candidate(const coll_t *c) {
  zero_copy_t z = {NULL, 0, 0};
  const symm_coll_args_t *a = c->a;
  const cpu_state_t *st = cpu_state(c->comm);
  if (!cma_suits(c) || !cpu_cma_ready(c->comm)) return z;
  const bool sends = rank_sends(c, c->me);
  if (sends && cpu_coll_overlap(a->sendbuf, a->send_bytes, a->recvbuf, a->recv_bytes) &&
      !(in_place(c) && a->kind != SYMM_COLL_ALL_TO_ALL))
    return z;
  z.group = st->cma_group;
  z.offset = sends ? (uint64_t)(uintptr_t)a->sendbuf : 0;
  return z;
}

/* Every sending rank's published offset leaves room for the call in the
 * tensor (the same size on every rank): a peer's pad is read, never
 * trusted.  Every rank sees the same table, so all fail alike. */
static symm_result_t check_offsets(const coll_t *c, const symm_tensor_t *t) {
  const size_t nbytes = symm_tensor_nbytes(t);
  for (int r = 0; r < c->w; r++) {
    uint64_t off = cpu_coll_brief(c, r)->offset;
    if (!rank_sends(c, r) || (off <= nbytes && c->a->send_bytes <= nbytes - off)) continue;
    return symm_error(SYMM_ERR_PROTOCOL, "symm_%s #%llu: rank %d published its send data at "
                      "offset %llu of a %zu-byte tensor, past its end; no rank ran the call",
                      cpu_coll_kind_name(c->a->kind), (unsigned long long)c->seq, r,
                      (unsigned long long)off, nbytes);
  }
  return SYMM_SUCCESS;
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
  char *out = cpu_coll_half(c, c->me) + c->out_off;
  char *mine = (char *)a->recvbuf + lo * c->esize;
  bool direct = a->recvbuf == a->sendbuf ||
                !cpu_coll_overlap(a->sendbuf, a->send_bytes, a->recvbuf, a->recv_bytes);
  size_t n = hi - lo, step = direct ? REDUCE_PIECE_BYTES / c->esize : n;
  const char *in[STACK_RANKS], **ip = c->w <= STACK_RANKS ? in : c->src;
  for (size_t p = 0; p < n; p += step) {
    size_t len = n - p < step ? n - p : step, off = p * c->esize;
    if (ip != c->src)
      for (int r = 0; r < c->w; r++) ip[r] = c->src[r] + off;
    cpu_reduce(out + off, (const void *const *)ip, c->w, len, a->dtype, a->op);
    if (direct && p + len < n) cpu_memcpy(mine + off, out + off, len * c->esize);
    if (ip == c->src)
      for (int r = 0; r < c->w; r++) ip[r] += len * c->esize;
  }
  SYMM_CHECK(cpu_coll_arrive(c, PHASE_DONE));
  /* The last piece after the arrival: peers need not wait for it. */
  if (direct && n) {
    size_t last = (n - 1) / step * step;
    cpu_memcpy(mine + last * c->esize, out + last * c->esize, (n - last) * c->esize);
  }
  SYMM_CHECK(cpu_coll_wait(c, PHASE_DONE, "reduce its chunk"));
  for (int k = 1; k <= c->w; k++) {
    int r = (c->me + k) % c->w;
    if (direct && r == c->me) continue;
    chunk_range(c, r, &lo, &hi);
    if (hi > lo)
      cpu_memcpy((char *)a->recvbuf + lo * c->esize, cpu_coll_half(c, r) + c->out_off,
                 (hi - lo) * c->esize);
  }
  return SYMM_SUCCESS;
}

static void reduce_scatter(coll_t *c) {
  const symm_coll_args_t *a = c->a;
  for (int r = 0; r < c->w; r++) c->src[r] += (size_t)c->me * a->recv_bytes;
  cpu_reduce(a->recvbuf, (const void *const *)c->src, c->w, a->count, a->dtype, a->op);
}

/* Copies len bytes at off of rank r's send data into dst: from where it
 * is mapped here, or (cross-memory attach) from r's process.  A read that
 * fails ends this rank's reads and is kept for its exit (cpu_coll_cma_finish). */
static void fetch(coll_t *c, int r, void *dst, size_t off, size_t len) {
  if (!c->cma || r == c->me) {
    cpu_memcpy(dst, c->src[r] + off, len);
    return;
  }
  if (c->read_errno) return;
  c->read_errno = cpu_cma_read(c->comm, r, dst, cpu_coll_brief(c, r)->offset + off, len);
  if (c->read_errno) c->read_peer = r;
}

static void all_gather(coll_t *c) {
  size_t bytes = c->a->send_bytes;
  for (int k = 1; k <= c->w; k++) {
    int r = (c->me + k) % c->w;
    if (r != c->me || !in_place(c))
      fetch(c, r, (char *)c->a->recvbuf + (size_t)r * bytes, 0, bytes);
  }
}

/* Exchanges a and b, n bytes, through a buffer that stays in L1: each byte
 * read once and written once where it lies. */
static void swap_bytes(char *a, char *b, size_t n) {
  _Alignas(64) char tmp[SWAP_PIECE_BYTES];
  for (size_t p = 0; p < n; p += sizeof tmp) {
    size_t len = n - p < sizeof tmp ? n - p : sizeof tmp;
    cpu_memcpy(tmp, a + p, len);
    cpu_memcpy(a + p, b + p, len);
    cpu_memcpy(b + p, tmp, len);
  }
}

/* In-place all-to-all on buffers read in place: block r of my buffer and
 * block me of rank r's are exchanged, and nothing else touches either, so
 * the pair shares the work: the lower rank swaps the first half (whole
 * cache lines), the higher the rest.  The exit barrier (phase 3) follows. */
static void all_to_all_swap(coll_t *c) {
  size_t bytes = c->a->send_bytes / (size_t)c->w;
  size_t half = symm_round_up(bytes / 2, SCRATCH_ALIGN);
  if (half > bytes) half = bytes;
  for (int k = 1; k < c->w; k++) {
    int r = (c->me + k) % c->w;
    char *mine = (char *)c->a->recvbuf + (size_t)r * bytes;
    char *theirs = (char *)c->src[r] + (size_t)c->me * bytes;
    size_t lo = c->me < r ? 0 : half, hi = c->me < r ? half : bytes;
    swap_bytes(mine + lo, theirs + lo, hi - lo);
  }
}

static void all_to_all(coll_t *c) {
  if (c->zero_copy && in_place(c)) {
    all_to_all_swap(c);
    return;
  }
  size_t bytes = c->a->send_bytes / (size_t)c->w;
  for (int k = 1; k <= c->w; k++) {
    int r = (c->me + k) % c->w;
    if (r != c->me || !in_place(c))
      fetch(c, r, (char *)c->a->recvbuf + (size_t)r * bytes, (size_t)c->me * bytes, bytes);
  }
}

static void broadcast(coll_t *c) {
  const symm_coll_args_t *a = c->a;
  if (c->me != a->root) fetch(c, a->root, a->recvbuf, 0, a->recv_bytes);
  else if (a->recvbuf != a->sendbuf) cpu_memmove(a->recvbuf, a->sendbuf, a->recv_bytes);
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
  char *in = inline_data(c) ? (char *)c->pads[c->me]->slot[c->h].data : cpu_coll_half(c, c->me);
  if (!two_shot(a)) {
    cpu_memcpy(in, a->sendbuf, a->send_bytes);
    return;
  }
  size_t lo, hi;
  chunk_range(c, c->me, &lo, &hi);
  lo *= c->esize;
  hi *= c->esize;
  cpu_memcpy(in, a->sendbuf, lo);
  cpu_memcpy(in + hi, (const char *)a->sendbuf + hi, a->send_bytes - hi);
}

/* Where rank r's send data is read this call (cross-memory attach: this
 * rank's own here; the peers' in their processes, fetch). */
static const char *source(const coll_t *c, const zero_copy_t *z, int r) {
  if (c->cma) return r == c->me ? c->a->sendbuf : NULL;
  if (c->zero_copy)
    return (const char *)symm_tensor_peer_data(z->t)[r] + cpu_coll_brief(c, r)->offset;
  return inline_data(c) ? (const char *)c->pads[r]->slot[c->h].data : cpu_coll_half(c, r);
}

static const char *path_name(const coll_t *c, bool late) {
  if (c->cma) return "cma";
  if (!c->zero_copy) return late ? "staged late" : "staged";
  return c->a->kind == SYMM_COLL_ALL_TO_ALL && in_place(c) ? "zero copy, pairwise swap"
                                                          : "zero copy";
}

static symm_result_t run(coll_t *c) {
  const symm_coll_args_t *a = c->a;
  layout(c);
  SYMM_CHECK(prepare_scratch(c));
  bool sends = rank_sends(c, c->me);
  zero_copy_t z = zero_copy_candidate(c);
  if (!z.group) z = cma_candidate(c);
  if (sends && !z.group && a->send_bytes) stage(c);
  cpu_coll_publish(c, z.group, z.offset);
  SYMM_CHECK(cpu_coll_sync(c, PHASE_ARRIVED, "arrive"));
  SYMM_CHECK(cpu_coll_check_match(c));
  if (!a->count) return SYMM_SUCCESS;

  /* Same table on every rank, same decision. */
  uint64_t group0 = cpu_coll_brief(c, 0)->group;
  bool same = group0 != 0, late = false;
  for (int r = 0; r < c->w; r++) {
    uint64_t g = cpu_coll_brief(c, r)->group;
    same &= g == group0;
    late |= g != 0 && rank_sends(c, r);
  }
  c->cma = same && group0 == cpu_state(c->comm)->cma_group;
  c->read_errno = 0;
  c->zero_copy = same && !c->cma;
  if (c->zero_copy) SYMM_CHECK(check_offsets(c, z.t));
  if (!same && late) {
    if (sends && z.group) stage(c);
    SYMM_CHECK(cpu_coll_sync(c, PHASE_STAGED, "stage its data"));
  }
  for (int r = 0; r < c->w; r++) c->src[r] = source(c, &z, r);
  if (!same && two_shot(a)) c->src[c->me] = a->sendbuf;
  SYMM_TRACE(COLL, "symm_%s #%llu: %s", cpu_coll_kind_name(a->kind), (unsigned long long)c->seq,
             path_name(c, late));

  switch (a->kind) {
    case SYMM_COLL_ALL_REDUCE:
      if (two_shot(a)) return all_reduce_two_shot(c);
      all_reduce_one_shot(c);
      break;
    case SYMM_COLL_REDUCE_SCATTER: reduce_scatter(c); break;
    case SYMM_COLL_ALL_GATHER: all_gather(c); break;
    case SYMM_COLL_ALL_TO_ALL: all_to_all(c); break;
    case SYMM_COLL_BROADCAST: broadcast(c); break;
    case SYMM_COLL_ALL_TO_ALL_V: break; /* cpu_coll_v_run, from run_sliced */
  }
  if (c->cma) return cpu_coll_cma_finish(c);
  if (c->zero_copy) SYMM_CHECK(cpu_coll_sync(c, PHASE_DONE, "finish reading"));
  return SYMM_SUCCESS;
}

/*
 * Large all-reduces run as a sequence of slices of SYMM_HOST_SLICE_BYTES,
 * each a complete collective with its own sequence number: a slice's
 * buffers (send, recv, scratch, of every rank) stay in the caches, where a
 * whole 16 MiB call spills to DRAM (docs/tuning.md).  All-reduce is elementwise, so slicing changes no
 * result.  Every slice carries the whole call's signature: ranks that
 * disagree on the count fail at the first slice, before any data moves.
 */
static symm_result_t run_sliced(coll_t *c) {
  const symm_coll_args_t *a = c->a;
  /* Every rank slices alike: cpu_startup checked SYMM_HOST_SLICE_BYTES. */
  size_t slice = cpu_state(c->comm)->slice_bytes / c->esize;
  c->sig = symm_coll_signature(a);
  if (a->kind == SYMM_COLL_ALL_TO_ALL_V) return cpu_coll_v_run(c);
  if (a->kind != SYMM_COLL_ALL_REDUCE || !slice || a->count <= slice) return run(c);
  symm_coll_args_t s = *a;
  symm_result_t res = SYMM_SUCCESS;
  for (size_t off = 0; off < a->count; off += slice) {
    /* A failed slice fails the rest unrun.  They keep their numbers, which
     * the peers count alike, and call_end gives them up; but ranks whose
     * counts differ slice differently: their mismatch, found at the first
     * slice by every rank, ends the call at that slice's number. */
    if (res == SYMM_ERR_MISMATCH) break;
    if (off) s.seq = symm_comm_next_coll_seq(c->comm);
    if (res != SYMM_SUCCESS) continue;
    s.count = a->count - off < slice ? a->count - off : slice;
    s.sendbuf = (const char *)a->sendbuf + off * c->esize;
    s.recvbuf = (char *)a->recvbuf + off * c->esize;
    s.send_bytes = s.recv_bytes = s.count * c->esize;
    c->a = &s;
    c->seq = s.seq;
    c->h = (int)(s.seq & 1);
    res = run(c);
    c->a = a;
  }
  return res;
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
  cpu_coll_publish(c, 0, 0);
  SYMM_CHECK(cpu_coll_sync(c, PHASE_ARRIVED, "arrive"));
  return cpu_coll_peer_in_host_call(c) ? symm_comm_meet_host_call(c->comm) : SYMM_SUCCESS;
}

static symm_result_t with_frame(symm_comm_t *comm, const symm_coll_args_t *args,
                                symm_result_t (*body)(coll_t *));

/* The body of a host call's arrival on the pads. */
static symm_result_t host_arrival(coll_t *c) {
  c->sig = SYMM_COLL_SIG_HOST_CALL;
  symm_tensor_t *s = symm_comm_scratch_current(c->comm);
  if (!s) return SYMM_SUCCESS;
  SYMM_CHECK(cpu_coll_attach(c, s, false));
  coll_pad_t *pad = c->pads[c->me];
  pad->slot[c->h].brief = (coll_brief_t){SYMM_COLL_SIG_HOST_CALL, 0, 0};
  memset(&pad->detail[c->h], 0, sizeof pad->detail[c->h]);
  return cpu_coll_arrive(c, PHASE_ARRIVED);
}

/* Host call `seq` (engine->host_call): an arrival no collective makes,
 * in the slot of its parity, once the gate allows (within the call's
 * deadline: the host call's own round has what is left).  A rank that
 * cannot pass the gate publishes nothing; its call_end's `left` tells the
 * peers. */
void cpu_host_call(symm_comm_t *comm, uint64_t seq) {
  symm_coll_args_t none = {.kind = SYMM_COLL_ALL_REDUCE, .seq = seq};
  symm_result_t res = with_frame(comm, &none, host_arrival);
  if (res != SYMM_SUCCESS) {
    SYMM_INFO(COLL, "host call #%llu: not announced on the pads: %s", (unsigned long long)seq,
              symm_last_error());
    symm_error_clear();
  }
}

/* engine->call_end: this rank has left every call up to `last`; its
 * pad's left says so (peers' gates read it, and a peer waiting for an
 * arrival of this rank that will not come reads it too).  The pad is the
 * engine's cached one of the current scratch (cpu_coll_attach), else it
 * is looked up, keeping the call's own message the last error. */
void cpu_call_end(symm_comm_t *comm, uint64_t last) {
  cpu_state_t *cs = cpu_state(comm);
  if (!cs) return;
  symm_tensor_t *scratch = symm_comm_scratch_current(comm);
  if (last > cs->left) cs->left = last;
  if (!scratch) return;
  void *mine = cs->pads_of == scratch ? cs->pads[symm_comm_rank(comm)] : NULL;
  if (!mine) {
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", symm_last_error());
    const symm_result_t res = symm_tensor_signal_pad(scratch, symm_comm_rank(comm), &mine);
    symm_error_restore(saved);
    if (res != SYMM_SUCCESS) return;
  }
  atomic_store_explicit(&((coll_pad_t *)mine)->left, cs->left, memory_order_release);
}

/* Runs body on a frame for one call of comm. */
static symm_result_t with_frame(symm_comm_t *comm, const symm_coll_args_t *args,
                                symm_result_t (*body)(coll_t *)) {
  const char *src_stack[STACK_RANKS];
  const int world = symm_comm_size(comm);
  coll_t c = {.comm = comm, .a = args, .whole = args, .w = world, .me = symm_comm_rank(comm),
              .h = (int)(args->seq & 1), .seq = args->seq, .esize = symm_dtype_size(args->dtype),
              .src = src_stack};
  if (world > STACK_RANKS && !(c.src = malloc(sizeof *c.src * (size_t)world)))
    return symm_error(SYMM_ERR_NO_MEMORY, "CPU collectives: out of memory");
  symm_result_t res = body(&c);
  if (c.src != src_stack) free((void *)c.src);
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
