/*
 * symmem-run: starts a job's key-value store and N ranks of a program on
 * this host.
 *
 *   symmem-run -n N [-p] [-v] [--bind-to core|numa|none] [--bind ADDR] [--port P]
 *              [--timeout S] [--] PROG ARGS
 *
 * The store runs in this process (a thread of symm_store_server_*), so the
 * ranks are started with SYMM_STORE_EXTERNAL=1 and rank 0 does not serve one.
 * The launcher owns the job's lifetime: when a rank fails it tells the store
 * (so peers blocked on that rank fail fast with SYMM_ERR_PEER_LOST instead of
 * waiting out their timeout), stops the other ranks, and leaves no process of
 * the job behind.
 *
 * Output: each rank's stdout and stderr are pipes that the launcher reads
 * and passes on to its own stdout and stderr whole lines at a time, each
 * line in one write(), so that lines of different ranks never mix (with -p
 * each starts with "[rank] ").  A rank's last line without a newline gets
 * one when its pipe closes; a line longer than RUN_LINE_MAX is passed on in
 * pieces.  The pipes are read all the time (while ranks start, run and are
 * stopped), so a rank that writes a lot never waits on the launcher for
 * long, and what ranks write while they stop is not lost.
 *
 * Process model:
 *  - each rank is the leader of its own process group, so signalling the
 *    group reaches whatever the rank started (shell pipelines, helpers);
 *  - ranks die with the launcher (PR_SET_PDEATHSIG), and the launcher is a
 *    child subreaper: a rank's orphaned children are re-parented here, are
 *    reaped rather than left as zombies, and those that left their rank's
 *    process group are still found and killed when the job ends;
 *  - the main loop is single-threaded: signals and SIGCHLD are turned into
 *    bytes on a self-pipe and handled next to the ranks' output pipes in one
 *    poll().
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "symmem.h"
#include "symmem_run_bind.h"
#include "tool_common.h"

extern char **environ;

#define RUN_MAX_RANKS 4096
/* Between SIGTERM and SIGKILL when the launcher stops the job itself. */
#define RUN_KILL_GRACE_MS 2000
/* After the last rank exited, how long output still held open by escaped
 * descendants is waited for before the pipes are closed. */
#define RUN_DRAIN_MS 1000
/* A line longer than this is written out in pieces (prefix on the first). */
#define RUN_LINE_MAX (64u * 1024u)
#define RUN_EXIT_USAGE 2
#define RUN_EXIT_TIMEOUT 124

typedef struct run_options {
  int np;
  bool prefix;
  const char *bind;
  int port;
  double timeout_s; /* 0: none */
  run_bind_t bind_to;
  bool verbose;
  char **argv;      /* the program and its arguments */
} run_options_t;

/* One of a rank's output pipes, and its unfinished line. */
typedef struct out_stream {
  int fd;         /* read end; -1 once closed */
  int dest;       /* 1, or err_fd for stderr */
  char *buf;
  size_t len, cap;
  bool mid_line;  /* part of the current line was already written */
} out_stream_t;

typedef struct rank_proc {
  pid_t pid;          /* 0: never started */
  bool running;
  bool group_gone;    /* its process group is known to be empty */
  bool stopped;       /* still running when the launcher began to stop it */
  out_stream_t out[2];
} rank_proc_t;

typedef struct job {
  run_options_t opt;
  run_binding_t binding;
  rank_proc_t *ranks;
  int started, running;
  symm_store_server_t *server;
  char token[33];
  char job_id[48];
  char store_addr[320];
  bool stdin_is_tty;
  int exit_code;       /* decided by the first cause; -1 while undecided */
  bool stopping;       /* SIGTERM sent by the launcher, SIGKILL due at kill_at */
  bool killed;
  uint64_t kill_at, deadline;
  /* After the last rank: leftovers get SIGTERM, SIGKILL at end_kill_at;
   * then output is drained until drain_until. */
  bool ended, end_killed, leftovers_done;
  uint64_t end_kill_at, end_giveup_at, drain_until;
  int signals_seen;    /* forwarded INT/TERM/HUP (not USR1/USR2/QUIT) */
  char *scratch;       /* one prefixed line, written with one write() */
  struct pollfd *pfds; /* the main loop's, 2 + 2 * np */
  int *owner;          /* of pfds[i]: rank * 2 + stream */
} job_t;

static int sig_pipe[2] = {-1, -1};
/* The launcher's own stderr: its messages and the ranks' stderr go there. */
static const int err_fd = 2;

/* ------------------------------------------------------------- utilities */

static uint64_t now_ms(void) { return tool_now_ns() / 1000000u; }

static const char *signal_abbrev(int sig) {
  switch (sig) {
  case SIGINT: return "SIGINT";
  case SIGTERM: return "SIGTERM";
  case SIGHUP: return "SIGHUP";
  case SIGQUIT: return "SIGQUIT";
  case SIGUSR1: return "SIGUSR1";
  case SIGUSR2: return "SIGUSR2";
  case SIGKILL: return "SIGKILL";
  case SIGSEGV: return "SIGSEGV";
  case SIGABRT: return "SIGABRT";
  case SIGBUS: return "SIGBUS";
  case SIGFPE: return "SIGFPE";
  case SIGILL: return "SIGILL";
  case SIGPIPE: return "SIGPIPE";
  case SIGALRM: return "SIGALRM";
  case SIGTRAP: return "SIGTRAP";
  case SIGSYS: return "SIGSYS";
  case SIGXCPU: return "SIGXCPU";
  case SIGXFSZ: return "SIGXFSZ";
  default: return "signal";
  }
}

