/* Tests of symmem-bench: run under symmem-run on the host backend the way
 * people run it, and read its table, CSV and JSON the way scripts do. */
#include <stdarg.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"

#define OUT_CAP (256 * 1024)
#define MAX_ROWS 64

typedef struct table_row {
  size_t bytes, count;
  char type[16], op[16];
  double time_us, algbw, busbw;
  char wrong[16];
  char algo[16];
} table_row_t;

/* Runs a shell command built from fmt, prints it with its output, returns
 * the exit status. */
static int run_fmt(char *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int run_fmt(char *out, const char *fmt, ...) {
  char cmd[4096];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
  va_end(ap);
  ASSERT_LT(n, (int)sizeof cmd);
  int rc = test_run_command(cmd, out, OUT_CAP);
  printf("$ %s\n-> %d\n%s\n", cmd, rc, out);
  return rc;
}

/* symmem-bench under symmem-run with `ranks` host ranks and ARGS. */
static int run_bench(char *out, int ranks, const char *args) {
  struct stat st;
  if (stat(test_tool_path("symmem-bench"), &st) != 0)
    TEST_FAIL_("%s is not built", test_tool_path("symmem-bench"));
  return run_fmt(out, "env SYMM_BACKEND=host %s -n %d -- %s %s", test_tool_path("symmem-run"),
                 ranks, test_tool_path("symmem-bench"), args);
}

static int count_occurrences(const char *hay, const char *needle) {
  int n = 0;
  for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
  return n;
}

/* The data rows of a table: lines that start with blanks and a number. */
static int parse_table(const char *out, table_row_t *rows, int max) {
  int n = 0;
  for (const char *line = out; line && *line; line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
    const char *p = line;
    while (*p == ' ') p++;
    if (p == line || *p < '0' || *p > '9') continue;
    ASSERT_LT(n, max);
    table_row_t *r = &rows[n];
    int got = sscanf(line, "%zu %zu %15s %15s %lf %lf %lf %15s %15s", &r->bytes, &r->count,
                     r->type, r->op, &r->time_us, &r->algbw, &r->busbw, r->wrong, r->algo);
    if (got != 9) TEST_FAIL_("table row does not parse (%d fields): %.120s", got, line);
    n++;
  }
  return n;
}

static void assert_table_header(const char *out) {
  static const char *const columns[] = {"size(B)", "count(elems)", "type", "op", "time(us)",
                                        "algbw(GB/s)", "busbw(GB/s)", "#wrong", "algo"};
  const char *head = strstr(out, "#      size(B)");
  ASSERT(head != NULL);
  const char *end = strchr(head, '\n');
  ASSERT(end != NULL);
  const char *p = head;
  for (size_t i = 0; i < sizeof columns / sizeof columns[0]; i++) {
    const char *c = strstr(p, columns[i]);
    if (!c || c > end) TEST_FAIL_("column %s missing or out of order", columns[i]);
    p = c + strlen(columns[i]);
  }
  ASSERT_STR_CONTAINS(out, "#  backend: host  ranks: ");
  ASSERT_STR_CONTAINS(out, "devices: cpu");
  ASSERT_STR_CONTAINS(out, "#  collective: ");
  ASSERT_STR_CONTAINS(out, "#  iterations: ");
  ASSERT_STR_CONTAINS(out, "# nccl: not used (host backend)");
  ASSERT_STR_CONTAINS(out, "#  settings: ");
}


/* ------------------------------------------------------------------ tests */

TEST_IMPL(bench_table) {
  char *out = malloc(OUT_CAP);
  int rc = run_bench(out, 2, "-b 8 -e 64K -f 8 -c 1");
  ASSERT_EQ(rc, 0);
  assert_table_header(out);
  ASSERT_STR_CONTAINS(out, "#  backend: host  ranks: 2  devices: cpu,cpu");
  ASSERT_STR_CONTAINS(out, "collective: all_reduce  dtype: f32  op: sum  algo: auto");
  /* The run's non-default settings: run_bench sets the backend; the
   * launcher's own variables and the token are left out. */
  ASSERT_STR_CONTAINS(out, "#  settings: SYMM_BACKEND=host\n");
  table_row_t rows[MAX_ROWS];
  int n = parse_table(out, rows, MAX_ROWS);
  static const size_t sizes[] = {8, 64, 512, 4096, 32768};
  ASSERT_EQ(n, 5);
  for (int i = 0; i < n; i++) {
    ASSERT_EQ(rows[i].bytes, sizes[i]);
    ASSERT_EQ(rows[i].count, sizes[i] / 4);
    ASSERT(strcmp(rows[i].type, "f32") == 0);
    ASSERT(strcmp(rows[i].op, "sum") == 0);
    ASSERT_STR_CONTAINS(rows[i].wrong, "0");
    ASSERT_EQ(strlen(rows[i].wrong), 1);
    /* What ran: auto on the host backend, one-shot up to 2 KiB. */
    ASSERT(strcmp(rows[i].algo, sizes[i] <= 2048 ? "one_shot" : "two_shot") == 0);
    ASSERT(rows[i].time_us > 0);
    /* 2 ranks: busbw = algbw * 2(n-1)/n = algbw. */
    ASSERT(rows[i].busbw <= rows[i].algbw * 1.001 + 0.001);
    ASSERT(rows[i].busbw >= rows[i].algbw * 0.999 - 0.001);
  }
  ASSERT_STR_CONTAINS(out, "# Out of bounds values : 0 OK");
  ASSERT_STR_CONTAINS(out, "# Avg bus bandwidth    : ");
  /* -c 0: nothing checked, said so. */
  rc = run_bench(out, 2, "-b 1K -e 1K -c 0 -n 3 -w 1");
  ASSERT_EQ(rc, 0);
  n = parse_table(out, rows, MAX_ROWS);
  ASSERT_EQ(n, 1);
  ASSERT(strcmp(rows[0].wrong, "N/A") == 0);
  ASSERT_STR_CONTAINS(out, "# Out of bounds values : N/A");
  free(out);
  return 0;
}

TEST_IMPL(bench_csv) {
  char *out = malloc(OUT_CAP);
  int rc = run_bench(out, 2, "-b 8 -e 64K -f 8 -c 1 --csv");
  ASSERT_EQ(rc, 0);
  const char *head = strstr(out, "collective,backend,ranks,inplace,size_bytes,count,type,op,"
                                 "time_us,algbw_gbps,busbw_gbps,wrong,nccl_time_us,ratio,algo\n");
  ASSERT(head != NULL);
  ASSERT(strstr(out, "# ") == NULL); /* machine output only */
  static const size_t sizes[] = {8, 64, 512, 4096, 32768};
  const char *line = strchr(head, '\n') + 1;
  for (int i = 0; i < 5; i++) {
    const char *end = strchr(line, '\n');
    ASSERT(end != NULL);
    char buf[512];
    snprintf(buf, sizeof buf, "%.*s", (int)(end - line), line);
    int commas = 0;
    for (const char *p = buf; *p; p++) commas += *p == ',';
    ASSERT_EQ(commas, 14);
    char coll[32], backend[16], type[16], op[16];
    int ranks, inplace;
    size_t bytes, count;
    double time_us, algbw, busbw;
    long long wrong;
    int got = sscanf(buf, "%31[^,],%15[^,],%d,%d,%zu,%zu,%15[^,],%15[^,],%lf,%lf,%lf,%lld", coll,
                     backend, &ranks, &inplace, &bytes, &count, type, op, &time_us, &algbw,
                     &busbw, &wrong);
    ASSERT_EQ(got, 12);
    ASSERT(strcmp(coll, "all_reduce") == 0);
    ASSERT(strcmp(backend, "host") == 0);
    ASSERT_EQ(ranks, 2);
    ASSERT_EQ(inplace, 1);
    ASSERT_EQ(bytes, sizes[i]);
    ASSERT_EQ(count, sizes[i] / 4);
    ASSERT_EQ(wrong, 0);
    ASSERT(time_us > 0);
    /* No NCCL on the host backend; the algorithm auto picks there: one-shot
     * up to 2 KiB, two-shot above. */
    const char *want = sizes[i] <= 2048 ? ",,,one_shot" : ",,,two_shot";
    ASSERT(strcmp(buf + strlen(buf) - strlen(want), want) == 0);
    line = end + 1;
  }
  ASSERT_EQ(count_occurrences(out, "\nall_reduce,host,"), 5); /* one row per size */
  free(out);
  return 0;
}

TEST_IMPL(bench_json) {
  char *out = malloc(OUT_CAP);
  int rc = run_bench(out, 2, "-b 8 -e 64K -f 8 -c 1 --json");
  ASSERT_EQ(rc, 0);
  const char *json = strstr(out, "{\"tool\":\"symmem-bench\"");
  ASSERT(json != NULL);
  test_assert_json_shape(json);
  ASSERT_STR_CONTAINS(json, "\"config\":{\"backend\":\"host\",\"ranks\":2,\"devices\":[\"cpu\",\"cpu\"],"
                            "\"collective\":\"all_reduce\",\"dtype\":\"f32\",\"op\":\"sum\"");
  ASSERT_STR_CONTAINS(json, "\"nccl\":{\"used\":false,\"reason\":\"host backend\"}");
  ASSERT_EQ(count_occurrences(json, "{\"size_bytes\":"), 5);
  ASSERT_EQ(count_occurrences(json, "\"wrong\":0,"), 5);
  ASSERT_STR_CONTAINS(json, "{\"size_bytes\":32768,\"count\":8192,\"type\":\"f32\"");
  ASSERT_EQ(count_occurrences(json, "\"nccl_time_us\":null,\"ratio\":null,\"algo\":\""), 5);
  ASSERT_EQ(count_occurrences(json, "\"algo\":\"two_shot\"}"), 2); /* 4 and 32 KiB */
  ASSERT_STR_CONTAINS(json, "\"out_of_bounds\":0,\"avg_busbw_gbps\":");
  free(out);
  return 0;
}

/* The floor on the host: measured between the ranks, said in the header,
 * and every row read against it (a multiple of the round trip up to 4 KiB,
 * a fraction of the copy bandwidth above); --floor 0 leaves it out. */
TEST_IMPL(bench_floor) {
  char *out = malloc(OUT_CAP);
  ASSERT_EQ(run_bench(out, 2, "-b 8 -e 64K -f 8 -n 2 -w 1"), 0);
  ASSERT_STR_CONTAINS(out, "#  floor: cache-line round trip ");
  ASSERT_STR_CONTAINS(out, "  floor\n");
  table_row_t rows[MAX_ROWS];
  ASSERT_EQ(parse_table(out, rows, MAX_ROWS), 5);
  int small = 0, large = 0;
  for (const char *p = strstr(out, "\n     "); p; p = strstr(p + 1, "\n     ")) {
    const char *end = strchr(p + 1, '\n');
    if (!end) break;
    small += end[-2] == 'r' && end[-1] == 't';
    large += end[-1] == '%';
  }
  ASSERT_EQ(small, 4); /* 8 B to 4 KiB */
  ASSERT_EQ(large, 1); /* 32 KiB */
  ASSERT_EQ(run_bench(out, 2, "-b 8 -e 64K -f 8 -n 2 -w 1 --json"), 0);
  ASSERT_STR_CONTAINS(out, "\"floor\":{\"round_trip_ns\":");
  ASSERT_EQ(count_occurrences(out, "\"round_trips\":"), 4);
  ASSERT_EQ(count_occurrences(out, "\"copy_fraction\":"), 1);
  ASSERT_EQ(run_bench(out, 2, "-b 8 -e 8 -n 2 -w 1 --floor 0"), 0);
  ASSERT_STR_CONTAINS(out, "#  floor: not measured (--floor 0)");
  ASSERT(strstr(out, "rt\n") == NULL);
  free(out);
  return 0;
}

TEST_IMPL(bench_sizes) {
  char *out = malloc(OUT_CAP);
  table_row_t rows[MAX_ROWS];
  /* Suffixes, and the factor. */
  int rc = run_bench(out, 2, "-b 1K -e 4K -f 2 -n 2 -w 1");
  ASSERT_EQ(rc, 0);
  int n = parse_table(out, rows, MAX_ROWS);
  ASSERT_EQ(n, 3);
  ASSERT_EQ(rows[0].bytes, 1024);
  ASSERT_EQ(rows[1].bytes, 2048);
  ASSERT_EQ(rows[2].bytes, 4096);
  /* nccl-tests sizes of gathers: the whole result, split over the ranks, at
   * least one element each; sizes that round alike are printed once. */
  rc = run_bench(out, 3, "--coll all_gather -b 4 -e 64 -f 2 -n 2 -w 1");
  ASSERT_EQ(rc, 0);
  n = parse_table(out, rows, MAX_ROWS);
  static const size_t gather_sizes[] = {12, 24, 60}; /* 64 B: 16 elements, 5 each */
  ASSERT_EQ(n, 3);
  for (int i = 0; i < n; i++) {
    ASSERT_EQ(rows[i].bytes, gather_sizes[i]);
    ASSERT_EQ(rows[i].count, gather_sizes[i] / 4);
    ASSERT(strcmp(rows[i].op, "none") == 0);
    /* 3 ranks: busbw = algbw * 2/3. */
    ASSERT(rows[i].busbw <= rows[i].algbw * 0.667 + 0.001);
  }
  free(out);
  return 0;
}

/* Every collective, in and out of place, several dtypes and ops, odd
 * counts, 2 and 3 ranks: each checked value must be right. */
TEST_IMPL(bench_collectives) {
  static const struct { int ranks; const char *args; } cases[] = {
      {2, "--coll all_reduce --dtype f32 --op sum --inplace 0"},
      {3, "--coll all_reduce --dtype bf16 --op sum --inplace 1"},
      {3, "--coll all_reduce --dtype f16 --op min --inplace 0"},
      {2, "--coll all_reduce --dtype i32 --op max --inplace 1"},
      {3, "--coll all_reduce --dtype f32 --algo one_shot"},
      {3, "--coll all_reduce --dtype f32 --algo two_shot --inplace 0"},
      {3, "--coll all_gather --dtype u8 --inplace 1"},
      {3, "--coll all_gather --dtype f64 --inplace 0"},
      {3, "--coll reduce_scatter --dtype f32 --op sum --inplace 1"},
      {2, "--coll reduce_scatter --dtype bf16 --op max --inplace 0"},
      {3, "--coll broadcast --dtype i16 --root 1 --inplace 1"},
      {3, "--coll broadcast --dtype f32 --root 2 --inplace 0"},
      {3, "--coll all_to_all --dtype i64 --inplace 0"},
      {2, "--coll all_to_all --dtype f16 --inplace 1"},
  };
  char *out = malloc(OUT_CAP);
  char args[512];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    /* 12, 60, 300, 1500 and 7500 bytes: counts that are not multiples of
     * anything convenient. */
    snprintf(args, sizeof args, "%s -b 12 -e 8K -f 5 -n 2 -w 1 -c 1", cases[i].args);
    int rc = run_bench(out, cases[i].ranks, args);
    ASSERT_EQ(rc, 0);
    table_row_t rows[MAX_ROWS];
    int n = parse_table(out, rows, MAX_ROWS);
    ASSERT_GE(n, 4);
    for (int r = 0; r < n; r++) ASSERT(strcmp(rows[r].wrong, "0") == 0);
    ASSERT_STR_CONTAINS(out, "# Out of bounds values : 0 OK");
  }
  free(out);
  return 0;
}

