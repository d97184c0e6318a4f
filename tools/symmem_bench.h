/*
 * symmem-bench's own header: options, the run's state, and the functions
 * its files share.
 *   symmem_bench.c          the run: buffers, calls, timing, main
 *   symmem_bench_options.c  the command line
 *   symmem_bench_check.c    element values, the reference, the checked call
 *   symmem_bench_report.c   the table, CSV and JSON
 *   symmem_bench_plot.c     the gnuplot picture
 *   symmem_bench_floor.c    the host floor: a cache line's round trip, a
 *                           core's copy bandwidth (bench/floor.c)
 *   symmem_bench_nccl.c     NCCL timed on the same buffers and stream
 *                           (libnccl through src/backends/nccl/nccl_lib.c)
 */
#ifndef SYMM_BENCH_H
#define SYMM_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "backends/nccl/nccl_lib.h"
#include "symmem.h"

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
  BENCH_ALL_TO_ALL_V,
  BENCH_COLL_COUNT_
} bench_coll_t;
extern const char *const coll_names[BENCH_COLL_COUNT_];
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
  double skew;            /* all_to_all_v: largest peer share / smallest (>= 1) */
  int groups;             /* -g: groups timed side by side (divides the ranks) */
  int floor;              /* host: measure the floor and print against it */
} bench_options_t;
/* Returns -1 to go on, else the exit status (0 for --help). */
int parse_options(int argc, char **argv, bench_options_t *opt);
/* "symmem-bench: message", then the usage; returns BENCH_EXIT_USAGE. */
int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
bool coll_reduces(bench_coll_t coll);

/* ------------------------------------------------------------- the run */
typedef struct bench_nccl {
  bool used;
  bool borrowed;          /* comm is the nccl backend's own (its windows), not ours */
  char why[320];          /* when not used */
  symm_nccl_lib_t lib;
  symm_nccl_comm_t comm;
} bench_nccl_t;

/* What rank 0 prints for one size. */
typedef struct size_result {
  size_t bytes, count;
  double time_us;   /* slowest rank */
  double algbw, busbw;
  int64_t wrong;    /* all ranks; -1 when not checked */
  double nccl_us;   /* slowest rank; < 0 when not measured */
  const char *algo; /* all-reduce: the algorithm that ran (symm_all_reduce_algo); else "-" */
  int group;        /* -g: the group that ran it */
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
  size_t most_elems;          /* the largest buffer of any rank (a symmetric tensor's) */
  size_t total_elems;         /* the printed count */
  unsigned char *send, *recv;
  /* all_to_all_v: this rank's counts and packed displacements, per rank
   * (every rank sends the same split: symmem_bench_split.h) */
  const size_t *send_counts, *send_displs, *recv_counts, *recv_displs;
} layout_t;

typedef struct bench {
  bench_options_t opt;
  symm_comm_t *comm;          /* this rank's group (the world without -g) */
  symm_comm_t *world;
  symm_store_t *store;        /* the world's */
  int rank, size, device;     /* in the group */
  int world_rank, world_size, group;
  size_t esize;
  size_t buf_bytes;           /* of each buffer */
  symm_tensor_t *tensor;      /* --inplace 1 */
  unsigned char *send_base, *recv_base;
  unsigned char *host_data;   /* staging: this rank's input */
  unsigned char *host_result; /* staging: what the call produced */
  void *stream;               /* cudaStream_t on GPU backends */
  int *devices;               /* rank 0: every rank's device */
  bench_nccl_t nccl;
  size_t *split;              /* all_to_all_v: 4 x size counts and displacements */
  double *shares;             /* all_to_all_v: size shares (symmem_bench_split.h) */
  size_result_t *results;     /* rank 0: sizes x groups */
  int n_results;
  double floor_rt_ns;         /* 0: not measured (floor_why says why) */
  double floor_copy_gbps;
  char floor_why[64];
} bench_t;

/* Ends this rank with "symmem-bench: rank R: message" (exit 1). */
/* symmem_bench_mem.c: messages name this rank (-1 until set). */
void bench_set_rank(int rank);
void bench_die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

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

static inline bool on_gpu(const bench_t *b) { return b->device >= 0; }

/* symmem_bench_mem.c: this rank's memory */
void *mem_alloc(const bench_t *b, size_t bytes);
void mem_free(const bench_t *b, void *p);
void bench_sync(bench_t *b);
void mem_put(bench_t *b, void *dst, const void *host, size_t bytes);
void mem_get(bench_t *b, void *host, const void *src, size_t bytes);
void mem_poison(bench_t *b, void *dst, size_t bytes);
/* "bench/g<group>/" then fmt: a store key of this rank's group. */
void bench_key(const bench_t *b, char *key, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* symmem_bench_check.c */
/* Fills the buffers, makes one call through `call`, counts wrong values. */
int64_t check_once(bench_t *b, const layout_t *l, void (*call)(bench_t *, const layout_t *));

/* symmem_bench_report.c (rank 0) */
double bus_factor(const bench_t *b);
const char *op_column(const bench_t *b);
void print_table_header(const bench_t *b);
void print_table_row(const bench_t *b, const size_result_t *r);
void print_csv_header(const bench_t *b);
void print_csv_row(const bench_t *b, const size_result_t *r);
void print_json(const bench_t *b, int64_t wrong_total, double avg_busbw);

/* symmem_bench_plot.c (rank 0) */
int plot(const bench_t *b);

/* symmem_bench_nccl.c */
void nccl_setup(bench_t *b);
void nccl_teardown(bench_t *b);
#ifdef SYMM_HAVE_CUDA
void call_nccl(bench_t *b, const layout_t *l);
#endif

/* symmem_bench_floor.c: the floor, measured between the ranks on the host
 * (collective over the world); sizes up to FLOOR_SMALL_BYTES print as
 * multiples of its round trip, larger ones as busbw over its copy
 * bandwidth (floor_ratio: -1 when not measured). */
#define FLOOR_SMALL_BYTES 4096
void measure_floor(bench_t *b);
bool floor_small(const size_result_t *r);
double floor_ratio(const bench_t *b, const size_result_t *r);

#endif /* SYMM_BENCH_H */
