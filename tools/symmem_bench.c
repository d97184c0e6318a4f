/*
 * symmem-bench: time symmem's collectives over a sweep of sizes and print
 * them the way nccl-tests does, so that people and scripts that read those
 * tables read ours.
 *
 *   symmem-run -n N -- symmem-bench [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS]
 *       [-w WARMUP] [-c 0|1] [--coll C] [--op OP] [--dtype T] [--algo A]
 *       [--inplace 0|1] [--root R] [--graph] [--csv|--json] [--plot FILE.png]
 *
 * Every rank runs the same sweep; rank 0 prints.  Per size: `warmup` calls,
 * a barrier, then `iters` calls back to back; the time is the mean per call
 * of the slowest rank (each rank posts its own mean in the job's store,
 * rank 0 takes the maximum, so no collective of ours is needed to report).
 * With -c 1 the buffers are then filled with deterministic per-rank data,
 * one more call runs (with --graph: one replay of a graph capturing it),
 * and every received value is compared with a reference computed here;
 * mismatches are the #wrong column.
 *
 * On GPU backends (CUDA builds) the calls go on one stream and are timed
 * with CUDA events, eagerly or (--graph) captured in one CUDA graph; when
 * libnccl loads, the same calls through NCCL on the same buffers and stream
 * give the nccl_time and ratio columns.
 *
 * Exit status: 0; 1 when a call fails, a value is wrong, or the plot cannot
 * be made (the table is printed first); 2 for usage errors.
 */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/internal.h"
#include "tool_common.h"

#ifdef SYMM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

#define BENCH_EXIT_FAIL 1
#define BENCH_EXIT_USAGE 2
/* Byte written over receive buffers before a checked call, so that a value
 * the call never wrote is counted wrong (it decodes to no expected value in
 * any dtype). */
#define BENCH_POISON 0xA5
#define BENCH_MAX_SIZES 64

/* ------------------------------------------------------------- options */

typedef enum bench_coll {
  BENCH_ALL_REDUCE,
  BENCH_ALL_GATHER,
  BENCH_REDUCE_SCATTER,
  BENCH_BROADCAST,
  BENCH_ALL_TO_ALL,
  BENCH_COLL_COUNT_
} bench_coll_t;