/* --algo ce: on the host backend the collectives that move data run the
 * CPU's copies (the algo column says ce, every value right); an all-reduce
 * or reduce-scatter is refused, naming why. */
TEST_IMPL(bench_algo_ce_host) {
  char *out = malloc(OUT_CAP);
  static const char *const moves[] = {"all_gather", "broadcast", "all_to_all", "all_to_all_v"};
  char args[256];
  for (size_t i = 0; i < sizeof moves / sizeof moves[0]; i++) {
    snprintf(args, sizeof args, "--coll %s --algo ce -b 12 -e 4K -f 7 -n 2 -w 1 -c 1", moves[i]);
    ASSERT_EQ(run_bench(out, 2, args), 0);
    table_row_t rows[MAX_ROWS];
    int n = parse_table(out, rows, MAX_ROWS);
    ASSERT_GE(n, 3);
    for (int r = 0; r < n; r++) {
      ASSERT(strcmp(rows[r].wrong, "0") == 0);
      ASSERT_MSG(strcmp(rows[r].algo, "ce") == 0, "%s: algo %s", moves[i], rows[r].algo);
    }
  }
  ASSERT_NE(run_bench(out, 2, "--coll all_reduce --algo ce -b 64 -e 64 -n 1 -w 0"), 0);
  ASSERT_STR_CONTAINS(out, "only copy");
  ASSERT_NE(run_bench(out, 2, "--coll reduce_scatter --algo ce -b 64 -e 64 -n 1 -w 0"), 0);
  ASSERT_STR_CONTAINS(out, "only copy");
  free(out);
  return 0;
}

