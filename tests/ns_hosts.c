/* Namespace hosts for the tests: see ns_hosts.h. */
#include "ns_hosts.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define NS_BRIDGE "symmbr0"
#define NS_LINK_UP_MS 10000

/* ---- running `ip` inside a namespace */

/* Runs `ip -batch -` on script inside the network namespace that process
 * ns_pid holds; its output (both streams) in out.  Returns its exit
 * status (127: no `ip`, 126: could not enter the namespace). */
static int ns_ip(pid_t ns_pid, const char *script, char *out, size_t cap) {
  int in[2], res[2];
  if (pipe(in) != 0 || pipe(res) != 0) TEST_FAIL_("pipe: %s", strerror(errno));
  pid_t pid = test_fork();
  if (pid == 0) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/net", (int)ns_pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) {
      dprintf(res[1], "cannot enter %s: %s\n", path, strerror(errno));
      _exit(126);
    }
    dup2(in[0], 0);
    dup2(res[1], 1);
    dup2(res[1], 2);
    close(in[1]);
    close(res[0]);
    execlp("ip", "ip", "-batch", "-", (char *)NULL);
    dprintf(2, "ip: %s\n", strerror(errno));
    _exit(127);
  }
  close(in[0]);
  close(res[1]);
  /* The scripts are far smaller than a pipe's buffer. */
  if (write(in[1], script, strlen(script)) != (ssize_t)strlen(script))
    TEST_FAIL_("write to ip: %s", strerror(errno));
  close(in[1]);
  size_t n = 0;
  ssize_t r;
  while (n + 1 < cap && (r = read(res[0], out + n, cap - 1 - n)) > 0) n += (size_t)r;
  while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == ' ')) n--; /* one line in a message */
  out[n] = 0;
  close(res[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ---- the processes that hold the namespaces */

/* Forks a process that makes new namespaces (flags) with host name `name`
 * (NULL: none) and waits until killed.  0 and its pid in *pid, or the
 * errno of what failed. */
static int ns_holder(int flags, const char *name, pid_t *pid) {
  int ready[2];
  if (pipe(ready) != 0) TEST_FAIL_("pipe: %s", strerror(errno));
  *pid = test_fork();
  if (*pid == 0) {
    close(ready[0]);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int err = 0;
    if (unshare(flags) != 0 || (name && sethostname(name, strlen(name)) != 0)) err = errno;
    if (write(ready[1], &err, sizeof err) != (ssize_t)sizeof err) _exit(1);
    close(ready[1]);
    if (err) _exit(1);
    for (;;) pause();
  }
  close(ready[1]);
  int err = 0;
  if (read(ready[0], &err, sizeof err) != (ssize_t)sizeof err) err = EIO;
  close(ready[0]);
  if (err) {
    waitpid(*pid, NULL, 0);
    *pid = 0;
  }
  return err;
}

static void ns_kill(pid_t *pid) {
  if (*pid <= 0) return;
  kill(*pid, SIGKILL);
  while (waitpid(*pid, NULL, 0) < 0 && errno == EINTR) {
  }
  *pid = 0;
}

/* ---- links */

/* Whether interface `name` is running (carrier and operational state up)
 * in the network namespace of process ns_pid: waits for it up to
 * NS_LINK_UP_MS in a child that enters the namespace. */
static bool ns_link_running(pid_t ns_pid, const char *name) {
  pid_t pid = test_fork();
  if (pid == 0) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/net", (int)ns_pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) _exit(2);
    int sock = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr = {0};
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", name);
    const uint64_t end = test_now_ms() + NS_LINK_UP_MS;
    for (int wait_ms = 1; test_now_ms() < end; wait_ms = wait_ms < 64 ? 2 * wait_ms : 64) {
      if (ioctl(sock, SIOCGIFFLAGS, &ifr) == 0 && (ifr.ifr_flags & IFF_RUNNING)) _exit(0);
      poll(NULL, 0, wait_ms); /* the kernel's link watch runs apart from ip */
    }
    _exit(1);
  }
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

/* The bridge, and a veth pair per host with one end in the host as eth0;
 * then each host's addresses, then the bridge's ends up (last, so that
 * every link comes up with its peer already up).  false with the reason
 * in why. */
static bool ns_wire(ns_hosts_t *t, char *why, size_t cap) {
  char script[2048], out[2048];
  size_t n = (size_t)snprintf(script, sizeof script,
                              "link set lo up\nlink add " NS_BRIDGE " type bridge\n"
                              "link set " NS_BRIDGE " up\n");
  for (int h = 0; h < t->count; h++)
    n += (size_t)snprintf(script + n, sizeof script - n,
                          "link add vh%d type veth peer name eth0 netns %d\n", h,
                          (int)t->holder[h]);
  int rc = ns_ip(t->bridge, script, out, sizeof out);
  if (rc == 127) {
    snprintf(why, cap, "iproute2's ip is not installed (%s)", out);
    return false;
  }
  if (rc != 0) {
    snprintf(why, cap, "cannot make the bridge and veth pairs (ip exit %d): %s", rc, out);
    return false;
  }
  for (int h = 0; h < t->count; h++) {
    snprintf(script, sizeof script, "link set lo up\naddr add %s/24 dev eth0\nlink set eth0 up\n",
             t->addr[h]);
    if ((rc = ns_ip(t->holder[h], script, out, sizeof out)) != 0) {
      snprintf(why, cap, "cannot address host %d (ip exit %d): %s", h, rc, out);
      return false;
    }
  }
  n = 0;
  for (int h = 0; h < t->count; h++)
    n += (size_t)snprintf(script + n, sizeof script - n,
                          "link set vh%d master " NS_BRIDGE "\nlink set vh%d up\n", h, h);
  if ((rc = ns_ip(t->bridge, script, out, sizeof out)) != 0) {
    snprintf(why, cap, "cannot join the veth pairs to the bridge (ip exit %d): %s", rc, out);
    return false;
  }
  return true;
}

/* Every host's eth0 and every bridge port running. */
static bool ns_links_up(const ns_hosts_t *t, char *why, size_t cap) {
  char port[16];
  for (int h = 0; h < t->count; h++) {
    snprintf(port, sizeof port, "vh%d", h);
    if (!ns_link_running(t->holder[h], "eth0") || !ns_link_running(t->bridge, port)) {
      snprintf(why, cap, "host %d's link did not come up within %d ms", h, NS_LINK_UP_MS);
      return false;
    }
  }
  return true;
}

/* ---- the topology */

/* Whether this process may make and enter network namespaces and
 * configure their links: CAP_SYS_ADMIN and CAP_NET_ADMIN in effect. */
static bool ns_have_caps(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  unsigned long long eff = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "CapEff: %llx", &eff) == 1) break;
  if (f) fclose(f);
  const unsigned long long need = 1ull << 21 /* CAP_SYS_ADMIN */ | 1ull << 12 /* CAP_NET_ADMIN */;
  return (eff & need) == need;
}

