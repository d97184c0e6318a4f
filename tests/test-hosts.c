/* Ranks on several hosts: "hosts" made of network and UTS namespaces
 * joined by a bridge, on private addresses of the test's own
 * (tests/ns_hosts.h), each with a host name of its own.  The ranks meet at
 * a store that rank 0 serves on host 0's bridge address, through the
 * caller's callbacks, or under Open MPI's mpirun through PMIx; they work
 * out their local rank and size per host; a wrong token from another host
 * is refused; the host backend and POSIX-fd handles, which share memory
 * within one host only, are refused naming the hosts.  Where the machine
 * cannot make such hosts (not root and no user namespaces, no `ip`, no
 * veth or bridge driver) each test skips, saying why. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "arena_backend.h"
#include "bootstrap/store_proto.h"
#include "harness.h"
#include "cb_channel.h"
#include "ns_hosts.h"
#include "symm_test_access.h"

#define MAX_RANKS 8

typedef struct {
  ns_hosts_t net;
  int ranks;
  int host_of[MAX_RANKS];
  char dir[64]; /* a directory of the test's (logs), empty if none */
} hosts_job_t;

#define ASSERT_STR_EQ(a, b)                                                   \
  do {                                                                        \
    const char *sa_ = (a), *sb_ = (b);                                        \
    ASSERT_MSG(sa_ && strcmp(sa_, sb_) == 0, "\"%s\" vs \"%s\"", sa_ ? sa_ : "(null)", sb_); \
  } while (0)

/* Makes the hosts for a job of `ranks` ranks placed on host_of; false
 * (SKIP printed) where that cannot be done here. */
static bool job_open(hosts_job_t *j, int hosts, int subnet, int ranks, const int *host_of) {
  ASSERT(ranks <= MAX_RANKS);
  memset(j, 0, sizeof *j);
  j->ranks = ranks;
  memcpy(j->host_of, host_of, (size_t)ranks * sizeof *host_of);
  return ns_hosts_open(&j->net, hosts, subnet);
}

static const char *host_name_of(const hosts_job_t *j, int rank) {
  return j->net.name[j->host_of[rank]];
}

/* This process runs on the host the job placed it on, by that name. */
static void check_my_host(const hosts_job_t *j, int rank) {
  char name[128] = "";
  ASSERT_EQ(gethostname(name, sizeof name - 1), 0);
  ASSERT_EQ(ns_hosts_my_host(), j->host_of[rank]);
  ASSERT_STR_EQ(name, host_name_of(j, rank));
}

/* Local rank and size, worked out by the library from the host names
 * (the launcher's variables are unset), and every peer's host. */
static void check_peers(const hosts_job_t *j, const symm_comm_t *comm) {
  const int me = symm_comm_rank(comm);
  int local_rank = 0, local_size = 0;
  for (int r = 0; r < j->ranks; r++) {
    const bool same = j->host_of[r] == j->host_of[me];
    local_rank += same && r < me;
    local_size += same;
    ASSERT_EQ(symm_comm_peer_same_host(comm, r), same);
    ASSERT_STR_EQ(symm_comm_peer_host(comm, r), host_name_of(j, r));
  }
  ASSERT_EQ(symm_comm_local_rank(comm), local_rank);
  ASSERT_EQ(symm_comm_local_size(comm), local_size);
  ASSERT(!symm_test_comm_single_host(comm));
  /* The shared-memory bootstrap is for one host: the store stays in use. */
  ASSERT_PTR_EQ(symm_test_comm_store_bootstrap(comm), NULL);
}

/* On the arena backend by hosts (ARENA_UNREACHABLE=hosts, as a provider
 * that maps its own host's memory): the peers of this host are mapped and
 * written through their pointers, those of other hosts have none. */