static const char *const coll_names[BENCH_COLL_COUNT_] = {
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all"};

typedef enum bench_format { BENCH_TABLE, BENCH_CSV, BENCH_JSON } bench_format_t;

typedef struct bench_options {
  size_t min_bytes, max_bytes;
  size_t step_factor;
  int iters, warmup;
  int check;
  bench_coll_t coll;
  symm_redop_t op;
  symm_dtype_t dtype;
  symm_algo_t algo;       /* --algo, else SYMM_ALLREDUCE_ALGO's */
  bool algo_given;        /* --algo was given: it overrides SYMM_ALLREDUCE_ALGO */
  int inplace;
  int root;
  bool graph;
  int nccl;               /* 0: do not time NCCL even where it loads */
  bench_format_t format;
  const char *plot;       /* PNG path or NULL */
  int inject;             /* testing: values corrupted per size on rank 0 */
} bench_options_t;

static void print_usage(FILE *out) {
  fprintf(out,
          "usage: symmem-bench [options]   (start N ranks with symmem-run -n N --)\n"
          "\n"
          "Times a symmem collective over a sweep of sizes; rank 0 prints an\n"
          "nccl-tests style table.\n"
          "\n"
          "options:\n"
          "  -b, --minbytes SIZE      smallest size (default 8); SIZE: 8, 1K, 4M, 1G\n"
          "  -e, --maxbytes SIZE      largest size (default 32M)\n"
          "  -f, --stepfactor F       multiply the size by F (>= 2) each step (default 2)\n"
          "  -n, --iters N            timed calls per size (default 20)\n"
          "  -w, --warmup_iters N     untimed calls before them (default 5)\n"
          "  -c, --check 0|1          1: check one call's results against a reference\n"
          "                           (the #wrong column; default 1); with --graph, one\n"
          "                           replay of a graph capturing the call\n"
          "      --coll C             all_reduce (default), all_gather, reduce_scatter,\n"
          "                           broadcast, all_to_all\n"
          "      --op OP              sum (default), min, max (reductions only)\n"
          "      --dtype T            f32 (default), bf16, f16, i32; any symmem dtype\n"
          "                           for all_gather, broadcast, all_to_all\n"
          "      --algo A             all-reduce algorithm: auto, one_shot, two_shot, ll,\n"
          "                           ll128 (default: SYMM_ALLREDUCE_ALGO, else auto)\n"
          "      --inplace 0|1        1 (default): buffers inside a symmetric tensor,\n"
          "                           in place; 0: ordinary memory, out of place\n"
          "      --root R             broadcast root (default 0)\n"
          "      --graph              GPU: capture the timed calls in one CUDA graph\n"
          "      --nccl 0|1           GPU: also time NCCL where it loads (default 1)\n"
          "      --csv                print CSV instead of the table\n"
          "      --json               print one JSON object instead of the table\n"
          "      --plot FILE.png      also draw time and bus bandwidth with gnuplot\n"
          "      --inject-errors N    testing: corrupt N received values per size on\n"
          "                           rank 0 before the check\n"
          "  -h, --help               show this help\n"
          "\n"
          "Sizes are the bytes of the whole result (nccl-tests: all_gather,\n"
          "reduce_scatter and all_to_all split them over the ranks).  time is the\n"
          "mean per call of the slowest rank; algbw = size / time; busbw = algbw\n"
          "times 2(n-1)/n (all_reduce), (n-1)/n (all_gather, reduce_scatter,\n"
          "all_to_all) or 1 (broadcast).  ratio = time / nccl_time.\n"
          "NCCL runs only with NCCL_NVLS_ENABLE=0 (set when unset); SYMM_NCCL_LIB\n"
          "names the library (default libnccl.so.2).\n");
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int code = tool_usage_error("symmem-bench", print_usage, BENCH_EXIT_USAGE, fmt, ap);
  va_end(ap);
  return code;
}


static bool parse_coll(const char *name, bench_coll_t *coll) {
  for (int i = 0; i < BENCH_COLL_COUNT_; i++)
    if (strcmp(name, coll_names[i]) == 0) {
      *coll = (bench_coll_t)i;
      return true;
    }
  return false;
}

static bool coll_reduces(bench_coll_t coll) {
  return coll == BENCH_ALL_REDUCE || coll == BENCH_REDUCE_SCATTER;
}

enum {
  OPT_COLL = 256, OPT_OP, OPT_DTYPE, OPT_ALGO, OPT_INPLACE, OPT_ROOT, OPT_GRAPH, OPT_NCCL,
  OPT_CSV, OPT_JSON, OPT_PLOT, OPT_INJECT
};

/* Returns -1 to go on, else the exit status (0 for --help). */
static int parse_options(int argc, char **argv, bench_options_t *opt) {
  static const struct option longopts[] = {
      {"minbytes", required_argument, NULL, 'b'},
      {"maxbytes", required_argument, NULL, 'e'},
      {"stepfactor", required_argument, NULL, 'f'},
      {"iters", required_argument, NULL, 'n'},
      {"warmup_iters", required_argument, NULL, 'w'},
      {"check", required_argument, NULL, 'c'},
      {"coll", required_argument, NULL, OPT_COLL},
      {"op", required_argument, NULL, OPT_OP},
      {"dtype", required_argument, NULL, OPT_DTYPE},
      {"algo", required_argument, NULL, OPT_ALGO},
      {"inplace", required_argument, NULL, OPT_INPLACE},
      {"root", required_argument, NULL, OPT_ROOT},
      {"graph", no_argument, NULL, OPT_GRAPH},
      {"nccl", required_argument, NULL, OPT_NCCL},
      {"csv", no_argument, NULL, OPT_CSV},
      {"json", no_argument, NULL, OPT_JSON},
      {"plot", required_argument, NULL, OPT_PLOT},
      {"inject-errors", required_argument, NULL, OPT_INJECT},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  *opt = (bench_options_t){.min_bytes = 8, .max_bytes = 32u << 20, .step_factor = 2,
                           .iters = 20, .warmup = 5, .check = 1, .coll = BENCH_ALL_REDUCE,
                           .op = SYMM_REDUCE_SUM, .dtype = SYMM_DTYPE_F32,
                           .algo = SYMM_ALGO_AUTO, .inplace = 1, .nccl = 1};
  bool csv = false, json = false;
  opterr = 0; /* our own messages, followed by the usage */
  int c, flag;
  while ((c = getopt_long(argc, argv, ":b:e:f:n:w:c:h", longopts, NULL)) != -1) {
    switch (c) {
    case 'b':
    case 'e': {
      int64_t v = symm_parse_size(optarg);
      if (v <= 0)
        return usage_error("%s needs a size in bytes such as 8, 1K, 4M or 1G, not '%s'",
                           c == 'b' ? "-b/--minbytes" : "-e/--maxbytes", optarg);
      *(c == 'b' ? &opt->min_bytes : &opt->max_bytes) = (size_t)v;
      break;
    }
    case 'f':
      if (!tool_parse_int(optarg, 2, 1 << 20, &flag))
        return usage_error("-f/--stepfactor needs a whole factor of at least 2, not '%s'", optarg);
      opt->step_factor = (size_t)flag;
      break;
    case 'n':
      if (!tool_parse_int(optarg, 1, 1 << 30, &opt->iters))
        return usage_error("-n/--iters needs a positive number, not '%s'", optarg);
      break;
    case 'w':
      if (!tool_parse_int(optarg, 0, 1 << 30, &opt->warmup))
        return usage_error("-w/--warmup_iters needs a number >= 0, not '%s'", optarg);
      break;
    case 'c':
      if (!tool_parse_int(optarg, 0, 1, &opt->check))
        return usage_error("-c/--check takes 0 or 1, not '%s'", optarg);
      break;
    case OPT_COLL:
      if (!parse_coll(optarg, &opt->coll))
        return usage_error("unknown collective '%s'; valid: all_reduce, all_gather, "
                           "reduce_scatter, broadcast, all_to_all", optarg);
      break;
    case OPT_OP:
      if (symm_redop_from_name(optarg, &opt->op) != SYMM_SUCCESS)
        return usage_error("%s", symm_last_error());
      break;
    case OPT_DTYPE:
      if (symm_dtype_from_name(optarg, &opt->dtype) != SYMM_SUCCESS)
        return usage_error("%s", symm_last_error());
      break;
    case OPT_ALGO:
      if (symm_algo_from_name(optarg, &opt->algo) != SYMM_SUCCESS)
        return usage_error("%s", symm_last_error());
      opt->algo_given = true;
      break;
    case OPT_INPLACE:
      if (!tool_parse_int(optarg, 0, 1, &opt->inplace))
        return usage_error("--inplace takes 0 or 1, not '%s'", optarg);
      break;
    case OPT_ROOT:
      if (!tool_parse_int(optarg, 0, 1 << 20, &opt->root))
        return usage_error("--root needs a rank, not '%s'", optarg);
      break;
    case OPT_GRAPH: opt->graph = true; break;
    case OPT_NCCL:
      if (!tool_parse_int(optarg, 0, 1, &opt->nccl))
        return usage_error("--nccl takes 0 or 1, not '%s'", optarg);
      break;
    case OPT_CSV: csv = true; break;
    case OPT_JSON: json = true; break;
    case OPT_PLOT:
      if (!*optarg) return usage_error("--plot needs a file name");
      opt->plot = optarg;
      break;
    case OPT_INJECT:
      if (!tool_parse_int(optarg, 0, 1 << 30, &opt->inject))
        return usage_error("--inject-errors needs a number >= 0, not '%s'", optarg);
      break;
    case 'h': print_usage(stdout); return 0;
    case ':': return usage_error("option %s needs a value", argv[optind - 1]);
    default:
      if (optopt > 0 && optopt < 256) return usage_error("unknown option -%c", optopt);
      return usage_error("unknown option %s", argv[optind - 1]);
    }
  }
  if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
  if (csv && json) return usage_error("--csv and --json exclude each other");
  opt->format = csv ? BENCH_CSV : json ? BENCH_JSON : BENCH_TABLE;
  if (opt->min_bytes > opt->max_bytes)
    return usage_error("-b/--minbytes (%zu) is larger than -e/--maxbytes (%zu)", opt->min_bytes,
                       opt->max_bytes);
  if (coll_reduces(opt->coll) && !symm_dtype_reducible(opt->dtype))
    return usage_error("%s reduces, which needs --dtype f32, bf16, f16 or i32, not %s",
                       coll_names[opt->coll], symm_dtype_name(opt->dtype));
  return -1;
}

/* ------------------------------------------------------------ the run */

/* NCCL, loaded at run time.  The declarations are NCCL's ABI as its header
 * defines it: every call returns an int result (0 = success), the unique id
 * is 128 opaque bytes passed by value, data types and reduction operators
 * are int enums, communicators and streams are pointers. */
#define BENCH_NCCL_ID_BYTES 128
typedef struct bench_nccl_id { char bytes[BENCH_NCCL_ID_BYTES]; } bench_nccl_id_t;
typedef void *bench_nccl_comm_t;

enum { /* ncclDataType_t values */
  NCCL_INT8_ = 0, NCCL_UINT8_ = 1, NCCL_INT32_ = 2, NCCL_UINT32_ = 3, NCCL_INT64_ = 4,
  NCCL_UINT64_ = 5, NCCL_FLOAT16_ = 6, NCCL_FLOAT32_ = 7, NCCL_FLOAT64_ = 8, NCCL_BFLOAT16_ = 9
};
enum { NCCL_SUM_ = 0, NCCL_MAX_ = 2, NCCL_MIN_ = 3 }; /* ncclRedOp_t values */

typedef struct bench_nccl {
  bool used;
  char why[320];          /* when not used */
  void *lib;
  bench_nccl_comm_t comm;
  int version;
  int (*get_version)(int *);
  int (*get_unique_id)(bench_nccl_id_t *);
  int (*comm_init_rank)(bench_nccl_comm_t *, int, bench_nccl_id_t, int);
  int (*comm_destroy)(bench_nccl_comm_t);
  const char *(*get_error_string)(int);
  int (*all_reduce)(const void *, void *, size_t, int, int, bench_nccl_comm_t, void *);
  int (*all_gather)(const void *, void *, size_t, int, bench_nccl_comm_t, void *);
  int (*reduce_scatter)(const void *, void *, size_t, int, int, bench_nccl_comm_t, void *);
  int (*broadcast)(const void *, void *, size_t, int, int, bench_nccl_comm_t, void *);
  int (*send)(const void *, size_t, int, int, bench_nccl_comm_t, void *);
  int (*recv)(void *, size_t, int, int, bench_nccl_comm_t, void *);
  int (*group_start)(void);
  int (*group_end)(void);
} bench_nccl_t;

/* What rank 0 prints for one size. */
typedef struct size_result {
  size_t bytes, count;
  double time_us;   /* slowest rank */
  double algbw, busbw;
  int64_t wrong;    /* all ranks; -1 when not checked */
  double nccl_us;   /* slowest rank; < 0 when not measured */
  const char *algo; /* all-reduce: the algorithm that ran (symm_all_reduce_algo); else "-" */
} size_result_t;

/* What each rank posts in the store for one size. */
typedef struct rank_report {
  double time_us;
  double nccl_us;
  int64_t wrong;
} rank_report_t;

/* Buffers and counts of one size. */
typedef struct layout {
  size_t count;               /* the count argument of the call */
  size_t send_elems, recv_elems;
  size_t total_elems;         /* the printed count */
  unsigned char *send, *recv;
} layout_t;

typedef struct bench {
  bench_options_t opt;
  symm_comm_t *comm;
  symm_store_t *store;
  int rank, size, device;
  size_t esize;
  size_t buf_bytes;           /* of each buffer */
  symm_tensor_t *tensor;      /* --inplace 1 */
  unsigned char *send_base, *recv_base;
  unsigned char *host_data;   /* staging: this rank's input */
  unsigned char *host_result; /* staging: what the call produced */
  void *stream;               /* cudaStream_t on GPU backends */
  int *devices;               /* rank 0: every rank's device */
  bench_nccl_t nccl;
  size_result_t results[BENCH_MAX_SIZES];
  int n_results;
} bench_t;

static int bench_rank = -1; /* for messages */

static void bench_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void bench_die(const char *fmt, ...) {
  /* One write, so that the lines of ranks failing together do not mix. */
  char msg[2048];
  int n = snprintf(msg, sizeof msg, "symmem-bench: rank %d: ", bench_rank);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg + n, sizeof msg - (size_t)n - 1, fmt, ap);
  va_end(ap);
  strcat(msg, "\n");
  fflush(stdout);
  fputs(msg, stderr);
  exit(BENCH_EXIT_FAIL);
}

/* A symm_ call that must succeed; a failure ends this rank with the
 * library's detailed message (symmem-run then stops the other ranks). */
#define BENCH_CHECK(call)                                                     \
  do {                                                                        \
    symm_result_t r_ = (call);                                                \
    if (r_ != SYMM_SUCCESS)                                                   \
      bench_die("%s:%d: %s: %s (%s)", __FILE__, __LINE__, #call,              \
                symm_strerror(r_), symm_last_error());                        \
  } while (0)

#ifdef SYMM_HAVE_CUDA
#define BENCH_CUDA_CHECK(call)                                                \
  do {                                                                        \
    cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess)                                                    \
      bench_die("%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
  } while (0)
#endif

static bool on_gpu(const bench_t *b) { return b->device >= 0; }

static double now_us(void) { return (double)symm_now_ns() / 1e3; }

/* ---- memory: CPU for the host backend, this rank's GPU otherwise */

static void *mem_alloc(const bench_t *b, size_t bytes) {
  void *p = NULL;
#ifdef SYMM_HAVE_CUDA
  if (on_gpu(b)) {
    BENCH_CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
  }
#endif
  p = malloc(bytes);
  if (!p) bench_die("out of memory allocating %zu bytes", bytes);
  return p;
}

static void mem_free(const bench_t *b, void *p) {
  if (!p) return;
#ifdef SYMM_HAVE_CUDA
  if (on_gpu(b)) {
    cudaFree(p);
    return;
  }
#endif
  free(p);
}

/* Waits for this rank's queued work and reports device-side errors. */
static void bench_sync(bench_t *b) {
#ifdef SYMM_HAVE_CUDA
  if (on_gpu(b)) BENCH_CUDA_CHECK(cudaStreamSynchronize((cudaStream_t)b->stream));
#endif
  BENCH_CHECK(symm_comm_check_async_error(b->comm));
}

static void mem_put(bench_t *b, void *dst, const void *host, size_t bytes) {
#ifdef SYMM_HAVE_CUDA
  if (on_gpu(b)) {
    BENCH_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice,
                                     (cudaStream_t)b->stream));
    bench_sync(b);
    return;
  }