/* Writes everything, waiting out a non-blocking destination; drops the
 * data if the destination is gone (EPIPE), since the ranks should not die
 * because nobody reads the launcher's output any more. */
static void write_all(int fd, const char *data, size_t len) {
  while (len > 0) {
    ssize_t w = write(fd, data, len);
    if (w > 0) {
      data += w;
      len -= (size_t)w;
    } else if (w < 0 && errno == EINTR) {
      continue;
    } else if (w < 0 && errno == EAGAIN) {
      struct pollfd p = {fd, POLLOUT, 0};
      poll(&p, 1, 100);
    } else {
      return;
    }
  }
}

/* A message of the launcher's, in one write() like the ranks' lines. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n >= sizeof buf) {
    n = (int)sizeof buf - 1;
    buf[n - 1] = '\n';
  }
  write_all(err_fd, buf, (size_t)n);
}

/* ----------------------------------------------------------- options */

static void print_usage(FILE *out) {
  fprintf(out,
          "usage: symmem-run -n N [options] [--] PROGRAM [ARGS...]\n"
          "\n"
          "Starts the job's key-value store and N ranks of PROGRAM on this host.\n"
          "Each rank gets SYMM_RANK, SYMM_WORLD_SIZE, SYMM_LOCAL_RANK, SYMM_LOCAL_SIZE,\n"
          "SYMM_STORE_ADDR, SYMM_TOKEN, SYMM_JOB_ID and SYMM_STORE_EXTERNAL=1.\n"
          "\n"
          "options:\n"
          "  -n, --np N          number of ranks, 1..%d (required)\n"
          "  -p, --prefix        start every output line of rank r with \"[r] \"\n"
          "      --bind-to WHAT  core: each rank on a core of its own (all its hardware\n"
          "                      threads), numa: the ranks round-robin over the NUMA\n"
          "                      nodes, none; default: core when there is a core per\n"
          "                      rank, else none (within symmem-run's own CPUs)\n"
          "  -v, --verbose       say how the ranks are bound, and where each runs; at the\n"
          "                      end, what the store served (connections, requests, bytes)\n"
          "      --bind ADDR     address the store listens on (default 127.0.0.1)\n"
          "      --port P        port of the store (default: any free port)\n"
          "      --timeout SECS  stop the job after SECS seconds (exit status 124)\n"
          "  -h, --help          show this help\n"
          "      --version       show the version\n"
          "\n"
          "The ranks' stdout and stderr go to symmem-run's stdout and stderr whole lines\n"
          "at a time, so that lines of different ranks never mix; a last line without a\n"
          "newline gets one, and a line over %u KiB is passed on in pieces.  A rank's\n"
          "stdout is a pipe: flush it (python -u) to see lines as they come.  Rank 0\n"
          "reads symmem-run's stdin unless it is a terminal; the other ranks read none.\n"
          "\n"
          "If a rank exits non-zero or is killed, symmem-run says which rank and how, the\n"
          "other ranks get SIGTERM (SIGKILL %d s later, for time to flush and exit),\n"
          "what they write until their output closes is passed on, and symmem-run exits\n"
          "with the failed rank's status (128+signal for a signal).  The store tells the\n"
          "failed rank's peers that it was lost (SYMM_ERR_PEER_LOST), and does not warn\n"
          "of the ranks symmem-run stopped.\n"
          "\n"
          "SIGINT/SIGTERM/SIGHUP are forwarded to the ranks; a second one kills them.\n"
          "SIGUSR1/SIGUSR2/SIGQUIT are forwarded to the ranks each time they come, and\n"
          "the job goes on (Slurm's --signal=USR1@T, checkpoints).\n",
          RUN_MAX_RANKS, RUN_LINE_MAX / 1024, RUN_KILL_GRACE_MS / 1000);
}

static int usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int usage_error(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int code = tool_usage_error("symmem-run", print_usage, RUN_EXIT_USAGE, fmt, ap);
  va_end(ap);
  return code;
}


enum { OPT_BIND = 256, OPT_PORT, OPT_TIMEOUT, OPT_VERSION, OPT_BIND_TO };