/* The check must see wrong values: corrupted ones are counted, the footer
 * says FAILED and the exit status is 1. */
TEST_IMPL(bench_detects_wrong) {
  char *out = malloc(OUT_CAP);
  int rc = run_bench(out, 2, "-b 64 -e 4K -f 8 -n 2 -w 1 --inject-errors 3");
  ASSERT_EQ(rc, 1);
  table_row_t rows[MAX_ROWS];
  int n = parse_table(out, rows, MAX_ROWS);
  ASSERT_EQ(n, 3);
  for (int i = 0; i < n; i++) ASSERT(strcmp(rows[i].wrong, "3") == 0);
  ASSERT_STR_CONTAINS(out, "# Out of bounds values : 9 FAILED");
  free(out);
  return 0;
}

TEST_IMPL(bench_usage) {
  char *out = malloc(OUT_CAP);
  static const char *const bad[] = {
      "--bogus",          "-b",                 "-b abc",          "-b 0",
      "-e 1X",            "-f 1",               "-f x",            "-n 0",
      "-w -1",            "-c 2",               "--coll nope",     "--op mean",
      "--dtype f128",     "--algo fast",        "--inplace 2",     "--root x",
      "--nccl 3",         "-b 1M -e 1K",        "--csv --json",    "extra",
      "--plot ''",
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = run_fmt(out, "%s %s", test_tool_path("symmem-bench"), bad[i]);
    ASSERT_EQ(rc, 2);
    ASSERT_STR_CONTAINS(out, "usage: symmem-bench");
    ASSERT_STR_CONTAINS(out, "symmem-bench: "); /* a message saying what is wrong */
  }
  int rc = run_fmt(out, "%s --help", test_tool_path("symmem-bench"));
  ASSERT_EQ(rc, 0);
  ASSERT_STR_CONTAINS(out, "usage: symmem-bench");
  ASSERT_STR_CONTAINS(out, "--stepfactor");
  /* A root outside the job is a usage error too, found once ranks exist. */
  rc = run_bench(out, 2, "--coll broadcast --root 2 -b 8 -e 8");
  ASSERT_EQ(rc, 2);
  ASSERT_STR_CONTAINS(out, "--root 2 is not a rank of this 2-rank job");
  free(out);
  return 0;
}

