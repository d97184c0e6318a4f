/* symmem-bench --plot: time and bus bandwidth against size, drawn by
 * gnuplot. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "symmem_bench.h"

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
int plot(const bench_t *b) {
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