/* Returns -1 to go on, else the exit status (0 for --help/--version). */
static int parse_options(int argc, char **argv, run_options_t *opt) {
  static const struct option longopts[] = {
      {"np", required_argument, NULL, 'n'},
      {"prefix", no_argument, NULL, 'p'},
      {"bind-to", required_argument, NULL, OPT_BIND_TO},
      {"verbose", no_argument, NULL, 'v'},
      {"bind", required_argument, NULL, OPT_BIND},
      {"port", required_argument, NULL, OPT_PORT},
      {"timeout", required_argument, NULL, OPT_TIMEOUT},
      {"help", no_argument, NULL, 'h'},
      {"version", no_argument, NULL, OPT_VERSION},
      {NULL, 0, NULL, 0}};
  *opt = (run_options_t){0, false, "127.0.0.1", 0, 0.0, RUN_BIND_DEFAULT, false, NULL};
  opterr = 0; /* our own messages, followed by the usage */
  int c;
  /* '+': options end at PROGRAM, so its own options are left alone. */
  while ((c = getopt_long(argc, argv, "+:n:phv", longopts, NULL)) != -1) {
    switch (c) {
    case 'n':
      if (!tool_parse_int(optarg, 1, RUN_MAX_RANKS, &opt->np))
        return usage_error("-n needs a number of ranks from 1 to 4096, not '%s'", optarg);
      break;
    case 'p': opt->prefix = true; break;
    case 'v': opt->verbose = true; break;
    case OPT_BIND_TO:
      if (run_bind_parse(optarg, &opt->bind_to) != 0)
        return usage_error("--bind-to takes core, numa or none, not '%s'", optarg);
      break;
    case OPT_BIND:
      if (!*optarg) return usage_error("--bind needs an address");
      opt->bind = optarg;
      break;
    case OPT_PORT:
      if (!tool_parse_int(optarg, 0, 65535, &opt->port))
        return usage_error("--port needs a port number from 0 to 65535, not '%s'", optarg);
      break;
    case OPT_TIMEOUT: {
      char *end;
      errno = 0;
      double t = strtod(optarg, &end);
      if (errno || end == optarg || *end || !isfinite(t) || t <= 0 || t > 1e9)
        return usage_error("--timeout needs a positive number of seconds, not '%s'", optarg);
      opt->timeout_s = t;
      break;
    }
    case 'h': print_usage(stdout); return 0;
    case OPT_VERSION: {
      int v = symm_version();
      printf("symmem-run (symmem) %d.%d.%d\n", v / 10000, v / 100 % 100, v % 100);
      return 0;
    }
    case ':': return usage_error("option %s needs a value", argv[optind - 1]);
    default:
      if (optopt > 0 && optopt < 256) return usage_error("unknown option -%c", optopt);
      return usage_error("unknown option %s", argv[optind - 1]);
    }
  }
  if (opt->np == 0) return usage_error("the number of ranks (-n N) is required");
  if (optind >= argc) return usage_error("no program to run");
  opt->argv = argv + optind;
  return -1;
}

/* ------------------------------------------------------------- signals */

static void on_signal(int sig) {
  int saved = errno;
  unsigned char b = (unsigned char)sig;
  ssize_t w = write(sig_pipe[1], &b, 1); /* full pipe: a wake-up is pending */
  (void)w;
  errno = saved;
}

/* Left at their default, USR1/USR2/QUIT would kill the launcher and, through
 * PR_SET_PDEATHSIG, every rank without a word. */
static const int caught_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT,
                                     SIGUSR1, SIGUSR2, SIGCHLD};

static int install_signal_handlers(void) {
  if (pipe2(sig_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return -1;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigfillset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof caught_signals / sizeof caught_signals[0]; i++)
    if (sigaction(caught_signals[i], &sa, NULL) != 0) return -1;
  /* A closed stdout must not kill the launcher and orphan the job. */
  signal(SIGPIPE, SIG_IGN);
  return 0;
}

/* ------------------------------------------------------- job environment */

/* Variables symmem-run sets for every rank; any inherited value of these
 * is dropped.  The first two differ per rank. */
enum { ENV_RANK, ENV_LOCAL_RANK, ENV_WORLD_SIZE, ENV_LOCAL_SIZE, ENV_STORE_ADDR,
       ENV_TOKEN, ENV_JOB_ID, ENV_STORE_EXTERNAL, ENV_COUNT };
static const char *const job_env_names[ENV_COUNT] = {
    "SYMM_RANK",       "SYMM_LOCAL_RANK", "SYMM_WORLD_SIZE", "SYMM_LOCAL_SIZE",
    "SYMM_STORE_ADDR", "SYMM_TOKEN",      "SYMM_JOB_ID",     "SYMM_STORE_EXTERNAL"};

static bool is_job_env(const char *entry) {
  for (size_t i = 0; i < ENV_COUNT; i++) {
    size_t n = strlen(job_env_names[i]);
    if (strncmp(entry, job_env_names[i], n) == 0 && entry[n] == '=') return true;
  }
  return false;
}

/*
 * The ranks' environment, built before fork: the child of a multi-threaded
 * process (the store thread) may only make async-signal-safe calls, so it
 * cannot setenv().  entries[ENV_RANK] and entries[ENV_LOCAL_RANK] are
 * rewritten for each rank.  Everything else is inherited unchanged, in
 * particular NCCL_NVLS_ENABLE and the other multicast guards.
 */
typedef struct rank_env {
  char **envp;
  char *entries[ENV_COUNT];
} rank_env_t;

static int rank_env_init(rank_env_t *env, const job_t *job) {
  memset(env, 0, sizeof *env);
  size_t n = 0;
  while (environ[n]) n++;
  env->envp = calloc(n + ENV_COUNT + 1, sizeof *env->envp);
  if (!env->envp) return -1;
  char world[16];
  snprintf(world, sizeof world, "%d", job->opt.np);
  const char *values[ENV_COUNT] = {
      [ENV_RANK] = "4096", /* sizes the buffer for any rank number */
      [ENV_LOCAL_RANK] = "4096",
      [ENV_WORLD_SIZE] = world,
      [ENV_LOCAL_SIZE] = world, /* every rank runs on this host */
      [ENV_STORE_ADDR] = job->store_addr,
      [ENV_TOKEN] = job->token,
      [ENV_JOB_ID] = job->job_id,
      [ENV_STORE_EXTERNAL] = "1"};
  size_t k = 0;
  for (size_t i = 0; i < ENV_COUNT; i++) {
    size_t len = strlen(job_env_names[i]) + strlen(values[i]) + 2;
    env->entries[i] = malloc(len);
    if (!env->entries[i]) return -1;
    snprintf(env->entries[i], len, "%s=%s", job_env_names[i], values[i]);
    env->envp[k++] = env->entries[i];
  }
  for (size_t i = 0; i < n; i++)
    if (!is_job_env(environ[i])) env->envp[k++] = environ[i];
  env->envp[k] = NULL;
  return 0;
}

static void rank_env_set_rank(rank_env_t *env, int rank) {
  for (int i = ENV_RANK; i <= ENV_LOCAL_RANK; i++) {
    size_t len = strlen(job_env_names[i]) + 6; /* "=4096" + NUL */
    snprintf(env->entries[i], len, "%s=%d", job_env_names[i], rank);
  }
}

static void rank_env_free(rank_env_t *env) {
  for (size_t i = 0; i < ENV_COUNT; i++) free(env->entries[i]);
  free(env->envp);
}

/* ------------------------------------------------------------- spawning */

/* Runs in the forked child: only async-signal-safe calls until exec. */
__attribute__((noreturn)) static void exec_rank(const job_t *job, int rank, int out_fds[2], int err_report,
                      char **envp, const sigset_t *mask, pid_t launcher) {
  struct sigaction dfl;
  memset(&dfl, 0, sizeof dfl);
  dfl.sa_handler = SIG_DFL;
  for (size_t i = 0; i < sizeof caught_signals / sizeof caught_signals[0]; i++)
    sigaction(caught_signals[i], &dfl, NULL);
  sigaction(SIGPIPE, &dfl, NULL);
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher) _exit(127); /* launcher died before prctl */
  /* A rank in a background process group that reads the terminal would be
   * stopped by SIGTTIN, so only rank 0 reads stdin, and not from a tty. */
  if (rank != 0 || job->stdin_is_tty) {
    int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd >= 0) dup2(null_fd, 0);
  }
  if (out_fds[0] >= 0) dup2(out_fds[0], 1);
  if (out_fds[1] >= 0) dup2(out_fds[1], 2);
  sigprocmask(SIG_SETMASK, mask, NULL);
  run_bind_apply(&job->binding, rank);
  execvpe(job->opt.argv[0], job->opt.argv, envp);
  int err = errno;
  ssize_t w = write(err_report, &err, sizeof err);
  (void)w;
  _exit(127);
}

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