/* Not root with those capabilities: the test goes on as root of a user
 * namespace of its own, in which the namespaces below are its to make
 * (the ranks, forked later, are in it too, so they all see one uid). */
static bool ns_become_root(char *why, size_t cap) {
  if (geteuid() == 0 && ns_have_caps()) return true;
  const unsigned uid = (unsigned)geteuid(), gid = (unsigned)getegid();
  char map[64];
  int fd;
  bool ok = unshare(CLONE_NEWUSER) == 0;
  snprintf(map, sizeof map, "0 %u 1\n", uid);
  ok = ok && (fd = open("/proc/self/uid_map", O_WRONLY)) >= 0 &&
       write(fd, map, strlen(map)) == (ssize_t)strlen(map) && close(fd) == 0;
  ok = ok && (fd = open("/proc/self/setgroups", O_WRONLY)) >= 0 && write(fd, "deny", 4) == 4 &&
       close(fd) == 0;
  snprintf(map, sizeof map, "0 %u 1\n", gid);
  ok = ok && (fd = open("/proc/self/gid_map", O_WRONLY)) >= 0 &&
       write(fd, map, strlen(map)) == (ssize_t)strlen(map) && close(fd) == 0;
  if (!ok)
    snprintf(why, cap, "not root with CAP_SYS_ADMIN and CAP_NET_ADMIN, and cannot be root of a "
             "user namespace here (%s)", strerror(errno));
  return ok;
}