TEST_IMPL(bench_graph_host) {
  char *out = malloc(OUT_CAP);
  int rc = run_bench(out, 2, "--graph -b 8 -e 8");
  ASSERT_EQ(rc, 1);
  ASSERT_STR_CONTAINS(out, "--graph captures calls in a CUDA graph, which needs a GPU backend");
  ASSERT(strstr(out, "size(B)") == NULL); /* refused before timing anything */
  free(out);
  return 0;
}

TEST_IMPL(bench_plot) {
  char *out = malloc(OUT_CAP);
  char dir[] = "/tmp/symm-bench-XXXXXX", png[128], args[256];
  ASSERT(mkdtemp(dir) != NULL);
  snprintf(png, sizeof png, "%s/plot.png", dir);
  snprintf(args, sizeof args, "-b 8 -e 4K -f 8 -n 2 -w 1 --plot %s", png);
  /* Without gnuplot: the table, then a clear error and status 1. */
  int rc = run_fmt(out, "env PATH=/nonexistent SYMM_BACKEND=host %s -n 2 -- %s %s",
                   test_tool_path("symmem-run"), test_tool_path("symmem-bench"), args);
  ASSERT_EQ(rc, 1);
  ASSERT_STR_CONTAINS(out, "# Avg bus bandwidth");
  ASSERT_STR_CONTAINS(out, "--plot needs gnuplot, which is not in PATH");
  ASSERT(access(png, F_OK) != 0);
  rc = run_fmt(out, "command -v gnuplot");
  if (rc != 0) {
    rmdir(dir);
    free(out);
    printf("SKIP: gnuplot is not installed; only the error path was tested\n");
    return TEST_SKIP;
  }
  rc = run_bench(out, 2, args);
  ASSERT_EQ(rc, 0);
  ASSERT_STR_CONTAINS(out, "# plot: ");
  FILE *f = fopen(png, "rb");
  ASSERT(f != NULL);
  unsigned char magic[8] = {0};
  ASSERT_EQ(fread(magic, 1, sizeof magic, f), 8);
  fclose(f);
  ASSERT(memcmp(magic, "\x89PNG\r\n\x1a\n", 8) == 0);
  unlink(png);
  rmdir(dir);
  free(out);
  return 0;
}