/*
 * Starts rank `rank`.  Returns 0, or the errno of a failed exec (the child
 * reports it through a close-on-exec pipe, so the parent knows whether the
 * program started without waiting for it to exit), or -1 for a failure of
 * our own (message printed).
 */
static int spawn_rank(job_t *job, int rank, rank_env_t *env) {
  rank_proc_t *rp = &job->ranks[rank];
  int pipes[2][2] = {{-1, -1}, {-1, -1}}, report[2] = {-1, -1};
  int child_out[2] = {-1, -1};
  int result = -1;
  for (int i = 0; i < 2; i++) {
    if (pipe2(pipes[i], O_CLOEXEC) != 0) goto fail_errno;
    child_out[i] = pipes[i][1];
  }
  if (pipe2(report, O_CLOEXEC) != 0) goto fail_errno;
  rank_env_set_rank(env, rank);

  /* Signals stay blocked across fork so that the child cannot run the
   * launcher's handler (and write to its self-pipe) before resetting it. */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  pid_t launcher = getpid();
  pid_t pid = fork();
  if (pid == 0) exec_rank(job, rank, child_out, report[1], env->envp, &old, launcher);
  int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (pid < 0) {
    errno = fork_errno;
    goto fail_errno;
  }
  setpgid(pid, pid); /* also in the child: whichever runs first wins */
  rp->pid = pid;
  rp->running = true;
  job->started++;
  job->running++;
  close_fd(&report[1]);
  for (int i = 0; i < 2; i++) {
    close_fd(&pipes[i][1]);
    rp->out[i].fd = pipes[i][0];
    rp->out[i].dest = i == 0 ? 1 : err_fd;
    pipes[i][0] = -1;
    if (rp->out[i].fd >= 0) fcntl(rp->out[i].fd, F_SETFL, O_NONBLOCK);
  }
  int exec_errno = 0;
  ssize_t r;
  while ((r = read(report[0], &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {
  }
  result = r == (ssize_t)sizeof exec_errno ? exec_errno : 0;
  goto done;

fail_errno:
  say("symmem-run: cannot start rank %d: %s\n", rank, strerror(errno));
  result = -1;
done:
  for (int i = 0; i < 2; i++) {
    close_fd(&pipes[i][0]);
    close_fd(&pipes[i][1]);
  }
  close_fd(&report[0]);
  close_fd(&report[1]);
  return result;
}

/* ----------------------------------------------------------- stopping */

static void record_exit(job_t *job, int code) {
  if (job->exit_code < 0) job->exit_code = code;
}

/* Signals rank `rank`'s process group: the rank and what it started.  A
 * rank that already exited is signalled only while its group is known to
 * have members, so that a recycled pid is never hit. */
static void signal_rank(job_t *job, int rank, int sig) {
  rank_proc_t *rp = &job->ranks[rank];
  if (rp->pid <= 0 || rp->group_gone) return;
  if (kill(-rp->pid, sig) == 0) return;
  if (rp->running) kill(rp->pid, sig); /* it left its group (setsid ...) */
  else rp->group_gone = true;
}

static void signal_all(job_t *job, int sig) {
  for (int r = 0; r < job->started; r++) signal_rank(job, r, sig);
}

/* The ranks still running are stopped on purpose from now on: the
 * launcher does not mark them lost, and the store, told first, records
 * their losses without a warning (symm_store_server_expect_gone). */
static void mark_stopped(job_t *job) {
  for (int r = 0; r < job->started; r++)
    if (job->ranks[r].running && !job->ranks[r].stopped) {
      job->ranks[r].stopped = true;
      symm_store_server_expect_gone(job->server, (int32_t)job->ranks[r].pid);
    }
}

/* SIGTERM now, SIGKILL after the grace period.  Idempotent. */
static void begin_stop(job_t *job) {
  if (job->stopping) return;
  job->stopping = true;
  job->kill_at = now_ms() + RUN_KILL_GRACE_MS;
  mark_stopped(job);
  signal_all(job, SIGTERM);
}

static void kill_all(job_t *job) {
  job->killed = true;
  mark_stopped(job);
  signal_all(job, SIGKILL);
}

/* USR1/USR2/QUIT are messages to the program (a checkpoint warning, a
 * request for a stack dump), not a request to end the job: each one is
 * passed on once, and whatever the ranks do about it decides the rest. */
static bool is_passed_through(int sig) {
  return sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGQUIT;
}

static void on_forwarded_signal(job_t *job, int sig) {
  if (is_passed_through(sig)) {
    say("symmem-run: got %s; forwarding it to the ranks\n", signal_abbrev(sig));
    signal_all(job, sig);
  } else if (++job->signals_seen == 1) {
    say("symmem-run: got %s; forwarding it to the ranks (send it again to kill them)\n",
        signal_abbrev(sig));
    record_exit(job, 128 + sig);
    mark_stopped(job); /* the job ends: the ranks are not lost, but stopped */
    signal_all(job, sig);
  } else if (!job->killed) {
    say("symmem-run: got %s again; killing the ranks\n", signal_abbrev(sig));
    kill_all(job);
  }
}

/* ---------------------------------------------------------- rank output */
/* The functions below take a rank's stream and its number. */

static void emit(job_t *job, out_stream_t *s, int rank, const char *data, size_t len,
                 bool end_line) {
  size_t n = 0;
  if (!s->mid_line && rank >= 0 && job->opt.prefix)
    n = (size_t)snprintf(job->scratch, 32, "[%d] ", rank);
  memcpy(job->scratch + n, data, len);
  n += len;
  if (end_line) job->scratch[n++] = '\n';
  write_all(s->dest, job->scratch, n);
  s->mid_line = !end_line;
}

/* Writes every complete line in the buffer, each in one write() so that
 * lines of different ranks never interleave; keeps the unfinished rest. */
static void flush_lines(job_t *job, out_stream_t *s, int rank, bool at_eof) {
  size_t start = 0;
  for (;;) {
    char *nl = memchr(s->buf + start, '\n', s->len - start);
    if (!nl) break;
    size_t line = (size_t)(nl - (s->buf + start));
    emit(job, s, rank, s->buf + start, line, true);
    start += line + 1;
  }
  if (start < s->len && (at_eof || s->len - start >= RUN_LINE_MAX)) {
    emit(job, s, rank, s->buf + start, s->len - start, at_eof);
    start = s->len;
  } else if (at_eof && s->mid_line) {
    emit(job, s, rank, "", 0, true);
  }
  memmove(s->buf, s->buf + start, s->len - start);
  s->len -= start;
}

static void close_stream(job_t *job, out_stream_t *s, int rank) {
  if (s->fd < 0) return;
  flush_lines(job, s, rank, true);
  close_fd(&s->fd);
  free(s->buf);
  s->buf = NULL;
  s->len = s->cap = 0;
}

/* Makes room for the next read: grows the buffer up to RUN_LINE_MAX, then
 * writes out an over-long line in pieces.  False if nothing can be kept. */
static bool make_room(job_t *job, out_stream_t *s, int rank) {
  if (s->cap - s->len >= 512 || s->cap >= RUN_LINE_MAX) {
    if (s->len == s->cap) {
      emit(job, s, rank, s->buf, s->len, false);
      s->len = 0;
    }
    return true;
  }
  size_t cap = s->cap ? s->cap * 2 : 4096;
  if (cap > RUN_LINE_MAX) cap = RUN_LINE_MAX;
  char *buf = realloc(s->buf, cap);
  if (buf) {
    s->buf = buf;
    s->cap = cap;
  } else if (s->len == s->cap) {
    if (!s->cap) return false;
    emit(job, s, rank, s->buf, s->len, false);
    s->len = 0;
  }
  return true;
}

/* Reads what is available now; closes the stream at end of file. */
static void pump_stream(job_t *job, out_stream_t *s, int rank) {
  while (s->fd >= 0) {
    if (!make_room(job, s, rank)) {
      close_fd(&s->fd); /* out of memory: this rank's output is lost */
      return;
    }
    ssize_t r = read(s->fd, s->buf + s->len, s->cap - s->len);
    if (r > 0) {
      s->len += (size_t)r;
      flush_lines(job, s, rank, false);
    } else if (r == 0 || (errno != EINTR && errno != EAGAIN)) {
      close_stream(job, s, rank);
    } else if (errno == EAGAIN) {
      return;
    }
  }
}

/* --------------------------------------------------------------- reaping */

static void describe_status(int status, char *buf, size_t len) {
  if (WIFEXITED(status))
    snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    snprintf(buf, len, "was killed by signal %d (%s, %s)%s", WTERMSIG(status),
             signal_abbrev(WTERMSIG(status)), strsignal(WTERMSIG(status)),
             WCOREDUMP(status) ? ", core dumped" : "");
  else
    snprintf(buf, len, "ended with wait status 0x%x", (unsigned)status);
}

static void on_rank_exit(job_t *job, int rank, int status) {
  rank_proc_t *rp = &job->ranks[rank];
  rp->running = false;
  job->running--;
  /* Show what the rank wrote before it went, ahead of our verdict. */
  for (int i = 0; i < 2; i++) pump_stream(job, &rp->out[i], rank);
  if (kill(-rp->pid, 0) != 0 && errno == ESRCH) rp->group_gone = true;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;

  /* A rank that died on its own is reported to the store at once, so that
   * peers waiting on it fail with SYMM_ERR_PEER_LOST.  Ranks we were
   * stopping (our SIGTERM, a forwarded SIGINT) need no announcement: everyone
   * is being stopped anyway, and their closed connections tell the store. */
  if (!rp->stopped) symm_store_server_mark_lost(job->server, rank);
  if (job->exit_code < 0) {
    char what[128];
    describe_status(status, what, sizeof what);
    say("symmem-run: rank %d (pid %d) %s%s\n", rank, (int)rp->pid, what,
        job->running > 0 ? "; stopping the other ranks" : "");
    record_exit(job, WIFEXITED(status) ? WEXITSTATUS(status)
                                       : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0));
  }
  begin_stop(job);
}

/* An orphan of some rank, re-parented to us, has ended: groups that are now
 * empty must not be signalled any more (their ids may be reused). */
static void recheck_groups(job_t *job) {
  for (int r = 0; r < job->started; r++) {
    rank_proc_t *rp = &job->ranks[r];
    if (!rp->running && !rp->group_gone && kill(-rp->pid, 0) != 0 && errno == ESRCH)
      rp->group_gone = true;
  }
}

static bool is_rank_group(const job_t *job, pid_t pgid) {
  for (int r = 0; r < job->started; r++)
    if (job->ranks[r].pid == pgid) return true;
  return false;
}

/*
 * Children adopted as subreaper that are still alive, i.e. processes of the
 * job whose parent has died.  Called once the ranks are gone, when our only
 * children are such orphans, including those that left their rank's process
 * group (setsid ...).  Sends them sig unless it is 0; with skip_rank_groups
 * those still in a rank's group are left to the group signal.  Returns how
 * many there are.
 */
static int signal_adopted_orphans(const job_t *job, int sig, bool skip_rank_groups) {
  DIR *proc = opendir("/proc");
  if (!proc) return 0;
  pid_t self = getpid();
  int count = 0;
  struct dirent *e;
  while ((e = readdir(proc)) != NULL) {
    char *end, path[64], stat[512];
    long pid = strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end) continue;
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    ssize_t n = read(fd, stat, sizeof stat - 1);
    close(fd);
    if (n <= 0) continue;
    stat[n] = 0;
    const char *after_comm = strrchr(stat, ')'); /* comm may hold anything */
    char state;
    int ppid, pgid;
    if (!after_comm || sscanf(after_comm + 1, " %c %d %d", &state, &ppid, &pgid) != 3 ||
        ppid != self || state == 'Z')
      continue;
    count++;
    if (sig && !(skip_rank_groups && is_rank_group(job, pgid)))
      kill((pid_t)pid, sig);
  }
  closedir(proc);
  return count;
}

static void reap_children(job_t *job) {
  int status;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    int rank = -1;
    for (int r = 0; r < job->started; r++)
      if (job->ranks[r].pid == pid && job->ranks[r].running) rank = r;
    if (rank >= 0) on_rank_exit(job, rank, status);
    else recheck_groups(job);
  }
}

