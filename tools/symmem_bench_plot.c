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

/* One plot command: column `mine` (and NCCL's column `nccl`) against the
 * size, a line per group. */
static void plot_lines(FILE *gp, const bench_t *b, const char *data, int mine, int nccl) {
  const char *name = b->opt.groups > 1 ? "sprintf('symmem group %d', g)" : "'symmem'";
  const char *nccl_name = b->opt.groups > 1 ? "sprintf('nccl group %d', g)" : "'nccl'";
  fprintf(gp, "plot for [g=0:%d] '%s' index g using 1:%d with linespoints title %s",
          b->opt.groups - 1, data, mine, name);
  if (b->nccl.used)
    fprintf(gp, ", for [g=0:%d] '%s' index g using 1:%d with linespoints title %s",
            b->opt.groups - 1, data, nccl, nccl_name);
  fprintf(gp, "\n");
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
  /* One data block per group (gnuplot's index), two blank lines apart. */
  for (int g = 0; g < b->opt.groups; g++) {
    for (int i = 0; i < b->n_results; i++) {
      const size_result_t *r = &b->results[i];
      if (r->group != g) continue;
      fprintf(f, "%zu %.6g %.6g ", r->bytes, r->time_us, r->busbw);
      if (r->nccl_us > 0)
        fprintf(f, "%.6g %.6g\n", r->nccl_us,
                (double)r->bytes / (r->nccl_us * 1e3) * bus_factor(b));
      else
        fprintf(f, "NaN NaN\n");
    }
    fprintf(f, "\n\n");
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
  fprintf(gp, "\nset datafile missing 'NaN'\nset multiplot layout 2,1 title '%s %s %s, %d ranks%s, "
              "%s backend%s'\n",
          coll_names[b->opt.coll], symm_dtype_name(b->opt.dtype), op_column(b), b->size,
          b->opt.groups > 1 ? " per group" : "", symm_backend_name(symm_comm_backend(b->comm)),
          b->opt.graph ? ", graph" : "");
  fprintf(gp, "set logscale x 2\nset format x '%%.0b%%BB'\nset xlabel 'size'\nset grid\n"
              "set key top left\nset logscale y\nset ylabel 'time (us)'\n");
  plot_lines(gp, b, data, 2, 4);
  fprintf(gp, "unset logscale y\nset ylabel 'bus bandwidth (GB/s)'\n");
  plot_lines(gp, b, data, 3, 5);
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
