/* All-to-all-v (any dtype: rows of a.v.row_bytes), every mode of
 * symm_v_mode_t in one kernel, one launch per call.
 *
 *  1. Each block builds its own copy of its rank's table of chunks (counts
 *     from the parameters or the device splits, checked; coll_abi.h has
 *     the layout), and stages its pieces of every chunk into this rank's
 *     staging half, at the row the chunk has in sendbuf (packed modes:
 *     packed).  Counts that are wrong stage nothing: the table says why.
 *  2. Header exchange, phase 0: every rank's table of this block, and its
 *     pieces, are there.
 *  3. If any rank's table says its counts were wrong, every rank records
 *     the lowest such rank's error and stops: all of them see the same.
 *     Else each block gathers the chunks addressed to this rank, places
 *     them in recv (mode by mode) and checks the whole placement (fits
 *     recv_rows; host counts equal the senders'), then publishes its
 *     verdict in its table.
 *  4. Header exchange, phase 1; if any rank's verdict is a refusal, every
 *     rank records the lowest such rank's and writes nothing.  So a call
 *     either moves every row on every rank or none.
 *  5. Each block pulls its pieces of the chunks addressed here from the
 *     peers' staging (its own rank's too: recv may alias send) and block 0
 *     writes out_splits_offsets.
 * The piece of chunk i that block b moves is a function of the chunk's
 * size, i and the grid alone, so the sender's block b staged exactly what
 * the receiver's block b pulls: what the exchange on channel b ordered.
 * Staging halves are reused two epochs later as in the other kernels.
 *
 * A piece of coll_kernels.cu, which includes every piece in order into its
 * one translation unit; it is not compiled on its own. */
#ifndef SYMM_COLL_A2AV_CUH
#define SYMM_COLL_A2AV_CUH

/* ----------------------------------------------------- all-to-all-v */

enum { A2AV_HOST = 0, A2AV_DEV = 1, A2AV_DEV_2D = 2, A2AV_COMBINE = 3 };
/* Chunks are cut into pieces of at least this many bytes, one block each
 * (blocks taken round-robin from the chunk's index on, so that small
 * chunks spread over the grid). */
#define A2AV_MIN_PIECE 4096u
/* A block's pieces are copied in units of this many bytes, one warp each,
 * round-robin: what a warp moves with COLL_UNROLL 16-byte loads a lane in
 * flight.  Many small pieces keep every warp busy, and so does one large
 * piece. */
#define A2AV_UNIT (32u * 16u * COLL_UNROLL)

struct a2av_piece {
  uint64_t src, dst, bytes;
};

/* This block's part of this epoch's staging half (coll_abi.h): its table
 * (in this rank's scratch; a peer's is at the same offset in the peer's)
 * and its working arrays, per chunk j: rows, source row, place, and the
 * compacted piece list; per expert: base. */
struct a2av_area {
  uint64_t stage;  /* offset of the staging half in every rank's scratch data */
  uint64_t table;  /* offset of this block's table in it */
  symm_coll_v_header_t *hdr;
  symm_coll_v_entry_t *ent;
  uint64_t *rows, *src, *dst, *base;
  a2av_piece *list;
  uint32_t chunks, ne;
};

static __device__ a2av_area a2av_area_of(const params_t &a, const coll_ctx &c) {
  a2av_area A;
  A.ne = (uint32_t)a.v.n_experts;
  A.chunks = (uint32_t)a.world * A.ne;
  A.stage = coll_stage_off(a, c);
  A.table = (uint64_t)blockIdx.x * a.v.table_bytes;
  char *mine = (char *)(uintptr_t)(a.peer_data[a.rank] + A.stage);
  A.hdr = (symm_coll_v_header_t *)(mine + A.table);
  A.ent = (symm_coll_v_entry_t *)(A.hdr + 1);
  uint64_t *plan = (uint64_t *)(mine + gridDim.x * a.v.table_bytes +
                                (uint64_t)blockIdx.x * a.v.plan_bytes);
  A.rows = plan;
  A.src = plan + A.chunks;
  A.dst = plan + 2 * (uint64_t)A.chunks;
  A.list = (a2av_piece *)(plan + 3 * (uint64_t)A.chunks);
  A.base = plan + 6 * (uint64_t)A.chunks;
  return A;
}

/* Rank r's table of this block (r's staging half of this epoch). */
static __device__ __forceinline__ uint64_t a2av_table_of(const params_t &a, const a2av_area &A,
                                                         int r) {
  return a.peer_data[r] + A.stage + A.table;
}