#endif
  memcpy(dst, host, bytes);
}

static void mem_get(bench_t *b, void *host, const void *src, size_t bytes) {
#ifdef SYMM_HAVE_CUDA
  if (on_gpu(b)) {
    BENCH_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost,
                                     (cudaStream_t)b->stream));
    bench_sync(b);
    return;
  }
#endif
  memcpy(host, src, bytes);
}

static void mem_poison(bench_t *b, void *dst, size_t bytes) {
#ifdef SYMM_HAVE_CUDA
  if (on_gpu(b)) {
    BENCH_CUDA_CHECK(cudaMemsetAsync(dst, BENCH_POISON, bytes, (cudaStream_t)b->stream));
    bench_sync(b);
    return;
  }
#endif
  memset(dst, BENCH_POISON, bytes);
}

/* ---- element values */

static float bits_to_f32(uint32_t x) {
  float f;
  memcpy(&f, &x, sizeof f);
  return f;
}

static uint32_t f32_to_bits(float f) {
  uint32_t x;
  memcpy(&x, &f, sizeof x);
  return x;
}

static uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* NaN stays NaN */
  x += 0x7fffu + ((x >> 16) & 1u);  /* round to nearest even */
  return (uint16_t)(x >> 16);
}

/* IEEE binary16, round to nearest even, subnormals included. */
static uint16_t f32_to_f16(float f) {
  uint32_t x = f32_to_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u, exp = (x >> 23) & 0xffu, man = x & 0x7fffffu;
  if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
  int e = (int)exp - 127 + 15;
  if (e >= 31) return (uint16_t)(sign | 0x7c00u);
  uint32_t h, rest, half;
  if (e <= 0) {
    if (e < -10) return (uint16_t)sign;
    man |= 0x800000u;
    unsigned shift = (unsigned)(14 - e);
    h = man >> shift;
    rest = man & ((1u << shift) - 1);
    half = 1u << (shift - 1);
  } else {
    h = ((uint32_t)e << 10) | (man >> 13);
    rest = man & 0x1fffu;
    half = 0x1000u;
  }
  if (rest > half || (rest == half && (h & 1u))) h++; /* a carry rounds into the exponent */
  return (uint16_t)(sign | h);
}

static float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (man << 13));
  if (exp) return bits_to_f32(sign | ((exp + 112u) << 23) | (man << 13));
  float v = ldexpf((float)man, -24);
  return sign ? -v : v;
}

static void elem_store(void *buf, symm_dtype_t dt, size_t i, double v) {
  switch (dt) {
  case SYMM_DTYPE_F16: ((uint16_t *)buf)[i] = f32_to_f16((float)v); break;
  case SYMM_DTYPE_BF16: ((uint16_t *)buf)[i] = f32_to_bf16((float)v); break;
  case SYMM_DTYPE_F32: ((float *)buf)[i] = (float)v; break;
  case SYMM_DTYPE_F64: ((double *)buf)[i] = v; break;
  case SYMM_DTYPE_I8: ((int8_t *)buf)[i] = (int8_t)v; break;
  case SYMM_DTYPE_I16: ((int16_t *)buf)[i] = (int16_t)v; break;
  case SYMM_DTYPE_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
  case SYMM_DTYPE_I64: ((int64_t *)buf)[i] = (int64_t)v; break;
  case SYMM_DTYPE_U8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
  case SYMM_DTYPE_U16: ((uint16_t *)buf)[i] = (uint16_t)v; break;
  case SYMM_DTYPE_U32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
  case SYMM_DTYPE_U64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
  default: break;
  }
}

static double elem_load(const void *buf, symm_dtype_t dt, size_t i) {
  switch (dt) {
  case SYMM_DTYPE_F16: return f16_to_f32(((const uint16_t *)buf)[i]);
  case SYMM_DTYPE_BF16: return bits_to_f32((uint32_t)((const uint16_t *)buf)[i] << 16);
  case SYMM_DTYPE_F32: return ((const float *)buf)[i];
  case SYMM_DTYPE_F64: return ((const double *)buf)[i];
  case SYMM_DTYPE_I8: return ((const int8_t *)buf)[i];
  case SYMM_DTYPE_I16: return ((const int16_t *)buf)[i];
  case SYMM_DTYPE_I32: return ((const int32_t *)buf)[i];
  case SYMM_DTYPE_I64: return (double)((const int64_t *)buf)[i];
  case SYMM_DTYPE_U8: return ((const uint8_t *)buf)[i];
  case SYMM_DTYPE_U16: return ((const uint16_t *)buf)[i];
  case SYMM_DTYPE_U32: return ((const uint32_t *)buf)[i];
  case SYMM_DTYPE_U64: return (double)((const uint64_t *)buf)[i];
  default: return NAN;
  }
}

static bool dtype_unsigned(symm_dtype_t dt) {
  return dt == SYMM_DTYPE_U8 || dt == SYMM_DTYPE_U16 || dt == SYMM_DTYPE_U32 ||
         dt == SYMM_DTYPE_U64;
}

/* Input of rank r at index i.  Small integers, so that every dtype holds
 * them and every reduction order gives the same exact result: reductions
 * use [-8, 8] (sums of up to 32 ranks stay exact even in bf16); data
 * movement uses 97 values, so a value in the wrong place rarely matches. */
static double input_value(const bench_t *b, int r, size_t i) {
  if (coll_reduces(b->opt.coll)) return (double)(((i % 17) * 7 + (size_t)r * 13) % 17) - 8.0;
  double v = (double)(((i % 97) * 131 + (size_t)r * 31 + 7) % 97);
  return dtype_unsigned(b->opt.dtype) ? v : v - 48.0;
}