/* gnuplot that cannot write the plot draws the PNG to its stdout: it must
 * not land in the bench's machine-readable output.  Only stdout is read. */
TEST_IMPL(bench_plot_unwritable) {
  char *out = malloc(OUT_CAP);
  int rc = run_fmt(out, "command -v gnuplot");
  if (rc != 0) {
    free(out);
    printf("SKIP: gnuplot is not installed\n");
    return TEST_SKIP;
  }
  rc = run_fmt(out, "(env SYMM_BACKEND=host %s -n 2 -- %s -b 8 -e 4K -f 8 -n 2 -w 1 --csv "
               "--plot /nonexistent/symm-dir/x.png 2>/dev/null)",
               test_tool_path("symmem-run"), test_tool_path("symmem-bench"));
  ASSERT_EQ(rc, 1);
  ASSERT(strstr(out, "PNG") == NULL);
  const char *header = "collective,backend,ranks,inplace,size_bytes,count,type,op,"
                       "time_us,algbw_gbps,busbw_gbps,wrong,nccl_time_us,ratio,algo\n";
  ASSERT_EQ(strncmp(out, header, strlen(header)), 0);
  int rows = 0;
  for (const char *line = out + strlen(header); *line; rows++) {
    const char *end = strchr(line, '\n');
    if (!end) TEST_FAIL_("unterminated line after the CSV: %.60s", line);
    if (strncmp(line, "all_reduce,host,2,", 18) != 0)
      TEST_FAIL_("not a CSV row: %.60s", line);
    int commas = 0;
    for (const char *p = line; p < end; p++) commas += *p == ',';
    ASSERT_EQ(commas, 14);
    line = end + 1;
  }
  ASSERT_EQ(rows, 4);
  free(out);
  return 0;
}

/* Without --algo, SYMM_ALLREDUCE_ALGO decides, and the header and the algo
 * column say what ran (the bench used to force auto over it); --algo
 * overrides the variable. */
TEST_IMPL(bench_algo_env) {
  char *out = malloc(OUT_CAP);
  table_row_t rows[MAX_ROWS];
  struct stat st;
  if (stat(test_tool_path("symmem-bench"), &st) != 0)
    TEST_FAIL_("%s is not built", test_tool_path("symmem-bench"));
  static const char *const cases[][3] = {
      /* extra args, header's algo, every row's algo (host: 8 B to 4 KiB) */
      {"", "algo: two_shot ", "two_shot"},
      {"--algo one_shot", "algo: one_shot ", "one_shot"},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    int rc = run_fmt(out, "env SYMM_BACKEND=host SYMM_ALLREDUCE_ALGO=two_shot %s -n 2 -- %s "
                     "-b 8 -e 4K -f 8 -n 2 -w 1 %s",
                     test_tool_path("symmem-run"), test_tool_path("symmem-bench"), cases[c][0]);
    ASSERT_EQ(rc, 0);
    ASSERT_STR_CONTAINS(out, cases[c][1]);
    int n = parse_table(out, rows, MAX_ROWS);
    ASSERT_EQ(n, 4);
    for (int i = 0; i < n; i++) {
      if (strcmp(rows[i].algo, cases[c][2]) != 0)
        TEST_FAIL_("%zu B: algo %s, want %s", rows[i].bytes, rows[i].algo, cases[c][2]);
      ASSERT(strcmp(rows[i].wrong, "0") == 0);
    }
  }
  free(out);
  return 0;
}