/* Exclusive prefix sums of get(k), k in [0, n), in that order: put(k, sum
 * of get(0 .. k-1)) for every k; returns the total (in every thread).
 * Threads take runs of consecutive k.  A barrier at the end. */
template <typename Get, typename Put>
static __device__ uint64_t a2av_scan(uint32_t n, Get get, Put put) {
  __shared__ uint64_t s_warp[32];
  const uint32_t per = (n + blockDim.x - 1) / blockDim.x;
  const uint32_t lo = threadIdx.x * per < n ? threadIdx.x * per : n;
  const uint32_t hi = lo + per < n ? lo + per : n;
  const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  uint64_t sum = 0;
  for (uint32_t k = lo; k < hi; k++) sum += get(k);
  uint64_t x = sum; /* inclusive over the warp's threads */
  for (uint32_t o = 1; o < 32; o <<= 1) {
    const uint64_t y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) s_warp[warp] = x;
  __syncthreads();
  if (warp == 0) {
    uint64_t w = lane < nwarps ? s_warp[lane] : 0;
    for (uint32_t o = 1; o < 32; o <<= 1) {
      const uint64_t y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    s_warp[lane] = w;
  }
  __syncthreads();
  uint64_t base = (warp ? s_warp[warp - 1] : 0) + x - sum;
  const uint64_t total = s_warp[nwarps - 1];
  for (uint32_t k = lo; k < hi; k++) {
    const uint64_t v = get(k);
    put(k, base);
    base += v;
  }
  __syncthreads(); /* s_warp is written by the next scan */
  return total;
}

/* ---- the sender ---- */

static __device__ __forceinline__ bool a2av_packed(const params_t &a) {
  return a.v.mode == A2AV_DEV || a.v.mode == A2AV_DEV_2D;
}

/* Chunk j (= q * ne + e) of this rank's sends as the caller gave it: rows,
 * first row in sendbuf (packed modes: none), and the index of the count
 * in the caller's array (combine's offset sits `chunks` further). */
static __device__ void a2av_send_chunk(const params_t &a, const a2av_area &A, uint32_t j,
                                       int64_t *rows, int64_t *src, uint32_t *idx) {
  const int64_t *in = (const int64_t *)(uintptr_t)a.v.in_splits;
  *src = 0;
  *idx = j;
  if (a.v.mode == A2AV_HOST) {
    *rows = (int64_t)a.v.send_counts[j];
    *src = (int64_t)a.v.send_displs[j];
  } else if (a.v.mode == A2AV_COMBINE) {
    *idx = (j % A.ne) * (uint32_t)a.world + j / A.ne;
    *rows = in[*idx];
    *src = in[A.chunks + *idx];
  } else {
    *rows = in[j];
  }
}

/* What is wrong with chunk j on its own (0: nothing) and the figures. */
static __device__ uint32_t a2av_check_chunk(const params_t &a, const a2av_area &A, uint32_t j,
                                            coll_detail *d) {
  int64_t rows, src;
  uint32_t idx;
  a2av_send_chunk(a, A, j, &rows, &src, &idx);
  d->other = 0;
  if (rows < 0) {
    d->got = idx;
    d->limit = (uint64_t)rows;
    return SYMM_COLL_WHY_NEG_COUNT;
  }
  if (rows == 0) return 0u; /* moves nothing: its offset is not looked at */
  if (src < 0) {
    d->got = idx;
    d->limit = (uint64_t)src;
    return SYMM_COLL_WHY_NEG_OFFSET;
  }
  /* Packed: each count alone within send_rows, so that their sum cannot
   * wrap (send_rows is below 2^48, gpu_coll_a2av.c); the sum is checked
   * next. */
  d->got = (uint64_t)src + (uint64_t)rows; /* both below 2^63 */
  d->limit = a.v.send_rows;
  return d->got > a.v.send_rows ? SYMM_COLL_WHY_SEND_ROWS : 0u;
}

/* Fills this block's table (and A.rows, A.src: this rank's chunks, A.dst:
 * their staged rows) with the checks' verdict in its header.  Returns
 * whether the counts are good (the same in every thread). */
static __device__ bool a2av_build_table(const params_t &a, const a2av_area &A) {
  __shared__ uint32_t s_bad;
  __shared__ coll_detail s_d;
  if (threadIdx.x == 0) s_bad = a.v.refused ? 0u : ~0u;
  __syncthreads();
  for (uint32_t j = threadIdx.x; j < A.chunks; j += blockDim.x) {
    int64_t rows = 0, src = 0;
    uint32_t idx;
    coll_detail d;
    bool bad = a.v.refused != 0;
    if (!bad) {
      a2av_send_chunk(a, A, j, &rows, &src, &idx);
      bad = a2av_check_chunk(a, A, j, &d) != 0u;
      if (bad) atomicMin(&s_bad, j);
    }
    A.rows[j] = bad ? 0 : (uint64_t)rows;
    A.src[j] = bad ? 0 : (uint64_t)src;
  }
  __syncthreads();
  const bool packed = a2av_packed(a);
  const uint64_t total = a2av_scan(
      A.chunks, [&](uint32_t j) { return A.rows[j]; },
      [&](uint32_t j, uint64_t p) {
        if (packed) A.src[j] = p;
        A.dst[j] = A.src[j];
        A.ent[j].rows = A.rows[j];
        A.ent[j].staged = A.src[j];
      });
  if (threadIdx.x == 0) {
    uint32_t why = 0;
    if (a.v.refused) {
      why = a.v.refused;
      s_d.got = a.v.data_off + a.v.send_rows * a.v.row_bytes;
      s_d.limit = a.stage_half;
    } else if (s_bad != ~0u) {
      why = a2av_check_chunk(a, A, s_bad, &s_d);
    } else if (packed && total > a.v.send_rows) {
      why = SYMM_COLL_WHY_SEND_ROWS;
      s_d.got = total;
      s_d.limit = a.v.send_rows;
    }
    s_d.why = why;
    A.hdr->why = why;
    A.hdr->zero = 0;
    A.hdr->got = why ? s_d.got : 0;
    A.hdr->limit = why ? s_d.limit : 0;
    A.hdr->rows = total;
  }
  __syncthreads();
  return s_d.why == 0u;
}

/* Block b's piece of chunk i of n bytes: [*lo, *lo + *len), false if it
 * has none.  A function of (n, i, grid) alone: the sender and every
 * receiver cut a chunk alike. */
static __device__ __forceinline__ bool a2av_piece_of(uint64_t n, uint32_t i, uint64_t *lo,
                                                     uint64_t *len) {
  if (n == 0) return false;
  const uint32_t G = gridDim.x;
  const uint32_t j = (blockIdx.x + G - i % G) % G;
  uint64_t k = (n + A2AV_MIN_PIECE - 1) / A2AV_MIN_PIECE;
  if (k > G) k = G;
  if (j >= k) return false;
  const uint64_t per = ((n + k - 1) / k + 15) & ~(uint64_t)15;
  const uint64_t l = (uint64_t)j * per;
  if (l >= n) return false;
  *lo = l;
  *len = n - l < per ? n - l : per;
  return true;
}

/* Compacts this block's pieces, k in [0, n) in that order, into A.list
 * (piece(k, &p) says whether k has one and fills it); returns how many. */
template <typename Piece>
static __device__ uint32_t a2av_list(const a2av_area &A, uint32_t n, Piece piece) {
  a2av_piece p;
  return (uint32_t)a2av_scan(
      n, [&](uint32_t k) { return (uint64_t)piece(k, &p); },
      [&](uint32_t k, uint64_t at) {
        if (piece(k, &p)) A.list[at] = p;
      });
}

/* Copies the n pieces of A.list in units of A2AV_UNIT: unit u of the
 * pieces laid end to end goes to warp u % warps. */
static __device__ void a2av_copy_list(const a2av_area &A, uint32_t n, bool vec) {
  const uint32_t lane = threadIdx.x & 31u, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  uint32_t w0 = 0; /* the warp that takes the current piece's first unit */
  for (uint32_t m = 0; m < n; m++) {
    const a2av_piece p = A.list[m];
    const uint64_t units = (p.bytes + A2AV_UNIT - 1) / A2AV_UNIT;
    for (uint64_t u = (warp + nw - w0) % nw; u < units; u += nw) {
      const uint64_t off = u * A2AV_UNIT;
      const uint64_t len = p.bytes - off < A2AV_UNIT ? p.bytes - off : A2AV_UNIT;
      coll_copy_by((char *)(uintptr_t)(p.dst + off), (const char *)(uintptr_t)(p.src + off), len,
                   vec, lane, 32u);
    }
    w0 = (uint32_t)((w0 + units) % nw);
  }
}

/* Step 1: the table, and this block's pieces of this rank's chunks into
 * its staging (each at its sendbuf row). */
static __device__ void a2av_send(const params_t &a, const a2av_area &A) {
  if (!a2av_build_table(a, A)) return;
  const uint64_t rb = a.v.row_bytes;
  const char *send = (const char *)(uintptr_t)a.send;
  char *staged = (char *)(uintptr_t)(a.peer_data[a.rank] + A.stage + a.v.data_off);
  const uint32_t n = a2av_list(A, A.chunks, [&](uint32_t j, a2av_piece *p) {
    uint64_t lo, len;
    if (!a2av_piece_of(A.rows[j] * rb, j, &lo, &len)) return false;
    p->src = (uint64_t)(uintptr_t)(send + A.src[j] * rb + lo);
    p->dst = (uint64_t)(uintptr_t)(staged + A.dst[j] * rb + lo);
    p->bytes = len;
    return true;
  });
  a2av_copy_list(A, n, a.vec != 0);
}

/* Every block of this rank has staged (read send and in_splits) before any
 * block goes on to write recv and out_splits, which overlap them: blocks
 * are counted in a local word of the pad, the last one resets the count
 * and marks the epoch passed.  A timeout is recorded and fails fast. */
static __device__ void a2av_local_barrier(const params_t &a, coll_ctx &c) {
  __shared__ int s_late;
  __syncthreads();
  if (threadIdx.x == 0) {
    s_late = 0;
    volatile uint32_t *w = coll_local_words(a);
    __threadfence();
    if (c.fail_fast) {
      s_late = 1;
    } else if (atomicAdd((uint32_t *)w + SYMM_COLL_WORD_ORDER_COUNT, 1u) == gridDim.x - 1) {
      w[SYMM_COLL_WORD_ORDER_COUNT] = 0u; /* every block has counted */
      __threadfence();
      w[SYMM_COLL_WORD_ORDER_PASSED] = c.e;
    } else {
      unsigned spins = 0;
      while (w[SYMM_COLL_WORD_ORDER_PASSED] != c.e)
        if ((++spins & 63u) == 0 && coll_expired(a, c)) {
          coll_record(a, c, SYMM_DEV_ERR_TIMEOUT, (uint32_t)a.rank);
          s_late = 1;
          break;
        }
    }
    __threadfence();
  }
  __syncthreads();
  if (s_late) c.fail_fast = true;
}

/* ---- the receiver ---- */

/* What a rank found wrong, as the error record takes it. */
struct a2av_report {
  uint32_t code, peer;
  coll_detail d;
};

/* The lowest rank whose table of this block flags a refusal: its own
 * counts (verdict false, after phase 0) or its verdict on what it receives
 * (true, after phase 1); false if none.  Volatile loads: the same lines
 * were read before the second exchange. */
static __device__ bool a2av_first_flagged(const params_t &a, const a2av_area &A, bool verdict,
                                          a2av_report *r) {
  __shared__ uint32_t s_first;
  __shared__ a2av_report s_r;
  if (threadIdx.x == 0) s_first = ~0u;
  __syncthreads();
  const int t = (int)threadIdx.x;
  uint4 x = make_uint4(0, 0, 0, 0), y = x;
  if (t < a.world) {
    const uint64_t h = a2av_table_of(a, A, t) + (verdict ? 32u : 0u);
    x = coll_ld_v4(h);
    y = coll_ld_v4(h + 16u);
    if (x.x) atomicMin(&s_first, (uint32_t)t);
  }
  __syncthreads();
  if (t < a.world && (uint32_t)t == s_first) {
    /* sender: {why, 0, got}, {limit, rows}; verdict: {why, code, peer,
     * other}, {got, limit} */
    s_r.peer = verdict ? x.z : (uint32_t)t;
    s_r.code = verdict ? x.y : SYMM_COLL_ERR_INVALID_ARG;
    s_r.d.why = x.x;
    s_r.d.other = verdict ? x.w : 0u;
    s_r.d.got = verdict ? ((uint64_t)y.y << 32 | y.x) : ((uint64_t)x.w << 32 | x.z);
    s_r.d.limit = verdict ? ((uint64_t)y.w << 32 | y.z) : ((uint64_t)y.y << 32 | y.x);
  }
  __syncthreads();
  const bool found = s_first != ~0u;
  if (found) *r = s_r;
  __syncthreads();
  return found;
}

/* The chunks addressed to this rank: j = s * ne + e from source s (its
 * chunk me * ne + e), rows and staged row into A.rows, A.src. */
static __device__ void a2av_gather(const params_t &a, const a2av_area &A) {
  const uint32_t me = (uint32_t)a.rank;
  for (uint32_t j = threadIdx.x; j < A.chunks; j += blockDim.x) {
    const uint32_t s = j / A.ne, e = j % A.ne;
    const symm_coll_v_entry_t *ent =
        (const symm_coll_v_entry_t *)(uintptr_t)(a2av_table_of(a, A, (int)s) +
                                                 sizeof(symm_coll_v_header_t)) +
        (me * A.ne + e);
    A.rows[j] = ent->rows;
    A.src[j] = ent->staged;
  }
  __syncthreads();
}

/* 2-D placement: expert e's block starts at B_e, the sum of the earlier
 * experts' totals each rounded up to major_align (a multiple of it, since
 * they all are), and holds sources 0, 1, ... in order.  Scan in
 * expert-major order k = e * W + s, then per expert the aligned starts. */
static __device__ void a2av_place_2d(const params_t &a, const a2av_area &A) {
  const uint32_t W = (uint32_t)a.world, ne = A.ne;
  const uint64_t align = a.v.major_align ? a.v.major_align : 1;
  const uint64_t total = a2av_scan(
      A.chunks, [&](uint32_t k) { return A.rows[(k % W) * ne + k / W]; },
      [&](uint32_t k, uint64_t p) { A.dst[(k % W) * ne + k / W] = p; });
  /* A.dst[e] (source 0 of expert e) is where expert e starts unpadded. */
  a2av_scan(
      ne,
      [&](uint32_t e) {
        const uint64_t t = (e + 1 < ne ? A.dst[e + 1] : total) - A.dst[e];
        return (t + align - 1) / align * align;
      },
      [&](uint32_t e, uint64_t b) { A.base[e] = b - A.dst[e]; });
  for (uint32_t j = threadIdx.x; j < A.chunks; j += blockDim.x) A.dst[j] += A.base[j % ne];
  __syncthreads();
}

/* A.dst: where each incoming chunk goes in recv (rows). */
static __device__ void a2av_place(const params_t &a, const a2av_area &A) {
  if (a.v.mode == A2AV_HOST) {
    for (uint32_t j = threadIdx.x; j < A.chunks; j += blockDim.x) A.dst[j] = a.v.recv_displs[j];
    __syncthreads();
  } else if (a.v.mode == A2AV_DEV_2D) {
    a2av_place_2d(a, A);
  } else { /* packed in source-rank order, experts in order within */
    a2av_scan(
        A.chunks, [&](uint32_t j) { return A.rows[j]; },
        [&](uint32_t j, uint64_t p) { A.dst[j] = p; });
  }
}

/* This rank's verdict on the placement: host counts that differ from the
 * senders' (the lowest source), else rows past recv_rows (how many rows
 * it needs, the lowest source that does not fit); why 0 when all is well.
 * An empty chunk writes nothing, wherever it is placed (an empty expert's
 * aligned block may start past the end). */
static __device__ void a2av_verdict(const params_t &a, const a2av_area &A, a2av_report *r) {
  __shared__ uint32_t s_count, s_fit;
  __shared__ unsigned long long s_need;
  if (threadIdx.x == 0) s_count = s_fit = ~0u, s_need = 0;
  __syncthreads();
  for (uint32_t j = threadIdx.x; j < A.chunks; j += blockDim.x) {
    const uint32_t s = j / A.ne;
    const uint64_t end = A.dst[j] + A.rows[j];
    if (a.v.mode == A2AV_HOST && A.rows[j] != a.v.recv_counts[s]) atomicMin(&s_count, s);
    if (A.rows[j] && end > a.v.recv_rows) atomicMin(&s_fit, s);
    if (A.rows[j]) atomicMax(&s_need, (unsigned long long)end);
  }
  __syncthreads();
  r->code = SYMM_COLL_ERR_INVALID_ARG;
  r->peer = (uint32_t)a.rank;
  r->d.why = 0;
  if (s_count != ~0u) {
    r->code = (uint32_t)SYMM_DEV_ERR_MISMATCH;
    r->peer = s_count;
    r->d = coll_detail{SYMM_COLL_WHY_COUNT, (uint32_t)a.rank, A.rows[s_count],
                       a.v.recv_counts[s_count]};
  } else if (s_fit != ~0u) {
    r->d = coll_detail{SYMM_COLL_WHY_RECV_ROWS, s_fit, s_need, a.v.recv_rows};
  }
  __syncthreads();
}

/* This block's verdict into its table, for the peers after phase 1. */
static __device__ void a2av_publish(const a2av_area &A, const a2av_report &r) {
  if (threadIdx.x != 0) return;
  const uint64_t h = (uint64_t)(uintptr_t)A.hdr + 32u;
  coll_st_v4(h, r.d.why, r.code, r.peer, r.d.other);
  coll_st_v4(h + 16u, (uint32_t)r.d.got, (uint32_t)(r.d.got >> 32), (uint32_t)r.d.limit,
             (uint32_t)(r.d.limit >> 32));
}

/* out_splits_offsets (block 0, device modes): [0][i] rows, [1][i] first
 * row, i in the mode's order. */
static __device__ void a2av_write_splits(const params_t &a, const a2av_area &A) {
  int64_t *out = (int64_t *)(uintptr_t)a.v.out_splits;
  const uint32_t W = (uint32_t)a.world, n = A.chunks;
  if (a.v.mode == A2AV_HOST || !out) return;
  for (uint32_t j = threadIdx.x; j < n; j += blockDim.x) {
    const uint32_t s = j / A.ne, e = j % A.ne;
    const uint32_t i = a.v.mode == A2AV_DEV_2D ? e * W + s : j;
    out[i] = (int64_t)A.rows[j];
    out[n + i] = (int64_t)A.dst[j];
  }
}

/* Step 5: this block's pieces of the chunks addressed here, pulled from
 * every source's staging (starting with the next rank, so that ranks pull
 * from different peers at once) into recv. */
static __device__ void a2av_pull(const params_t &a, const a2av_area &A) {
  const uint64_t rb = a.v.row_bytes;
  const uint32_t W = (uint32_t)a.world, me = (uint32_t)a.rank;
  char *recv = (char *)(uintptr_t)a.recv;
  const uint32_t n = a2av_list(A, A.chunks, [&](uint32_t k, a2av_piece *p) {
    const uint32_t s = (me + 1 + k / A.ne) % W, e = k % A.ne, j = s * A.ne + e;
    uint64_t lo, len;
    if (!a2av_piece_of(A.rows[j] * rb, me * A.ne + e, &lo, &len)) return false;
    p->src = a.peer_data[s] + A.stage + a.v.data_off + A.src[j] * rb + lo;
    p->dst = (uint64_t)(uintptr_t)(recv + A.dst[j] * rb + lo);
    p->bytes = len;
    return true;
  });
  a2av_copy_list(A, n, a.vec != 0);
  if (blockIdx.x == 0) a2av_write_splits(a, A);
}

/* Steps 3 to 5, after phase 0 went well.  A refusal is recorded by block
 * 0 alone (every block finds the same). */
static __device__ void a2av_receive(const params_t &a, coll_ctx &c, const a2av_area &A) {
  a2av_report r;
  if (a2av_first_flagged(a, A, false, &r)) {
    if (blockIdx.x == 0 && threadIdx.x == 0) coll_record(a, c, r.code, r.peer, &r.d);
    return;
  }
  a2av_gather(a, A);
  a2av_place(a, A);
  a2av_verdict(a, A, &r);
  a2av_publish(A, r);
  if (coll_exchange(a, c, 1) != CTX_OK) return;
  if (a2av_first_flagged(a, A, true, &r)) {
    if (blockIdx.x == 0 && threadIdx.x == 0) coll_record(a, c, r.code, r.peer, &r.d);
    return;
  }
  a2av_pull(a, A);
}

/* Two blocks per SM: the ordered mode waits for every block of its own
 * rank, so the grids of ranks that share a GPU must be resident together
 * (at most 240 blocks, 3 ranks of 80; 264 fit an H100's 132 SMs). */
extern "C" __global__ void __launch_bounds__(SYMM_COLL_THREADS, 2)
    symm_coll_all_to_all_v(const params_t a) {
  coll_after_prior_kernel();
  coll_ctx c = coll_begin(a, true);
  const a2av_area A = a2av_area_of(a, c);
  if (!c.fail_fast) a2av_send(a, A);
  if (a.v.ordered) a2av_local_barrier(a, c);
  if (coll_exchange(a, c, 0) == CTX_OK) a2av_receive(a, c, A);
  coll_end(a, c);
}

#endif /* SYMM_COLL_A2AV_CUH */