static double reduce_over_ranks(const bench_t *b, size_t i) {
  double acc = input_value(b, 0, i);
  for (int r = 1; r < b->size; r++) {
    double v = input_value(b, r, i);
    switch (b->opt.op) {
    case SYMM_REDUCE_MIN: acc = v < acc ? v : acc; break;
    case SYMM_REDUCE_MAX: acc = v > acc ? v : acc; break;
    default: acc += v; break;
    }
  }
  return acc;
}

/* What this rank's receive buffer must hold at index k. */
static double expected_value(const bench_t *b, const layout_t *l, size_t k) {
  size_t per = l->count;
  switch (b->opt.coll) {
  case BENCH_ALL_REDUCE: return reduce_over_ranks(b, k);
  case BENCH_REDUCE_SCATTER: return reduce_over_ranks(b, (size_t)b->rank * per + k);
  case BENCH_ALL_GATHER: return input_value(b, (int)(k / per), k % per);
  case BENCH_BROADCAST: return input_value(b, b->opt.root, k);
  case BENCH_ALL_TO_ALL:
    return input_value(b, (int)(k / per), (size_t)b->rank * per + k % per);
  default: return NAN;
  }
}

/* ---- sizes and buffers */

/* Counts and buffers for `bytes`, following nccl-tests: the size is the
 * whole result; gathers and scatters split it over the ranks (at least one
 * element each). */
static layout_t layout_for(const bench_t *b, size_t bytes) {
  size_t n = bytes / b->esize, world = (size_t)b->size;
  if (n == 0) n = 1;
  layout_t l = {0};
  switch (b->opt.coll) {
  case BENCH_ALL_REDUCE:
  case BENCH_BROADCAST:
    l.count = l.send_elems = l.recv_elems = l.total_elems = n;
    break;
  case BENCH_ALL_GATHER:
  case BENCH_REDUCE_SCATTER:
  case BENCH_ALL_TO_ALL:
    l.count = n / world ? n / world : 1;
    l.total_elems = l.count * world;
    l.send_elems = b->opt.coll == BENCH_ALL_GATHER ? l.count : l.total_elems;
    l.recv_elems = b->opt.coll == BENCH_REDUCE_SCATTER ? l.count : l.total_elems;
    break;
  default: break;
  }
  if (!b->opt.inplace) {
    l.send = b->send_base;
    l.recv = b->recv_base;
    return l;
  }
  /* In place as nccl-tests and NCCL define it: gathers send from their own
   * slot of the result, scatters receive into their own slot of the input. */
  unsigned char *base = symm_tensor_data(b->tensor);
  size_t slot = (size_t)b->rank * l.count * b->esize;
  l.send = l.recv = base;
  if (b->opt.coll == BENCH_ALL_GATHER) l.send = base + slot;
  if (b->opt.coll == BENCH_REDUCE_SCATTER) l.recv = base + slot;
  return l;
}

/* The sizes of the sweep, each once (rounding can make neighbours equal). */
static int sweep_sizes(const bench_t *b, size_t *sizes) {
  int n = 0;
  size_t last = 0;
  for (size_t s = b->opt.min_bytes; s <= b->opt.max_bytes && n < BENCH_MAX_SIZES;) {
    layout_t l = layout_for(b, s);
    size_t bytes = l.total_elems * b->esize;
    if (bytes != last) sizes[n++] = s;
    last = bytes;
    if (s > b->opt.max_bytes / b->opt.step_factor) break;
    s *= b->opt.step_factor;
  }
  return n;
}

static void alloc_buffers(bench_t *b, const size_t *sizes, int n) {
  size_t most = 0;
  for (int i = 0; i < n; i++) {
    layout_t l = layout_for(b, sizes[i]);
    size_t e = l.send_elems > l.recv_elems ? l.send_elems : l.recv_elems;
    if (e > most) most = e;
  }
  b->buf_bytes = most * b->esize;
  if (b->opt.inplace) {
    int64_t numel = (int64_t)most;
    BENCH_CHECK(symm_tensor_alloc(b->comm, &numel, 1, b->opt.dtype, &b->tensor));
    BENCH_CHECK(symm_tensor_rendezvous(b->tensor));
  } else {
    b->send_base = mem_alloc(b, b->buf_bytes);
    b->recv_base = mem_alloc(b, b->buf_bytes);
  }
  b->host_data = malloc(b->buf_bytes);
  b->host_result = malloc(b->buf_bytes);
  if (!b->host_data || !b->host_result) bench_die("out of memory for %zu-byte staging", b->buf_bytes);
  /* Ordinary memory is staged through the communicator's scratch; growing
   * it is collective and must not happen inside a timed loop or a graph. */
  BENCH_CHECK(symm_comm_reserve_scratch(b->comm, b->buf_bytes));
}

static void free_buffers(bench_t *b) {
  symm_tensor_free(b->tensor);
  mem_free(b, b->send_base);
  mem_free(b, b->recv_base);
  free(b->host_data);
  free(b->host_result);
}

/* ---- one call */

static symm_result_t run_symm(bench_t *b, const layout_t *l) {
  const bench_options_t *o = &b->opt;
  switch (o->coll) {
  case BENCH_ALL_REDUCE:
    return symm_all_reduce(b->comm, l->send, l->recv, l->count, o->dtype, o->op, b->stream);
  case BENCH_ALL_GATHER:
    return symm_all_gather(b->comm, l->send, l->recv, l->count, o->dtype, b->stream);
  case BENCH_REDUCE_SCATTER:
    return symm_reduce_scatter(b->comm, l->send, l->recv, l->count, o->dtype, o->op, b->stream);
  case BENCH_BROADCAST:
    return symm_broadcast(b->comm, l->send, l->recv, l->count, o->dtype, o->root, b->stream);
  case BENCH_ALL_TO_ALL:
    return symm_all_to_all(b->comm, l->send, l->recv, l->count, o->dtype, b->stream);
  default: return SYMM_ERR_INVALID_ARG;
  }
}

static void call_symm(bench_t *b, const layout_t *l) {
  symm_result_t r = run_symm(b, l);
  if (r != SYMM_SUCCESS)
    bench_die("symm_%s of %zu x %s failed: %s (%s)", coll_names[b->opt.coll], l->count,
              symm_dtype_name(b->opt.dtype), symm_strerror(r), symm_last_error());
}

/* Called with this rank's queue empty, just before its clock starts: ranks
 * reach a size's timed loop at different moments (rank 0 was printing the
 * previous row), and the first calls of an early rank would time the wait
 * for the late one.  Outside the timed region, as in nccl-tests. */
static void start_together(bench_t *b) { BENCH_CHECK(symm_comm_barrier(b->comm)); }

#ifdef SYMM_HAVE_CUDA
/* NCCL's data type for the bench's dtype; movement of a dtype NCCL lacks
 * goes as bytes.  Sets *scale to the elements per bench element. */
static int nccl_dtype(const bench_t *b, size_t *scale) {
  *scale = 1;
  switch (b->opt.dtype) {
  case SYMM_DTYPE_F16: return NCCL_FLOAT16_;
  case SYMM_DTYPE_BF16: return NCCL_BFLOAT16_;
  case SYMM_DTYPE_F32: return NCCL_FLOAT32_;
  case SYMM_DTYPE_F64: return NCCL_FLOAT64_;
  case SYMM_DTYPE_I8: return NCCL_INT8_;
  case SYMM_DTYPE_U8: return NCCL_UINT8_;
  case SYMM_DTYPE_I32: return NCCL_INT32_;
  case SYMM_DTYPE_U32: return NCCL_UINT32_;
  case SYMM_DTYPE_I64: return NCCL_INT64_;
  case SYMM_DTYPE_U64: return NCCL_UINT64_;
  default: *scale = b->esize; return NCCL_UINT8_;
  }
}