/* --coll all_to_all_v: uniform and skewed splits, in and out of place,
 * several dtypes, 2 to 4 ranks; every received value checked.  Sizes are
 * what each rank sends: the count column is size / element size. */
TEST_IMPL(bench_all_to_all_v) {
  static const struct { int ranks; const char *args, *split; } cases[] = {
      {2, "--dtype f32 --inplace 1", "skew 1 (fixed seed, the same for every sender); "
                                     "rank p gets: 50.0% 50.0%"},
      {2, "--dtype f32 --inplace 0 --skew 4", "skew 4 "},
      {3, "--dtype bf16 --inplace 1 --skew 8", "skew 8 "},
      {3, "--dtype i64 --inplace 0 --skew 1.5", "skew 1.5 "},
      {4, "--dtype u8 --inplace 1 --skew 16", "skew 16 "},
  };
  char *out = malloc(OUT_CAP);
  char args[512];
  table_row_t rows[MAX_ROWS];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(args, sizeof args, "--coll all_to_all_v %s -b 12 -e 8K -f 5 -n 2 -w 1 -c 1",
             cases[i].args);
    int rc = run_bench(out, cases[i].ranks, args);
    ASSERT_EQ(rc, 0);
    assert_table_header(out);
    ASSERT_STR_CONTAINS(out, "#  collective: all_to_all_v ");
    ASSERT_STR_CONTAINS(out, "#  split: ");
    ASSERT_STR_CONTAINS(out, cases[i].split);
    int n = parse_table(out, rows, MAX_ROWS);
    ASSERT_GE(n, 4);
    for (int r = 0; r < n; r++) {
      ASSERT(strcmp(rows[r].wrong, "0") == 0);
      ASSERT(strcmp(rows[r].op, "none") == 0);
      ASSERT(strcmp(rows[r].algo, "-") == 0);
      ASSERT(rows[r].count > 0 && rows[r].bytes % rows[r].count == 0);
      ASSERT(rows[r].time_us > 0);
    }
    ASSERT_STR_CONTAINS(out, "# Out of bounds values : 0 OK");
  }
  /* The shares of a skew of 4 at 2 ranks: 1 to 4, every sender alike. */
  int rc = run_bench(out, 2, "--coll all_to_all_v --skew 4 -b 1K -e 1K -n 1 -w 0");
  ASSERT_EQ(rc, 0);
  ASSERT(strstr(out, "rank p gets: 20.0% 80.0%") || strstr(out, "rank p gets: 80.0% 20.0%"));
  /* Wrong values are seen (rank 0's first 3 each size), and JSON says the split. */
  rc = run_bench(out, 3, "--coll all_to_all_v --skew 2 -b 1K -e 4K -f 4 -n 1 -w 0 "
                         "--inject-errors 3");
  ASSERT_EQ(rc, 1);
  ASSERT_STR_CONTAINS(out, "# Out of bounds values : 6 FAILED");
  rc = run_bench(out, 2, "--coll all_to_all_v --skew 4 -b 1K -e 1K -n 1 -w 0 --json");
  ASSERT_EQ(rc, 0);
  const char *json = strstr(out, "{\"tool\":\"symmem-bench\"");
  ASSERT(json != NULL);
  test_assert_json_shape(json);
  ASSERT_STR_CONTAINS(json, "\"collective\":\"all_to_all_v\"");
  ASSERT_STR_CONTAINS(json, "\"skew\":4,\"shares\":[");
  ASSERT_STR_CONTAINS(json, "{\"size_bytes\":1024,\"count\":256,\"type\":\"f32\",\"op\":\"none\"");
  free(out);
  return 0;
}

/* --skew and -g values the tool refuses, each with a message that says
 * why; -g that does not divide the ranks is refused once they exist. */
