/* symmem-bench's output on rank 0: the nccl-tests style table, CSV and
 * JSON. */
#include <stdlib.h>
#include <string.h>

#include "symmem_bench.h"

double bus_factor(const bench_t *b) {
  double n = b->size;
  switch (b->opt.coll) {
  case BENCH_ALL_REDUCE: return 2.0 * (n - 1) / n;
  case BENCH_BROADCAST: return 1.0;
  default: return (n - 1) / n;
  }
}

/* The sum of all_to_all_v's shares (they print as parts of the whole). */
static double share_total(const bench_t *b) {
  double t = 0;
  for (int p = 0; p < b->size; p++) t += b->shares[p];
  return t > 0 ? t : 1;
}

const char *op_column(const bench_t *b) {
  return coll_reduces(b->opt.coll) ? symm_redop_name(b->opt.op) : "none";
}

static void print_devices(const bench_t *b, FILE *out) {
  for (int r = 0; r < b->world_size; r++) {
    if (r) fputc(',', out);
    if (b->devices[r] < 0) fputs("cpu", out);
    else fprintf(out, "%d", b->devices[r]);
  }
}

/* The symmem settings of this run that are set (what the launcher sets for
 * every job, the token included, left out), so that a table says how it
 * was made. */
static void print_settings(void) {
  size_t n = symm_setting_count();
  int shown = 0;
  printf("#  settings:");
  for (size_t i = 0; i < n; i++) {
    symm_setting_info_t info;
    if (symm_setting_get(i, &info) != SYMM_SUCCESS || !info.value || !*info.value ||
        info.per_job)
      continue;
    printf(" %s=%s", info.name, info.value);
    shown++;
  }
  printf("%s\n", shown ? "" : " defaults");
}

/* all_to_all_v: the part of its size every rank sends each rank. */
static void print_split(const bench_t *b) {
  printf("#  split: skew %g (fixed seed, the same for every sender); rank p gets:", b->opt.skew);
  for (int p = 0; p < b->size && p < 16; p++)
    printf(" %.1f%%", 100.0 * b->shares[p] / share_total(b));
  printf("%s\n", b->size > 16 ? " ..." : "");
}