/* ------------------------------------------------------- signals, timers */

static void handle_signal_bytes(job_t *job) {
  unsigned char bytes[64];
  ssize_t n;
  while ((n = read(sig_pipe[0], bytes, sizeof bytes)) > 0)
    for (ssize_t i = 0; i < n; i++)
      if (bytes[i] != SIGCHLD) on_forwarded_signal(job, bytes[i]);
  reap_children(job); /* SIGCHLD, or a wake-up for one */
}

static void check_deadlines(job_t *job, uint64_t now) {
  if (job->running == 0) return; /* see cleanup_step */
  if (job->deadline && now >= job->deadline) {
    job->deadline = 0;
    say("symmem-run: timeout of %g s reached; stopping the ranks\n", job->opt.timeout_s);
    record_exit(job, RUN_EXIT_TIMEOUT);
    begin_stop(job);
  }
  if (job->stopping && !job->killed && now >= job->kill_at) {
    say("symmem-run: %d rank(s) still running %d s after SIGTERM; killing them\n", job->running,
        RUN_KILL_GRACE_MS / 1000);
    kill_all(job);
  }
}

/* ---------------------------------------------- after the last rank ended */

/* Whether processes of the job outlive its ranks: members of a rank's
 * process group, or adopted orphans. */
static bool leftovers_remain(job_t *job) {
  recheck_groups(job);
  for (int r = 0; r < job->started; r++)
    if (!job->ranks[r].group_gone) return true;
  return signal_adopted_orphans(job, 0, false) > 0;
}