static void call_nccl(bench_t *b, const layout_t *l) {
  bench_nccl_t *n = &b->nccl;
  size_t scale;
  int dt = nccl_dtype(b, &scale), rc = 0;
  int op = b->opt.op == SYMM_REDUCE_MIN ? NCCL_MIN_ : b->opt.op == SYMM_REDUCE_MAX ? NCCL_MAX_
                                                                                    : NCCL_SUM_;
  size_t count = l->count * scale, chunk = l->count * b->esize;
  switch (b->opt.coll) {
  case BENCH_ALL_REDUCE:
    rc = n->all_reduce(l->send, l->recv, count, dt, op, n->comm, b->stream);
    break;
  case BENCH_ALL_GATHER: rc = n->all_gather(l->send, l->recv, count, dt, n->comm, b->stream); break;
  case BENCH_REDUCE_SCATTER:
    rc = n->reduce_scatter(l->send, l->recv, count, dt, op, n->comm, b->stream);
    break;
  case BENCH_BROADCAST:
    rc = n->broadcast(l->send, l->recv, count, dt, b->opt.root, n->comm, b->stream);
    break;
  case BENCH_ALL_TO_ALL:
    /* NCCL has no all-to-all call; it is a group of sends and receives. */
    rc = n->group_start();
    for (int p = 0; p < b->size && rc == 0; p++) {
      rc = n->send(l->send + (size_t)p * chunk, count, dt, p, n->comm, b->stream);
      if (rc == 0) rc = n->recv(l->recv + (size_t)p * chunk, count, dt, p, n->comm, b->stream);
    }
    if (rc == 0) rc = n->group_end();
    else n->group_end();
    break;
  default: break;
  }
  if (rc != 0)
    bench_die("nccl %s failed: %s", coll_names[b->opt.coll],
              n->get_error_string ? n->get_error_string(rc) : "error");
}

/* Captures n calls into a CUDA graph, instantiates it and replays it once
 * (the first replay also uploads the graph). */
static void graph_capture_replay(bench_t *b, const layout_t *l, bool nccl, int n,
                                 cudaGraph_t *graph, cudaGraphExec_t *exec) {
  cudaStream_t s = (cudaStream_t)b->stream;
  BENCH_CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < n; i++) nccl ? call_nccl(b, l) : call_symm(b, l);
  BENCH_CUDA_CHECK(cudaStreamEndCapture(s, graph));
  BENCH_CUDA_CHECK(cudaGraphInstantiateWithFlags(exec, *graph, 0));
  BENCH_CUDA_CHECK(cudaGraphLaunch(*exec, s));
  bench_sync(b);
}

/* Mean µs per call on this rank's stream, eagerly or replaying a graph of
 * `iters` captured calls. */
static double gpu_time_us(bench_t *b, const layout_t *l, bool nccl) {
  cudaStream_t s = (cudaStream_t)b->stream;
  for (int i = 0; i < b->opt.warmup; i++) nccl ? call_nccl(b, l) : call_symm(b, l);
  bench_sync(b);
  cudaEvent_t start, stop;
  BENCH_CUDA_CHECK(cudaEventCreate(&start));
  BENCH_CUDA_CHECK(cudaEventCreate(&stop));
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  if (b->opt.graph) graph_capture_replay(b, l, nccl, b->opt.iters, &graph, &exec);
  start_together(b);
  BENCH_CUDA_CHECK(cudaEventRecord(start, s));
  if (exec) {
    BENCH_CUDA_CHECK(cudaGraphLaunch(exec, s));
  } else {
    for (int i = 0; i < b->opt.iters; i++) nccl ? call_nccl(b, l) : call_symm(b, l);
  }
  BENCH_CUDA_CHECK(cudaEventRecord(stop, s));
  bench_sync(b);
  float ms = 0;
  BENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  if (exec) cudaGraphExecDestroy(exec);
  if (graph) cudaGraphDestroy(graph);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return (double)ms * 1e3 / b->opt.iters;
}
#endif

static double host_time_us(bench_t *b, const layout_t *l) {
  for (int i = 0; i < b->opt.warmup; i++) call_symm(b, l);
  start_together(b);
  double t0 = now_us();
  for (int i = 0; i < b->opt.iters; i++) call_symm(b, l);
  return (now_us() - t0) / b->opt.iters;
}

static double time_symm(bench_t *b, const layout_t *l) {
#ifdef SYMM_HAVE_CUDA
  if (on_gpu(b)) return gpu_time_us(b, l, false);
#endif
  return host_time_us(b, l);
}

/* The checked call, made the way the timed ones were: eagerly, or with
 * --graph one replay of a CUDA graph that captured it (a captured call can
 * go wrong where an eager one does not). */
static void call_checked(bench_t *b, const layout_t *l) {
#ifdef SYMM_HAVE_CUDA
  if (on_gpu(b) && b->opt.graph) {
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    graph_capture_replay(b, l, false, 1, &graph, &exec);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    return;
  }
#endif
  call_symm(b, l);
}

/* Fills the buffers with known data, runs one call, and counts the
 * received values that differ from the reference.  Barriers keep a rank
 * from rewriting its buffers while peers may still read them. */
static int64_t check_once(bench_t *b, const layout_t *l) {
  symm_dtype_t dt = b->opt.dtype;
  size_t es = b->esize;
  bench_sync(b);
  BENCH_CHECK(symm_comm_barrier(b->comm));
  mem_poison(b, l->recv, l->recv_elems * es);
  if (b->opt.coll != BENCH_BROADCAST || b->rank == b->opt.root) {
    for (size_t i = 0; i < l->send_elems; i++)
      elem_store(b->host_data, dt, i, input_value(b, b->rank, i));
    mem_put(b, l->send, b->host_data, l->send_elems * es);
  }
  BENCH_CHECK(symm_comm_barrier(b->comm));
  call_checked(b, l);
  bench_sync(b);
  mem_get(b, b->host_result, l->recv, l->recv_elems * es);
  if (b->rank == 0)
    for (size_t i = 0; i < l->recv_elems && i < (size_t)b->opt.inject; i++)
      elem_store(b->host_result, dt, i, elem_load(b->host_result, dt, i) + 1);
  int64_t wrong = 0;
  unsigned char want[8];
  for (size_t k = 0; k < l->recv_elems; k++) {
    /* The reference goes through the dtype too, so the comparison is exact. */
    elem_store(want, dt, 0, expected_value(b, l, k));
    wrong += !(elem_load(b->host_result, dt, k) == elem_load(want, dt, 0));
  }
  return wrong;
}

/* ---- reporting through the store */

static void post_report(bench_t *b, int index, const rank_report_t *rep) {
  char key[64];
  snprintf(key, sizeof key, "bench/report/%d/%d", index, b->rank);
  BENCH_CHECK(symm_store_set(b->store, key, rep, sizeof *rep));
}

/* Rank 0: every rank's report of size `index`, combined. */
static void collect_reports(bench_t *b, int index, rank_report_t *all) {
  *all = (rank_report_t){0, -1, 0};
  for (int r = 0; r < b->size; r++) {
    char key[64];
    snprintf(key, sizeof key, "bench/report/%d/%d", index, r);
    rank_report_t rep;
    size_t len = 0;
    BENCH_CHECK(symm_store_get(b->store, key, &rep, sizeof rep, &len, -1));
    if (len != sizeof rep) bench_die("store key %s holds %zu bytes, not a report", key, len);
    symm_store_delete(b->store, key);
    if (rep.time_us > all->time_us) all->time_us = rep.time_us;
    if (rep.nccl_us > all->nccl_us) all->nccl_us = rep.nccl_us;
    all->wrong = rep.wrong < 0 || all->wrong < 0 ? -1 : all->wrong + rep.wrong;
  }
}

static double bus_factor(const bench_t *b) {
  double n = b->size;
  switch (b->opt.coll) {
  case BENCH_ALL_REDUCE: return 2.0 * (n - 1) / n;
  case BENCH_BROADCAST: return 1.0;
  default: return (n - 1) / n;
  }
}

/* ---- output (rank 0) */

static const char *op_column(const bench_t *b) {
  return coll_reduces(b->opt.coll) ? symm_redop_name(b->opt.op) : "none";
}

static void print_devices(const bench_t *b, FILE *out) {
  for (int r = 0; r < b->size; r++) {
    if (r) fputc(',', out);
    if (b->devices[r] < 0) fputs("cpu", out);
    else fprintf(out, "%d", b->devices[r]);
  }
}

/* The symmem settings of this run that are set (what the launcher sets for
 * every job, the token included, left out), so that a table says how it
 * was made. */
