/* symmem-bench's command line. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "symmem_bench.h"
#include "tool_common.h"

const char *const coll_names[BENCH_COLL_COUNT_] = {
    "all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all", "all_to_all_v"};

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
          "                           broadcast, all_to_all, all_to_all_v\n"
          "      --skew S             all_to_all_v: the largest peer's share over the\n"
          "                           smallest, S >= 1 (default 1: uniform); see below\n"
          "      --op OP              sum (default), min, max, prod, avg (reductions only)\n"
          "      --dtype T            f32 (default), f16, bf16, f64, i8, i16, i32, i64, u8,\n"
          "                           u16, u32, u64, f8e4m3, f8e5m2\n"
          "      --algo A             all-reduce algorithm: auto, one_shot, two_shot, ll,\n"
          "                           ll128 (default: SYMM_ALLREDUCE_ALGO, else auto); ce:\n"
          "                           all-gather, broadcast, all-to-all(-v) on the GPU's\n"
          "                           copy engines (SYMM_COPY_ALGO)\n"
          "      --inplace 0|1        1 (default): buffers inside a symmetric tensor,\n"
          "                           in place (all_to_all_v: send and receive apart\n"
          "                           in it); 0: ordinary memory, out of place\n"
          "      --root R             broadcast root (default 0)\n"
          "  -g, --groups N           split the ranks into N groups of consecutive ranks\n"
          "                           (contiguous blocks: group g holds ranks g*n/N ..\n"
          "                           (g+1)*n/N - 1; N must divide the n ranks) and time\n"
          "                           them all at once, side by side, one row per group\n"
          "                           and size (default 1)\n"
          "      --graph              GPU: capture the timed calls in one CUDA graph\n"
          "      --nccl 0|1           GPU: also time NCCL where it loads (default 1)\n"
          "      --floor 0|1          host: measure a cache line's round trip between\n"
          "                           ranks 0 and 1 and a core's copy bandwidth, and\n"
          "                           print sizes up to 4 KiB as multiples of the\n"
          "                           round trip, larger ones as busbw over the copy\n"
          "                           bandwidth (the floor column; default 1)\n"
          "      --csv                print CSV instead of the table\n"
          "      --json               print one JSON object instead of the table\n"
          "      --plot FILE.png      also draw time and bus bandwidth with gnuplot\n"
          "      --inject-errors N    testing: corrupt N received values per size on\n"
          "                           rank 0 before the check\n"
          "  -h, --help               show this help\n"
          "\n"
          "Sizes are the bytes of the whole result (nccl-tests: all_gather,\n"
          "reduce_scatter and all_to_all split them over the ranks); for\n"
          "all_to_all_v the bytes each rank sends (on average over the ranks, and\n"
          "exactly: every rank sends the same split).  all_to_all_v's split is\n"
          "skewed like mixture-of-experts routing: rank p's share is\n"
          "S^(k_p/(n-1)), k a permutation of the ranks drawn from a fixed seed, the\n"
          "same for every sender, so the hottest rank receives S times what the\n"
          "coldest does.  time is the mean per call of the slowest rank (of each\n"
          "group with -g); algbw = size / time; busbw = algbw times 2(n-1)/n\n"
          "(all_reduce), (n-1)/n (all_gather, reduce_scatter, all_to_all,\n"
          "all_to_all_v) or 1 (broadcast), n the ranks of a group.\n"
          "ratio = time / nccl_time.\n"
          "NCCL runs only with NCCL_NVLS_ENABLE=0 (set when unset); SYMM_NCCL_LIB\n"
          "names the library (default libnccl.so.2).\n");
}

int usage_error(const char *fmt, ...) {
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

bool coll_reduces(bench_coll_t coll) {
  return coll == BENCH_ALL_REDUCE || coll == BENCH_REDUCE_SCATTER;
}

enum {
  OPT_COLL = 256, OPT_OP, OPT_DTYPE, OPT_ALGO, OPT_INPLACE, OPT_ROOT, OPT_GRAPH, OPT_NCCL,
  OPT_CSV, OPT_JSON, OPT_PLOT, OPT_INJECT, OPT_SKEW, OPT_FLOOR
};

/* --skew: a finite ratio >= 1. */
static bool parse_skew(const char *text, double *skew) {
  char *end;
  errno = 0;
  double v = strtod(text, &end);
  if (errno || end == text || *end || !isfinite(v) || v < 1.0) return false;
  *skew = v;
  return true;
}

/* The valid --coll names, comma-separated, into buf. */
static const char *coll_list(char *buf, size_t len) {
  size_t n = 0;
  buf[0] = 0;
  for (int i = 0; i < BENCH_COLL_COUNT_ && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, "%s%s", i ? ", " : "", coll_names[i]);
  return buf;
}

/* What the output flags chose, and whether --skew was given, kept until
 * every option is read. */
typedef struct {
  bool csv, json, skew;
} output_flags_t;