static void check_memory(const hosts_job_t *j, symm_comm_t *comm) {
  const int me = symm_comm_rank(comm), n = symm_comm_size(comm);
  int64_t len = MAX_RANKS;
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(comm, &len, 1, SYMM_DTYPE_I64, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  void *const *ptrs = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  for (int r = 0; r < n; r++) {
    const bool same = j->host_of[r] == j->host_of[me];
    ASSERT_MSG((ptrs[r] != NULL) == same, "rank %d's pointer %p here (its host %s, mine %s)", r,
               ptrs[r], host_name_of(j, r), host_name_of(j, me));
    if (same) ((volatile int64_t *)ptrs[r])[me] = 1000 + me;
  }
  ASSERT_OK(symm_comm_barrier(comm));
  const volatile int64_t *mine = symm_tensor_data(t);
  for (int r = 0; r < n; r++)
    ASSERT_EQ(mine[r], j->host_of[r] == j->host_of[me] ? 1000 + r : 0);
  ASSERT_OK(symm_tensor_free(t));
}

/* ---- ranks meet at a store on host 0's bridge address ------------------ */

/* Whether a TCP socket of this network namespace listens on ip:port
 * (/proc/self/net/tcp: the address as its 32 bits in memory, in hex). */
static bool listens_on(const char *ip, int port) {
  struct in_addr want;
  ASSERT_EQ(inet_pton(AF_INET, ip, &want), 1);
  FILE *f = fopen("/proc/self/net/tcp", "r");
  ASSERT(f != NULL);
  char line[512];
  bool found = false;
  while (!found && fgets(line, sizeof line, f)) {
    unsigned addr, lport, st;
    if (sscanf(line, "%*s %x:%x %*s %x", &addr, &lport, &st) == 3)
      found = st == 0x0A && addr == want.s_addr && (int)lport == port;
  }
  fclose(f);
  return found;
}

static int store_rank(int rank, int size, void *arg) {
  (void)size;
  const hosts_job_t *j = arg;
  check_my_host(j, rank);
  setenv("ARENA_UNREACHABLE", "hosts", 1);
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  if (rank == 0) { /* its store listens on the bridge address, and there only */
    ASSERT(listens_on(j->net.addr[0], NS_HOSTS_STORE_PORT));
    ASSERT(!listens_on("0.0.0.0", NS_HOSTS_STORE_PORT));
  }
  check_peers(j, comm);
  check_memory(j, comm);
  printf("rank %d on %s: local rank %d of %d, store %s\n", rank, host_name_of(j, rank),
         symm_comm_local_rank(comm), symm_comm_local_size(comm), getenv("SYMM_STORE_ADDR"));
  fflush(stdout);
  symm_comm_destroy(comm);
  return 0;
}

static int run_store_job(int hosts, int subnet, int ranks, const int *host_of) {
  hosts_job_t j;
  if (!job_open(&j, hosts, subnet, ranks, host_of)) return TEST_SKIP;
  arena_backends_register();
  test_job_opts_t o = {.kill_rank = -1, .backend = "arena"};
  int bad = ns_hosts_run_ranks(&j.net, ranks, host_of, store_rank, &j, &o);
  ns_hosts_close(&j.net);
  ASSERT_EQ(bad, 0);
  return 0;
}

TEST_IMPL(hosts_store_2) {
  const int host_of[] = {0, 1};
  return run_store_job(2, 1, 2, host_of);
}

/* The ranks' order is not the hosts'. */
TEST_IMPL(hosts_store_3) {
  const int host_of[] = {0, 2, 1};
  return run_store_job(3, 2, 3, host_of);
}

/* Two ranks on each of four hosts, dealt round the hosts: host 0 has
 * ranks 0 and 4, whose local ranks are 0 and 1. */
TEST_IMPL(hosts_store_4x2) {
  const int host_of[] = {0, 1, 2, 3, 0, 1, 2, 3};
  return run_store_job(4, 3, 8, host_of);
}

/* ---- a wrong token from another host ----------------------------------- */

static void send_all(int fd, const void *p, size_t n) {
  ASSERT_EQ(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n); /* a few bytes on a fresh socket */
}

static void recv_all(int fd, void *buf, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t k = recv(fd, (char *)buf + got, n - got, 0);
    ASSERT_GT(k, 0);
    got += (size_t)k;
  }
}

/* One reply of the store on fd (store_proto.h): its status. */
static uint32_t wire_reply(int fd) {
  uint8_t hdr[SYMM_PROTO_HEADER_BYTES], body[512];
  recv_all(fd, hdr, sizeof hdr);
  symm_proto_header_t h;
  symm_proto_decode_header(hdr, &h);
  ASSERT_EQ(h.magic, SYMM_PROTO_MAGIC);
  ASSERT(h.body_len >= SYMM_PROTO_REPLY_PREFIX && h.body_len <= sizeof body);
  recv_all(fd, body, h.body_len);
  return symm_proto_get32(body);
}