static void print_settings(void) {
  size_t n = 0;
  const symm_setting_desc_t *table = symm_settings_table(&n);
  int shown = 0;
  printf("#  settings:");
  for (size_t i = 0; i < n; i++) {
    const char *v = getenv(table[i].name);
    if (!v || !*v || table[i].per_job) continue;
    printf(" %s=%s", table[i].name, symm_setting_shown(&table[i], v));
    shown++;
  }
  printf("%s\n", shown ? "" : " defaults");
}

static void print_table_header(const bench_t *b) {
  const bench_options_t *o = &b->opt;
  int v = symm_version();
  printf("# symmem-bench %d.%d.%d\n", v / 10000, v / 100 % 100, v % 100);
  printf("#  backend: %s  ranks: %d  devices: ", symm_backend_name(symm_comm_backend(b->comm)),
         b->size);
  print_devices(b, stdout);
  printf("\n#  collective: %s  dtype: %s  op: %s  algo: %s  inplace: %d  root: %d\n",
         coll_names[o->coll], symm_dtype_name(o->dtype), op_column(b), symm_algo_name(o->algo),
         o->inplace, o->root);
  printf("#  iterations: %d  warmup: %d  check: %d  graph: %d\n", o->iters, o->warmup, o->check,
         o->graph ? 1 : 0);
  print_settings();
  if (b->nccl.used)
    printf("# nccl: used (version %d, %s on the same buffers and stream)\n", b->nccl.version,
           o->graph ? "graph-captured" : "eager");
  else
    printf("# nccl: not used (%s)\n", b->nccl.why);
  printf("#  time: mean per call of the slowest rank; busbw = algbw * %s\n",
         o->coll == BENCH_ALL_REDUCE ? "2(n-1)/n" : o->coll == BENCH_BROADCAST ? "1" : "(n-1)/n");
  printf("#\n");
  printf("#%13s  %12s  %5s  %5s  %10s  %11s  %11s  %6s  %8s", "size(B)", "count(elems)", "type",
         "op", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "algo");
  if (b->nccl.used) printf("  %13s  %6s", "nccl_time(us)", "ratio");
  printf("\n");
  fflush(stdout);
}

static void print_table_row(const bench_t *b, const size_result_t *r) {
  char wrong[32];
  if (r->wrong < 0) snprintf(wrong, sizeof wrong, "N/A");
  else snprintf(wrong, sizeof wrong, "%lld", (long long)r->wrong);
  printf("%14zu  %12zu  %5s  %5s  %10.2f  %11.3f  %11.3f  %6s  %8s", r->bytes, r->count,
         symm_dtype_name(b->opt.dtype), op_column(b), r->time_us, r->algbw, r->busbw, wrong,
         r->algo);
  if (b->nccl.used) printf("  %13.2f  %6.3f", r->nccl_us, r->time_us / r->nccl_us);
  printf("\n");
  fflush(stdout);
}

static void print_csv_header(void) {
  printf("collective,backend,ranks,inplace,size_bytes,count,type,op,time_us,algbw_gbps,"
         "busbw_gbps,wrong,nccl_time_us,ratio,algo\n");
}

static void print_csv_row(const bench_t *b, const size_result_t *r) {
  printf("%s,%s,%d,%d,%zu,%zu,%s,%s,%.3f,%.4f,%.4f,", coll_names[b->opt.coll],
         symm_backend_name(symm_comm_backend(b->comm)), b->size, b->opt.inplace, r->bytes,
         r->count, symm_dtype_name(b->opt.dtype), op_column(b), r->time_us, r->algbw, r->busbw);
  if (r->wrong >= 0) printf("%lld", (long long)r->wrong);
  printf(",");
  if (r->nccl_us >= 0) printf("%.3f,%.4f", r->nccl_us, r->time_us / r->nccl_us);
  else printf(",");
  printf(",%s\n", r->algo);
  fflush(stdout);
}

static void json_string(FILE *out, const char *s) {
  fputc('"', out);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(out, "\\%c", c);
    else if (c < 0x20) fprintf(out, "\\u%04x", c);
    else fputc(c, out);
  }
  fputc('"', out);
}

static void print_json(const bench_t *b, int64_t wrong_total, double avg_busbw) {
  const bench_options_t *o = &b->opt;
  int v = symm_version();
  printf("{\"tool\":\"symmem-bench\",\"version\":\"%d.%d.%d\",\"config\":{\"backend\":",
         v / 10000, v / 100 % 100, v % 100);
  json_string(stdout, symm_backend_name(symm_comm_backend(b->comm)));
  printf(",\"ranks\":%d,\"devices\":[", b->size);
  /* As the table says it: a GPU ordinal, or "cpu" for a host-backend rank. */
  for (int r = 0; r < b->size; r++) {
    if (b->devices[r] < 0) printf("%s\"cpu\"", r ? "," : "");
    else printf("%s%d", r ? "," : "", b->devices[r]);
  }
  printf("],\"collective\":\"%s\",\"dtype\":\"%s\",\"op\":\"%s\",\"algo\":\"%s\","
         "\"inplace\":%d,\"root\":%d,\"iters\":%d,\"warmup\":%d,\"check\":%d,\"graph\":%d},",
         coll_names[o->coll], symm_dtype_name(o->dtype), op_column(b), symm_algo_name(o->algo),
         o->inplace, o->root, o->iters, o->warmup, o->check, o->graph ? 1 : 0);
  printf("\"nccl\":{\"used\":%s,", b->nccl.used ? "true" : "false");
  if (b->nccl.used) printf("\"version\":%d}", b->nccl.version);
  else {
    printf("\"reason\":");
    json_string(stdout, b->nccl.why);
    printf("}");
  }
  printf(",\"results\":[");
  for (int i = 0; i < b->n_results; i++) {
    const size_result_t *r = &b->results[i];
    printf("%s\n{\"size_bytes\":%zu,\"count\":%zu,\"type\":\"%s\",\"op\":\"%s\","
           "\"time_us\":%.3f,\"algbw_gbps\":%.4f,\"busbw_gbps\":%.4f,\"wrong\":",
           i ? "," : "", r->bytes, r->count, symm_dtype_name(o->dtype), op_column(b), r->time_us,
           r->algbw, r->busbw);
    if (r->wrong >= 0) printf("%lld", (long long)r->wrong);
    else printf("null");
    if (r->nccl_us >= 0)
      printf(",\"nccl_time_us\":%.3f,\"ratio\":%.4f", r->nccl_us, r->time_us / r->nccl_us);
    else printf(",\"nccl_time_us\":null,\"ratio\":null");
    printf(",\"algo\":\"%s\"}", r->algo);
  }
  printf("],\n\"out_of_bounds\":");
  if (o->check) printf("%lld", (long long)wrong_total);
  else printf("null");
  printf(",\"avg_busbw_gbps\":%.4f}\n", avg_busbw);
  fflush(stdout);
}

/* ---- plot */

static bool in_path(const char *prog) {
  const char *path = getenv("PATH");
  if (!path) return false;
  char dir[4096];
  for (const char *p = path; *p;) {
    size_t n = strcspn(p, ":");
    if (n && n < sizeof dir - strlen(prog) - 2) {
      snprintf(dir, sizeof dir, "%.*s/%s", (int)n, p, prog);
      if (access(dir, X_OK) == 0) return true;
    }
    p += n;
    if (*p == ':') p++;
  }
  return false;
}

/* gnuplot string literal in single quotes ('' stands for one quote). */
static void gnuplot_string(FILE *out, const char *s) {
  fputc('\'', out);
  for (; *s; s++) {
    if (*s == '\'') fputc('\'', out);
    fputc(*s, out);
  }
  fputc('\'', out);
}

/* Draws time and bus bandwidth against size.  Returns 0, or 1 with the
 * reason on stderr. */
