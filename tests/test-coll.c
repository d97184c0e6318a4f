/* Collectives on the host backend, in real processes: every op x dtype x
 * reduction against a reference computed here from deterministic per-rank
 * data, at odd sizes and world sizes 2 to 8; buffers in ordinary memory, in
 * place on a symmetric tensor, read in place from a symmetric tensor (zero
 * copy) and mixed; rounding of f16/bf16; mismatched calls, a rank that
 * never arrives, count 0 and bad arguments. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include "symm_test_access.h" /* the scratch-size test */
#include "float_bits.h"
#include "harness.h"

static symm_comm_t *init_comm(void) {
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  return comm;
}

/* ------------------------------------------------- reference arithmetic */
/* Deliberately unlike the library's bit tricks: frexp/rint on doubles
 * (the default rounding mode is to nearest, ties to even).  The test data
 * stays in the normal range of both formats. */

/* Rounds a finite, non-zero normal value to `digits` significant bits. */
static double round_digits(double v, int digits, int *exp2) {
  int e;
  double m = frexp(v, &e); /* v = m * 2^e, 0.5 <= |m| < 1 */
  double q = rint(ldexp(m, digits));
  *exp2 = e - digits;
  return q;
}

static uint16_t ref_to_bf16(float f) {
  if (isnan(f)) return 0x7fc0;
  if (f == 0 || isinf(f)) return (uint16_t)(bits_of(f) >> 16);
  int e;
  double q = round_digits(f, 8, &e);
  float r = (float)ldexp(q, e);
  return (uint16_t)(bits_of(r) >> 16);
}

static float ref_from_bf16(uint16_t h) { return f32_of_bits((uint32_t)h << 16); }

static uint16_t ref_to_f16(float f) {
  uint16_t sign = signbit(f) ? 0x8000 : 0;
  if (isnan(f)) return 0x7e00;
  double a = fabs((double)f);
  if (a == 0) return sign;
  int e;
  double q = round_digits(a, 11, &e); /* a ~ q * 2^e, 1024 <= q <= 2048 */
  if (q == 2048) {
    q = 1024;
    e++;
  }
  int biased = e + 10 + 15;
  if (biased >= 31) return sign | 0x7c00;
  ASSERT(biased >= 1); /* no subnormals in the generated data */
  return (uint16_t)(sign | (biased << 10) | ((int)q - 1024));
}

static float ref_from_f16(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
  return (float)((h & 0x8000) ? -v : v);
}

/* FP8, independently of the library's arithmetic: a code's value from the
 * formula, and a value's code by searching every finite code for the
 * nearest (ties to the even code), saturating beyond the largest. */
typedef struct {
  int mbits, bias;
  unsigned max_finite, nan;
} ref_fp8_t;
static const ref_fp8_t ref_e4m3 = {3, 7, 0x7e, 0x7f}, ref_e5m2 = {2, 15, 0x7b, 0x7e};

static double ref_fp8_mag(unsigned code, const ref_fp8_t *f) {
  int e = (int)(code >> f->mbits), m = (int)(code & ((1u << f->mbits) - 1));
  return e == 0 ? ldexp(m, 1 - f->bias - f->mbits)
                : ldexp((1 << f->mbits) + m, e - f->bias - f->mbits);
}

static double ref_from_fp8(uint8_t b, const ref_fp8_t *f) {
  unsigned code = b & 0x7fu;
  double v = code > f->max_finite ? (f == &ref_e5m2 && code == 0x7c ? INFINITY : NAN)
                                  : ref_fp8_mag(code, f);
  return b & 0x80 ? -v : v;
}

static uint8_t ref_to_fp8(float x, const ref_fp8_t *f) {
  uint8_t sign = signbit(x) ? 0x80 : 0;
  if (isnan(x)) return (uint8_t)(sign | f->nan);
  double a = fabs((double)x);
  /* The codes' values grow with the code: the largest code not above a,
   * then the nearer of it and the next (ties: the even code). */
  unsigned lo = 0, hi = f->max_finite;
  while (lo < hi) {
    unsigned mid = (lo + hi + 1) / 2;
    if (ref_fp8_mag(mid, f) <= a) lo = mid;
    else hi = mid - 1;
  }
  unsigned best = lo;
  if (lo < f->max_finite) {
    double below = a - ref_fp8_mag(lo, f), above = ref_fp8_mag(lo + 1, f) - a;
    if (above < below || (above == below && (lo & 1))) best = lo + 1;
  }
  return (uint8_t)(sign | best);
}

/* ------------------------------------------------------------ test data */

static uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

static bool is_float(symm_dtype_t dt) {
  return dt == SYMM_DTYPE_F16 || dt == SYMM_DTYPE_BF16 || dt == SYMM_DTYPE_F32 ||
         dt == SYMM_DTYPE_F64 || dt == SYMM_DTYPE_F8E4M3 || dt == SYMM_DTYPE_F8E5M2;
}

static bool is_signed(symm_dtype_t dt) {
  return dt == SYMM_DTYPE_I8 || dt == SYMM_DTYPE_I16 || dt == SYMM_DTYPE_I32 ||
         dt == SYMM_DTYPE_I64;
}

/* Element i of a float dtype, exactly (every format fits a double). */
static double load_f(const void *buf, symm_dtype_t dt, size_t i) {
  const char *p = (const char *)buf + i * symm_dtype_size(dt);
  uint16_t u;
  float f;
  double d;
  switch (dt) {
    case SYMM_DTYPE_F32: memcpy(&f, p, 4); return f;
    case SYMM_DTYPE_F64: memcpy(&d, p, 8); return d;
    case SYMM_DTYPE_BF16: memcpy(&u, p, 2); return ref_from_bf16(u);
    case SYMM_DTYPE_F16: memcpy(&u, p, 2); return ref_from_f16(u);
    case SYMM_DTYPE_F8E4M3: return ref_from_fp8((uint8_t)*p, &ref_e4m3);
    default: return ref_from_fp8((uint8_t)*p, &ref_e5m2);
  }
}

/* Stores v (already rounded to f32, or f64 for f64) as dtype dt. */
static void store_f(void *buf, symm_dtype_t dt, size_t i, double v) {
  char *p = (char *)buf + i * symm_dtype_size(dt);
  float f = (float)v;
  uint16_t u;
  uint8_t b;
  switch (dt) {
    case SYMM_DTYPE_F32: memcpy(p, &f, 4); return;
    case SYMM_DTYPE_F64: memcpy(p, &v, 8); return;
    case SYMM_DTYPE_BF16: u = ref_to_bf16(f); memcpy(p, &u, 2); return;
    case SYMM_DTYPE_F16: u = ref_to_f16(f); memcpy(p, &u, 2); return;
    case SYMM_DTYPE_F8E4M3: b = ref_to_fp8(f, &ref_e4m3); memcpy(p, &b, 1); return;
    default: b = ref_to_fp8(f, &ref_e5m2); memcpy(p, &b, 1); return;
  }
}

/* Rank `rank`'s n elements for the call with this salt.  Floats: for
 * products, factors that every format holds exactly (so only the final
 * rounding differs between formats); else values in the normal range of
 * the format (FP8: any finite code, so sums saturate too).  Integers: the
 * whole range, so that sums and products wrap. */
static void gen(void *buf, symm_dtype_t dt, symm_redop_t op, size_t n, int rank, uint64_t salt) {
  static const double factors[] = {0.5, 0.75, 1, 1.25, 1.5, 2};
  size_t es = symm_dtype_size(dt);
  for (size_t i = 0; i < n; i++) {
    uint64_t h = mix64(((uint64_t)rank << 48) ^ (i * 0x2545f4914f6cdd1dull) ^ salt);
    char *p = (char *)buf + i * es;
    if (!is_float(dt)) {
      memcpy(p, &h, es);
    } else if (op == SYMM_REDUCE_PROD) {
      store_f(buf, dt, i, (h & 1 ? -1 : 1) * factors[(h >> 1) % 6]);
    } else if (dt == SYMM_DTYPE_F8E4M3 || dt == SYMM_DTYPE_F8E5M2) {
      uint8_t code = (uint8_t)h, mag = code & 0x7f;
      if (dt == SYMM_DTYPE_F8E4M3 && mag == 0x7f) code ^= 1;
      if (dt == SYMM_DTYPE_F8E5M2 && mag > 0x7b) code = (uint8_t)((code & 0x80) | 0x7b);
      *p = (char)code;
    } else if (dt == SYMM_DTYPE_F32 || dt == SYMM_DTYPE_F64) {
      store_f(buf, dt, i, (double)((int64_t)(h % 200001) - 100000) / 64.0);
    } else {
      double v = (double)((int64_t)(h % 4001) - 2000) / 8.0;
      store_f(buf, dt, i, v == 0 ? 0.125 : v);
    }
  }
}

/* The library's order and precision: f64 in double, every other float in
 * f32, rounded once at the end; avg divides the sum by w. */
static double ref_float(void **in, int w, size_t at, symm_dtype_t dt, symm_redop_t op) {
  const bool dbl = dt == SYMM_DTYPE_F64;
  double acc = load_f(in[0], dt, at);
  for (int r = 1; r < w; r++) {
    double v = load_f(in[r], dt, at), x;
    switch (op) {
      case SYMM_REDUCE_MIN: x = v < acc ? v : acc; break;
      case SYMM_REDUCE_MAX: x = v > acc ? v : acc; break;
      case SYMM_REDUCE_PROD: x = dbl ? acc * v : (double)((float)acc * (float)v); break;
      default: x = dbl ? acc + v : (double)((float)acc + (float)v); break;
    }
    acc = x;
  }
  if (op == SYMM_REDUCE_AVG) acc = dbl ? acc / w : (double)((float)acc / (float)w);
  return acc;
}

/* Integers: sums and products modulo 2^bits, min/max by the type's sign,
 * avg the wrapped sum (read with the type's sign) divided by w, truncated. */
static uint64_t ref_int(void **in, int w, size_t at, symm_dtype_t dt, symm_redop_t op) {
  const size_t es = symm_dtype_size(dt);
  const unsigned bits = (unsigned)(8 * es);
  const uint64_t mask = bits == 64 ? ~0ull : (1ull << bits) - 1;
  const bool sgn = is_signed(dt);
  uint64_t acc = 0;
  for (int r = 0; r < w; r++) {
    uint64_t v = 0;
    memcpy(&v, (char *)in[r] + at * es, es);
    /* Sign-extended views for comparisons. */
    int64_t sv = bits == 64 ? (int64_t)v : (int64_t)(v << (64 - bits)) >> (64 - bits);
    int64_t sa = bits == 64 ? (int64_t)acc : (int64_t)(acc << (64 - bits)) >> (64 - bits);
    if (r == 0) acc = v;
    else if (op == SYMM_REDUCE_MIN) acc = (sgn ? sv < sa : v < acc) ? v : acc;
    else if (op == SYMM_REDUCE_MAX) acc = (sgn ? sv > sa : v > acc) ? v : acc;
    else if (op == SYMM_REDUCE_PROD) acc = (acc * v) & mask;
    else acc = (acc + v) & mask;
  }
  if (op == SYMM_REDUCE_AVG) {
    int64_t sa = bits == 64 ? (int64_t)acc : (int64_t)(acc << (64 - bits)) >> (64 - bits);
    acc = (sgn ? (uint64_t)(sa / w) : acc / (uint64_t)w) & mask;
  }
  return acc;
}

/* out[i] = in[0][first + i] op in[1][first + i] ..., in rank order. */
static void ref_reduce(void *out, void **in, int w, size_t first, size_t n, symm_dtype_t dt,
                       symm_redop_t op) {
  const size_t es = symm_dtype_size(dt);
  for (size_t i = 0; i < n; i++) {
    if (is_float(dt)) {
      store_f(out, dt, i, ref_float(in, w, first + i, dt, op));
    } else {
      uint64_t v = ref_int(in, w, first + i, dt, op);
      memcpy((char *)out + i * es, &v, es);
    }
  }
}

/* ------------------------------------------------------- one checked call */

typedef enum { P_MALLOC, P_IN_PLACE, P_SYMMETRIC, P_MIXED, P_COUNT } placement_t;
static const char *const placement_names[P_COUNT] = {"malloc", "in place", "symmetric", "mixed"};

typedef enum { K_ALL_REDUCE, K_REDUCE_SCATTER, K_ALL_GATHER, K_BROADCAST, K_ALL_TO_ALL, K_COUNT } kind_t;
static const char *const kind_names[K_COUNT] = {"all_reduce", "reduce_scatter", "all_gather",
                                                "broadcast", "all_to_all"};

typedef struct {
  symm_comm_t *comm;
  int rank, size;
  symm_tensor_t *sym; /* u8 tensor, room for the largest call */
  uint64_t salt;
  int calls;
} job_t;

static size_t max_bytes(int w) { return (size_t)65539 * 8 * (size_t)w; }

static symm_result_t call(job_t *j, kind_t k, const void *send, void *recv, size_t count,
                          symm_dtype_t dt, symm_redop_t op, int root) {
  switch (k) {
    case K_ALL_REDUCE: return symm_all_reduce(j->comm, send, recv, count, dt, op, NULL);
    case K_REDUCE_SCATTER: return symm_reduce_scatter(j->comm, send, recv, count, dt, op, NULL);
    case K_ALL_GATHER: return symm_all_gather(j->comm, send, recv, count, dt, NULL);
    case K_BROADCAST: return symm_broadcast(j->comm, send, recv, count, dt, root, NULL);
    default: return symm_all_to_all(j->comm, send, recv, count, dt, NULL);
  }
}