static void finish_cleanup(job_t *job, uint64_t now) {
  job->leftovers_done = true;
  job->drain_until = now + RUN_DRAIN_MS;
}

static void kill_leftovers(job_t *job, uint64_t now) {
  job->end_killed = true;
  job->end_giveup_at = now + 500; /* for members we may not signal */
  signal_all(job, SIGKILL);
  signal_adopted_orphans(job, SIGKILL, false);
}

/*
 * The job is over when its last rank is, and what the ranks left behind
 * goes too: SIGTERM, and SIGKILL after the grace period, so that a helper
 * still handling a forwarded signal can finish.  Groups already told to stop
 * are not told twice.
 */
static void begin_cleanup(job_t *job, uint64_t now) {
  job->ended = true;
  if (!leftovers_remain(job)) {
    finish_cleanup(job, now);
  } else if (job->killed) {
    kill_leftovers(job, now);
  } else {
    bool groups_told = job->stopping || job->signals_seen > 0;
    if (!groups_told) signal_all(job, SIGTERM);
    signal_adopted_orphans(job, SIGTERM, true);
    job->end_kill_at = job->stopping ? job->kill_at : now + RUN_KILL_GRACE_MS;
  }
}

static void cleanup_step(job_t *job, uint64_t now) {
  if (!leftovers_remain(job)) finish_cleanup(job, now);
  else if (!job->end_killed && now >= job->end_kill_at) kill_leftovers(job, now);
  else if (job->end_killed && now >= job->end_giveup_at) finish_cleanup(job, now);
}