/* One who claims rank 1 at the store with no token: HELLO, the store's
 * challenge left unchecked, then AUTH with a made-up proof.  Returns the
 * store's answer to AUTH. */
static uint32_t impostor_claim(const char *ip, int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  ASSERT_EQ(inet_pton(AF_INET, ip, &sa.sin_addr), 1);
  ASSERT_EQ(connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  uint8_t msg[SYMM_PROTO_HEADER_BYTES + SYMM_PROTO_NONCE + SYMM_PROTO_PROOF] = {0};
  uint8_t *body = msg + SYMM_PROTO_HEADER_BYTES;
  memset(body, 0x5a, SYMM_PROTO_NONCE);
  symm_proto_put32(body + SYMM_PROTO_NONCE, 1);
  symm_proto_encode_header(msg, SYMM_OP_HELLO, 1, SYMM_PROTO_NONCE + 4);
  send_all(fd, msg, SYMM_PROTO_HEADER_BYTES + SYMM_PROTO_NONCE + 4);
  ASSERT_EQ(wire_reply(fd), SYMM_SUCCESS);
  memset(body, 0x77, SYMM_PROTO_PROOF);
  symm_proto_encode_header(msg, SYMM_OP_AUTH, 2, SYMM_PROTO_PROOF);
  send_all(fd, msg, SYMM_PROTO_HEADER_BYTES + SYMM_PROTO_PROOF);
  const uint32_t status = wire_reply(fd);
  close(fd);
  return status;
}

/* A process on host 1 that claims rank 1 before rank 1 joins the job:
 * with a wrong token it refuses the store itself, which cannot prove the
 * token it lacks (PERMISSION); then, as one who skips that check, its
 * made-up proof is refused by the store (PERMISSION on the wire).  A
 * process of its own: a process's communicators are numbered on their
 * store in the order it makes them, the failed one too. */
static void wrong_token_tries(const hosts_job_t *j) {
  pid_t pid = test_fork();
  if (pid == 0) {
    setenv("SYMM_TOKEN", "not-the-job-token", 1);
    symm_comm_t *comm = NULL;
    ASSERT_RES(symm_comm_init(NULL, &comm), SYMM_ERR_PERMISSION);
    printf("rank 1 on %s with a wrong token: %s\n", host_name_of(j, 1), symm_last_error());
    ASSERT_STR_CONTAINS(symm_last_error(), "did not prove that it holds this job's token");
    ASSERT_STR_CONTAINS(symm_last_error(), j->net.store_addr);
    /* The store is up: init reached it. */
    ASSERT_EQ(impostor_claim(j->net.addr[0], NS_HOSTS_STORE_PORT), SYMM_ERR_PERMISSION);
    fflush(stdout);
    _exit(0);
  }
  int st = 0;
  ASSERT_EQ(waitpid(pid, &st, 0), pid);
  ASSERT_MSG(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the wrong token's process: status %d", st);
}

/* Rank 1 tries wrong tokens from host 1, then the job meets with the
 * right one; rank 0's store logged the refusal with host 1's address. */
static int token_rank(int rank, int size, void *arg) {
  (void)size;
  const hosts_job_t *j = arg;
  char log[128];
  snprintf(log, sizeof log, "%s/store.log", j->dir);
  if (rank == 0) {
    setenv("SYMM_DEBUG", "WARN", 1);
    setenv("SYMM_DEBUG_FILE", log, 1);
  }
  setenv("ARENA_UNREACHABLE", "hosts", 1);
  if (rank == 1) wrong_token_tries(j);
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  check_peers(j, comm);
  if (rank == 0) {
    char text[4096] = "", want[64];
    FILE *f = fopen(log, "r");
    ASSERT(f != NULL);
    text[fread(text, 1, sizeof text - 1, f)] = 0;
    fclose(f);
    printf("rank 0's store log: %s", text);
    snprintf(want, sizeof want, "wrong token from %s:", j->net.addr[1]);
    ASSERT_STR_CONTAINS(text, want);
  }
  fflush(stdout);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(hosts_wrong_token) {
  const int host_of[] = {0, 1, 2};
  hosts_job_t j;
  if (!job_open(&j, 3, 4, 3, host_of)) return TEST_SKIP;
  snprintf(j.dir, sizeof j.dir, "/tmp/symm-hosts-XXXXXX");
  ASSERT(mkdtemp(j.dir) != NULL);
  arena_backends_register();
  test_job_opts_t o = {.kill_rank = -1, .backend = "arena"};
  int bad = ns_hosts_run_ranks(&j.net, 3, host_of, token_rank, &j, &o);
  ns_hosts_close(&j.net);
  char log[128];
  snprintf(log, sizeof log, "%s/store.log", j.dir);
  unlink(log);
  rmdir(j.dir);
  ASSERT_EQ(bad, 0);
  return 0;
}

/* ---- what shares memory within one host only --------------------------- */

/* init fails on every rank with `code`, long before the timeout (it is
 * refused, not waited out), with a message that names every host with its
 * ranks and this rank's own, and contains `what`. */
static void check_refused(const hosts_job_t *j, int rank, symm_result_t res, uint64_t took_ms,
                          symm_result_t code, const char *what) {
  printf("rank %d on %s: %s after %llu ms: %s\n", rank, host_name_of(j, rank),
         symm_strerror(res), (unsigned long long)took_ms, symm_last_error());
  fflush(stdout);
  ASSERT_RES(res, code);
  ASSERT_LT(took_ms, 10000); /* half the ranks' timeout */
  ASSERT_STR_CONTAINS(symm_last_error(), what);
  ASSERT_STR_CONTAINS(symm_last_error(), host_name_of(j, rank));
  for (int r = 0; r < j->ranks; r++) ASSERT_STR_CONTAINS(symm_last_error(), host_name_of(j, r));
}

/* The ranks' hosts as the messages list them: "a (ranks 0, 2)". */
static void host_list_text(const hosts_job_t *j, int h, char *out, size_t cap) {
  size_t n = 0;
  int count = 0;
  for (int r = 0; r < j->ranks; r++) count += j->host_of[r] == h;
  n += (size_t)snprintf(out, cap, "%s (rank%s", j->net.name[h], count > 1 ? "s" : "");
  for (int r = 0, k = 0; r < j->ranks; r++)
    if (j->host_of[r] == h) n += (size_t)snprintf(out + n, cap - n, "%s %d", k++ ? "," : "", r);
  snprintf(out + n, cap - n, ")");
}

static int host_backend_rank(int rank, int size, void *arg) {
  (void)size;
  const hosts_job_t *j = arg;
  check_my_host(j, rank);
  symm_comm_t *comm = NULL;
  const uint64_t t0 = test_now_ms();
  symm_result_t res = symm_comm_init(NULL, &comm);
  check_refused(j, rank, res, test_now_ms() - t0, SYMM_ERR_UNSUPPORTED,
                "it shares the memory of one host only");
  char want[128];
  for (int h = 0; h < j->net.count; h++) {
    host_list_text(j, h, want, sizeof want);
    ASSERT_STR_CONTAINS(symm_last_error(), want);
  }
  snprintf(want, sizeof want, "this rank (%d) on %s", rank, host_name_of(j, rank));
  ASSERT_STR_CONTAINS(symm_last_error(), want);
  return 0;
}

/* Three hosts, host 1 with two ranks. */
TEST_IMPL(hosts_host_backend_refused) {
  const int host_of[] = {0, 1, 2, 1};
  hosts_job_t j;
  if (!job_open(&j, 3, 5, 4, host_of)) return TEST_SKIP;
  test_job_opts_t o = {.kill_rank = -1, .backend = "host"};
  int bad = ns_hosts_run_ranks(&j.net, 4, host_of, host_backend_rank, &j, &o);
  ns_hosts_close(&j.net);
  ASSERT_EQ(bad, 0);
  return 0;
}

/* The fd exchange itself: the arena backend (not by hosts) fetches every
 * peer's arena through it at start-up, and a peer on another host is
 * refused at once, naming both hosts. */
static int fdx_rank(int rank, int size, void *arg) {
  (void)size;
  const hosts_job_t *j = arg;
  symm_comm_t *comm = NULL;
  const uint64_t t0 = test_now_ms();
  symm_result_t res = symm_comm_init(NULL, &comm);
  check_refused(j, rank, res, test_now_ms() - t0, SYMM_ERR_UNSUPPORTED,
                "file descriptors pass between the processes of one host only");
  ASSERT_STR_CONTAINS(symm_last_error(), "fd exchange: rank");
  return 0;
}

TEST_IMPL(hosts_fd_exchange_refused) {
  const int host_of[] = {0, 1};
  hosts_job_t j;
  if (!job_open(&j, 2, 6, 2, host_of)) return TEST_SKIP;
  arena_backends_register();
  test_job_opts_t o = {.kill_rank = -1, .backend = "arena"};
  int bad = ns_hosts_run_ranks(&j.net, 2, host_of, fdx_rank, &j, &o);
  ns_hosts_close(&j.net);
  ASSERT_EQ(bad, 0);
  return 0;
}

/* The native backend over the fake driver (tests/fakes/fake_cuda.c), whose
 * devices export POSIX fds but no fabric handles: refused at start-up,
 * naming the hosts and the way out. */
static int native_fd_rank(int rank, int size, void *arg) {
  (void)size;
  const hosts_job_t *j = arg;
  setenv("SYMM_CUDA_LIB", SYMM_FAKECUDA_PATH, 1);
  setenv("FAKECUDA_FABRIC", "fails", 1);
  symm_comm_t *comm = NULL;
  const uint64_t t0 = test_now_ms();
  symm_result_t res = symm_comm_init(NULL, &comm);
  check_refused(j, rank, res, test_now_ms() - t0, SYMM_ERR_UNSUPPORTED,
                "POSIX-fd handles do not leave a host");
  ASSERT_STR_CONTAINS(symm_last_error(), "SYMM_NATIVE_HANDLE=fabric");
  return 0;
}

TEST_IMPL(hosts_native_fd_handles_refused) {
  const int host_of[] = {0, 1};
  hosts_job_t j;
  if (!job_open(&j, 2, 7, 2, host_of)) return TEST_SKIP;
  test_job_opts_t o = {.kill_rank = -1, .backend = "native"};
  int bad = ns_hosts_run_ranks(&j.net, 2, host_of, native_fd_rank, &j, &o);
  ns_hosts_close(&j.net);
  ASSERT_EQ(bad, 0);
  return 0;
}

/* The same job where every device exports fabric handles (the fake's
 * stand in for IMEX): they cross hosts, so the communicator is made, every
 * peer's memory is mapped and written (the fake's device memory is host
 * memory the CPU can check). */
static int native_fabric_rank(int rank, int size, void *arg) {
  const hosts_job_t *j = arg;
  setenv("SYMM_CUDA_LIB", SYMM_FAKECUDA_PATH, 1);
  setenv("FAKECUDA_FABRIC", "works", 1);
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  check_peers(j, comm);
  int64_t len = MAX_RANKS;
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(comm, &len, 1, SYMM_DTYPE_I64, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  void *const *ptrs = NULL;
  ASSERT_OK(symm_tensor_peer_ptrs(t, &ptrs));
  for (int r = 0; r < size; r++) ((volatile int64_t *)ptrs[r])[rank] = 1000 + rank;
  ASSERT_OK(symm_comm_barrier(comm));
  for (int r = 0; r < size; r++) ASSERT_EQ(((volatile int64_t *)ptrs[rank])[r], 1000 + r);
  printf("rank %d on %s: native on fabric handles, every peer's memory written\n", rank,
         host_name_of(j, rank));
  fflush(stdout);
  ASSERT_OK(symm_tensor_free(t));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(hosts_native_fabric_handles) {
  const int host_of[] = {0, 1};
  hosts_job_t j;
  if (!job_open(&j, 2, 9, 2, host_of)) return TEST_SKIP;
  test_job_opts_t o = {.kill_rank = -1, .backend = "native"};
  int bad = ns_hosts_run_ranks(&j.net, 2, host_of, native_fabric_rank, &j, &o);
  ns_hosts_close(&j.net);
  ASSERT_EQ(bad, 0);
  return 0;
}

/* ---- the caller's callbacks: no store at all ---------------------------- */

/* The tests' callbacks channel (cb_channel.h): its segment, mapped before
 * the ranks fork, stays shared across their network namespaces, as MPI's
 * channel would reach across real hosts.  One region per communicator. */
static symm_result_t cb_init(int region, int rank, int size, symm_backend_t backend,
                             cb_channel_t *ch, symm_bootstrap_callbacks_t *cb,
                             symm_comm_t **comm) {
  cb_channel_open(ch, region, rank, size, SYMM_BOOTSTRAP_CALLBACKS_VERSION, cb);
  return cb_channel_comm_init(cb, backend, 0, comm);
}

typedef struct {
  hosts_job_t job;
} cb_job_t;

/* Through the callbacks, with no store to be found: the host backend is
 * refused naming the hosts, which the ranks learnt from each other; the
 * arena backend by hosts works, local rank and size per host too. */
static int callbacks_rank(int rank, int size, void *arg) {
  cb_job_t *c = arg;
  unsetenv("SYMM_STORE_ADDR");
  unsetenv("SYMM_TOKEN");
  unsetenv("SYMM_RANK");
  unsetenv("SYMM_WORLD_SIZE");
  cb_channel_t ch;
  symm_bootstrap_callbacks_t cb;
  symm_comm_t *comm = NULL;
  const uint64_t t0 = test_now_ms();
  symm_result_t res = cb_init(0, rank, size, SYMM_BACKEND_HOST, &ch, &cb, &comm);
  check_refused(&c->job, rank, res, test_now_ms() - t0, SYMM_ERR_UNSUPPORTED,
                "it shares the memory of one host only");
  setenv("ARENA_UNREACHABLE", "hosts", 1);
  ASSERT_OK(cb_init(1, rank, size, (symm_backend_t)ARENA_BACKEND_ID, &ch, &cb, &comm));
  check_peers(&c->job, comm);
  check_memory(&c->job, comm);
  printf("rank %d on %s through the callbacks: local rank %d of %d\n", rank,
         host_name_of(&c->job, rank), symm_comm_local_rank(comm), symm_comm_local_size(comm));
  fflush(stdout);
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(hosts_callbacks) {
  const int host_of[] = {0, 1, 2, 0, 1};
  cb_job_t c;
  if (!job_open(&c.job, 3, 8, 5, host_of)) return TEST_SKIP;
  cb_channel_map();
  arena_backends_register();
  test_job_opts_t o = {.kill_rank = -1};
  int bad = ns_hosts_run_ranks(&c.job.net, 5, host_of, callbacks_rank, &c, &o);
  ns_hosts_close(&c.job.net);
  ASSERT_EQ(bad, 0);
  return 0;
}

/* ---- Open MPI's mpirun: PMIx across the hosts --------------------------- */

/* mpirun starts a daemon (orted) on every host but its own through an rsh
 * agent, as it would over ssh on a cluster; this one enters the host's
 * namespaces instead.  Each daemon serves the PMIx server of its host's
 * ranks, and the daemons reach mpirun over the bridge. */
static void write_agent(const hosts_job_t *j, const char *path) {
  FILE *f = fopen(path, "w");
  ASSERT(f != NULL);
  fprintf(f, "#!/bin/sh\n# mpirun's rsh agent for tests/test-hosts.c: AGENT HOST COMMAND...\n"
             "case \"$1\" in\n");
  for (int h = 0; h < j->net.count; h++)
    fprintf(f, "%s) pid=%d ;;\n", j->net.name[h], (int)j->net.holder[h]);
  fprintf(f, "*) echo \"agent: no host $1\" >&2; exit 1 ;;\nesac\nshift\n"
             "exec nsenter --net=/proc/$pid/ns/net --uts=/proc/$pid/ns/uts -- /bin/sh -c \"$*\"\n");
  ASSERT_EQ(fclose(f), 0);
  ASSERT_EQ(chmod(path, 0700), 0);
}

static void write_hostfile(const hosts_job_t *j, const char *path, int slots) {
  FILE *f = fopen(path, "w");
  ASSERT(f != NULL);
  for (int h = 0; h < j->net.count; h++) fprintf(f, "%s slots=%d\n", j->net.name[h], slots);
  ASSERT_EQ(fclose(f), 0);
}

/* What the PMIx job needs here; false with the reason in why. */
static bool pmix_job_usable(const char *prog, char *why, size_t cap) {
  char out[256];
  if (test_run_command("command -v mpirun.openmpi && command -v nsenter", out, sizeof out) != 0)
    snprintf(why, cap, "Open MPI's mpirun.openmpi or nsenter is not installed");
  else if (access(prog, X_OK) != 0)
    snprintf(why, cap, "%s is not built: %s", prog, strerror(errno));
  else
    return true;
  return false;
}

/* Runs argv (mpirun) in host 0 with its output in out, killing its
 * process group at timeout_ms; returns its exit status (128 + signal). */
static int run_in_host0(const hosts_job_t *j, char *const argv[], char *out, size_t cap,
                        int timeout_ms) {
  int pipefd[2];
  ASSERT_EQ(pipe(pipefd), 0);
  pid_t pid = test_fork();
  if (pid == 0) {
    setpgid(0, 0);
    ns_hosts_enter(&j->net, 0);
    dup2(pipefd[1], 1);
    dup2(pipefd[1], 2);
    close(pipefd[0]);
    execvp(argv[0], argv);
    fprintf(stderr, "%s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  close(pipefd[1]);
  const uint64_t end = test_now_ms() + (uint64_t)timeout_ms;
  size_t n = 0;
  for (;;) {
    const int left = (int)(end > test_now_ms() ? end - test_now_ms() : 0);
    struct pollfd p = {.fd = pipefd[0], .events = POLLIN};
    if (left == 0 || poll(&p, 1, left) == 0) {
      fprintf(stderr, "mpirun still running after %d ms; killing it\n", timeout_ms);
      kill(-pid, SIGKILL);
      break;
    }
    char sink[4096];
    const bool room = n + 1 < cap;
    ssize_t k = read(pipefd[0], room ? out + n : sink, room ? cap - 1 - n : sizeof sink);
    if (k <= 0) break;
    if (room) n += (size_t)k;
  }
  out[n] = 0;
  close(pipefd[0]);
  int st = 0;
  while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Two ranks on each of two hosts, dealt by mpirun (by slot: ranks 0 and
 * 1 on host 0), with no store: SYMM_BOOTSTRAP=pmix. */
TEST_IMPL(hosts_pmix) {
  char prog[512], why[600];
  snprintf(prog, sizeof prog, "%s/progs/symm-hosts-job", SYMM_TESTS_DIR);
  if (!pmix_job_usable(prog, why, sizeof why)) {
    printf("SKIP: %s\n", why);
    return TEST_SKIP;
  }
  const int host_of[] = {0, 0, 1, 1};
  hosts_job_t j;
  if (!job_open(&j, 2, 10, 4, host_of)) return TEST_SKIP;
  snprintf(j.dir, sizeof j.dir, "/tmp/symm-hosts-XXXXXX");
  ASSERT(mkdtemp(j.dir) != NULL);
  char agent[96], hostfile[96], subnet[32];
  snprintf(agent, sizeof agent, "%s/agent", j.dir);
  snprintf(hostfile, sizeof hostfile, "%s/hostfile", j.dir);
  snprintf(subnet, sizeof subnet, "10.213.%d.0/24", j.net.subnet);
  write_agent(&j, agent);
  write_hostfile(&j, hostfile, 2);
  setenv("SYMM_BOOTSTRAP", "pmix", 1);
  setenv("SYMM_TIMEOUT_MS", "20000", 1);
  /* The sanitizers' options reach the ranks on the other host too (make
   * test-sanitize's leak suppressions for libpmix). */
  setenv("ASAN_OPTIONS", getenv("ASAN_OPTIONS") ? getenv("ASAN_OPTIONS") : "", 1);
  setenv("LSAN_OPTIONS", getenv("LSAN_OPTIONS") ? getenv("LSAN_OPTIONS") : "", 1);
  /* The daemons reach mpirun over the bridge; Open MPI refuses root
   * unless told (its last option, so that the command is the same
   * otherwise). */
  char *argv[] = {"mpirun.openmpi", "--oversubscribe", "-n", "4", "--hostfile", hostfile,
                  "--mca", "plm_rsh_agent", agent, "--mca", "oob_tcp_if_include", subnet,
                  "-x", "SYMM_BOOTSTRAP", "-x", "SYMM_TIMEOUT_MS", "-x", "ASAN_OPTIONS",
                  "-x", "LSAN_OPTIONS", "--allow-run-as-root",
                  prog, j.net.name[0], j.net.name[1], NULL};
  if (geteuid() != 0) memmove(&argv[20], &argv[21], 4 * sizeof *argv);
  static char out[1 << 16];
  const int rc = run_in_host0(&j, argv, out, sizeof out, 60000);
  ns_hosts_close(&j.net);
  unlink(agent);
  unlink(hostfile);
  rmdir(j.dir);
  printf("mpirun exit %d:\n%s", rc, out);
  ASSERT_EQ(rc, 0);
  for (int r = 0; r < 4; r++) {
    char want[128];
    snprintf(want, sizeof want, "hosts_job: rank %d of 4 on %s: local %d of 2 ok", r,
             j.net.name[host_of[r]], r % 2);
    ASSERT_STR_CONTAINS(out, want);
  }
  return 0;
}