TEST_IMPL(bench_skew_groups_usage) {
  static const char *const bad_skew[] = {"0.5", "0", "-2", "abc", "inf", "nan", "2x", "''"};
  char *out = malloc(OUT_CAP);
  for (size_t i = 0; i < sizeof bad_skew / sizeof bad_skew[0]; i++) {
    int rc = run_fmt(out, "%s --coll all_to_all_v --skew %s", test_tool_path("symmem-bench"),
                     bad_skew[i]);
    ASSERT_EQ(rc, 2);
    ASSERT_STR_CONTAINS(out, "symmem-bench: --skew needs a ratio S >= 1 (the largest peer's "
                             "share over the smallest; 1: uniform), not '");
    ASSERT_STR_CONTAINS(out, "usage: symmem-bench");
  }
  int rc = run_fmt(out, "%s --skew 2", test_tool_path("symmem-bench"));
  ASSERT_EQ(rc, 2);
  ASSERT_STR_CONTAINS(out, "--skew shapes the split of --coll all_to_all_v; --coll all_reduce "
                           "has none");
  static const char *const bad_groups[] = {"-g 0", "-g x", "--groups -1", "-g"};
  for (size_t i = 0; i < sizeof bad_groups / sizeof bad_groups[0]; i++) {
    rc = run_fmt(out, "%s %s", test_tool_path("symmem-bench"), bad_groups[i]);
    ASSERT_EQ(rc, 2);
    ASSERT_STR_CONTAINS(out, "-g");
    ASSERT_STR_CONTAINS(out, "usage: symmem-bench");
  }
  rc = run_fmt(out, "%s --help", test_tool_path("symmem-bench"));
  ASSERT_EQ(rc, 0);
  ASSERT_STR_CONTAINS(out, "all_to_all_v");
  ASSERT_STR_CONTAINS(out, "--skew S");
  ASSERT_STR_CONTAINS(out, "-g, --groups N");
  ASSERT_STR_CONTAINS(out, "contiguous blocks");
  rc = run_bench(out, 4, "-g 3 -b 8 -e 8");
  ASSERT_EQ(rc, 2);
  ASSERT_STR_CONTAINS(out, "symmem-bench: -g 3 does not divide the 4 ranks of this job");
  ASSERT(strstr(out, "size(B)") == NULL);
  rc = run_bench(out, 4, "-g 2 --coll broadcast --root 2 -b 8 -e 8");
  ASSERT_EQ(rc, 2);
  ASSERT_STR_CONTAINS(out, "--root 2 is not a rank of this job's 2-rank groups");
  free(out);
  return 0;
}

/* The group column of a table: the last field of a data row. */
static int row_group(const char *out, int index) {
  int n = 0;
  for (const char *line = out; line && *line;
       line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
    const char *p = line;
    while (*p == ' ') p++;
    if (p == line || *p < '0' || *p > '9') continue;
    if (n++ != index) continue;
    const char *end = strchr(line, '\n'), *last = end ? end : line + strlen(line);
    while (last > line && last[-1] == ' ') last--;
    while (last > line && last[-1] != ' ') last--;
    return atoi(last);
  }
  return -1;
}

/* -g: groups of consecutive ranks timed side by side, a row per group and
 * size, each checked; the CSV gains a group column. */
TEST_IMPL(bench_groups) {
  char *out = malloc(OUT_CAP);
  table_row_t rows[MAX_ROWS];
  static const char *const colls[] = {"all_reduce", "all_to_all_v --skew 3", "all_gather"};
  char args[256];
  for (size_t c = 0; c < sizeof colls / sizeof colls[0]; c++) {
    snprintf(args, sizeof args, "-g 2 --coll %s -b 1K -e 16K -f 4 -n 2 -w 1", colls[c]);
    int rc = run_bench(out, 4, args);
    ASSERT_EQ(rc, 0);
    assert_table_header(out);
    ASSERT_STR_CONTAINS(out, "#  backend: host  ranks: 4  devices: cpu,cpu,cpu,cpu");
    ASSERT_STR_CONTAINS(out, "#  groups: 2 of 2 ranks, consecutive");
    ASSERT_STR_CONTAINS(out, "algo  group\n");
    int n = parse_table(out, rows, MAX_ROWS);
    ASSERT_EQ(n, 6); /* 1, 4 and 16 KiB, twice */
    for (int i = 0; i < n; i++) {
      ASSERT_EQ(rows[i].bytes, (size_t)1024 << (2 * (i / 2)));
      ASSERT(strcmp(rows[i].wrong, "0") == 0);
      ASSERT_EQ(row_group(out, i), i % 2);
      /* 2 ranks a group: busbw = algbw (all-reduce) or algbw / 2. */
      ASSERT(rows[i].busbw <= rows[i].algbw * 1.001 + 0.001);
    }
    ASSERT_STR_CONTAINS(out, "# Out of bounds values : 0 OK");
  }
  int rc = run_bench(out, 4, "-g 2 -b 1K -e 4K -f 4 -n 2 -w 1 --csv");
  ASSERT_EQ(rc, 0);
  ASSERT_STR_CONTAINS(out, "time_us,algbw_gbps,busbw_gbps,wrong,nccl_time_us,ratio,algo,group\n");
  ASSERT_EQ(count_occurrences(out, "\nall_reduce,host,2,1,"), 4);
  ASSERT_EQ(count_occurrences(out, ",one_shot,0\n") + count_occurrences(out, ",two_shot,0\n"), 2);
  ASSERT_EQ(count_occurrences(out, ",one_shot,1\n") + count_occurrences(out, ",two_shot,1\n"), 2);
  rc = run_bench(out, 4, "-g 4 -b 1K -e 1K -n 2 -w 1 --json");
  ASSERT_EQ(rc, 0);
  const char *json = strstr(out, "{\"tool\":\"symmem-bench\"");
  ASSERT(json != NULL);
  test_assert_json_shape(json);
  ASSERT_STR_CONTAINS(json, "\"groups\":4,\"group_ranks\":1");
  for (int g = 0; g < 4; g++) {
    char want[32];
    snprintf(want, sizeof want, "\"group\":%d}", g);
    ASSERT_EQ(count_occurrences(json, want), 1);
  }
  /* --plot draws a line per group (where gnuplot is installed). */
  if (run_fmt(out, "command -v gnuplot") == 0) {
    char dir[] = "/tmp/symm-bench-XXXXXX", png[128], args2[256];
    ASSERT(mkdtemp(dir) != NULL);
    snprintf(png, sizeof png, "%s/groups.png", dir);
    snprintf(args2, sizeof args2, "-g 2 -b 1K -e 4K -f 4 -n 2 -w 1 --plot %s", png);
    rc = run_bench(out, 4, args2);
    ASSERT_EQ(rc, 0);
    ASSERT_STR_CONTAINS(out, "# plot: ");
    ASSERT_EQ(access(png, F_OK), 0);
    unlink(png);
    rmdir(dir);
  }
  free(out);
  return 0;
}