static int plot(const bench_t *b) {
  if (!in_path("gnuplot")) {
    fprintf(stderr, "symmem-bench: --plot needs gnuplot, which is not in PATH "
                    "(Debian/Ubuntu: apt-get install gnuplot-nox); no plot written\n");
    return BENCH_EXIT_FAIL;
  }
  char data[] = "/tmp/symmem-bench-plot-XXXXXX";
  int fd = mkstemp(data);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f) {
    fprintf(stderr, "symmem-bench: --plot: cannot create %s: %s\n", data, strerror(errno));
    if (fd >= 0) close(fd);
    return BENCH_EXIT_FAIL;
  }
  for (int i = 0; i < b->n_results; i++) {
    const size_result_t *r = &b->results[i];
    fprintf(f, "%zu %.6g %.6g ", r->bytes, r->time_us, r->busbw);
    if (r->nccl_us > 0)
      fprintf(f, "%.6g %.6g\n", r->nccl_us, (double)r->bytes / (r->nccl_us * 1e3) * bus_factor(b));
    else
      fprintf(f, "NaN NaN\n");
  }
  fclose(f);
  /* gnuplot draws to its stdout when it cannot open the output file, and
   * its stdout is ours: the table, CSV or JSON a script is reading. */
  FILE *gp = popen("exec gnuplot >/dev/null", "w");
  if (!gp) {
    fprintf(stderr, "symmem-bench: --plot: cannot start gnuplot: %s\n", strerror(errno));
    unlink(data);
    return BENCH_EXIT_FAIL;
  }
  fprintf(gp, "set terminal pngcairo size 900,900 noenhanced\nset output ");
  gnuplot_string(gp, b->opt.plot);
  fprintf(gp, "\nset datafile missing 'NaN'\nset multiplot layout 2,1 title '%s %s %s, %d ranks, "
              "%s backend%s'\n",
          coll_names[b->opt.coll], symm_dtype_name(b->opt.dtype), op_column(b), b->size,
          symm_backend_name(symm_comm_backend(b->comm)), b->opt.graph ? ", graph" : "");
  fprintf(gp, "set logscale x 2\nset format x '%%.0b%%BB'\nset xlabel 'size'\nset grid\n"
              "set key top left\nset logscale y\nset ylabel 'time (us)'\n");
  fprintf(gp, "plot '%s' using 1:2 with linespoints title 'symmem'%s\n", data,
          b->nccl.used ? ", '' using 1:4 with linespoints title 'nccl'" : "");
  fprintf(gp, "unset logscale y\nset ylabel 'bus bandwidth (GB/s)'\n");
  fprintf(gp, "plot '%s' using 1:3 with linespoints title 'symmem'%s\n", data,
          b->nccl.used ? ", '' using 1:5 with linespoints title 'nccl'" : "");
  fprintf(gp, "unset multiplot\n");
  int st = pclose(gp);
  unlink(data);
  struct stat sb;
  if (st != 0 || stat(b->opt.plot, &sb) != 0 || sb.st_size == 0) {
    fprintf(stderr, "symmem-bench: --plot: gnuplot failed (status %d); %s not written\n", st,
            b->opt.plot);
    return BENCH_EXIT_FAIL;
  }
  if (b->opt.format == BENCH_TABLE) printf("# plot: %s\n", b->opt.plot);
  return 0;
}

/* ---- NCCL setup */

#ifdef SYMM_HAVE_CUDA
static bool nccl_load(bench_nccl_t *n, const char *libname) {
  n->lib = dlopen(libname, RTLD_NOW | RTLD_LOCAL);
  if (!n->lib) {
    snprintf(n->why, sizeof n->why, "%s cannot be loaded: %s", libname, dlerror());
    return false;
  }
  struct { void **fn; const char *name; } syms[] = {
      {(void **)&n->get_version, "ncclGetVersion"},
      {(void **)&n->get_unique_id, "ncclGetUniqueId"},
      {(void **)&n->comm_init_rank, "ncclCommInitRank"},
      {(void **)&n->comm_destroy, "ncclCommDestroy"},
      {(void **)&n->get_error_string, "ncclGetErrorString"},
      {(void **)&n->all_reduce, "ncclAllReduce"},
      {(void **)&n->all_gather, "ncclAllGather"},
      {(void **)&n->reduce_scatter, "ncclReduceScatter"},
      {(void **)&n->broadcast, "ncclBroadcast"},
      {(void **)&n->send, "ncclSend"},
      {(void **)&n->recv, "ncclRecv"},
      {(void **)&n->group_start, "ncclGroupStart"},
      {(void **)&n->group_end, "ncclGroupEnd"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].fn = dlsym(n->lib, syms[i].name);
    if (!*syms[i].fn) {
      snprintf(n->why, sizeof n->why, "%s has no %s", libname, syms[i].name);
      return false;
    }
  }
  if (n->get_version(&n->version) != 0) n->version = 0;
  return true;
}

/* Whether this rank can run NCCL; n->why says why not. */
static bool nccl_usable_here(bench_t *b) {
  bench_nccl_t *n = &b->nccl;
  const char *nvls = getenv("NCCL_NVLS_ENABLE");
  if (!b->opt.nccl) snprintf(n->why, sizeof n->why, "--nccl 0");
  else if (!nvls || strcmp(nvls, "0") != 0)
    snprintf(n->why, sizeof n->why, "NCCL_NVLS_ENABLE=%s; DESIGN.md's GPU safety rule runs "
             "NCCL only with NCCL_NVLS_ENABLE=0", nvls ? nvls : "(unset)");
  else if (b->opt.inplace && b->opt.coll == BENCH_ALL_TO_ALL)
    snprintf(n->why, sizeof n->why, "NCCL has no in-place all-to-all; use --inplace 0");
  else
    return nccl_load(n, symm_settings()->SYMM_NCCL_LIB);
  return false;
}
#endif

#ifdef SYMM_HAVE_CUDA
/* The first byte of the store key bench/nccl/id: what the rest holds. */
#define BENCH_NCCL_TAG_ID 'I'      /* NCCL's unique id: NCCL is timed */
#define BENCH_NCCL_TAG_REFUSED 'R' /* why it is not (without its NUL) */

/* Rank 0: tells every rank the unique id, or (why != NULL) why NCCL is not
 * timed. */
static void post_nccl_verdict(bench_t *b, const char *why, const bench_nccl_id_t *id) {
  char msg[1 + (sizeof b->nccl.why > sizeof *id ? sizeof b->nccl.why : sizeof *id)];
  size_t len;
  if (why) {
    msg[0] = BENCH_NCCL_TAG_REFUSED;
    len = strlen(why);
    if (len > sizeof msg - 1) len = sizeof msg - 1;
    memcpy(msg + 1, why, len);
  } else {
    msg[0] = BENCH_NCCL_TAG_ID;
    len = sizeof *id;
    memcpy(msg + 1, id, len);
  }
  BENCH_CHECK(symm_store_set(b->store, "bench/nccl/id", msg, 1 + len));
}
#endif

/* Decides with every rank whether NCCL is timed (a communicator is
 * collective, so either all ranks make one or none does) and makes it. */
static void nccl_setup(bench_t *b) {
  bench_nccl_t *n = &b->nccl;
  if (!on_gpu(b)) {
    snprintf(n->why, sizeof n->why, "host backend");
    return;
  }
#ifndef SYMM_HAVE_CUDA
  snprintf(n->why, sizeof n->why, "symmem-bench built without CUDA");
#else
  char key[64], verdict[sizeof n->why + 32];
  bool ok = nccl_usable_here(b);
  snprintf(verdict, sizeof verdict, "%s", ok ? "" : n->why);
  snprintf(key, sizeof key, "bench/nccl/%d", b->rank);
  BENCH_CHECK(symm_store_set(b->store, key, verdict, strlen(verdict) + 1));
  bench_nccl_id_t id;
  size_t len = 0;
  if (b->rank == 0) {
    /* The first rank's reason stands for all. */
    char why[sizeof verdict] = "";
    for (int r = 0; r < b->size && !why[0]; r++) {
      snprintf(key, sizeof key, "bench/nccl/%d", r);
      BENCH_CHECK(symm_store_get(b->store, key, verdict, sizeof verdict, &len, -1));
      verdict[sizeof verdict - 1] = 0;
      if (verdict[0]) snprintf(why, sizeof why, "rank %d: %s", r, verdict);
    }
    int rc = why[0] ? 0 : n->get_unique_id(&id);
    if (rc != 0) snprintf(why, sizeof why, "ncclGetUniqueId: %s", n->get_error_string(rc));
    post_nccl_verdict(b, why[0] ? why : NULL, &id);
  }
  /* A tag byte, then the id or the reason: told apart by length alone, a
   * reason of 127 characters (and its NUL) would pass for an id. */
  char reply[1 + (sizeof n->why > sizeof id ? sizeof n->why : sizeof id)];
  BENCH_CHECK(symm_store_get(b->store, "bench/nccl/id", reply, sizeof reply, &len, -1));
  if (len == 1 + sizeof id && reply[0] == BENCH_NCCL_TAG_ID) {
    memcpy(&id, reply + 1, sizeof id);
  } else if (len >= 1 && reply[0] == BENCH_NCCL_TAG_REFUSED) {
    snprintf(n->why, sizeof n->why, "%.*s", (int)(len - 1), reply + 1);
    return;
  } else {
    bench_die("store key bench/nccl/id holds %zu bytes that are neither an NCCL id nor a "
              "reason", len);
  }
  int rc = n->comm_init_rank(&n->comm, b->size, id, b->rank);
  if (rc != 0) bench_die("ncclCommInitRank: %s", n->get_error_string(rc));
  n->used = true;
#endif
}