static void check_case(job_t *j, kind_t k, symm_dtype_t dt, symm_redop_t op, size_t count,
                       placement_t pl, symm_algo_t algo) {
  int w = j->size, me = j->rank;
  size_t es = symm_dtype_size(dt);
  size_t send_n = count * (k == K_REDUCE_SCATTER || k == K_ALL_TO_ALL ? (size_t)w : 1);
  size_t recv_n = count * (k == K_ALL_GATHER || k == K_ALL_TO_ALL ? (size_t)w : 1);
  int root = (int)(j->salt % (uint64_t)w);
  uint64_t salt = ++j->salt * 0x100000001b3ull;
  /* Offsets differ per rank (and are not 16-byte aligned on odd ranks). */
  char *sym = (char *)symm_tensor_data(j->sym) + 8 * (size_t)(me + 1);
  char *heap_send = malloc(send_n * es), *heap_recv = malloc(recv_n * es);
  ASSERT(heap_send && heap_recv);
  char *send = heap_send, *recv = heap_recv;
  if (pl == P_IN_PLACE) {
    send = recv = sym;
    if (k == K_ALL_GATHER) send = sym + (size_t)me * count * es;    /* NCCL's in place */
    if (k == K_REDUCE_SCATTER) recv = sym + (size_t)me * count * es;
  } else if (pl == P_SYMMETRIC || (pl == P_MIXED && me == 0)) {
    send = sym;
  }
  memset(recv, 0xab, recv_n * es);
  bool sends = k != K_BROADCAST || me == root;
  if (sends) gen(send, dt, op, send_n, me, salt);
  /* A broadcast's non-root sendbuf is never read: NULL must do. */
  const void *send_arg = !sends && pl == P_MALLOC ? NULL : send;
  if (k == K_ALL_REDUCE) ASSERT_OK(symm_comm_set_allreduce_algo(j->comm, algo));

  symm_result_t res = call(j, k, send_arg, recv, count, dt, op, root);
  if (res != SYMM_SUCCESS)
    TEST_FAIL_("rank %d: %s %s %s count %zu %s algo %s -> %s (%s)", me, kind_names[k],
               symm_dtype_name(dt), symm_redop_name(op), count, placement_names[pl],
               symm_algo_name(algo), symm_strerror(res), symm_last_error());

  /* Everybody's data, then what this rank must have received. */
  void **in = calloc((size_t)w, sizeof *in);
  char *want = malloc(recv_n * es);
  ASSERT(in && want);
  for (int r = 0; r < w; r++) {
    in[r] = malloc(send_n * es);
    ASSERT(in[r]);
    gen(in[r], dt, op, send_n, r, salt);
  }
  switch (k) {
    case K_ALL_REDUCE: ref_reduce(want, in, w, 0, count, dt, op); break;
    case K_REDUCE_SCATTER: ref_reduce(want, in, w, (size_t)me * count, count, dt, op); break;
    case K_ALL_GATHER:
      for (int r = 0; r < w; r++) memcpy(want + (size_t)r * count * es, in[r], count * es);
      break;
    case K_BROADCAST: memcpy(want, in[root], count * es); break;
    default:
      for (int r = 0; r < w; r++)
        memcpy(want + (size_t)r * count * es, (char *)in[r] + (size_t)me * count * es,
               count * es);
  }
  if (memcmp(recv, want, recv_n * es) != 0) {
    size_t i = 0;
    while (memcmp(recv + i * es, want + i * es, es) == 0) i++;
    uint64_t got = 0, exp = 0;
    memcpy(&got, recv + i * es, es < 8 ? es : 8);
    memcpy(&exp, want + i * es, es < 8 ? es : 8);
    TEST_FAIL_("rank %d/%d: %s %s %s count %zu (%s, algo %s, root %d): element %zu is 0x%llx, "
               "want 0x%llx", me, w, kind_names[k], symm_dtype_name(dt), symm_redop_name(op),
               count, placement_names[pl], symm_algo_name(algo), root, i,
               (unsigned long long)got, (unsigned long long)exp);
  }
  for (int r = 0; r < w; r++) free(in[r]);
  free(in);
  free(want);
  free(heap_send);
  free(heap_recv);
  j->calls++;
}

/* ------------------------------------------------------ the op matrix */

typedef struct {
  bool full;           /* every dtype and reduction; else a reduced set */
  const char *scratch; /* SYMM_SCRATCH_BYTES for the ranks (NULL: default) */
} ops_arg_t;

static const size_t sizes[] = {1, 7, 1000, 65539};
#define LARGE_SIZE 65539
/* Every dtype reduces (ops_rank says at which sizes and placements). */
static const symm_dtype_t reduce_dtypes[] = {
    SYMM_DTYPE_F32, SYMM_DTYPE_BF16, SYMM_DTYPE_F16, SYMM_DTYPE_I32, SYMM_DTYPE_F8E4M3,
    SYMM_DTYPE_F8E5M2, SYMM_DTYPE_F64, SYMM_DTYPE_I8, SYMM_DTYPE_I16, SYMM_DTYPE_I64,
    SYMM_DTYPE_U8, SYMM_DTYPE_U16, SYMM_DTYPE_U32, SYMM_DTYPE_U64};
static const symm_dtype_t move_dtypes[] = {SYMM_DTYPE_F32, SYMM_DTYPE_BF16, SYMM_DTYPE_F16,
                                           SYMM_DTYPE_I32, SYMM_DTYPE_I8, SYMM_DTYPE_F64};

static int ops_rank(int rank, int size, void *arg) {
  const ops_arg_t *oa = arg;
  if (oa->scratch) setenv("SYMM_SCRATCH_BYTES", oa->scratch, 1);
  job_t j = {.comm = init_comm(), .rank = rank, .size = size};
  int64_t n = (int64_t)(max_bytes(size) + 4096);
  ASSERT_OK(symm_tensor_alloc(j.comm, &n, 1, SYMM_DTYPE_U8, &j.sym));
  ASSERT_OK(symm_tensor_rendezvous(j.sym));

  /* count 0: a successful no-op, collective all the same, NULL buffers ok. */
  for (int k = 0; k < K_COUNT; k++) ASSERT_OK(call(&j, k, NULL, NULL, 0, SYMM_DTYPE_F32, 0, 0));

  const int all_red = (int)(sizeof reduce_dtypes / sizeof *reduce_dtypes);
  int nmove = oa->full ? 6 : 2;
  for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++)
    for (int pl = 0; pl < P_COUNT; pl++) {
      /* The first four dtypes everywhere (a reduced run: two, sum and max);
       * prod and avg at two placements (a full run); the other dtypes with
       * every op at the mixed placement below the largest size (a reduced
       * run: at 7 elements). */
      const bool wide = pl == P_MIXED && sizes[s] != LARGE_SIZE && (oa->full || sizes[s] == 7);
      const int nred = wide ? all_red : oa->full ? 4 : 2;
      for (int d = 0; d < nred; d++)
        for (int op = 0; op < SYMM_REDUCE_COUNT_; op++) {
          const bool usual = op == SYMM_REDUCE_SUM || op == SYMM_REDUCE_MAX ||
                             (oa->full && op == SYMM_REDUCE_MIN);
          if (!usual && !wide && !(oa->full && pl == P_MALLOC && sizes[s] != LARGE_SIZE))
            continue;
          check_case(&j, K_ALL_REDUCE, reduce_dtypes[d], op, sizes[s], pl, SYMM_ALGO_ONE_SHOT);
          check_case(&j, K_ALL_REDUCE, reduce_dtypes[d], op, sizes[s], pl, SYMM_ALGO_TWO_SHOT);
          check_case(&j, K_REDUCE_SCATTER, reduce_dtypes[d], op, sizes[s], pl, SYMM_ALGO_AUTO);
        }
      for (int d = 0; d < nmove; d++)
        for (int k = K_ALL_GATHER; k < K_COUNT; k++)
          check_case(&j, k, move_dtypes[d], SYMM_REDUCE_SUM, sizes[s], pl, SYMM_ALGO_AUTO);
    }
  /* LL and AUTO resolve to one of the two on the host. */
  check_case(&j, K_ALL_REDUCE, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, 1000, P_MALLOC, SYMM_ALGO_LL);
  check_case(&j, K_ALL_REDUCE, SYMM_DTYPE_BF16, SYMM_REDUCE_SUM, 65539, P_IN_PLACE,
             SYMM_ALGO_AUTO);
  if (rank == 0) printf("%d ranks: %d collective calls checked\n", size, j.calls);
  ASSERT_OK(symm_comm_barrier(j.comm));
  symm_tensor_free(j.sym);
  symm_comm_destroy(j.comm);
  return 0;
}

static void run_ops(int n, bool full, const char *scratch) {
  ops_arg_t oa = {.full = full, .scratch = scratch};
  ASSERT_EQ(test_run_ranks_timed(n, ops_rank, &oa, 120000, 20000), 0);
}

TEST_IMPL(coll_ops_2) { run_ops(2, true, NULL); return 0; }
/* A small scratch: calls grow it (collectively) as the sizes go up. */
TEST_IMPL(coll_ops_3) { run_ops(3, true, "16K"); return 0; }
TEST_IMPL(coll_ops_4) { run_ops(4, true, NULL); return 0; }
TEST_IMPL(coll_ops_5) { run_ops(5, false, NULL); return 0; }
TEST_IMPL(coll_ops_8) { run_ops(8, false, "64K"); return 0; }

/* The small path: the CPU engine carries a call of up to 32 bytes in the
 * cache line of its flag.  Every dtype with every op, at one element and
 * on both sides of those 32 bytes, out of place and in place. */
static int small_ops_rank(int rank, int size, void *arg) {
  (void)arg;
  job_t j = {.comm = init_comm(), .rank = rank, .size = size};
  int64_t n = 4096;
  ASSERT_OK(symm_tensor_alloc(j.comm, &n, 1, SYMM_DTYPE_U8, &j.sym));
  ASSERT_OK(symm_tensor_rendezvous(j.sym));
  for (size_t d = 0; d < sizeof reduce_dtypes / sizeof *reduce_dtypes; d++) {
    const size_t inline_n = 32 / symm_dtype_size(reduce_dtypes[d]);
    const size_t counts[] = {1, inline_n - 1, inline_n, inline_n + 1};
    for (int op = 0; op < SYMM_REDUCE_COUNT_; op++)
      for (size_t c = 0; c < sizeof counts / sizeof *counts; c++) {
        if (!counts[c]) continue;
        check_case(&j, K_ALL_REDUCE, reduce_dtypes[d], op, counts[c], P_MALLOC, SYMM_ALGO_AUTO);
        check_case(&j, K_ALL_REDUCE, reduce_dtypes[d], op, counts[c], P_IN_PLACE, SYMM_ALGO_AUTO);
      }
  }
  if (rank == 0) printf("%d ranks: %d small all-reduces checked\n", size, j.calls);
  ASSERT_OK(symm_comm_barrier(j.comm));
  symm_tensor_free(j.sym);
  symm_comm_destroy(j.comm);
  return 0;
}

TEST_IMPL(coll_small_ops) {
  ASSERT_EQ(test_run_ranks(3, small_ops_rank, NULL), 0);
  return 0;
}

/* ---------------------- back to back: reuse of scratch halves and buffers */
/* No barrier between calls, and every rank rewrites its buffer as soon as
 * a call returns: a peer still reading it (or a half of the scratch reused
 * too early) shows up as a wrong sum. */
static int back_to_back_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = init_comm();
  int64_t n = 100000;
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_I32, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  int32_t *buf = symm_tensor_data(t), small[5];
  int32_t *out = malloc(sizeof *out * (size_t)n);
  ASSERT(out);
  for (int it = 0; it < 3000; it++) {
    /* Small: staged.  Large: zero copy, out of place (one-shot) and in
     * place (two-shot). */
    bool large = it >= 2700, one_shot = it % 2 == 0;
    size_t count = large ? (size_t)n : 5;
    int32_t *send = large ? buf : small;
    int32_t *recv = large && one_shot ? out : send;
    ASSERT_OK(symm_comm_set_allreduce_algo(comm, one_shot ? SYMM_ALGO_ONE_SHOT
                                                          : SYMM_ALGO_TWO_SHOT));
    for (size_t i = 0; i < count; i++) send[i] = it * 7 + rank * 3 + (int32_t)i;
    ASSERT_OK(symm_all_reduce(comm, send, recv, count, SYMM_DTYPE_I32, SYMM_REDUCE_SUM, NULL));
    for (size_t i = 0; i < count; i++) {
      int32_t want = size * (it * 7 + (int32_t)i) + 3 * size * (size - 1) / 2;
      if (recv[i] != want)
        TEST_FAIL_("rank %d iteration %d element %zu: %d, want %d", rank, it, i, recv[i], want);
    }
  }
  free(out);
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(coll_back_to_back) {
  ASSERT_EQ(test_run_ranks(3, back_to_back_rank, NULL), 0);
  return 0;
}

/* Small calls back to back with the ranks out of step: on a changing
 * third of the iterations one rank does some work before its call, so
 * that the others run ahead into the next call and write its slot and
 * scratch half while the slow rank may still be reading the last one.  A
 * rank that overwrote what a peer had not read yet shows as a wrong sum.
 * Counts cross the 32 bytes the flag's cache line carries; in place and
 * out of place alternate. */
static int skewed_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = init_comm();
  int32_t buf[16], out[16];
  volatile uint64_t sink = 0;
  for (int it = 0; it < 20000; it++) {
    const uint64_t h = (uint64_t)it * 0x9e3779b97f4a7c15ull;
    if ((int)(h >> 60) % size == rank && (h >> 58) % 3 == 0)
      for (uint64_t k = (h >> 40) % 20000; k; k--) sink += k;
    const size_t count = 1 + (size_t)(it % 12);
    int32_t *recv = it & 1 ? buf : out;
    for (size_t i = 0; i < count; i++) buf[i] = it * 5 + rank * 11 + (int32_t)i;
    ASSERT_OK(symm_all_reduce(comm, buf, recv, count, SYMM_DTYPE_I32, SYMM_REDUCE_SUM, NULL));
    for (size_t i = 0; i < count; i++) {
      const int32_t want = size * (it * 5 + (int32_t)i) + 11 * size * (size - 1) / 2;
      if (recv[i] != want)
        TEST_FAIL_("rank %d iteration %d element %zu: %d, want %d", rank, it, i, recv[i], want);
    }
  }
  (void)sink;
  symm_comm_destroy(comm);
  return 0;
}

/* Two-shot on symmetric tensors (zero copy), in place on one rank and out
 * of place on the other, alternating: a rank in place overwrites its
 * buffer with its reduced chunk while the peer may still read its input
 * there, and a rank's reduced chunk must reach the peer whatever the
 * peer's own placement. */
static int in_place_mixed_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = init_comm();
  int64_t n = 100000;
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_I32, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  ASSERT_OK(symm_comm_set_allreduce_algo(comm, SYMM_ALGO_TWO_SHOT));
  int32_t *buf = symm_tensor_data(t), *out = malloc(sizeof *out * (size_t)n);
  ASSERT(out);
  for (int it = 0; it < 4; it++) {
    const bool in_place = (rank + it) % 2 == 0;
    int32_t *recv = in_place ? buf : out;
    for (int64_t i = 0; i < n; i++) buf[i] = (int32_t)(rank * 1000 + i % 977 + it);
    ASSERT_OK(symm_all_reduce(comm, buf, recv, (size_t)n, SYMM_DTYPE_I32, SYMM_REDUCE_SUM, NULL));
    for (int64_t i = 0; i < n; i++) {
      const int32_t want = (int32_t)(1000 * size * (size - 1) / 2 + size * (i % 977 + it));
      if (recv[i] != want)
        TEST_FAIL_("rank %d iteration %d element %lld: %d, want %d", rank, it, (long long)i,
                   recv[i], want);
    }
    ASSERT_OK(symm_comm_barrier(comm));
  }
  free(out);
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(coll_two_shot_in_place_mixed) {
  ASSERT_EQ(test_run_ranks(2, in_place_mixed_rank, NULL), 0);
  return 0;
}