/* ----------------------------------------------------------- main loop */

static int poll_timeout(const job_t *job, uint64_t now) {
  uint64_t next = UINT64_MAX;
  if (job->running > 0) {
    if (job->deadline) next = job->deadline;
    if (job->stopping && !job->killed && job->kill_at < next) next = job->kill_at;
  } else if (!job->leftovers_done) {
    return 20; /* leftovers end without telling us */
  } else {
    next = job->drain_until;
  }
  if (next == UINT64_MAX) return -1;
  return next <= now ? 0 : (int)(next - now > 60000 ? 60000 : next - now);
}

/* The descriptors to watch: the self-pipe first, then the ranks' open
 * output pipes (*rank_fds of them). */
static size_t fill_pollfds(job_t *job, size_t *rank_fds) {
  size_t n = 0;
  *rank_fds = 0;
  job->pfds[n++] = (struct pollfd){sig_pipe[0], POLLIN, 0};
  for (int r = 0; r < job->started; r++)
    for (int i = 0; i < 2; i++)
      if (job->ranks[r].out[i].fd >= 0) {
        job->owner[n] = r * 2 + i;
        job->pfds[n++] = (struct pollfd){job->ranks[r].out[i].fd, POLLIN, 0};
        (*rank_fds)++;
      }
  return n;
}

/* Waits up to timeout_ms for output or a signal; passes on what came. */
static void poll_once(job_t *job, size_t n, int timeout_ms) {
  int ready = poll(job->pfds, n, timeout_ms);
  if (ready < 0 && errno != EINTR) {
    say("symmem-run: poll: %s\n", strerror(errno));
    usleep(10000);
  }
  for (size_t i = 1; ready > 0 && i < n; i++) {
    if (!job->pfds[i].revents) continue;
    int who = job->owner[i];
    pump_stream(job, &job->ranks[who / 2].out[who % 2], who / 2);
  }
  handle_signal_bytes(job);
}

static void run_loop(job_t *job) {
  for (;;) {
    uint64_t now = now_ms();
    check_deadlines(job, now);
    if (job->running == 0) {
      if (!job->ended) begin_cleanup(job, now);
      else if (!job->leftovers_done) cleanup_step(job, now);
    }
    size_t rank_fds;
    size_t n = fill_pollfds(job, &rank_fds);
    /* The store's log stays open as long as the store: not waited for. */
    if (job->leftovers_done && (rank_fds == 0 || now >= job->drain_until)) break;
    poll_once(job, n, poll_timeout(job, now));
  }
  /* Output still held open by a process we could not stop is cut off. */
  for (int r = 0; r < job->started; r++)
    for (int i = 0; i < 2; i++) close_stream(job, &job->ranks[r].out[i], r);
  reap_children(job);
}

/* --------------------------------------------------------------- setup */

/* The address ranks connect to: loopback unless the store was bound to
 * one specific address. */
static void make_store_addr(job_t *job) {
  const char *bind = job->opt.bind;
  int port = symm_store_server_port(job->server);
  const char *host = bind;
  if (!strcmp(bind, "0.0.0.0") || !strcmp(bind, "*")) host = "127.0.0.1";
  else if (!strcmp(bind, "::") || !strcmp(bind, "[::]")) host = "[::1]";
  if (strchr(host, ':') && host[0] != '[')
    snprintf(job->store_addr, sizeof job->store_addr, "[%s]:%d", host, port);
  else
    snprintf(job->store_addr, sizeof job->store_addr, "%s:%d", host, port);
}

/* Every rank's output takes two descriptors; the default soft limit (1024)
 * would cap a job at about 500 ranks. */