/* Each host's holder, names, addresses and namespace fds. */
static bool ns_make_hosts(ns_hosts_t *t, char *why, size_t cap) {
  char self[64] = "";
  gethostname(self, sizeof self - 1);
  for (int h = 0; h < t->count; h++) {
    snprintf(t->name[h], sizeof t->name[h], "symm-host%d", h);
    snprintf(t->addr[h], sizeof t->addr[h], "10.213.%d.%d", t->subnet, h + 1);
    if (strcmp(self, t->name[h]) == 0) {
      snprintf(why, cap, "this machine is named %s, as a test host would be", self);
      return false;
    }
    int err = ns_holder(CLONE_NEWNET | CLONE_NEWUTS, t->name[h], &t->holder[h]);
    if (err) {
      snprintf(why, cap, "cannot make a network and UTS namespace: %s", strerror(err));
      return false;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/ns/net", (int)t->holder[h]);
    t->net_fd[h] = open(path, O_RDONLY | O_CLOEXEC);
    snprintf(path, sizeof path, "/proc/%d/ns/uts", (int)t->holder[h]);
    t->uts_fd[h] = open(path, O_RDONLY | O_CLOEXEC);
    if (t->net_fd[h] < 0 || t->uts_fd[h] < 0) TEST_FAIL_("%s: %s", path, strerror(errno));
  }
  snprintf(t->store_addr, sizeof t->store_addr, "%s:%d", t->addr[0], NS_HOSTS_STORE_PORT);
  return true;
}

bool ns_hosts_open(ns_hosts_t *t, int count, int subnet) {
  ASSERT(count >= 2 && count <= NS_HOSTS_MAX);
  ASSERT(subnet >= 0 && subnet <= 255);
  memset(t, 0, sizeof *t);
  t->count = count;
  t->subnet = subnet;
  for (int h = 0; h < NS_HOSTS_MAX; h++) t->net_fd[h] = t->uts_fd[h] = -1;
  char why[2400] = "";
  bool ok = ns_become_root(why, sizeof why);
  int err = ok ? ns_holder(CLONE_NEWNET, NULL, &t->bridge) : 0;
  if (err) snprintf(why, sizeof why, "cannot make a network namespace: %s", strerror(err));
  ok = ok && !err && ns_make_hosts(t, why, sizeof why) && ns_wire(t, why, sizeof why) &&
       ns_links_up(t, why, sizeof why);
  if (!ok) {
    printf("SKIP: %s\n", why);
    ns_hosts_close(t);
    return false;
  }
  printf("hosts:");
  for (int h = 0; h < count; h++) printf(" %s (%s)", t->name[h], t->addr[h]);
  printf(", bridged in a network namespace of the test's\n");
  return true;
}

void ns_hosts_close(ns_hosts_t *t) {
  if (t->bridge > 0) {
    char script[512], out[1024];
    size_t n = 0;
    for (int h = 0; h < t->count; h++)
      if (t->holder[h] > 0)
        n += (size_t)snprintf(script + n, sizeof script - n, "link del vh%d\n", h);
    snprintf(script + n, sizeof script - n, "link del " NS_BRIDGE "\n");
    ns_ip(t->bridge, script, out, sizeof out); /* what is left dies with the namespace */
  }
  for (int h = 0; h < NS_HOSTS_MAX; h++) {
    ns_kill(&t->holder[h]);
    if (t->net_fd[h] >= 0) close(t->net_fd[h]);
    if (t->uts_fd[h] >= 0) close(t->uts_fd[h]);
    t->net_fd[h] = t->uts_fd[h] = -1;
  }
  ns_kill(&t->bridge);
}

void ns_hosts_enter(const ns_hosts_t *t, int h) {
  ASSERT(h >= 0 && h < t->count);
  prctl(PR_SET_PDEATHSIG, SIGKILL); /* the namespaces must not outlive the test */
  if (setns(t->net_fd[h], CLONE_NEWNET) != 0 || setns(t->uts_fd[h], CLONE_NEWUTS) != 0)
    TEST_FAIL_("entering host %d: %s", h, strerror(errno));
}

/* ---- jobs across the hosts */

typedef struct {
  const ns_hosts_t *t;
  const int *host_of;
} ns_job_t;

static int rank_host = -1;

static void ns_enter_rank(int rank, void *arg) {
  const ns_job_t *j = arg;
  rank_host = j->host_of[rank];
  ns_hosts_enter(j->t, rank_host);
}

int ns_hosts_run_ranks(const ns_hosts_t *t, int n, const int *host_of, test_rank_fn fn,
                       void *arg, const test_job_opts_t *opts) {
  test_job_opts_t o = {.kill_rank = -1};
  if (opts) o = *opts;
  ns_job_t j = {t, host_of};
  o.enter = ns_enter_rank;
  o.enter_arg = &j;
  o.store_addr = t->store_addr;
  return test_run_ranks_opts(n, fn, arg, &o);
}

int ns_hosts_my_host(void) { return rank_host; }