void print_table_header(const bench_t *b) {
  const bench_options_t *o = &b->opt;
  int v = symm_version();
  printf("# symmem-bench %d.%d.%d\n", v / 10000, v / 100 % 100, v % 100);
  printf("#  backend: %s  ranks: %d  devices: ", symm_backend_name(symm_comm_backend(b->comm)),
         b->world_size);
  print_devices(b, stdout);
  printf("\n#  collective: %s  dtype: %s  op: %s  algo: %s  inplace: %d  root: %d\n",
         coll_names[o->coll], symm_dtype_name(o->dtype), op_column(b), symm_algo_name(o->algo),
         o->inplace, o->root);
  if (o->groups > 1)
    printf("#  groups: %d of %d ranks, consecutive (group g: ranks %d*g .. %d*g+%d), timed "
           "side by side; a row per group\n", o->groups, b->size, b->size, b->size, b->size - 1);
  if (o->coll == BENCH_ALL_TO_ALL_V) print_split(b);
  printf("#  iterations: %d  warmup: %d  check: %d  graph: %d\n", o->iters, o->warmup, o->check,
         o->graph ? 1 : 0);
  print_settings();
  if (b->nccl.used)
    printf("# nccl: used (version %d, %s on the same buffers and stream%s)\n",
           b->nccl.lib.version, o->graph ? "graph-captured" : "eager",
           b->nccl.borrowed ? ", the nccl backend's communicator and windows" : "");
  else
    printf("# nccl: not used (%s)\n", b->nccl.why);
  printf("#  time: mean per call of the slowest rank; busbw = algbw * %s\n",
         o->coll == BENCH_ALL_REDUCE ? "2(n-1)/n" : o->coll == BENCH_BROADCAST ? "1" : "(n-1)/n");
  if (b->floor_rt_ns > 0)
    printf("#  floor: cache-line round trip %.0f ns (ranks 0 and 1), copy %.2f GB/s per core "
           "(every rank copying at once); floor column: time / round trip up to %d B, then "
           "busbw / copy\n", b->floor_rt_ns, b->floor_copy_gbps, FLOOR_SMALL_BYTES);
  else
    printf("#  floor: not measured (%s)\n", b->floor_why);
  printf("#\n");
  printf("#%13s  %12s  %5s  %5s  %10s  %11s  %11s  %6s  %8s", "size(B)", "count(elems)", "type",
         "op", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong", "algo");
  if (b->nccl.used) printf("  %13s  %6s", "nccl_time(us)", "ratio");
  if (o->groups > 1) printf("  %5s", "group");
  if (b->floor_rt_ns > 0) printf("  %7s", "floor");
  printf("\n");
  fflush(stdout);
}

/* "3.1rt" (a multiple of the round trip) or "45%" (of the copy bandwidth). */
static void floor_text(const bench_t *b, const size_result_t *r, char *out, size_t cap) {
  const double f = floor_ratio(b, r);
  if (floor_small(r)) snprintf(out, cap, "%.1frt", f);
  else snprintf(out, cap, "%.0f%%", 100 * f);
}

void print_table_row(const bench_t *b, const size_result_t *r) {
  char wrong[32];
  if (r->wrong < 0) snprintf(wrong, sizeof wrong, "N/A");
  else snprintf(wrong, sizeof wrong, "%lld", (long long)r->wrong);
  printf("%14zu  %12zu  %5s  %5s  %10.2f  %11.3f  %11.3f  %6s  %8s", r->bytes, r->count,
         symm_dtype_name(b->opt.dtype), op_column(b), r->time_us, r->algbw, r->busbw, wrong,
         r->algo);
  if (b->nccl.used) printf("  %13.2f  %6.3f", r->nccl_us, r->time_us / r->nccl_us);
  if (b->opt.groups > 1) printf("  %5d", r->group);
  if (b->floor_rt_ns > 0) {
    char f[32];
    floor_text(b, r, f, sizeof f);
    printf("  %7s", f);
  }
  printf("\n");
  fflush(stdout);
}

/* With -g a last column says the group (its ranks: the ranks column). */
void print_csv_header(const bench_t *b) {
  printf("collective,backend,ranks,inplace,size_bytes,count,type,op,time_us,algbw_gbps,"
         "busbw_gbps,wrong,nccl_time_us,ratio,algo%s\n", b->opt.groups > 1 ? ",group" : "");
}

void print_csv_row(const bench_t *b, const size_result_t *r) {
  printf("%s,%s,%d,%d,%zu,%zu,%s,%s,%.3f,%.4f,%.4f,", coll_names[b->opt.coll],
         symm_backend_name(symm_comm_backend(b->comm)), b->size, b->opt.inplace, r->bytes,
         r->count, symm_dtype_name(b->opt.dtype), op_column(b), r->time_us, r->algbw, r->busbw);
  if (r->wrong >= 0) printf("%lld", (long long)r->wrong);
  printf(",");
  if (r->nccl_us >= 0) printf("%.3f,%.4f", r->nccl_us, r->time_us / r->nccl_us);
  else printf(",");
  printf(",%s", r->algo);
  if (b->opt.groups > 1) printf(",%d", r->group);
  printf("\n");
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

void print_json(const bench_t *b, int64_t wrong_total, double avg_busbw) {
  const bench_options_t *o = &b->opt;
  int v = symm_version();
  printf("{\"tool\":\"symmem-bench\",\"version\":\"%d.%d.%d\",\"config\":{\"backend\":",
         v / 10000, v / 100 % 100, v % 100);
  json_string(stdout, symm_backend_name(symm_comm_backend(b->comm)));
  printf(",\"ranks\":%d,\"devices\":[", b->world_size);
  /* As the table says it: a GPU ordinal, or "cpu" for a host-backend rank. */
  for (int r = 0; r < b->world_size; r++) {
    if (b->devices[r] < 0) printf("%s\"cpu\"", r ? "," : "");
    else printf("%s%d", r ? "," : "", b->devices[r]);
  }
  printf("],\"collective\":\"%s\",\"dtype\":\"%s\",\"op\":\"%s\",\"algo\":\"%s\","
         "\"inplace\":%d,\"root\":%d,\"iters\":%d,\"warmup\":%d,\"check\":%d,\"graph\":%d,"
         "\"groups\":%d,\"group_ranks\":%d",
         coll_names[o->coll], symm_dtype_name(o->dtype), op_column(b), symm_algo_name(o->algo),
         o->inplace, o->root, o->iters, o->warmup, o->check, o->graph ? 1 : 0, o->groups,
         b->size);
  if (o->coll == BENCH_ALL_TO_ALL_V) {
    printf(",\"skew\":%.17g,\"shares\":[", o->skew);
    for (int p = 0; p < b->size; p++)
      printf("%s%.6g", p ? "," : "", b->shares[p] / share_total(b));
    printf("]");
  }
  printf("},");
  if (b->floor_rt_ns > 0)
    printf("\"floor\":{\"round_trip_ns\":%.1f,\"copy_gbps\":%.3f},", b->floor_rt_ns,
           b->floor_copy_gbps);
  printf("\"nccl\":{\"used\":%s,", b->nccl.used ? "true" : "false");
  if (b->nccl.used) printf("\"version\":%d}", b->nccl.lib.version);
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
    const double f = floor_ratio(b, r);
    if (f >= 0) printf(",\"%s\":%.4f", floor_small(r) ? "round_trips" : "copy_fraction", f);
    if (r->nccl_us >= 0)
      printf(",\"nccl_time_us\":%.3f,\"ratio\":%.4f", r->nccl_us, r->time_us / r->nccl_us);
    else printf(",\"nccl_time_us\":null,\"ratio\":null");
    printf(",\"algo\":\"%s\"", r->algo);
    if (o->groups > 1) printf(",\"group\":%d", r->group);
    printf("}");
  }
  printf("],\n\"out_of_bounds\":");
  if (o->check) printf("%lld", (long long)wrong_total);
  else printf("null");
  printf(",\"avg_busbw_gbps\":%.4f}\n", avg_busbw);
  fflush(stdout);
}