static void raise_fd_limit(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

static void report_exec_failure(const job_t *job, int err) {
  say("symmem-run: cannot execute '%s': %s\n", job->opt.argv[0], strerror(err));
}

/* What the store served over the job, said with -v at its end. */
static void say_store_stats(const symm_store_server_t *server) {
  symm_store_stats_t st;
  symm_store_server_stats(server, &st);
  say("symmem-run: store served %llu connections, %llu requests (%llu bytes), replied "
      "%llu bytes\n", (unsigned long long)st.connections, (unsigned long long)st.requests,
      (unsigned long long)st.request_bytes, (unsigned long long)st.reply_bytes);
}

/* The ranks' CPUs (--bind-to), said with -v. */
static int plan_binding(job_t *job) {
  char err[256];
  if (run_bind_plan(job->opt.bind_to, job->opt.np, &job->binding, err, sizeof err) != 0) {
    say("symmem-run: %s\n", err);
    return -1;
  }
  if (!job->opt.verbose) return 0;
  say("symmem-run: binding %s\n", job->binding.why);
  for (int r = 0; r < job->opt.np; r++) {
    char where[512];
    run_bind_describe(&job->binding, r, where, sizeof where);
    say("symmem-run: rank %d: %s\n", r, where);
  }
  return 0;
}

static int start_ranks(job_t *job) {
  rank_env_t env;
  if (rank_env_init(&env, job) != 0) {
    rank_env_free(&env);
    say("symmem-run: out of memory\n");
    return -1;
  }
  /* A signal or a rank that failed already ends the spawning. */
  for (int r = 0; r < job->opt.np && job->exit_code < 0; r++) {
    int err = spawn_rank(job, r, &env);
    if (err > 0) {
      report_exec_failure(job, err);
      record_exit(job, err == ENOENT ? 127 : 126);
    } else if (err < 0) {
      record_exit(job, 1);
    }
    if (err != 0) begin_stop(job); /* before its exit is seen: no "lost" */
    /* Now and then the output of the ranks started so far, so that none
     * waits long on a full pipe while the others start (each look costs a
     * poll of all their pipes, hence not after every rank). */
    if (r % 64 == 63) {
      size_t rank_fds;
      poll_once(job, fill_pollfds(job, &rank_fds), 0);
    } else {
      handle_signal_bytes(job);
    }
  }
  rank_env_free(&env);
  return 0;
}

int main(int argc, char **argv) {
  job_t job;
  memset(&job, 0, sizeof job);
  job.exit_code = -1;
  int rc = parse_options(argc, argv, &job.opt);
  if (rc >= 0) return rc;

  /* A closed 0, 1 or 2 would be taken by the first pipe, which the ranks
   * then see in its place (or lose on exec). */
  for (int fd = 0; fd <= 2; fd++)
    if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
      int null_fd = open("/dev/null", O_RDWR);
      if (null_fd >= 0 && null_fd != fd) close(null_fd);
    }

  raise_fd_limit();
  job.stdin_is_tty = isatty(0);
  job.ranks = calloc((size_t)job.opt.np, sizeof *job.ranks);
  job.scratch = malloc(RUN_LINE_MAX + 64);
  job.pfds = calloc(2 + 2 * (size_t)job.opt.np, sizeof *job.pfds);
  job.owner = calloc(2 + 2 * (size_t)job.opt.np, sizeof *job.owner);
  if (!job.ranks || !job.scratch || !job.pfds || !job.owner) {
    say("symmem-run: out of memory\n");
    rc = 1;
    goto out;
  }
  for (int r = 0; r < job.opt.np; r++) job.ranks[r].out[0].fd = job.ranks[r].out[1].fd = -1;
  if (install_signal_handlers() != 0) {
    say("symmem-run: cannot set up signal handling: %s\n", strerror(errno));
    rc = 1;
    goto out;
  }
  /* Orphans of the ranks come to us, so that they are reaped and their
   * process groups can be tracked. */
  prctl(PR_SET_CHILD_SUBREAPER, 1);

  char tag[9];
  if (!tool_random_hex(job.token, 16) || !tool_random_hex(tag, 4)) {
    say("symmem-run: no random bytes for the job's token: %s\n", strerror(errno));
    rc = 1;
    goto out;
  }
  snprintf(job.job_id, sizeof job.job_id, "r%d-%s", (int)getpid(), tag);
  symm_result_t res = symm_store_server_start(job.opt.bind, job.opt.port, job.token, &job.server);
  if (res != SYMM_SUCCESS) {
    say("symmem-run: cannot start the store on %s port %d: %s\n", job.opt.bind, job.opt.port,
        *symm_last_error() ? symm_last_error() : symm_strerror(res));
    rc = 1;
    goto out;
  }
  make_store_addr(&job);
  if (job.opt.timeout_s > 0) job.deadline = now_ms() + (uint64_t)llround(job.opt.timeout_s * 1000);
  if (plan_binding(&job) != 0) {
    rc = RUN_EXIT_USAGE;
    goto out;
  }

  if (start_ranks(&job) != 0) record_exit(&job, 1);
  /* A job with missing ranks cannot make progress: stop the ones started. */
  if (job.started < job.opt.np) begin_stop(&job);
  run_loop(&job);
  rc = job.exit_code < 0 ? 0 : job.exit_code;
  if (job.opt.verbose) say_store_stats(job.server);

out:
  run_bind_free(&job.binding);
  symm_store_server_stop(job.server);
  free(job.ranks);
  free(job.scratch);
  free(job.pfds);
  free(job.owner);
  return rc;
}