/* bench/compare_mpi.sh COLL=all_to_all_v on a tiny sweep, where Open MPI
 * is installed: a table per ranks and skew with the split in its title,
 * every size of both sides joined, ratio = symmem / MPI, nothing wrong. */
/* Whether ratio r (printed to 3 decimals) is num / den of times printed to
 * 2 decimals: within what the roundings allow (a time of 0.495 prints as
 * 0.49 or 0.50, 1% apart). */
static bool ratio_ok(double r, double num, double den) {
  const double lo = (num - 0.005) / (den + 0.005), hi = (num + 0.005) / (den > 0.006 ? den - 0.005 : 0.001);
  return r >= lo - 0.0005 && r <= hi + 0.0005;
}

TEST_IMPL(bench_compare_mpi_all_to_all_v) {
  char *out = malloc(OUT_CAP);
  if (run_fmt(out, "command -v mpicc && command -v mpirun") != 0) {
    free(out);
    printf("SKIP: Open MPI (mpicc, mpirun) is not installed; apt-get install openmpi-bin "
           "libopenmpi-dev\n");
    return TEST_SKIP;
  }
  char script[1024];
  snprintf(script, sizeof script, "%s", __FILE__);
  char *slash = strrchr(script, '/');
  ASSERT(slash != NULL);
  snprintf(slash, sizeof script - (size_t)(slash - script), "/../bench/compare_mpi.sh");
  char build[1024];
  snprintf(build, sizeof build, "%s/..", test_tool_path(""));
  int rc = run_fmt(out, "COLL=all_to_all_v RANKS=2 SKEWS='1 4' MINBYTES=1K MAXBYTES=4K "
                   "ROUNDS=1 ITERS=2 WARMUP=1 sh %s %s", script, build);
  ASSERT_EQ(rc, 0);
  ASSERT_STR_CONTAINS(out, "# f32 all_to_all_v, 2 ranks, skew 1 (rank p gets: 50.0% 50.0%)");
  ASSERT(strstr(out, "# f32 all_to_all_v, 2 ranks, skew 4 (rank p gets: 20.0% 80.0%)") ||
         strstr(out, "# f32 all_to_all_v, 2 ranks, skew 4 (rank p gets: 80.0% 20.0%)"));
  ASSERT_EQ(count_occurrences(out, "ratio = symmem / MPI (< 1: symmem faster)"), 2);
  int rows = 0;
  for (const char *line = out; line && *line;
       line = strchr(line, '\n'), line = line ? line + 1 : NULL) {
    size_t bytes;
    double mpi, inpl, r1, oop, r2;
    int wrong;
    if (sscanf(line, " %zu %lf %lf %lf %lf %lf %d", &bytes, &mpi, &inpl, &r1, &oop, &r2,
               &wrong) != 7)
      continue;
    ASSERT(bytes == 1024 || bytes == 2048 || bytes == 4096);
    ASSERT_EQ(wrong, 0);
    ASSERT_MSG(ratio_ok(r1, inpl, mpi), "%zu B: ratio %.3f of %.2f / %.2f", bytes, r1, inpl, mpi);
    ASSERT_MSG(ratio_ok(r2, oop, mpi), "%zu B: ratio %.3f of %.2f / %.2f", bytes, r2, oop, mpi);
    rows++;
  }
  ASSERT_EQ(rows, 6);
  free(out);
  return 0;
}