/* One option c with its argument; -1 to go on, else the exit status. */
static int parse_one(int c, const char *arg, char **argv, bench_options_t *opt,
                     output_flags_t *out) {
  int flag;
  char names[128];
  switch (c) {
  case 'b':
  case 'e': {
    int64_t v = tool_parse_size(arg);
    if (v <= 0)
      return usage_error("%s needs a size in bytes such as 8, 1K, 4M or 1G, not '%s'",
                         c == 'b' ? "-b/--minbytes" : "-e/--maxbytes", arg);
    *(c == 'b' ? &opt->min_bytes : &opt->max_bytes) = (size_t)v;
    return -1;
  }
  case 'f':
    if (!tool_parse_int(arg, 2, 1 << 20, &flag))
      return usage_error("-f/--stepfactor needs a whole factor of at least 2, not '%s'", arg);
    opt->step_factor = (size_t)flag;
    return -1;
  case 'n':
    if (!tool_parse_int(arg, 1, 1 << 30, &opt->iters))
      return usage_error("-n/--iters needs a positive number, not '%s'", arg);
    return -1;
  case 'w':
    if (!tool_parse_int(arg, 0, 1 << 30, &opt->warmup))
      return usage_error("-w/--warmup_iters needs a number >= 0, not '%s'", arg);
    return -1;
  case 'c':
    if (!tool_parse_int(arg, 0, 1, &opt->check))
      return usage_error("-c/--check takes 0 or 1, not '%s'", arg);
    return -1;
  case OPT_COLL:
    if (!parse_coll(arg, &opt->coll))
      return usage_error("unknown collective '%s'; valid: %s", arg,
                         coll_list(names, sizeof names));
    return -1;
  case OPT_OP:
    if (symm_redop_from_name(arg, &opt->op) != SYMM_SUCCESS)
      return usage_error("%s", symm_last_error());
    return -1;
  case OPT_DTYPE:
    if (symm_dtype_from_name(arg, &opt->dtype) != SYMM_SUCCESS)
      return usage_error("%s", symm_last_error());
    return -1;
  case OPT_ALGO:
    if (symm_algo_from_name(arg, &opt->algo) != SYMM_SUCCESS)
      return usage_error("%s", symm_last_error());
    opt->algo_given = true;
    return -1;
  case OPT_INPLACE:
    if (!tool_parse_int(arg, 0, 1, &opt->inplace))
      return usage_error("--inplace takes 0 or 1, not '%s'", arg);
    return -1;
  case OPT_ROOT:
    if (!tool_parse_int(arg, 0, 1 << 20, &opt->root))
      return usage_error("--root needs a rank, not '%s'", arg);
    return -1;
  case OPT_GRAPH: opt->graph = true; return -1;
  case OPT_NCCL:
    if (!tool_parse_int(arg, 0, 1, &opt->nccl))
      return usage_error("--nccl takes 0 or 1, not '%s'", arg);
    return -1;
  case OPT_FLOOR:
    if (!tool_parse_int(arg, 0, 1, &opt->floor))
      return usage_error("--floor takes 0 or 1, not '%s'", arg);
    return -1;
  case OPT_CSV: out->csv = true; return -1;
  case OPT_JSON: out->json = true; return -1;
  case OPT_PLOT:
    if (!*arg) return usage_error("--plot needs a file name");
    opt->plot = arg;
    return -1;
  case OPT_INJECT:
    if (!tool_parse_int(arg, 0, 1 << 30, &opt->inject))
      return usage_error("--inject-errors needs a number >= 0, not '%s'", arg);
    return -1;
  case OPT_SKEW:
    if (!parse_skew(arg, &opt->skew))
      return usage_error("--skew needs a ratio S >= 1 (the largest peer's share over the "
                         "smallest; 1: uniform), not '%s'", arg);
    out->skew = true;
    return -1;
  case 'g':
    if (!tool_parse_int(arg, 1, 1 << 20, &opt->groups))
      return usage_error("-g/--groups needs a number of groups >= 1, not '%s'", arg);
    return -1;
  case 'h': print_usage(stdout); return 0;
  case ':': return usage_error("option %s needs a value", argv[optind - 1]);
  default:
    if (optopt > 0 && optopt < 256) return usage_error("unknown option -%c", optopt);
    return usage_error("unknown option %s", argv[optind - 1]);
  }
}

/* The checks across options, once all are read. */
static int check_options(bench_options_t *opt, const output_flags_t *out) {
  if (out->csv && out->json) return usage_error("--csv and --json exclude each other");
  opt->format = out->csv ? BENCH_CSV : out->json ? BENCH_JSON : BENCH_TABLE;
  if (opt->min_bytes > opt->max_bytes)
    return usage_error("-b/--minbytes (%zu) is larger than -e/--maxbytes (%zu)", opt->min_bytes,
                       opt->max_bytes);
  if (out->skew && opt->coll != BENCH_ALL_TO_ALL_V)
    return usage_error("--skew shapes the split of --coll all_to_all_v; --coll %s has none",
                       coll_names[opt->coll]);
  return -1;
}

/* Returns -1 to go on, else the exit status (0 for --help). */
int parse_options(int argc, char **argv, bench_options_t *opt) {
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
      {"skew", required_argument, NULL, OPT_SKEW},
      {"floor", required_argument, NULL, OPT_FLOOR},
      {"groups", required_argument, NULL, 'g'},
      {"help", no_argument, NULL, 'h'},
      {NULL, 0, NULL, 0}};
  *opt = (bench_options_t){.min_bytes = 8, .max_bytes = 32u << 20, .step_factor = 2,
                           .iters = 20, .warmup = 5, .check = 1, .coll = BENCH_ALL_REDUCE,
                           .op = SYMM_REDUCE_SUM, .dtype = SYMM_DTYPE_F32,
                           .algo = SYMM_ALGO_AUTO, .inplace = 1, .nccl = 1, .skew = 1.0,
                           .groups = 1, .floor = 1};
  output_flags_t out = {0};
  opterr = 0; /* our own messages, followed by the usage */
  int c;
  while ((c = getopt_long(argc, argv, ":b:e:f:n:w:c:g:h", longopts, NULL)) != -1) {
    int status = parse_one(c, optarg ? optarg : "", argv, opt, &out);
    if (status >= 0) return status;
  }
  if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
  return check_options(opt, &out);
}