static void nccl_teardown(bench_t *b) {
#ifdef SYMM_HAVE_CUDA
  if (b->nccl.used) b->nccl.comm_destroy(b->nccl.comm);
#endif
  /* The library stays loaded: NCCL's threads may outlive the destroy. */
}

/* ---- main */

static void setup_device(bench_t *b) {
  if (!on_gpu(b)) return;
#ifdef SYMM_HAVE_CUDA
  BENCH_CUDA_CHECK(cudaSetDevice(b->device));
  cudaStream_t s;
  BENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  b->stream = s;
#endif
}

static void gather_devices(bench_t *b) {
  char key[64];
  snprintf(key, sizeof key, "bench/device/%d", b->rank);
  BENCH_CHECK(symm_store_set(b->store, key, &b->device, sizeof b->device));
  if (b->rank != 0) return;
  b->devices = calloc((size_t)b->size, sizeof *b->devices);
  if (!b->devices) bench_die("out of memory");
  for (int r = 0; r < b->size; r++) {
    size_t len;
    snprintf(key, sizeof key, "bench/device/%d", r);
    BENCH_CHECK(symm_store_get(b->store, key, &b->devices[r], sizeof b->devices[r], &len, -1));
  }
}

/* Settings that only make sense on some backends, or with enough ranks;
 * refused on rank 0 with the reason, quietly elsewhere. */
static int refuse_unfit_setup(bench_t *b) {
  const char *why = NULL;
  char buf[256];
  if (b->opt.graph && !on_gpu(b))
    why = "--graph captures calls in a CUDA graph, which needs a GPU backend; the host "
          "backend runs every call synchronously (drop --graph)";
#ifndef SYMM_HAVE_CUDA
  if (on_gpu(b)) why = "this symmem-bench was built without CUDA; GPU backends need a CUDA build";
#endif
  int rc = -1;
  if (b->opt.root >= b->size) {
    snprintf(buf, sizeof buf, "--root %d is not a rank of this %d-rank job", b->opt.root,
             b->size);
    rc = b->rank == 0 ? usage_error("%s", buf) : BENCH_EXIT_USAGE;
  } else if (why) {
    if (b->rank == 0) fprintf(stderr, "symmem-bench: %s\n", why);
    rc = BENCH_EXIT_FAIL;
  }
  /* The other ranks wait for rank 0's message: a launcher stops the job as
   * soon as one rank fails, and would cut it off. */
  if (rc >= 0) symm_comm_barrier(b->comm);
  return rc;
}

static int run_sweep(bench_t *b, const size_t *sizes, int n_sizes) {
  const bench_options_t *o = &b->opt;
  int64_t wrong_total = 0;
  double busbw_sum = 0;
  if (b->rank == 0 && o->format == BENCH_TABLE) print_table_header(b);
  if (b->rank == 0 && o->format == BENCH_CSV) print_csv_header();
  for (int i = 0; i < n_sizes; i++) {
    layout_t l = layout_for(b, sizes[i]);
    rank_report_t rep = {time_symm(b, &l), -1, -1};
#ifdef SYMM_HAVE_CUDA
    if (b->nccl.used) rep.nccl_us = gpu_time_us(b, &l, true);
#endif
    if (o->check) rep.wrong = check_once(b, &l);
    post_report(b, i, &rep);
    if (b->rank != 0) continue;
    rank_report_t all;
    collect_reports(b, i, &all);
    size_result_t *r = &b->results[b->n_results++];
    r->bytes = l.total_elems * b->esize;
    r->count = l.total_elems;
    r->time_us = all.time_us;
    r->algbw = all.time_us > 0 ? (double)r->bytes / (all.time_us * 1e3) : 0;
    r->busbw = r->algbw * bus_factor(b);
    r->wrong = o->check ? all.wrong : -1;
    r->nccl_us = all.nccl_us;
    r->algo = "-";
    symm_algo_t algo;
    if (o->coll == BENCH_ALL_REDUCE &&
        symm_all_reduce_algo(b->comm, l.count, o->dtype, &algo) == SYMM_SUCCESS)
      r->algo = symm_algo_name(algo);
    if (r->wrong > 0) wrong_total += r->wrong;
    busbw_sum += r->busbw;
    if (o->format == BENCH_TABLE) print_table_row(b, r);
    if (o->format == BENCH_CSV) print_csv_row(b, r);
  }
  if (b->rank != 0) return 0;
  double avg = b->n_results ? busbw_sum / b->n_results : 0;
  if (o->format == BENCH_TABLE) {
    if (o->check)
      printf("# Out of bounds values : %lld %s\n", (long long)wrong_total,
             wrong_total ? "FAILED" : "OK");
    else printf("# Out of bounds values : N/A (-c 0)\n");
    printf("# Avg bus bandwidth    : %.4f\n#\n", avg);
    fflush(stdout);
  }
  if (o->format == BENCH_JSON) print_json(b, wrong_total, avg);
  if (wrong_total) {
    fprintf(stderr, "symmem-bench: %lld wrong values\n", (long long)wrong_total);
    return BENCH_EXIT_FAIL;
  }
  return 0;
}

int main(int argc, char **argv) {
  bench_t b = {0};
  int rc = parse_options(argc, argv, &b.opt);
  if (rc >= 0) return rc;
  /* DESIGN.md's GPU safety rule: NVLS stays off for NCCL (and for symmem's
   * own multicast, which honours the same variable). */
  setenv("NCCL_NVLS_ENABLE", "0", 0);

  symm_result_t res = symm_comm_init(NULL, &b.comm);
  if (res != SYMM_SUCCESS) {
    fprintf(stderr, "symmem-bench: symm_comm_init: %s (%s)\n", symm_strerror(res),
            symm_last_error());
    return BENCH_EXIT_FAIL;
  }
  b.rank = bench_rank = symm_comm_rank(b.comm);
  b.size = symm_comm_size(b.comm);
  b.device = symm_comm_device(b.comm);
  b.store = symm_comm_store(b.comm);
  b.esize = symm_dtype_size(b.opt.dtype);
  rc = refuse_unfit_setup(&b);
  if (rc >= 0) {
    symm_comm_destroy(b.comm);
    return rc;
  }
  setup_device(&b);
  /* Without --algo the communicator keeps what SYMM_ALLREDUCE_ALGO chose
   * (symm_comm_init checked the name), and the header says so. */
  if (!b.opt.algo_given)
    b.opt.algo = b.comm->allreduce_algo;
  else if (b.opt.coll == BENCH_ALL_REDUCE)
    BENCH_CHECK(symm_comm_set_allreduce_algo(b.comm, b.opt.algo));
  size_t sizes[BENCH_MAX_SIZES];
  int n_sizes = sweep_sizes(&b, sizes);
  gather_devices(&b);
  alloc_buffers(&b, sizes, n_sizes);
  nccl_setup(&b);

  rc = run_sweep(&b, sizes, n_sizes);

  nccl_teardown(&b);
  bench_sync(&b);
  /* Rank 0 may serve the store (launchers other than symmem-run): nobody
   * leaves while another rank may still use it. */
  BENCH_CHECK(symm_comm_barrier(b.comm));
  if (b.rank == 0 && b.opt.plot) {
    int prc = plot(&b);
    if (prc) rc = prc;
  }
  free_buffers(&b);
  free(b.devices);
  symm_comm_destroy(b.comm);
  return rc;
}