/* All-gather and all-to-all on a symmetric tensor, 3 ranks, every mix of
 * placements: rank r in place where bit r of the mask is set, else out of
 * place from the tensor into another part of it.  The all-gather reads
 * the peers' pieces where they lie whatever the mix; the all-to-all swaps
 * blocks pairwise in the peers' memory when every rank is in place, reads
 * in place when none is, and stages the in-place ranks' data late when
 * they are mixed (a swap and a pull cannot meet).  Each rank's log
 * (SYMM_DEBUG=TRACE) says which path every call took, and every result is
 * checked. */
#define ZC_COUNT 20011 /* i32 per piece: 80 KB, above the zero-copy threshold */
static void zc_fill(int32_t *p, size_t n, int rank, int block, int mask) {
  for (size_t i = 0; i < n; i++) p[i] = (int32_t)(rank << 24 | block << 20 | mask << 16) + (int32_t)(i % 65521);
}

static int zero_copy_mixed_rank(int rank, int size, void *arg) {
  const char *dir = arg;
  char pattern[256];
  test_log_coll_to(dir, "zc", rank, "TRACE", pattern, sizeof pattern);
  symm_comm_t *comm = init_comm();
  const size_t n = ZC_COUNT, whole = n * (size_t)size;
  int64_t len = (int64_t)(2 * whole);
  symm_tensor_t *t;
  ASSERT_OK(symm_tensor_alloc(comm, &len, 1, SYMM_DTYPE_I32, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  int32_t *buf = symm_tensor_data(t), *out = buf + whole, *want = malloc(whole * sizeof *want);
  ASSERT(want);
  for (int mask = 0; mask < 1 << size; mask++) {
    const bool mine = mask >> rank & 1;
    int32_t *recv = mine ? buf : out;
    /* All-gather: piece r comes from rank r. */
    zc_fill(mine ? buf + (size_t)rank * n : buf, n, rank, 0, mask);
    ASSERT_OK(symm_all_gather(comm, mine ? buf + (size_t)rank * n : buf, recv, n, SYMM_DTYPE_I32,
                              NULL));
    for (int r = 0; r < size; r++) zc_fill(want + (size_t)r * n, n, r, 0, mask);
    if (memcmp(recv, want, whole * sizeof *want) != 0)
      TEST_FAIL_("rank %d: all_gather, mask %d: wrong result", rank, mask);
    /* All-to-all: block b of rank r's send data goes to rank b. */
    for (int b = 0; b < size; b++) zc_fill(buf + (size_t)b * n, n, rank, b, mask);
    ASSERT_OK(symm_all_to_all(comm, buf, recv, n, SYMM_DTYPE_I32, NULL));
    for (int r = 0; r < size; r++) zc_fill(want + (size_t)r * n, n, r, rank, mask);
    if (memcmp(recv, want, whole * sizeof *want) != 0)
      TEST_FAIL_("rank %d: all_to_all, mask %d: wrong result", rank, mask);
  }
  free(want);
  symm_tensor_free(t);
  symm_comm_destroy(comm);

  /* The paths, in call order. */
  FILE *f = fopen(pattern, "r");
  ASSERT(f != NULL);
  char line[512];
  int call = 0;
  while (fgets(line, sizeof line, f)) {
    const bool a2a = strstr(line, "symm_all_to_all #") != NULL;
    if (!a2a && !strstr(line, "symm_all_gather #")) continue;
    if (!strstr(line, ": zero copy") && !strstr(line, ": staged")) continue; /* other traces */
    const int mask = call / 2, all = (1 << size) - 1;
    const char *path_want = !a2a || mask == 0 ? ": zero copy\n"
                            : mask == all    ? ": zero copy, pairwise swap"
                                             : ": staged late";
    if (!strstr(line, path_want))
      TEST_FAIL_("rank %d: call %d (mask %d) took another path: %s", rank, call, mask, line);
    call++;
  }
  fclose(f);
  ASSERT_EQ(call, 2 << size);
  return 0;
}

TEST_IMPL(coll_zero_copy_in_place_mixed) {
  ASSERT_EQ(test_run_ranks_in_tmpdir(3, zero_copy_mixed_rank, NULL), 0);
  return 0;
}

TEST_IMPL(coll_small_skewed) {
  ASSERT_EQ(test_run_ranks(3, skewed_rank, NULL), 0);
  return 0;
}

/* ------------------------------------------------ rounding, wrap-around */

typedef struct {
  symm_dtype_t dt;
  uint32_t a, b, want; /* bits; want 0xffffffff: NaN */
} rounding_case_t;

static const rounding_case_t rounding_cases[] = {
    {SYMM_DTYPE_BF16, 0x3f80, 0x3b80, 0x3f80},     /* 1 + 2^-8: tie, to even (down) */
    {SYMM_DTYPE_BF16, 0x3f81, 0x3b80, 0x3f82},     /* tie, to even (up) */
    {SYMM_DTYPE_BF16, 0x3f80, 0x3bc0, 0x3f81},     /* above the tie */
    {SYMM_DTYPE_BF16, 0xbf80, 0xbb80, 0xbf80},     /* negative tie */
    {SYMM_DTYPE_BF16, 0x3f80, 0xbb00, 0x3f80},     /* 1 - 2^-9: tie below 1 */
    {SYMM_DTYPE_BF16, 0x7f7f, 0x7f7f, 0x7f80},     /* overflow to Inf */
    {SYMM_DTYPE_BF16, 0x7fc0, 0x3f80, 0xffffffff}, /* NaN stays NaN */
    {SYMM_DTYPE_F16, 0x3c00, 0x1000, 0x3c00},      /* 1 + 2^-11: tie, to even */
    {SYMM_DTYPE_F16, 0x3c01, 0x1000, 0x3c02},      /* tie, to even (up) */
    {SYMM_DTYPE_F16, 0x7bff, 0x4c00, 0x7c00},      /* 65504 + 16: tie, to Inf */
    {SYMM_DTYPE_F16, 0x7bff, 0x4800, 0x7bff},      /* 65504 + 8: below the tie */
    {SYMM_DTYPE_F16, 0xfbff, 0xcc00, 0xfc00},      /* to -Inf */
    {SYMM_DTYPE_F16, 0x0001, 0x0001, 0x0002},      /* subnormals */
    {SYMM_DTYPE_F16, 0x0400, 0x8001, 0x03ff},      /* normal - subnormal */
    {SYMM_DTYPE_F16, 0x0001, 0x8001, 0x0000},      /* exact zero */
    {SYMM_DTYPE_F16, 0x7e00, 0x3c00, 0xffffffff},  /* NaN */
    {SYMM_DTYPE_F8E4M3, 0x7e, 0x7e, 0x7e},         /* 448 + 448 saturates */
    {SYMM_DTYPE_F8E4M3, 0xfe, 0xfe, 0xfe},         /* to -448 */
    {SYMM_DTYPE_F8E4M3, 0x38, 0x18, 0x38},         /* 1 + 2^-4: tie, to even (down) */
    {SYMM_DTYPE_F8E4M3, 0x39, 0x18, 0x3a},         /* 1.125 + 2^-4: tie, to even (up) */
    {SYMM_DTYPE_F8E4M3, 0x01, 0x01, 0x02},         /* subnormals */
    {SYMM_DTYPE_F8E4M3, 0x08, 0x81, 0x07},         /* normal - subnormal */
    {SYMM_DTYPE_F8E4M3, 0x7f, 0x38, 0xffffffff},   /* NaN stays NaN */
    {SYMM_DTYPE_F8E5M2, 0x7b, 0x7b, 0x7b},         /* 57344 + 57344 saturates */
    {SYMM_DTYPE_F8E5M2, 0x7c, 0x3c, 0x7b},         /* Inf + 1 saturates too */
    {SYMM_DTYPE_F8E5M2, 0x3c, 0x30, 0x3c},         /* 1 + 2^-3: tie, to even */
    {SYMM_DTYPE_F8E5M2, 0x3d, 0x30, 0x3e},         /* 1.25 + 2^-3: tie, to even (up) */
    {SYMM_DTYPE_F8E5M2, 0x7e, 0x3c, 0xffffffff},   /* NaN stays NaN */
    {SYMM_DTYPE_I32, 0x7fffffff, 1, 0x80000000},   /* wraps */
    {SYMM_DTYPE_I32, 0x80000000, 0xffffffff, 0x7fffffff},
};

static int rounding_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = init_comm();
  size_t ncase = sizeof rounding_cases / sizeof *rounding_cases;
  for (int algo = SYMM_ALGO_ONE_SHOT; algo <= SYMM_ALGO_TWO_SHOT; algo++) {
    ASSERT_OK(symm_comm_set_allreduce_algo(comm, algo));
    for (size_t c = 0; c < ncase; c++) {
      const rounding_case_t *rc = &rounding_cases[c];
      /* 37 copies: the vector body and the scalar tail both see it. */
      enum { N = 37 };
      const size_t es = symm_dtype_size(rc->dt);
      unsigned char in[N * 4], out[N * 4];
      uint32_t mine = rank == 0 ? rc->a : rc->b;
      for (int i = 0; i < N; i++) memcpy(in + i * es, &mine, es); /* little-endian */
      ASSERT_OK(symm_all_reduce(comm, in, out, N, rc->dt, SYMM_REDUCE_SUM, NULL));
      for (int i = 0; i < N; i++) {
        uint32_t got = 0;
        memcpy(&got, out + i * es, es);
        bool ok = rc->want != 0xffffffff ? got == rc->want : isnan(load_f(out, rc->dt, i));
        if (!ok)
          TEST_FAIL_("%s %s: 0x%x + 0x%x gave 0x%x at %d, want 0x%x", symm_algo_name(algo),
                     symm_dtype_name(rc->dt), rc->a, rc->b, got, i, rc->want);
      }
    }
  }
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(coll_rounding) {
  ASSERT_EQ(test_run_ranks(2, rounding_rank, NULL), 0);
  return 0;
}

/* --------------------------------------------------------- mismatches */

static void check_recovers(symm_comm_t *comm, int rank, int size) {
  float x[3] = {(float)rank, 1, -2};
  ASSERT_OK(symm_all_reduce(comm, x, x, 3, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
  ASSERT_EQ((int)x[0], size * (size - 1) / 2);
  ASSERT_EQ((int)x[1], size);
  ASSERT_EQ((int)x[2], -2 * size);
}

static int mismatch_count_rank(int rank, int size, void *arg) {
  setenv("SYMM_SCRATCH_BYTES", "64K", 1);
  symm_comm_t *comm = init_comm();
  float *buf = calloc(30000, sizeof *buf);
  ASSERT(buf);
  check_recovers(comm, rank, size); /* the scratch exists from here on */
  size_t count = rank == 2 ? 1001 : 1000;
  ASSERT_RES(symm_all_reduce(comm, buf, buf, count, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL),
             SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 2 called symm_all_reduce(count 1001, f32, sum)");
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 0 called symm_all_reduce(count 1000, f32, sum)");
  check_recovers(comm, rank, size);
  /* 12000 floats fit the 64 KiB scratch but not both halves of it: the rank
   * that would grow it must not wander off into a rendezvous alone. */
  count = rank == 1 ? 12000 : 1000;
  ASSERT_RES(symm_reduce_scatter(comm, buf, buf, count / 3, SYMM_DTYPE_F32, SYMM_REDUCE_MAX,
                                 NULL), SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 1 called symm_reduce_scatter(count 4000");
  check_recovers(comm, rank, size);
  /* 30000 floats do not fit the scratch at all: still a mismatch, found
   * before anybody grows it. */
  count = rank == 1 ? 30000 : 1000;
  ASSERT_RES(symm_reduce_scatter(comm, buf, buf, count / 3, SYMM_DTYPE_F32, SYMM_REDUCE_MAX,
                                 NULL), SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 1 called symm_reduce_scatter(count 10000");
  check_recovers(comm, rank, size);
  free(buf);
  symm_comm_destroy(comm);
  return 0;
}

/* Large all-reduces run in slices (SYMM_HOST_SLICE_BYTES, 4 KiB here):
 * odd counts in place, out of place and from a symmetric tensor give the
 * full result, and counts that agree on the first slice but not on the
 * whole call are a mismatch at once, on every rank. */
static int sliced_rank(int rank, int size, void *arg) {
  (void)arg;
  setenv("SYMM_HOST_SLICE_BYTES", "4K", 1);
  symm_comm_t *comm = init_comm();
  const size_t n = 10007; /* 10 slices of 1024 floats and a short one */
  int64_t len = (int64_t)n;
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(comm, &len, 1, SYMM_DTYPE_F32, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  float *sym = symm_tensor_data(t), *in = malloc(n * sizeof *in), *out = malloc(n * sizeof *out);
  ASSERT(in && out);
  for (int pass = 0; pass < 3; pass++) {
    float *src = pass == 2 ? sym : in, *dst = pass == 0 ? in : pass == 1 ? out : sym;
    for (size_t i = 0; i < n; i++) src[i] = (float)((int)(i % 13) + rank);
    ASSERT_OK(symm_all_reduce(comm, src, dst, n, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
    for (size_t i = 0; i < n; i++) ASSERT_EQ((int)dst[i], size * (int)(i % 13) + size * (size - 1) / 2);
  }
  size_t count = rank == size - 1 ? 3000 : 2000;
  ASSERT_RES(symm_all_reduce(comm, in, out, count, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL),
             SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "count 3000");
  check_recovers(comm, rank, size);
  free(in);
  free(out);
  symm_tensor_free(t);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(coll_sliced) {
  ASSERT_EQ(test_run_ranks(3, sliced_rank, NULL), 0);
  return 0;
}

/* Ranks that slice differently would pair up different pieces: refused. */
/* Ranks that would slice all-reduces differently cannot make a
 * communicator: every rank is told, at creation. */
static int slice_mismatch_rank(int rank, int size, void *arg) {
  (void)arg, (void)size;
  setenv("SYMM_HOST_SLICE_BYTES", rank == 0 ? "4K" : "0", 1);
  symm_comm_t *comm = NULL;
  ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_MISMATCH);
  ASSERT(comm == NULL);
  ASSERT_STR_CONTAINS(symm_last_error(), "SYMM_HOST_SLICE_BYTES");
  return 0;
}

TEST_IMPL(coll_slice_mismatch) {
  ASSERT_EQ(test_run_ranks(2, slice_mismatch_rank, NULL), 0);
  return 0;
}

TEST_IMPL(coll_mismatch_count) {
  ASSERT_EQ(test_run_ranks(3, mismatch_count_rank, NULL), 0);
  return 0;
}

static int mismatch_kind_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = init_comm();
  float in[64] = {0}, out[128];
  check_recovers(comm, rank, size);
  /* Different collectives, same count and dtype. */
  symm_result_t res = rank == 0
      ? symm_all_reduce(comm, in, out, 64, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL)
      : symm_all_gather(comm, in, out, 64, SYMM_DTYPE_F32, NULL);
  ASSERT_EQ(res, SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 1 called symm_all_gather(count 64, f32)");
  check_recovers(comm, rank, size);
  /* Different reductions. */
  ASSERT_RES(symm_all_reduce(comm, in, out, 64, SYMM_DTYPE_F32,
                             rank == 0 ? SYMM_REDUCE_SUM : SYMM_REDUCE_MAX, NULL),
             SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "max");
  /* Different dtypes. */
  ASSERT_RES(symm_all_to_all(comm, in, out, 32, rank == 0 ? SYMM_DTYPE_F32 : SYMM_DTYPE_I32,
                             NULL), SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "i32");
  /* Different roots. */
  ASSERT_RES(symm_broadcast(comm, in, out, 64, SYMM_DTYPE_F32, rank, NULL), SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "root 1");
  /* count 0 against count 64: still a mismatch. */
  ASSERT_RES(symm_all_reduce(comm, in, out, rank == 0 ? 0 : 64, SYMM_DTYPE_F32, SYMM_REDUCE_SUM,
                             NULL), SYMM_ERR_MISMATCH);
  check_recovers(comm, rank, size);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(coll_mismatch_kind) {
  ASSERT_EQ(test_run_ranks(2, mismatch_kind_rank, NULL), 0);
  return 0;
}

/* ---------------------------------------------- a rank that never comes */

enum { SHORT_TIMEOUT_MS = 1500 };

static int absent_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = init_comm();
  check_recovers(comm, rank, size);
  if (rank == size - 1) {
    /* Stays alive but never calls, until the others have given up (they
     * say so in the store: a fixed sleep could end before a late rank's
     * timeout, which would then see this rank gone instead). */
    for (int r = 0; r < size - 1; r++) {
      char key[48];
      snprintf(key, sizeof key, "test/absent/gave_up/%d", r);
      test_store_await(symm_comm_store(comm), key);
    }
    symm_comm_destroy(comm);
    return 0;
  }
  float x[16] = {0};
  uint64_t start = test_now_ms();
  ASSERT_RES(symm_all_reduce(comm, x, x, 16, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL),
             SYMM_ERR_TIMEOUT);
  uint64_t took = test_now_ms() - start;
  char want[32];
  snprintf(want, sizeof want, "rank %d", size - 1);
  ASSERT_STR_CONTAINS(symm_last_error(), want);
  ASSERT_GE(took, SHORT_TIMEOUT_MS - 100);
  ASSERT_LE(took, SHORT_TIMEOUT_MS + 3000);
  printf("rank %d: %s after %llu ms\n", rank, symm_last_error(), (unsigned long long)took);
  char key[48];
  snprintf(key, sizeof key, "test/absent/gave_up/%d", rank);
  ASSERT_OK(symm_store_set(symm_comm_store(comm), key, "1", 1));
  symm_comm_destroy(comm);
  return 0;
}

/* The last rank is SIGKILLed before it calls: the others get PEER_LOST
 * (its process is gone), not a timeout 20 s later. */
static int killed_before_call_rank(int rank, int size, void *arg) {
  const size_t count = arg ? *(const size_t *)arg : 16;
  symm_comm_t *comm = init_comm();
  check_recovers(comm, rank, size);
  if (rank == size - 1) {
    test_rank_ready();
    sleep(30); /* killed here by the harness */
    return 1;
  }
  float x[16] = {0};
  ASSERT_RES(symm_all_reduce(comm, x, x, count, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL),
             SYMM_ERR_PEER_LOST);
  char want[32];
  snprintf(want, sizeof want, "rank %d (pid", size - 1);
  ASSERT_STR_CONTAINS(symm_last_error(), want);
  return 0;
}

TEST_IMPL(coll_peer_killed) {
  test_job_opts_t o = {.timeout_ms = 30000, .store_timeout_ms = 20000,
                       .kill_rank = 2, .kill_after_ms = 200};
  ASSERT_EQ(test_run_ranks_opts(3, killed_before_call_rank, NULL, &o), 1); /* only the killed */
  return 0;
}

TEST_IMPL(coll_timeout) {
  ASSERT_EQ(test_run_ranks_timed(3, absent_rank, NULL, 30000, SHORT_TIMEOUT_MS), 0);
  return 0;
}

/* The same on the small path (8 bytes, in the flag's cache line): the
 * peers are waiting for the killed rank's line when it dies. */
TEST_IMPL(coll_small_peer_killed) {
  static size_t count = 2;
  test_job_opts_t o = {.timeout_ms = 30000, .store_timeout_ms = 20000,
                       .kill_rank = 2, .kill_after_ms = 200};
  ASSERT_EQ(test_run_ranks_opts(3, killed_before_call_rank, &count, &o), 1);
  return 0;
}

/* The last rank stops itself (SIGSTOP) before an 8-byte all-reduce: the
 * others time out at their deadline, naming it.  Rank 0 then resumes it;
 * its call, late, fails at once instead of succeeding alone, and every
 * rank gets back in step with a barrier and a checked all-reduce. */
static int frozen_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = init_comm();
  check_recovers(comm, rank, size);
  symm_store_t *store = symm_comm_store(comm);
  float x[2] = {1, 2};
  if (rank == size - 1) {
    char pid[16];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    ASSERT_OK(symm_store_set(store, "test/frozen/pid", pid, strlen(pid) + 1));
    raise(SIGSTOP);
    const uint64_t start = test_now_ms();
    ASSERT_RES(symm_all_reduce(comm, x, x, 2, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL),
               SYMM_ERR_TIMEOUT);
    ASSERT_STR_CONTAINS(symm_last_error(), "came late");
    ASSERT_LT(test_now_ms() - start, (uint64_t)SHORT_TIMEOUT_MS / 2);
    printf("rank %d (resumed): %s\n", rank, symm_last_error());
  } else {
    test_store_await(store, "test/frozen/pid");
    const uint64_t start = test_now_ms();
    ASSERT_RES(symm_all_reduce(comm, x, x, 2, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL),
               SYMM_ERR_TIMEOUT);
    const uint64_t took = test_now_ms() - start;
    char want[32];
    snprintf(want, sizeof want, "rank %d", size - 1);
    ASSERT_STR_CONTAINS(symm_last_error(), want);
    ASSERT_GE(took, SHORT_TIMEOUT_MS - 100);
    ASSERT_LE(took, SHORT_TIMEOUT_MS + 3000);
    printf("rank %d: %s after %llu ms\n", rank, symm_last_error(), (unsigned long long)took);
    char key[48];
    snprintf(key, sizeof key, "test/frozen/gave_up/%d", rank);
    ASSERT_OK(symm_store_set(store, key, "1", 1));
    if (rank == 0) {
      for (int r = 1; r < size - 1; r++) {
        snprintf(key, sizeof key, "test/frozen/gave_up/%d", r);
        test_store_await(store, key);
      }
      char pid[16] = "";
      size_t len = 0;
      ASSERT_OK(symm_store_get(store, "test/frozen/pid", pid, sizeof pid, &len, -1));
      while (symm_process_state(atoi(pid)) != 'T') sched_yield(); /* it stops itself */
      ASSERT_EQ(kill(atoi(pid), SIGCONT), 0);
    }
  }
  ASSERT_OK(symm_comm_barrier(comm));
  check_recovers(comm, rank, size);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(coll_small_frozen) {
  ASSERT_EQ(test_run_ranks_timed(3, frozen_rank, NULL, 30000, SHORT_TIMEOUT_MS), 0);
  return 0;
}

/* -------------------------------------------------------- bad arguments */

static int bad_args_rank(int rank, int size, void *arg) {
  symm_comm_t *comm = init_comm();
  float in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[16];
  /* Every rank makes the same refused calls: they meet each other (a
   * refused call still takes part, ops->abstain), so the ranks stay in
   * step. */
  ASSERT_RES(symm_all_reduce(NULL, in, out, 8, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL),
             SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_all_reduce(comm, NULL, out, 8, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL),
             SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_all_reduce(comm, in, NULL, 8, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL),
             SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_all_gather(comm, NULL, out, 8, SYMM_DTYPE_F32, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_all_reduce(comm, in, out, 8, SYMM_DTYPE_F32, SYMM_REDUCE_COUNT_, NULL),
             SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "bad reduction 5");
  ASSERT_RES(symm_all_reduce(comm, in, out, 8, (symm_dtype_t)99, SYMM_REDUCE_SUM, NULL),
             SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_all_reduce(comm, in, out, 8, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, (void *)in),
             SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "stream");
  ASSERT_RES(symm_broadcast(comm, in, out, 8, SYMM_DTYPE_F32, -1, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_broadcast(comm, in, out, 8, SYMM_DTYPE_F32, size, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "root");
  ASSERT_RES(symm_all_reduce(comm, in, out, SIZE_MAX / 2, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL),
             SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "overflows");
  ASSERT_RES(symm_comm_set_allreduce_algo(comm, SYMM_ALGO_COUNT_), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_comm_reserve_scratch(NULL, 1), SYMM_ERR_INVALID_ARG);
  /* Host collectives report errors from the call: nothing is ever pending. */
  ASSERT_OK(symm_comm_check_async_error(comm));
  /* Valid after all that: count 0 with NULL buffers, a non-root's NULL
   * sendbuf, then a real call. */
  ASSERT_OK(symm_all_reduce(comm, NULL, NULL, 0, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
  ASSERT_OK(symm_broadcast(comm, rank == 1 ? in : NULL, out, 8, SYMM_DTYPE_F32, 1, NULL));
  for (int i = 0; i < 8; i++) ASSERT_EQ((int)out[i], i + 1);
  /* Reserving scratch is collective and leaves collectives working. */
  ASSERT_OK(symm_comm_reserve_scratch(comm, (size_t)1 << 20));
  check_recovers(comm, rank, size);
  /* A size no tensor can hold on rank 0 only (the others ask for more than
   * the 32 MiB they have, so that they grow too): the growth fails on every
   * rank at once, its peers naming rank 0, instead of leaving them in the
   * round it never joined. */
  uint64_t t0 = test_now_ms();
  symm_result_t res = symm_comm_reserve_scratch(comm, rank == 0 ? SIZE_MAX : (size_t)64 << 20);
  ASSERT_NE(res, SYMM_SUCCESS);
  if (rank != 0) ASSERT_STR_CONTAINS(symm_last_error(), "rank 0");
  ASSERT_LT(test_now_ms() - t0, 10000);
  check_recovers(comm, rank, size);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(coll_bad_args) {
  ASSERT_EQ(test_run_ranks(2, bad_args_rank, NULL), 0);
  return 0;
}

/* A call that fails the argument checks on one rank only: that rank gets
 * SYMM_ERR_INVALID_ARG, its peers SYMM_ERR_MISMATCH naming it, and every
 * later call pairs with the peers' matching call (the refused call still
 * uses up its sequence number).  First before the scratch exists, then on
 * the other rank with it, then where the peer's call would grow it. */
static int refused_call_rank(int rank, int size, void *arg) {
  (void)arg;
  setenv("SYMM_SCRATCH_BYTES", "64K", 1);
  symm_comm_t *comm = init_comm();
  float x[3] = {(float)rank, 1, -2};
  symm_result_t res = symm_all_reduce(comm, x, x, 3, rank == 0 ? (symm_dtype_t)99 : SYMM_DTYPE_F32,
                                      SYMM_REDUCE_SUM, NULL);
  if (rank == 0) {
    ASSERT_EQ(res, SYMM_ERR_INVALID_ARG);
    ASSERT_STR_CONTAINS(symm_last_error(), "bad dtype 99");
  } else {
    ASSERT_EQ(res, SYMM_ERR_MISMATCH);
    ASSERT_STR_CONTAINS(symm_last_error(), "rank 0's symm_all_reduce failed its argument checks");
  }
  ASSERT_EQ((int)x[0], rank); /* untouched on both */
  for (int i = 0; i < 3; i++) check_recovers(comm, rank, size);

  float in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[16] = {0};
  res = symm_all_gather(comm, in, out, 8, SYMM_DTYPE_F32, rank == 1 ? (void *)in : NULL);
  ASSERT_EQ(res, rank == 1 ? SYMM_ERR_INVALID_ARG : SYMM_ERR_MISMATCH);
  if (rank == 0) ASSERT_STR_CONTAINS(symm_last_error(), "rank 1's symm_all_gather");
  ASSERT_EQ((int)out[0], 0);
  check_recovers(comm, rank, size);

  const size_t n = 30000; /* more than half the 64 KiB scratch */
  float *big = malloc(n * sizeof *big);
  ASSERT(big);
  for (size_t i = 0; i < n; i++) big[i] = (float)(i % 7);
  res = symm_broadcast(comm, big, big, n, SYMM_DTYPE_F32, rank == 0 ? -1 : 1, NULL);
  ASSERT_EQ(res, rank == 0 ? SYMM_ERR_INVALID_ARG : SYMM_ERR_MISMATCH);
  check_recovers(comm, rank, size);
  for (size_t i = 0; i < n; i++) big[i] = rank == 1 ? (float)(i % 7) : -1.0f;
  ASSERT_OK(symm_broadcast(comm, big, big, n, SYMM_DTYPE_F32, 1, NULL));
  for (size_t i = 0; i < n; i++) ASSERT_EQ((int)big[i], (int)(i % 7));
  free(big);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(coll_refused_call) {
  ASSERT_EQ(test_run_ranks(2, refused_call_rank, NULL), 0);
  return 0;
}

/* Ranks that set different all-reduce algorithms make different calls:
 * SYMM_ERR_MISMATCH on both, whatever the size; the same algorithm (LL
 * runs as one-shot on the host, so it matches one-shot) works. */
static int algo_mismatch_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = init_comm();
  const size_t counts[] = {5, 4099, 100000};
  float *buf = malloc(100000 * sizeof *buf);
  ASSERT(buf);
  for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
    ASSERT_OK(symm_comm_set_allreduce_algo(comm, rank == 0 ? SYMM_ALGO_ONE_SHOT
                                                           : SYMM_ALGO_TWO_SHOT));
    for (size_t i = 0; i < counts[k]; i++) buf[i] = (float)rank;
    ASSERT_RES(symm_all_reduce(comm, buf, buf, counts[k], SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL),
               SYMM_ERR_MISMATCH);
    ASSERT_STR_CONTAINS(symm_last_error(), "algorithm two_shot), rank 0 called");
    ASSERT_STR_CONTAINS(symm_last_error(), "algorithm one_shot) (set the same SYMM_ALLREDUCE_ALGO");
    const symm_algo_t same[][2] = {{SYMM_ALGO_TWO_SHOT, SYMM_ALGO_TWO_SHOT},
                                   {SYMM_ALGO_ONE_SHOT, SYMM_ALGO_LL}};
    for (int j = 0; j < 2; j++) {
      ASSERT_OK(symm_comm_set_allreduce_algo(comm, same[j][rank]));
      for (size_t i = 0; i < counts[k]; i++) buf[i] = (float)(rank + (int)(i % 5));
      ASSERT_OK(symm_all_reduce(comm, buf, buf, counts[k], SYMM_DTYPE_F32, SYMM_REDUCE_SUM,
                                NULL));
      for (size_t i = 0; i < counts[k]; i++) ASSERT_EQ((int)buf[i], 1 + 2 * (int)(i % 5));
    }
  }
  ASSERT_OK(symm_comm_set_allreduce_algo(comm, SYMM_ALGO_AUTO));
  check_recovers(comm, rank, size);
  free(buf);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(coll_algo_mismatch) {
  ASSERT_EQ(test_run_ranks(2, algo_mismatch_rank, NULL), 0);
  return 0;
}

/* symm_all_reduce_algo on the host backend: auto's choice by size, a forced
 * algorithm, the host's fallback of the LL protocols, and bad arguments. */
static int algo_query_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  symm_algo_t a = SYMM_ALGO_AUTO;
  ASSERT_OK(symm_all_reduce_algo(comm, 512, SYMM_DTYPE_F32, &a)); /* 2 KiB */
  ASSERT_EQ(a, SYMM_ALGO_ONE_SHOT);
  ASSERT_OK(symm_all_reduce_algo(comm, 513, SYMM_DTYPE_F32, &a));
  ASSERT_EQ(a, SYMM_ALGO_TWO_SHOT);
  ASSERT_OK(symm_all_reduce_algo(comm, 1024, SYMM_DTYPE_BF16, &a));
  ASSERT_EQ(a, SYMM_ALGO_ONE_SHOT);
  const struct { symm_algo_t set, runs; } forced[] = {
      {SYMM_ALGO_ONE_SHOT, SYMM_ALGO_ONE_SHOT}, {SYMM_ALGO_TWO_SHOT, SYMM_ALGO_TWO_SHOT},
      {SYMM_ALGO_LL, SYMM_ALGO_ONE_SHOT}, {SYMM_ALGO_LL128, SYMM_ALGO_ONE_SHOT}};
  for (size_t k = 0; k < sizeof forced / sizeof forced[0]; k++) {
    ASSERT_OK(symm_comm_set_allreduce_algo(comm, forced[k].set));
    ASSERT_OK(symm_all_reduce_algo(comm, 1 << 20, SYMM_DTYPE_F32, &a));
    ASSERT_EQ(a, forced[k].runs);
  }
  ASSERT_RES(symm_all_reduce_algo(NULL, 8, SYMM_DTYPE_F32, &a), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_all_reduce_algo(comm, 8, SYMM_DTYPE_F32, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_OK(symm_all_reduce_algo(comm, 8, SYMM_DTYPE_U8, &a)); /* the CPU reduces every dtype */
  ASSERT_RES(symm_all_reduce_algo(comm, 8, (symm_dtype_t)99, &a), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "bad dtype 99");
  ASSERT_RES(symm_all_reduce_algo(comm, SIZE_MAX / 2, SYMM_DTYPE_F32, &a), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "overflows");
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(coll_algo_query) {
  ASSERT_EQ(test_run_ranks(2, algo_query_rank, NULL), 0);
  return 0;
}

/* symm_comm_allreduce_algo: what SYMM_ALLREDUCE_ALGO chose at init, then
 * what symm_comm_set_allreduce_algo set; AUTO when neither; NULL refused. */
TEST_IMPL(coll_algo_choice_getter) {
  setenv("SYMM_BACKEND", "host", 1);
  symm_comm_t *comm = NULL;
  symm_algo_t algo = SYMM_ALGO_COUNT_;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  ASSERT_OK(symm_comm_allreduce_algo(comm, &algo));
  ASSERT_EQ(algo, SYMM_ALGO_AUTO);
  ASSERT_OK(symm_comm_set_allreduce_algo(comm, SYMM_ALGO_TWO_SHOT));
  ASSERT_OK(symm_comm_allreduce_algo(comm, &algo));
  ASSERT_EQ(algo, SYMM_ALGO_TWO_SHOT);
  ASSERT_RES(symm_comm_allreduce_algo(NULL, &algo), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_comm_allreduce_algo(comm, NULL), SYMM_ERR_INVALID_ARG);
  symm_comm_destroy(comm);
  setenv("SYMM_ALLREDUCE_ALGO", "ll", 1);
  ASSERT_OK(symm_comm_init(NULL, &comm));
  ASSERT_OK(symm_comm_allreduce_algo(comm, &algo));
  ASSERT_EQ(algo, SYMM_ALGO_LL);
  symm_comm_destroy(comm);
  return 0;
}

/* symm_comm_scratch_bytes on the host backend: with what it says reserved
 * for buffers of up to B bytes (and a small default, so that the default
 * does not hide a short answer), no collective on such buffers grows the
 * scratch; bad arguments are refused. */
static int scratch_query_rank(int rank, int size, void *arg) {
  (void)arg;
  setenv("SYMM_SCRATCH_BYTES", "64K", 1);
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  const size_t B = ((size_t)1 << 20) + 36; /* f32 elements: a multiple of 4 bytes */
  size_t need = 0;
  ASSERT_OK(symm_comm_scratch_bytes(comm, B, &need));
  ASSERT_GE(need, 2 * B);
  ASSERT_OK(symm_comm_reserve_scratch(comm, need));
  const symm_tensor_t *scratch = symm_comm_scratch_current(comm);
  float *send = calloc(B, 1), *recv = calloc(B, 1);
  ASSERT(send && recv);
  const size_t n = B / 4, per = B / 4 / (size_t)size;
  const symm_algo_t algos[] = {SYMM_ALGO_ONE_SHOT, SYMM_ALGO_TWO_SHOT};
  for (int k = 0; k < 2; k++) {
    ASSERT_OK(symm_comm_set_allreduce_algo(comm, algos[k]));
    ASSERT_OK(symm_all_reduce(comm, send, recv, n, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
  }
  ASSERT_OK(symm_reduce_scatter(comm, send, recv, per, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
  ASSERT_OK(symm_all_gather(comm, send, recv, per, SYMM_DTYPE_F32, NULL));
  ASSERT_OK(symm_broadcast(comm, send, recv, n, SYMM_DTYPE_F32, 0, NULL));
  ASSERT_OK(symm_all_to_all(comm, send, recv, per, SYMM_DTYPE_F32, NULL));
  if (symm_comm_scratch_current(comm) != scratch)
    TEST_FAIL_("rank %d: a collective grew the scratch reserved for %zu bytes", rank, B);
  size_t b = 0;
  ASSERT_RES(symm_comm_scratch_bytes(NULL, 8, &b), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_comm_scratch_bytes(comm, 8, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_comm_scratch_bytes(comm, SIZE_MAX - 8, &b), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "overflow");
  /* 2/5 of INT64_MAX needs 2 x (1 + 1/3) of that at 3 ranks, 16/15 of
   * INT64_MAX: a size_t holds it, a tensor does not. */
  ASSERT_RES(symm_comm_scratch_bytes(comm, (size_t)INT64_MAX / 5 * 2, &b), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "more scratch than a tensor can hold");
  free(send);
  free(recv);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(coll_scratch_query) {
  ASSERT_EQ(test_run_ranks(3, scratch_query_rank, NULL), 0);
  return 0;
}

/* The first scratch holds SYMM_SCRATCH_BYTES (default 32 MiB): the host
 * backend keeps nothing else in it.  Reserving less keeps it. */
static int scratch_default_rank(int rank, int size, void *arg) {
  (void)rank, (void)size;
  const char *setting = arg;
  if (setting) setenv("SYMM_SCRATCH_BYTES", setting, 1);
  else unsetenv("SYMM_SCRATCH_BYTES");
  const size_t want = setting ? (size_t)1 << 20 : (size_t)32 << 20;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  float in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
  ASSERT_OK(symm_all_reduce(comm, in, out, 8, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
  ASSERT(symm_comm_scratch_current(comm) != NULL);
  ASSERT_EQ(symm_tensor_nbytes(symm_comm_scratch_current(comm)), want);
  ASSERT_OK(symm_comm_reserve_scratch(comm, want / 2));
  ASSERT_EQ(symm_tensor_nbytes(symm_comm_scratch_current(comm)), want);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(coll_scratch_default) {
  ASSERT_EQ(test_run_ranks(2, scratch_default_rank, NULL), 0);
  ASSERT_EQ(test_run_ranks(2, scratch_default_rank, "1M"), 0);
  return 0;
}

/* ------------------------------------ different kinds of communicator call */
/* Ranks below `split` make call `low`, the others call `high`, with the
 * same sequence number: a collective the engine runs on the scratch pads
 * against a call that agrees over the bootstrap (barrier, rendezvous), with
 * the scratch in place (`warm`: one all-reduce first) or not yet.  Every
 * rank gets SYMM_ERR_MISMATCH at once (well before the 20 s timeout)
 * naming both calls as the user made them, never an internal step; then a
 * matched all-reduce (values checked), a barrier and the rendezvous of the
 * tensor succeed on every rank.  A rank whose call fails its own argument
 * checks (REFUSED, or rank 0 with `first_refused`) gets
 * SYMM_ERR_INVALID_ARG and still takes part. */
typedef enum {
  CALL_ALL_REDUCE,
  CALL_ALL_REDUCE_BIG, /* more than the 64 KiB scratch holds: it would grow */
  CALL_ALL_GATHER,
  CALL_BARRIER,
  CALL_RENDEZVOUS,
  CALL_REFUSED
} kinds_call_t;
enum { KINDS_BIG = 30000 };

typedef struct {
  kinds_call_t low, high;
  int split;
  bool warm;
  bool first_refused; /* rank 0 makes a refused all-reduce instead */
} kinds_case_t;

static const char *kinds_call_name(kinds_call_t k) {
  switch (k) {
    case CALL_ALL_REDUCE: return "symm_all_reduce(count 100, f32, sum)";
    case CALL_ALL_REDUCE_BIG: return "symm_all_reduce(count 30000, f32, sum)";
    case CALL_ALL_GATHER: return "symm_all_gather(count 100, f32)";
    case CALL_BARRIER: return "symm_comm_barrier";
    case CALL_RENDEZVOUS: return "symm_tensor_rendezvous([100] f32)";
    case CALL_REFUSED: return "symm_all_reduce(count 100, f32, ";
  }
  return "?";
}

static symm_result_t kinds_call(symm_comm_t *comm, kinds_call_t k, symm_tensor_t *t, float *buf,
                                float *out) {
  switch (k) {
    case CALL_ALL_REDUCE:
      return symm_all_reduce(comm, buf, out, 100, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL);
    case CALL_ALL_REDUCE_BIG:
      return symm_all_reduce(comm, buf, out, KINDS_BIG, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL);
    case CALL_ALL_GATHER: return symm_all_gather(comm, buf, out, 100, SYMM_DTYPE_F32, NULL);
    case CALL_BARRIER: return symm_comm_barrier(comm);
    case CALL_RENDEZVOUS: return symm_tensor_rendezvous(t);
    case CALL_REFUSED:
      return symm_all_reduce(comm, buf, out, 100, SYMM_DTYPE_F32, (symm_redop_t)7, NULL);
  }
  return SYMM_ERR_INTERNAL;
}

static int kinds_rank(int rank, int size, void *arg) {
  const kinds_case_t *kc = arg;
  const bool big = kc->low == CALL_ALL_REDUCE_BIG || kc->high == CALL_ALL_REDUCE_BIG;
  if (big) setenv("SYMM_SCRATCH_BYTES", "64K", 1);
  symm_comm_t *comm = init_comm();
  const int timeout_ms = symm_comm_timeout_ms(comm);
  ASSERT_GE(timeout_ms, 10000);
  int64_t n = 100;
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &t));
  const size_t elems = big ? KINDS_BIG : 1000 * (size_t)size;
  float *buf = calloc(elems, sizeof *buf), *out = calloc(elems, sizeof *out);
  ASSERT(buf && out);
  if (kc->warm) check_recovers(comm, rank, size);
  kinds_call_t mine = rank == 0 && kc->first_refused ? CALL_REFUSED
                      : rank < kc->split ? kc->low : kc->high;
  uint64_t start = test_now_ms();
  symm_result_t res = kinds_call(comm, mine, t, buf, out);
  uint64_t took = test_now_ms() - start;
  printf("rank %d: %s after %llu ms: %s\n", rank, symm_strerror(res), (unsigned long long)took,
         symm_last_error());
  ASSERT_RES(res, mine == CALL_REFUSED ? SYMM_ERR_INVALID_ARG : SYMM_ERR_MISMATCH);
  ASSERT_LT(took, (uint64_t)timeout_ms / 2);
  if (mine != CALL_REFUSED) {
    ASSERT_STR_CONTAINS(symm_last_error(),
                        kinds_call_name(kc->first_refused ? CALL_REFUSED : kc->low));
    ASSERT_STR_CONTAINS(symm_last_error(), kinds_call_name(kc->high));
    ASSERT(!strstr(symm_last_error(), "called status"));
    ASSERT(!strstr(symm_last_error(), "called rendezvous"));
    ASSERT(!strstr(symm_last_error(), "called barrier"));
  }
  /* Still in step: the next calls match and work. */
  for (size_t i = 0; i < 1000; i++) buf[i] = (float)(rank + (int)(i % 7));
  ASSERT_OK(symm_all_reduce(comm, buf, out, 1000, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
  for (size_t i = 0; i < 1000; i++)
    ASSERT_EQ((int)out[i], size * (size - 1) / 2 + size * (int)(i % 7));
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT_OK(symm_tensor_rendezvous(t));
  check_recovers(comm, rank, size);
  ASSERT_OK(symm_tensor_free(t));
  free(buf);
  free(out);
  symm_comm_destroy(comm);
  return 0;
}

#define KINDS_TEST(name, ranks, low_, high_, split_, warm_, first_refused_)    \
  TEST_IMPL(name) {                                                            \
    static kinds_case_t kc = {.low = low_, .high = high_, .split = split_,     \
                              .warm = warm_, .first_refused = first_refused_}; \
    ASSERT_EQ(test_run_ranks(ranks, kinds_rank, &kc), 0);                      \
    return 0;                                                                  \
  }

KINDS_TEST(coll_kinds_barrier_2, 2, CALL_ALL_REDUCE, CALL_BARRIER, 1, true, false)
KINDS_TEST(coll_kinds_barrier_cold_2, 2, CALL_ALL_REDUCE, CALL_BARRIER, 1, false, false)
KINDS_TEST(coll_kinds_barrier_3, 3, CALL_ALL_REDUCE, CALL_BARRIER, 2, true, false)
KINDS_TEST(coll_kinds_barrier_cold_3, 3, CALL_ALL_REDUCE, CALL_BARRIER, 1, false, false)
KINDS_TEST(coll_kinds_rendezvous_2, 2, CALL_ALL_REDUCE, CALL_RENDEZVOUS, 1, true, false)
KINDS_TEST(coll_kinds_rendezvous_cold_3, 3, CALL_ALL_REDUCE, CALL_RENDEZVOUS, 1, false, false)
KINDS_TEST(coll_kinds_gather_2, 2, CALL_BARRIER, CALL_ALL_GATHER, 1, true, false)
KINDS_TEST(coll_kinds_gather_3, 3, CALL_ALL_GATHER, CALL_BARRIER, 1, true, false)
KINDS_TEST(coll_kinds_refused_3, 3, CALL_REFUSED, CALL_BARRIER, 1, true, false)
KINDS_TEST(coll_kinds_refused_cold_2, 2, CALL_REFUSED, CALL_BARRIER, 1, false, false)
KINDS_TEST(coll_kinds_refused_mixed_3, 3, CALL_ALL_REDUCE, CALL_BARRIER, 2, true, true)
KINDS_TEST(coll_kinds_grow_3, 3, CALL_ALL_REDUCE_BIG, CALL_RENDEZVOUS, 2, true, false)

/* Rank 0's all-reduce times out while rank 1 stays out of the
 * communicator (it waits for a store key), so rank 0 has used one number
 * more.  Their next barrier names the same call under different numbers:
 * SYMM_ERR_MISMATCH "out of step" on both, which puts both on the higher
 * number; from there barrier and all-reduce (values checked) pair up
 * again, where rank 1's all-reduce would otherwise pair with rank 0's
 * stale one. */
static int out_of_step_rank(int rank, int size, void *arg) {
  (void)arg;
  symm_comm_t *comm = init_comm();
  check_recovers(comm, rank, size);
  if (rank == 0) {
    float x[16] = {0};
    ASSERT_RES(symm_all_reduce(comm, x, x, 16, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL),
               SYMM_ERR_TIMEOUT);
    ASSERT_OK(symm_store_set(symm_comm_store(comm), "test/kinds/gave_up", "1", 1));
  } else {
    test_store_await(symm_comm_store(comm), "test/kinds/gave_up");
  }
  ASSERT_RES(symm_comm_barrier(comm), SYMM_ERR_MISMATCH);
  printf("rank %d: %s\n", rank, symm_last_error());
  ASSERT_STR_CONTAINS(symm_last_error(), "rank 1 called symm_comm_barrier as its communicator "
                      "call #2, rank 0 as #3: the ranks are out of step");
  ASSERT_OK(symm_comm_barrier(comm));
  check_recovers(comm, rank, size);
  ASSERT_OK(symm_comm_barrier(comm));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(coll_kinds_out_of_step) {
  ASSERT_EQ(test_run_ranks_timed(2, out_of_step_rank, NULL, 30000, SHORT_TIMEOUT_MS), 0);
  return 0;
}

/* ------------------------------------------------- a forged pad offset
 * A peer's pad is read, never trusted (issue 23, item 4).  Rank 1's call
 * publishes its zero-copy offset, then a thread of rank 1 (an attacker
 * writing the shared memory it owns) rewrites it to 1 TiB past the tensor
 * before rank 0 comes; rank 0 comes only once it has (a store key).  On
 * c5cb091 both ranks read 1 TiB past their mapping of rank 1's tensor and
 * died of SIGSEGV; now the all-reduce is SYMM_ERR_PROTOCOL on both, naming
 * rank 1 and the offset, nobody reads through it, and the communicator
 * works afterwards.  The same for an all-to-all-v whose senders are read in
 * place (cpu_coll_v.c): its table entries are checked against the room
 * past the published offset, before any row moves. */

/* The CPU engine's pad as it lays out one parity's slot (cpu_coll.c:
 * coll_slot_t): what an attacker who reads the source knows. */
typedef struct {
  _Alignas(64) _Atomic uint64_t flag; /* 4 * seq + phase */
  uint64_t sig, group, offset;
} forged_slot_t;

/* And as far as the details that follow the slots (cpu_coll_int.h:
 * coll_pad_t, coll_detail_t): room, the size of sendbuf that an
 * all-to-all-v sender read with cross-memory attach publishes. */
typedef struct {
  uint64_t count;
  int32_t kind, dtype, op, root, algo, in_place;
  uint64_t need, room;
  struct {
    int32_t code, peer;
    uint64_t a, b;
  } verdict[2];
  int32_t read_errno, read_peer;
} forged_detail_t;

typedef struct {
  forged_slot_t slot[2];
  _Alignas(64) forged_detail_t detail[2];
} forged_pad_t;

typedef struct {
  forged_slot_t *slot; /* rank 1's own pad: two slots, one per parity */
  uint64_t before[2];  /* each slot's flag before the call */
  symm_store_t *store;
  uint64_t offset;     /* what it writes over the published offset */
  const char *key;     /* set to "1" once it forged, "0" if it never could */
  bool kill;           /* instead of forging: SIGKILL its process (after the key) */
  bool room;           /* forge the detail's room, not the slot's offset */
} forger_t;

#define FORGED_OFFSET ((uint64_t)1 << 40)

/* Returns non-NULL once it forged; NULL if the call never published a
 * zero-copy offset within 20 s (the test then fails, not hangs: rank 0
 * is let go all the same). */
static void *forger(void *arg) {
  forger_t *f = arg;
  const uint64_t deadline = test_now_ms() + 20000;
  for (uint64_t spins = 0; test_now_ms() < deadline; spins++) {
    for (int h = 0; h < 2; h++) {
      uint64_t flag = atomic_load_explicit(&f->slot[h].flag, memory_order_acquire);
      /* The call has published (phase 1, arrived) in this slot. */
      if (flag == f->before[h] || (flag & 3) != 1 || !f->slot[h].group) continue;
      if (f->room) ((forged_pad_t *)(void *)f->slot)->detail[h].room = f->offset;
      else if (!f->kill) f->slot[h].offset = f->offset;
      atomic_thread_fence(memory_order_seq_cst);
      symm_store_set(f->store, f->key, "1", 1);
      if (f->kill) raise(SIGKILL);
      return f;
    }
    if (spins % 1024 == 1023) sched_yield();
  }
  symm_store_set(f->store, f->key, "0", 1);
  return NULL;
}

/* The call whose offset is forged: an all-reduce, or (a2av) an
 * all-to-all-v from the first half of the tensor into the second. */
static symm_result_t forged_call(symm_comm_t *comm, float *x, size_t n, bool a2av) {
  if (!a2av) return symm_all_reduce(comm, x, x, n, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL);
  const size_t counts[2] = {n / 2, n / 2};
  return symm_all_to_all_v(comm, x, counts, NULL, x + n, counts, NULL, SYMM_DTYPE_F32, NULL);
}

static int forged_offset_rank(int rank, int size, void *arg) {
  const bool a2av = arg != NULL;
  symm_comm_t *comm = init_comm();
  const size_t n = 20000; /* 80 KB: zero copy from 64 KiB */
  int64_t len = (int64_t)(2 * n);
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(comm, &len, 1, SYMM_DTYPE_F32, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  float *x = symm_tensor_data(t);
  check_recovers(comm, rank, size); /* the scratch exists */
  for (size_t i = 0; i < n; i++) x[i] = (float)rank;
  symm_store_t *store = symm_comm_store(comm);
  pthread_t thread;
  forger_t f = {.slot = NULL, .before = {0, 0}, .store = store, .offset = FORGED_OFFSET,
               .key = "test/forged/done"};
  if (rank == 1) {
    void *pad = NULL;
    ASSERT_OK(symm_tensor_signal_pad(symm_comm_scratch_current(comm), 1, &pad));
    f.slot = pad;
    for (int h = 0; h < 2; h++) f.before[h] = atomic_load(&f.slot[h].flag);
    ASSERT_EQ(pthread_create(&thread, NULL, forger, &f), 0);
  } else {
    test_store_await(store, "test/forged/done");
  }
  ASSERT_RES(forged_call(comm, x, n, a2av), SYMM_ERR_PROTOCOL);
  printf("rank %d: %s\n", rank, symm_last_error());
  ASSERT_STR_CONTAINS(symm_last_error(),
                      a2av ? "rank 1's table for rank 0 is past the 0 bytes of data it offers"
                           : "rank 1 published its send data at offset 1099511627776");
  if (rank == 1) {
    void *forged = NULL;
    ASSERT_EQ(pthread_join(thread, &forged), 0);
    ASSERT(forged); /* the call published a zero-copy offset to forge */
  }
  ASSERT_OK(symm_comm_barrier(comm));
  check_recovers(comm, rank, size);
  for (size_t i = 0; i < n; i++) x[i] = (float)rank;
  ASSERT_OK(forged_call(comm, x, n, a2av));
  for (size_t i = 0; i < n; i += 997)
    ASSERT_EQ((int)x[a2av ? n + i : i], a2av ? (int)(i / (n / 2)) : size * (size - 1) / 2);
  ASSERT_OK(symm_tensor_free(t));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(coll_forged_zero_copy_offset) {
  ASSERT_EQ(test_run_ranks_timed(2, forged_offset_rank, NULL, 30000, 20000), 0);
  return 0;
}

TEST_IMPL(coll_a2av_forged_zero_copy_offset) {
  static int a2av = 1;
  ASSERT_EQ(test_run_ranks_timed(2, forged_offset_rank, &a2av, 30000, 20000), 0);
  return 0;
}

/* One rank: every collective is its input, in and out of place, every op
 * (avg too) and kind; no scratch is made. */
static int one_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  int32_t in[7] = {5, -3, 7, 0, 11, -13, 2}, out[7];
  for (int op = 0; op < SYMM_REDUCE_COUNT_; op++) {
    memset(out, 0, sizeof out);
    ASSERT_OK(symm_all_reduce(comm, in, out, 7, SYMM_DTYPE_I32, (symm_redop_t)op, NULL));
    ASSERT_MSG(memcmp(in, out, sizeof in) == 0, "all_reduce %s", symm_redop_name(op));
    ASSERT_OK(symm_reduce_scatter(comm, in, in, 7, SYMM_DTYPE_I32, (symm_redop_t)op, NULL));
  }
  memset(out, 0, sizeof out);
  ASSERT_OK(symm_all_gather(comm, in, out, 7, SYMM_DTYPE_I32, NULL));
  ASSERT_MSG(memcmp(in, out, sizeof in) == 0, "all_gather");
  memset(out, 0, sizeof out);
  ASSERT_OK(symm_all_to_all(comm, in, out, 7, SYMM_DTYPE_I32, NULL));
  ASSERT_MSG(memcmp(in, out, sizeof in) == 0, "all_to_all");
  memset(out, 0, sizeof out);
  ASSERT_OK(symm_broadcast(comm, in, out, 7, SYMM_DTYPE_I32, 0, NULL));
  ASSERT_MSG(memcmp(in, out, sizeof in) == 0, "broadcast");
  ASSERT_RES(symm_broadcast(comm, in, out, 7, SYMM_DTYPE_I32, 1, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_MSG(symm_comm_scratch_current(comm) == NULL, "a one-rank collective made a scratch");
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(coll_one_rank) {
  ASSERT_EQ(test_run_ranks(1, one_rank, NULL), 0);
  return 0;
}

/* ------------------------------------------------ cross-memory attach
 * All-gather, broadcast and all-to-all from ordinary memory whose pieces
 * reach the CPU engine's threshold (32 KiB a read) are read in the peers'
 * processes with process_vm_readv, where the library's probe (at a rank's
 * first such call) found that every peer may be read.  These tests need that: where the
 * probe says no (Yama ptrace_scope >= 1, a seccomp filter), they SKIP with
 * the library's own reason. */

#define CMA_N 20011 /* i32 per piece: 80 KB, above the threshold */

/* A communicator whose one call is the kind that probes cross-memory
 * attach, at a rank's first call that could read its peers: an all-gather
 * from malloc'd memory, pieces above the threshold. */
static void cma_probing_comm(int size) {
  symm_comm_t *comm = init_comm();
  int32_t *send = calloc(CMA_N, sizeof *send), *recv = calloc(CMA_N * (size_t)size, sizeof *recv);
  ASSERT(send && recv);
  ASSERT_OK(symm_all_gather(comm, send, recv, CMA_N, SYMM_DTYPE_I32, NULL));
  free(send);
  free(recv);
  symm_comm_destroy(comm);
}

static int cma_probe_rank(int rank, int size, void *arg) {
  char path[256];
  test_log_coll_to(arg, "probe", rank, "INFO", path, sizeof path);
  cma_probing_comm(size);
  return 0;
}

/* Whether the library turns cross-memory attach on for ranks started as
 * the tests start them; else the reason one of them logged, in why. */
static bool cma_permitted(char *why, size_t cap) {
  char dir[] = "/tmp/symm-cma-XXXXXX";
  ASSERT(mkdtemp(dir));
  ASSERT_EQ(test_run_ranks(2, cma_probe_rank, dir), 0);
  int on = 0;
  snprintf(why, cap, "the library logged no verdict on cross-memory attach");
  for (int r = 0; r < 2; r++) {
    char path[256], line[512];
    snprintf(path, sizeof path, "%s/probe-%d.log", dir, r);
    FILE *f = fopen(path, "r");
    ASSERT(f != NULL);
    while (fgets(line, sizeof line, f)) {
      const char *off = strstr(line, "cross-memory attach off: ");
      if (strstr(line, "cross-memory attach on")) on++;
      if (off) snprintf(why, cap, "%s", off);
    }
    fclose(f);
  }
  char cmd[64];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  ASSERT_EQ(system(cmd), 0);
  why[strcspn(why, "\n")] = '\0';
  return on == 2;
}

/* Whether a line of the log at path holds `text`. */
static bool cma_log_mentions(const char *path, const char *text) {
  FILE *f = fopen(path, "r");
  ASSERT(f != NULL);
  char line[512];
  bool said = false;
  while (fgets(line, sizeof line, f)) said |= strstr(line, text) != NULL;
  fclose(f);
  return said;
}

/* A communicator whose calls could never read a peer's memory (small
 * calls, an all-reduce) never probes: its log says nothing of
 * cross-memory attach.  The next one's first large all-gather from
 * malloc'd memory probes, and the log gives the verdict (on or off). */
static int cma_lazy_rank(int rank, int size, void *arg) {
  char path[256];
  test_log_coll_to(arg, "lazy", rank, "INFO", path, sizeof path);
  unsetenv("SYMM_HOST_CMA"); /* off is said at init */
  symm_comm_t *comm = init_comm();
  int32_t small[8] = {rank}, all[8 * 8];
  ASSERT_OK(symm_all_reduce(comm, small, small, 8, SYMM_DTYPE_I32, SYMM_REDUCE_SUM, NULL));
  ASSERT_OK(symm_all_gather(comm, small, all, 8, SYMM_DTYPE_I32, NULL));
  symm_comm_destroy(comm);
  ASSERT_MSG(!cma_log_mentions(path, "cross-memory attach"), "rank %d probed cross-memory attach without a call that "
             "could use it", rank);
  cma_probing_comm(size);
  ASSERT_MSG(cma_log_mentions(path, "cross-memory attach"), "rank %d gave no verdict on cross-memory attach at its first "
             "large all-gather from malloc'd memory", rank);
  return 0;
}

TEST_IMPL(coll_cma_probe_lazy) {
  ASSERT_EQ(test_run_ranks_in_tmpdir(2, cma_lazy_rank, NULL), 0);
  return 0;
}

#define CMA_SKIP_UNLESS_PERMITTED()                                           \
  do {                                                                        \
    char why_[512];                                                           \
    if (!cma_permitted(why_, sizeof why_)) {                                  \
      printf("SKIP: %s\n", why_);                                             \
      return TEST_SKIP;                                                       \
    }                                                                         \
  } while (0)

static void cma_fill(int32_t *p, size_t n, int rank, int block, int call) {
  for (size_t i = 0; i < n; i++)
    p[i] = (int32_t)(rank << 24 | block << 16 | call << 12) + (int32_t)(i % 4093);
}

/* The paths ("cma", "staged late", ...) this rank's log gives its calls,
 * in order, against want[0..n). */
static void cma_check_paths(const char *path, int rank, const char *const *want, int n) {
  static const char *const paths[] = {"cma", "staged", "staged late", "zero copy",
                                      "zero copy, pairwise swap"};
  FILE *f = fopen(path, "r");
  ASSERT(f != NULL);
  char line[512];
  int call = 0;
  while (fgets(line, sizeof line, f)) {
    line[strcspn(line, "\n")] = '\0';
    const char *at = strstr(line, " symm_"), *colon = at ? strstr(at, ": ") : NULL;
    if (!colon || !strstr(at, " #")) continue;
    bool known = false;
    for (size_t i = 0; i < sizeof paths / sizeof *paths; i++) known |= !strcmp(colon + 2, paths[i]);
    if (!known) continue; /* the other COLL lines */
    if (call < n && strcmp(colon + 2, want[call]) != 0)
      TEST_FAIL_("rank %d: call %d took another path than \"%s\":%s", rank, call, want[call], at);
    call++;
  }
  fclose(f);
  ASSERT_EQ(call, n);
}

typedef enum { CMA_ALL_GATHER, CMA_BROADCAST, CMA_ALL_TO_ALL, CMA_ALL_REDUCE, CMA_A2AV } cma_kind_t;

/* An all-to-all-v of n i32 to every rank, as an all-to-all's blocks. */
static symm_result_t cma_a2av(symm_comm_t *comm, int size, const int32_t *send, int32_t *recv,
                              size_t n) {
  size_t counts[16];
  ASSERT(size <= 16);
  for (int r = 0; r < size; r++) counts[r] = n;
  return symm_all_to_all_v(comm, send, counts, NULL, recv, counts, NULL, SYMM_DTYPE_I32, NULL);
}

/* One checked call of kind k, n i32 a piece (all-to-all: a block), from
 * malloc'd memory, in place or not; `call` salts the data and picks a
 * broadcast's root (call % size). */
static void cma_call(symm_comm_t *comm, int rank, int size, cma_kind_t k, size_t n, bool in_place,
                     int call) {
  const size_t whole = n * (size_t)size;
  int32_t *buf = malloc(whole * sizeof *buf), *out = malloc(whole * sizeof *out);
  int32_t *want = malloc(whole * sizeof *want);
  ASSERT(buf && out && want);
  int32_t *recv = in_place ? buf : out;
  const int root = call % size;
  size_t check = whole;
  if (k == CMA_ALL_GATHER) {
    int32_t *send = in_place ? buf + (size_t)rank * n : buf;
    cma_fill(send, n, rank, 0, call);
    ASSERT_OK(symm_all_gather(comm, send, recv, n, SYMM_DTYPE_I32, NULL));
    for (int r = 0; r < size; r++) cma_fill(want + (size_t)r * n, n, r, 0, call);
  } else if (k == CMA_BROADCAST) {
    cma_fill(buf, n, rank, 0, call);
    ASSERT_OK(symm_broadcast(comm, buf, recv, n, SYMM_DTYPE_I32, root, NULL));
    cma_fill(want, n, root, 0, call);
    check = n;
  } else if (k == CMA_ALL_TO_ALL || k == CMA_A2AV) {
    for (int b = 0; b < size; b++) cma_fill(buf + (size_t)b * n, n, rank, b, call);
    if (k == CMA_ALL_TO_ALL) ASSERT_OK(symm_all_to_all(comm, buf, recv, n, SYMM_DTYPE_I32, NULL));
    else ASSERT_OK(cma_a2av(comm, size, buf, recv, n));
    for (int r = 0; r < size; r++) cma_fill(want + (size_t)r * n, n, r, rank, call);
  } else {
    for (size_t i = 0; i < n; i++) buf[i] = rank + (int32_t)(i % 7);
    ASSERT_OK(symm_all_reduce(comm, buf, recv, n, SYMM_DTYPE_I32, SYMM_REDUCE_SUM, NULL));
    for (size_t i = 0; i < n; i++) want[i] = size * (int32_t)(i % 7) + size * (size - 1) / 2;
    check = n;
  }
  ASSERT_MSG(memcmp(recv, want, check * sizeof *want) == 0, "call %d (kind %d, %zu a piece, %s): "
             "wrong result", call, (int)k, n, in_place ? "in place" : "out of place");
  free(buf);
  free(out);
  free(want);
}

/* The CPUs this process may run on, as the ranks' (CPU engine: a
 * broadcast reads in the root's process only while the ranks have a CPU
 * each). */
static int cma_cpus(void) {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 0;
}

/* Which paths the calls take: every data-moving kind out of place from
 * malloc'd memory reads in the peers' processes (a broadcast only where
 * the ranks have a CPU each), and so do an all-gather and a broadcast in
 * place there, and an all-to-all-v whose senders send 64 KiB or more; a
 * small call, an all-to-all in place (a rank overwrites what its peers
 * read) and an all-reduce stage.  Then 200 all-gathers
 * back to back, each rank rewriting its sendbuf as soon as a call
 * returns: a peer still reading it (no exit barrier) shows as a wrong
 * result. */
static int cma_paths_rank(int rank, int size, void *arg) {
  char path[256];
  test_log_coll_to(arg, "paths", rank, "TRACE", path, sizeof path);
  symm_comm_t *comm = init_comm();
  const char *bc = cma_cpus() >= size ? "cma" : "staged";
  const char *const want[] = {"cma", "staged", "cma", bc, bc, "cma", "staged", "staged", "cma",
                              "staged"};
  cma_call(comm, rank, size, CMA_ALL_GATHER, CMA_N, false, 0);
  cma_call(comm, rank, size, CMA_ALL_GATHER, 1000, false, 1);
  cma_call(comm, rank, size, CMA_ALL_GATHER, CMA_N, true, 2);
  cma_call(comm, rank, size, CMA_BROADCAST, CMA_N, false, 3);
  cma_call(comm, rank, size, CMA_BROADCAST, CMA_N, true, 4);
  cma_call(comm, rank, size, CMA_ALL_TO_ALL, CMA_N, false, 5);
  cma_call(comm, rank, size, CMA_ALL_TO_ALL, CMA_N, true, 6);
  cma_call(comm, rank, size, CMA_ALL_REDUCE, CMA_N, false, 7);
  cma_call(comm, rank, size, CMA_A2AV, CMA_N, false, 8);
  cma_call(comm, rank, size, CMA_A2AV, 1000, false, 9); /* under 64 KiB a sender: staged */
  enum { BACK_TO_BACK = 200 };
  const size_t n = CMA_N, whole = n * (size_t)size;
  int32_t *send = malloc(n * sizeof *send), *recv = malloc(whole * sizeof *recv);
  int32_t *expect = malloc(whole * sizeof *expect);
  ASSERT(send && recv && expect);
  for (int it = 0; it < BACK_TO_BACK; it++) {
    cma_fill(send, n, rank, 0, it);
    ASSERT_OK(symm_all_gather(comm, send, recv, n, SYMM_DTYPE_I32, NULL));
    for (int r = 0; r < size; r++) cma_fill(expect + (size_t)r * n, n, r, 0, it);
    ASSERT_MSG(memcmp(recv, expect, whole * sizeof *expect) == 0, "back to back, call %d", it);
  }
  free(send);
  free(recv);
  free(expect);
  symm_comm_destroy(comm);
  const int nwant = (int)(sizeof want / sizeof *want);
  const char *all[sizeof want / sizeof *want + BACK_TO_BACK];
  for (int i = 0; i < nwant + BACK_TO_BACK; i++) all[i] = i < nwant ? want[i] : "cma";
  cma_check_paths(path, rank, all, nwant + BACK_TO_BACK);
  return 0;
}

TEST_IMPL(coll_cma_paths) {
  CMA_SKIP_UNLESS_PERMITTED();
  ASSERT_EQ(test_run_ranks_in_tmpdir(2, cma_paths_rank, NULL), 0);
  ASSERT_EQ(test_run_ranks_in_tmpdir(3, cma_paths_rank, NULL), 0);
  return 0;
}

/* Element k of the row that rank `from` sends to expert e of rank `to`,
 * in the all-to-all-v numbered `salt` of a test. */
static int32_t row_value(int from, int to, int e, size_t k, int salt) {
  return (int32_t)mix64((uint64_t)from | (uint64_t)to << 8 | (uint64_t)(salt & 0xff) << 16 |
                        (uint64_t)e << 24 | (uint64_t)k << 40);
}

/* An all-to-all-v of ne experts, one row of `row` i32 from every rank to
 * every expert of every rank (symm_all_to_all_vdev_2d: sent rank-major
 * (p, e), received expert-major (e, p)), from send into recv (want: room
 * for the result); every row and out_splits_offsets checked. */
static void a2av_rows(symm_comm_t *comm, int rank, int size, int32_t *send, int32_t *recv,
                      int32_t *want, int ne, size_t row, int salt) {
  const size_t rows = (size_t)size * (size_t)ne;
  int64_t *splits = malloc(rows * sizeof *splits), *so = malloc(2 * rows * sizeof *so);
  ASSERT(splits && so);
  for (int p = 0; p < size; p++)
    for (int e = 0; e < ne; e++) {
      splits[(size_t)p * (size_t)ne + (size_t)e] = 1;
      for (size_t k = 0; k < row; k++) {
        send[((size_t)p * (size_t)ne + (size_t)e) * row + k] = row_value(rank, p, e, k, salt);
        want[((size_t)e * (size_t)size + (size_t)p) * row + k] = row_value(p, rank, e, k, salt);
      }
    }
  ASSERT_OK(symm_all_to_all_vdev_2d(comm, send, rows, recv, rows, row, SYMM_DTYPE_I32, splits,
                                    so, ne, 1, NULL));
  for (size_t i = 0; i < rows; i++) {
    ASSERT_MSG(so[i] == 1 && so[rows + i] == (int64_t)i, "out_splits_offsets[%zu]: %lld at "
               "%lld", i, (long long)so[i], (long long)so[rows + i]);
    ASSERT_MSG(memcmp(recv + i * row, want + i * row, row * sizeof *want) == 0,
               "expert %zu from rank %zu (%d experts, %zu-byte rows, recvbuf %zu bytes past a "
               "page): wrong row", i / (size_t)size, i % (size_t)size, ne, row * sizeof *want,
               (size_t)((uintptr_t)recv % 4096));
  }
  free(splits);
  free(so);
}

/* Reads in the peers' processes into a receive buffer at every placement
 * near the window that the kernel copies slowly (dst 1-63 bytes past src
 * modulo the page: read through a bounce buffer, cpu_cma.c) and either
 * side of it: send data on a page boundary, recvbuf `off` bytes past one.
 * An all-gather of 128 KiB (whole pages) a piece reads each peer's piece
 * alone at dst - src = off; one of 311300 bytes a piece (76 pages and 4
 * bytes: more than one round of the 256 KiB bounce buffer) at off + 4r
 * for rank r's.  An all-to-all-v of 32 experts, a row of 2064 bytes each
 * (under the 8 KiB from which a piece of a list bounces), and one of 8
 * experts of 8208-byte rows, read every chunk of a sender in one call:
 * sent rank-major, received expert-major, so that the chunks' dst - src
 * differ by a row (mod 4096) from one expert to the next and a list holds
 * bounced and direct pieces, first, inside and last.  Every element
 * checked, and the path ("cma") from the log. */
enum { PLACE_PAGE = 4096 };
static const size_t place_offs[] = {0, 4, 16, 32, 60, 64, 4092};
#define PLACE_OFFS (sizeof place_offs / sizeof place_offs[0])

/* An all-gather of n i32 a piece from send (on a page) into room +
 * place_offs[o], for every o; `call` numbers the data. */
static void place_gather(symm_comm_t *comm, int rank, int size, int32_t *send, char *room,
                         int32_t *want, size_t n, int call) {
  for (size_t o = 0; o < PLACE_OFFS; o++) {
    int32_t *recv = (int32_t *)(room + place_offs[o]);
    cma_fill(send, n, rank, 0, call + (int)o);
    ASSERT_OK(symm_all_gather(comm, send, recv, n, SYMM_DTYPE_I32, NULL));
    for (int r = 0; r < size; r++) cma_fill(want + (size_t)r * n, n, r, 0, call + (int)o);
    ASSERT_MSG(memcmp(recv, want, n * (size_t)size * sizeof *want) == 0, "all-gather of %zu "
               "bytes a piece, recvbuf %zu bytes past a page: wrong result", n * sizeof *want,
               place_offs[o]);
  }
}

/* The all-to-all-v of a2av_rows into room + place_offs[o], for every o. */
static void place_a2av(symm_comm_t *comm, int rank, int size, int32_t *send, char *room,
                       int32_t *want, int ne, size_t row, int call) {
  for (size_t o = 0; o < PLACE_OFFS; o++)
    a2av_rows(comm, rank, size, send, (int32_t *)(room + place_offs[o]), want, ne, row,
              call + (int)o);
}

static int cma_placements_rank(int rank, int size, void *arg) {
  char path[256];
  test_log_coll_to(arg, "placements", rank, "TRACE", path, sizeof path);
  symm_comm_t *comm = init_comm();
  const size_t most = 77825 * (size_t)size; /* i32: the largest call's recvbuf */
  const size_t span = (most * sizeof(int32_t) + 2 * PLACE_PAGE + PLACE_PAGE - 1) / PLACE_PAGE *
                      PLACE_PAGE; /* aligned_alloc takes multiples of the alignment */
  int32_t *send = aligned_alloc(PLACE_PAGE, span), *want = malloc(most * sizeof *want);
  char *room = aligned_alloc(PLACE_PAGE, span);
  ASSERT(send && want && room);
  place_gather(comm, rank, size, send, room, want, 32768, 0);
  place_gather(comm, rank, size, send, room, want, 77825, 8);
  place_a2av(comm, rank, size, send, room, want, 32, 516, 16);
  place_a2av(comm, rank, size, send, room, want, 8, 2052, 24);
  free(send), free(want), free(room);
  symm_comm_destroy(comm);
  const char *all[4 * PLACE_OFFS];
  for (size_t i = 0; i < 4 * PLACE_OFFS; i++) all[i] = "cma";
  cma_check_paths(path, rank, all, (int)(4 * PLACE_OFFS));
  return 0;
}

TEST_IMPL(coll_cma_placements) {
  CMA_SKIP_UNLESS_PERMITTED();
  ASSERT_EQ(test_run_ranks_in_tmpdir(2, cma_placements_rank, NULL), 0);
  ASSERT_EQ(test_run_ranks_in_tmpdir(3, cma_placements_rank, NULL), 0);
  return 0;
}

/* Rank 1 sets SYMM_HOST_CMA=off (and says so at init): it never
 * publishes the group of cross-memory attach, so the others, which do,
 * stage late and every result is right; a broadcast whose root is rank 1
 * stages as it always did (its readers send nothing), and so does every
 * broadcast where the 3 ranks share CPUs. */
static int cma_off_rank(int rank, int size, void *arg) {
  char path[256];
  test_log_coll_to(arg, "off", rank, "TRACE", path, sizeof path);
  if (rank == 1) setenv("SYMM_HOST_CMA", "off", 1);
  symm_comm_t *comm = init_comm();
  cma_call(comm, rank, size, CMA_ALL_GATHER, CMA_N, false, 0);
  cma_call(comm, rank, size, CMA_BROADCAST, CMA_N, false, 1); /* root 1 */
  cma_call(comm, rank, size, CMA_ALL_TO_ALL, CMA_N, false, 2);
  cma_call(comm, rank, size, CMA_BROADCAST, CMA_N, false, 3); /* root 0 */
  cma_call(comm, rank, size, CMA_ALL_GATHER, CMA_N, true, 4);
  cma_call(comm, rank, size, CMA_A2AV, CMA_N, false, 5);
  symm_comm_destroy(comm);
  const char *bc = cma_cpus() >= size ? "staged late" : "staged";
  /* all-to-all-v: the late staging round is every rank's */
  const char *const want[] = {"staged late", "staged", "staged late", bc, "staged late",
                              "staged late"};
  cma_check_paths(path, rank, want, 6);
  ASSERT_MSG(cma_log_mentions(path, rank == 1 ? "cross-memory attach off: SYMM_HOST_CMA=off"
                                              : "cross-memory attach on"),
             "rank %d's log does not say that cross-memory attach is %s", rank,
             rank == 1 ? "off" : "on");
  return 0;
}

TEST_IMPL(coll_cma_off_one_rank) {
  CMA_SKIP_UNLESS_PERMITTED();
  ASSERT_EQ(test_run_ranks_in_tmpdir(3, cma_off_rank, NULL), 0);
  return 0;
}

/* A thread of the last rank acts on its own call (forger) once the call
 * has published the group of cross-memory attach (its pad, phase 1),
 * before any peer has come (they wait for the store key): it kills its
 * process, or rewrites the published address of its sendbuf to one mapped
 * nowhere (the first page, below mmap_min_addr). */
#define CMA_BAD_ADDRESS ((uint64_t)4096)

static void cma_start_saboteur(symm_comm_t *comm, int rank, bool kill, forger_t *f,
                               pthread_t *t) {
  void *pad = NULL;
  ASSERT_OK(symm_tensor_signal_pad(symm_comm_scratch_current(comm), rank, &pad));
  *f = (forger_t){.slot = pad, .store = symm_comm_store(comm), .offset = CMA_BAD_ADDRESS,
                  .key = "test/cma/acted", .kill = kill};
  for (int h = 0; h < 2; h++) f->before[h] = atomic_load(&f->slot[h].flag);
  ASSERT_EQ(pthread_create(t, NULL, forger, f), 0);
}

/* After an all-gather from malloc'd memory that every rank reads with
 * cross-memory attach (each rank's first such call probes its peers: a
 * probe that found a peer dead would stage instead), the last rank dies
 * once its next all-gather has arrived, before its peers come.  They come once its process is gone,
 * see every rank arrived, take the path of cross-memory attach (their
 * logs say so), fail to read the dead rank (ESRCH) and fail the call with
 * SYMM_ERR_PEER_LOST naming it, at once rather than at their timeout: no
 * rank returns success with part of the data. */
static int cma_killed_rank(int rank, int size, void *arg) {
  char path[256];
  test_log_coll_to(arg, "killed", rank, "TRACE", path, sizeof path);
  symm_comm_t *comm = init_comm();
  check_recovers(comm, rank, size); /* the scratch exists: its pad is watched */
  cma_call(comm, rank, size, CMA_ALL_GATHER, CMA_N, false, 0);
  const size_t n = CMA_N;
  int32_t *send = malloc(n * sizeof *send), *recv = malloc(n * (size_t)size * sizeof *recv);
  ASSERT(send && recv);
  cma_fill(send, n, rank, 0, 0);
  symm_store_t *store = symm_comm_store(comm);
  if (rank == size - 1) {
    char pid[16];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    ASSERT_OK(symm_store_set(store, "test/cma/pid", pid, strlen(pid) + 1));
    forger_t f;
    pthread_t t;
    cma_start_saboteur(comm, rank, true, &f, &t);
    symm_all_gather(comm, send, recv, n, SYMM_DTYPE_I32, NULL); /* dies in it */
    TEST_FAIL_("rank %d: the all-gather returned; its thread should have killed it", rank);
  }
  test_store_await(store, "test/cma/acted");
  char pid[16] = "";
  size_t len = 0;
  ASSERT_OK(symm_store_get(store, "test/cma/pid", pid, sizeof pid, &len, -1));
  const uint64_t start = test_now_ms();
  while (!symm_process_gone(atoi(pid))) {
    ASSERT_LT(test_now_ms() - start, 10000);
    sched_yield();
  }
  ASSERT_RES(symm_all_gather(comm, send, recv, n, SYMM_DTYPE_I32, NULL), SYMM_ERR_PEER_LOST);
  printf("rank %d: %s\n", rank, symm_last_error());
  char want[32];
  snprintf(want, sizeof want, "rank %d", size - 1);
  ASSERT_STR_CONTAINS(symm_last_error(), want);
  ASSERT_LT(test_now_ms() - start, 10000); /* not the 20 s timeout */
  free(send);
  free(recv);
  symm_comm_destroy(comm);
  static const char *const paths[] = {"staged", "cma", "cma"};
  cma_check_paths(path, rank, paths, 3);
  return 0;
}

TEST_IMPL(coll_cma_peer_killed) {
  CMA_SKIP_UNLESS_PERMITTED();
  test_job_opts_t o = {.timeout_ms = 40000, .store_timeout_ms = 20000, .kill_rank = -1};
  ASSERT_EQ(test_run_ranks_in_tmpdir(3, cma_killed_rank, &o), 1); /* only the one that died */
  return 0;
}

/* The last rank's published address is rewritten to one mapped nowhere
 * once its all-gather arrived: its peers' reads of it fail (EFAULT) while
 * its own reads succeed, and still the call fails on every rank, the
 * last included, with the same message naming the first reader that
 * failed and the rank it read.  The communicator then works: a barrier
 * and an all-gather of the same kind, its data checked. */
static cma_kind_t cma_fault_kind = CMA_ALL_GATHER; /* set before the ranks fork */

static bool cma_forge_room; /* the published room of an all-to-all-v sender instead */

static int cma_bad_address_rank(int rank, int size, void *arg) {
  char path[256];
  test_log_coll_to(arg, "fault", rank, "TRACE", path, sizeof path);
  symm_comm_t *comm = init_comm();
  check_recovers(comm, rank, size);
  const size_t n = CMA_N;
  int32_t *send = malloc(n * sizeof *send), *recv = malloc(n * (size_t)size * sizeof *recv);
  ASSERT(send && recv);
  cma_fill(send, n, rank, 0, 0);
  symm_store_t *store = symm_comm_store(comm);
  forger_t f;
  pthread_t t;
  if (rank == size - 1) {
    cma_start_saboteur(comm, rank, false, &f, &t);
    if (cma_forge_room) f.room = true, f.offset = 0; /* before the thread reads them: */
  } else {                                           /* it waits for the call */
    test_store_await(store, "test/cma/acted");
  }
  const bool a2av = cma_fault_kind == CMA_A2AV;
  ASSERT_RES(a2av ? cma_a2av(comm, size, send, recv, n / (size_t)size)
                  : symm_all_gather(comm, send, recv, n, SYMM_DTYPE_I32, NULL),
             cma_forge_room ? SYMM_ERR_PROTOCOL : SYMM_ERR_SYSTEM);
  printf("rank %d: %s\n", rank, symm_last_error());
  char want[128];
  if (cma_forge_room) {
    snprintf(want, sizeof want, "rank %d's table for rank 0 is past the 0 bytes", size - 1);
    ASSERT_STR_CONTAINS(symm_last_error(), want);
  } else {
    snprintf(want, sizeof want, "rank 0 could not read rank %d's send data", size - 1);
    ASSERT_STR_CONTAINS(symm_last_error(), want);
    ASSERT_STR_CONTAINS(symm_last_error(), strerror(EFAULT));
  }
  if (rank == size - 1) {
    void *acted = NULL;
    ASSERT_EQ(pthread_join(t, &acted), 0);
    ASSERT(acted); /* the call published an address to rewrite */
  }
  ASSERT_OK(symm_comm_barrier(comm));
  cma_call(comm, rank, size, cma_fault_kind, a2av ? CMA_N / 2 : CMA_N, false, 1);
  free(send);
  free(recv);
  symm_comm_destroy(comm);
  /* A call refused for its tables moves nothing and logs no path. */
  static const char *const paths[] = {"staged", "cma", "cma"};
  static const char *const refused[] = {"staged", "cma"};
  if (cma_forge_room) cma_check_paths(path, rank, refused, 2);
  else cma_check_paths(path, rank, paths, 3);
  return 0;
}

TEST_IMPL(coll_cma_bad_address) {
  CMA_SKIP_UNLESS_PERMITTED();
  ASSERT_EQ(test_run_ranks_in_tmpdir(3, cma_bad_address_rank, NULL), 0);
  return 0;
}

/* The same with an all-to-all-v from malloc'd memory (80 KB a sender, in
 * blocks of 26.7 KB: read in the senders' processes, one system call a
 * sender). */
TEST_IMPL(coll_cma_a2av_bad_address) {
  CMA_SKIP_UNLESS_PERMITTED();
  cma_fault_kind = CMA_A2AV;
  ASSERT_EQ(test_run_ranks_in_tmpdir(3, cma_bad_address_rank, NULL), 0);
  return 0;
}

/* The size of sendbuf that an all-to-all-v sender read with cross-memory
 * attach publishes is rewritten to 0 once its call arrived: its table
 * entries now reach past it, and every rank fails with
 * SYMM_ERR_PROTOCOL before any row is read (a pad is read, never
 * trusted: without the check a forged entry would read whatever lies past
 * sendbuf in the sender's process). */
TEST_IMPL(coll_cma_a2av_forged_room) {
  CMA_SKIP_UNLESS_PERMITTED();
  cma_fault_kind = CMA_A2AV;
  cma_forge_room = true;
  ASSERT_EQ(test_run_ranks_in_tmpdir(3, cma_bad_address_rank, NULL), 0);
  return 0;
}

/* An all-to-all-v from malloc'd memory with 1100 experts: a sender's 1100
 * chunks for a receiver take more iovecs than one process_vm_readv takes
 * (1024), so each sender is read in two system calls.  Every row checked,
 * out_splits_offsets too, and the path read from the log. */
#define MANY_E 1100
#define MANY_ROW 16 /* i32 a row: 64 B, 70 KB a sender and peer */

static int cma_many_chunks_rank(int rank, int size, void *arg) {
  char path[256];
  test_log_coll_to(arg, "many", rank, "TRACE", path, sizeof path);
  symm_comm_t *comm = init_comm();
  const size_t elems = (size_t)size * MANY_E * MANY_ROW;
  int32_t *send = malloc(elems * sizeof *send), *recv = malloc(elems * sizeof *recv);
  int32_t *want = malloc(elems * sizeof *want);
  ASSERT(send && recv && want);
  a2av_rows(comm, rank, size, send, recv, want, MANY_E, MANY_ROW, 0);
  free(send), free(recv), free(want);
  symm_comm_destroy(comm);
  static const char *const paths[] = {"cma"};
  cma_check_paths(path, rank, paths, 1);
  return 0;
}

TEST_IMPL(coll_cma_a2av_many_chunks) {
  CMA_SKIP_UNLESS_PERMITTED();
  ASSERT_EQ(test_run_ranks_in_tmpdir(2, cma_many_chunks_rank, NULL), 0);
  return 0;
}
