/* libFuzzer target: symmem-bench's command line (parse_options of
 * tools/symmem_bench_options.c).  The input is split at NUL bytes into
 * arguments after argv[0].  Checked besides the sanitizers: the parser
 * returns -1 (go on), 0 (--help) or BENCH_EXIT_USAGE, and options it lets
 * through are ones the run can use. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "symmem_bench.h"

#define FUZZ_MAX_ARGS 32

static void fail(const char *what) {
  fprintf(stderr, "fuzz-bench-options: %s\n", what);
  __builtin_trap();
}

static void check_accepted(const bench_options_t *o) {
  if (o->min_bytes == 0 || o->min_bytes > o->max_bytes) fail("sizes accepted out of order");
  if (o->step_factor < 2) fail("step factor below 2 accepted");
  if (o->iters < 1 || o->warmup < 0 || o->inject < 0) fail("negative count accepted");
  if ((o->check | o->inplace | o->nccl) & ~1) fail("a 0|1 option took another value");
  if ((unsigned)o->coll >= BENCH_COLL_COUNT_) fail("unknown collective accepted");
  if (o->root < 0) fail("negative root accepted");
  if (o->format != BENCH_TABLE && o->format != BENCH_CSV && o->format != BENCH_JSON)
    fail("unknown format");
  if (o->plot && !*o->plot) fail("empty plot file accepted");
  if (!(o->skew >= 1.0) || o->skew > 1e308) fail("a skew below 1 or not finite accepted");
  if (o->skew != 1.0 && o->coll != BENCH_ALL_TO_ALL_V) fail("--skew accepted without all_to_all_v");
  if (o->groups < 1) fail("fewer than one group accepted");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *buf = malloc(size + 1);
  if (!buf) return 0;
  memcpy(buf, data, size);
  buf[size] = 0;
  char *argv[FUZZ_MAX_ARGS + 2];
  int argc = 0;
  argv[argc++] = "symmem-bench";
  for (size_t at = 0; at < size && argc <= FUZZ_MAX_ARGS; at += strlen(buf + at) + 1)
    argv[argc++] = buf + at;
  argv[argc] = NULL;
  optind = 0; /* glibc: start over, forgetting the previous call's state */
  bench_options_t opt;
  int rc = parse_options(argc, argv, &opt);
  if (rc == -1)
    check_accepted(&opt);
  else if (rc != 0 && rc != BENCH_EXIT_USAGE)
    fail("unexpected exit status");
  free(buf);
  return 0;
}
