/* symm_tensor_register on the host backend, in real processes: the user's
 * memfd or file mapped shared, registered, rendezvoused, then every view,
 * signal, one-sided put and collective on it; the refusals (private
 * memory, the same range twice, overlap, shapes that differ, a descriptor
 * that lies), each failing every rank alike; and the user's memory intact
 * and readable after the free and after the communicator's destroy. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "harness.h"

#define N 1000           /* f32 elements: not a page multiple */
#define AT 4096 + 256    /* where the tensor starts in the file: not page-aligned */
#define FILE_BYTES (3 * 4096 * 2)

/* The user's own memory: a file (memfd, or a regular file unlinked at
 * once) of FILE_BYTES mapped shared. */
typedef struct {
  int fd;
  char *map;
} user_file_t;

static user_file_t user_file(bool memfd, int flags) {
  user_file_t u;
  if (memfd) {
    u.fd = memfd_create("symm-test-user", MFD_CLOEXEC);
  } else {
    char path[] = "/tmp/symm-test-reg-XXXXXX";
    u.fd = mkstemp(path);
    if (u.fd >= 0) unlink(path);
  }
  ASSERT_MSG(u.fd >= 0, "user file: %s", strerror(errno));
  ASSERT_EQ(ftruncate(u.fd, FILE_BYTES), 0);
  u.map = mmap(NULL, FILE_BYTES, PROT_READ | PROT_WRITE, flags, u.fd, 0);
  ASSERT_MSG(u.map != MAP_FAILED, "mmap: %s", strerror(errno));
  return u;
}

static symm_user_mem_t desc_of(const user_file_t *u, size_t at) {
  symm_user_mem_t m = SYMM_USER_MEM_INIT;
  m.ptr = u->map + at;
  m.fd = u->fd;
  m.fd_offset = at;
  return m;
}

static symm_tensor_t *register_n(symm_comm_t *comm, const symm_user_mem_t *m, int64_t n) {
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_register(comm, m, &n, 1, SYMM_DTYPE_F32, &t));
  return t;
}

static float value(int r, int i) { return (float)(r * 10000 + i); }

/* Views, lookup and the pad beside the data. */
static void check_views(symm_comm_t *comm, symm_tensor_t *t, float *mine) {
  const int r = symm_comm_rank(comm), w = symm_comm_size(comm);
  ASSERT_PTR_EQ(symm_tensor_data(t), mine);
  for (int p = 0; p < w; p++) {
    symm_view_t v;
    ASSERT_OK(symm_tensor_remote_view(t, p, &v));
    ASSERT_EQ(v.sizes[0], N);
    const float *d = v.data;
    for (int i = 0; i < N; i += 37)
      ASSERT_MSG(d[i] == value(p, i), "rank %d's element %d reads %g", p, i, (double)d[i]);
    symm_tensor_t *found = NULL;
    int fr = -2;
    size_t off = 0;
    ASSERT_OK(symm_tensor_lookup(d + 5, &found, &fr, &off));
    ASSERT_PTR_EQ(found, t);
    ASSERT_EQ(fr, p);
    ASSERT_EQ(off, 5 * sizeof(float));
    void *pad = NULL;
    ASSERT_OK(symm_tensor_signal_pad(t, p, &pad));
    ASSERT_MSG((char *)pad + symm_comm_signal_pad_bytes(comm) <= (char *)d ||
                   (char *)pad >= (char *)(d + N),
               "rank %d's pad %p inside its registered data %p", p, pad, (void *)d);
  }
  symm_view_t cv;
  ASSERT_RES(symm_tensor_contiguous_view(t, &cv), SYMM_ERR_UNSUPPORTED);
  ASSERT_STR_CONTAINS(symm_last_error(), "registered memory");
  /* The lookup of the user's pointer finds the tensor; its pad is apart. */
  ASSERT_OK(symm_validate(comm, mine, N * sizeof(float)));
  (void)r;
}

/* Stores into the right neighbour's memory through its view, a put, a
 * signal after each, and the collectives on the registered memory. */
static void check_traffic(symm_comm_t *comm, symm_tensor_t *t, float *mine) {
  const int r = symm_comm_rank(comm), w = symm_comm_size(comm);
  const int right = (r + 1) % w, left = (r + w - 1) % w;
  symm_view_t v;
  ASSERT_OK(symm_tensor_remote_view(t, right, &v));
  ((float *)v.data)[0] = (float)(100 + r);
  ASSERT_OK(symm_signal_put(t, right, 0, NULL));
  ASSERT_OK(symm_signal_wait(t, left, 0, NULL));
  ASSERT_MSG(mine[0] == (float)(100 + left), "my element 0 is %g after the left's signal",
             (double)mine[0]);
  const float put = (float)(200 + r);
  ASSERT_OK(symm_put_signal(t, right, 4 * sizeof(float), &put, sizeof put, 1, NULL));
  ASSERT_OK(symm_signal_wait(t, left, 1, NULL));
  ASSERT_MSG(mine[4] == (float)(200 + left), "my element 4 is %g after the put", (double)mine[4]);
  ASSERT_OK(symm_comm_barrier(comm));
  /* In place, zero copy: every rank's buffer is the registered tensor. */
  for (int i = 0; i < N; i++) mine[i] = (float)(r + 1) * (float)i;
  ASSERT_OK(symm_all_reduce(comm, mine, mine, N, SYMM_DTYPE_F32, SYMM_REDUCE_SUM, NULL));
  const float ranks_sum = (float)(w * (w + 1) / 2);
  for (int i = 0; i < N; i++)
    ASSERT_MSG(mine[i] == ranks_sum * (float)i, "all-reduce element %d: %g", i, (double)mine[i]);
  float *gathered = calloc((size_t)w * 8, sizeof *gathered);
  ASSERT(gathered);
  for (int i = 0; i < 8; i++) mine[i] = value(r, i);
  ASSERT_OK(symm_all_gather(comm, mine, gathered, 8, SYMM_DTYPE_F32, NULL));
  for (int p = 0; p < w; p++)
    for (int i = 0; i < 8; i++) ASSERT_EQ(gathered[p * 8 + i], value(p, i));
  free(gathered);
  ASSERT_OK(symm_signal_barrier(t, 2, NULL));
}

static int register_rank(int rank, int size, void *arg) {
  (void)size;
  const bool memfd = arg != NULL;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  user_file_t u = user_file(memfd, MAP_SHARED);
  float *mine = (float *)(u.map + AT);
  for (int i = 0; i < N; i++) mine[i] = value(rank, i);
  u.map[AT - 1] = 0x5A; /* the user's bytes around the tensor stay theirs */
  symm_user_mem_t m = desc_of(&u, AT);
  symm_tensor_t *t = register_n(comm, &m, N);
  ASSERT_RES(symm_tensor_remote_view(t, (rank + 1) % size, &(symm_view_t){0}), SYMM_ERR_STATE);
  ASSERT_OK(symm_tensor_rendezvous(t));
  check_views(comm, t, mine);
  ASSERT_OK(symm_comm_barrier(comm));
  check_traffic(comm, t, mine);
  ASSERT_OK(symm_comm_barrier(comm));
  for (int i = 0; i < N; i++) mine[i] = value(rank, i);
  ASSERT_OK(symm_tensor_free(t));
  /* The user's memory: still mapped, still theirs, no longer a tensor. */
  for (int i = 0; i < N; i++) ASSERT_EQ(mine[i], value(rank, i));
  ASSERT_EQ(u.map[AT - 1], 0x5A);
  symm_tensor_t *found = NULL;
  ASSERT_RES(symm_tensor_lookup(mine, &found, NULL, NULL), SYMM_ERR_NOT_FOUND);
  /* Registered again (the range is free), then left to the destroy. */
  t = register_n(comm, &m, N);
  ASSERT_OK(symm_tensor_rendezvous(t));
  ASSERT_OK(symm_comm_barrier(comm));
  symm_comm_destroy(comm);
  for (int i = 0; i < N; i++) ASSERT_EQ(mine[i], value(rank, i));
  ASSERT_RES(symm_tensor_free(t), SYMM_ERR_STATE);
  float back;
  ASSERT_EQ(pread(u.fd, &back, sizeof back, AT + 7 * sizeof(float)), (ssize_t)sizeof back);
  ASSERT_EQ(back, value(rank, 7));
  munmap(u.map, FILE_BYTES);
  close(u.fd);
  return 0;
}

TEST_IMPL(register_host_memfd) {
  ASSERT_EQ(test_run_ranks(3, register_rank, (void *)1), 0);
  return 0;
}

TEST_IMPL(register_host_file) {
  ASSERT_EQ(test_run_ranks(2, register_rank, NULL), 0);
  return 0;
}

/* Rank `who` passes `bad` and the others a good registration: every rank
 * fails with `code`, the refusing one saying `why`, the others naming it;
 * nothing stays registered (the good memory registers again at once). */
static void refused_everywhere(symm_comm_t *comm, int who, const symm_user_mem_t *good,
                               const symm_user_mem_t *bad, symm_result_t code, const char *why) {
  const int r = symm_comm_rank(comm);
  int64_t n = N;
  symm_tensor_t *t = (symm_tensor_t *)1;
  ASSERT_RES(symm_tensor_register(comm, r == who ? bad : good, &n, 1, SYMM_DTYPE_F32, &t), code);
  ASSERT_PTR_EQ(t, NULL);
  ASSERT_STR_CONTAINS(symm_last_error(), why);
  char named[32];
  snprintf(named, sizeof named, "rank %d", who);
  if (r != who) ASSERT_STR_CONTAINS(symm_last_error(), named);
  t = register_n(comm, good, N);
  ASSERT_OK(symm_tensor_free(t));
}

static void check_shapes_differ(symm_comm_t *comm, const symm_user_mem_t *good) {
  int64_t n = symm_comm_rank(comm) == 0 ? N : N / 2;
  symm_tensor_t *t = NULL;
  ASSERT_RES(symm_tensor_register(comm, good, &n, 1, SYMM_DTYPE_F32, &t), SYMM_ERR_MISMATCH);
  ASSERT_STR_CONTAINS(symm_last_error(), "registers a tensor of [");
}

/* The same range twice, and an overlapping one, on every rank. */
static void check_twice(symm_comm_t *comm, const symm_user_mem_t *good, const user_file_t *u) {
  symm_tensor_t *t = register_n(comm, good, N), *t2 = NULL;
  int64_t n = N;
  ASSERT_RES(symm_tensor_register(comm, good, &n, 1, SYMM_DTYPE_F32, &t2), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "overlaps the registered tensor [1000] f32");
  symm_user_mem_t inside = desc_of(u, AT + 64 * sizeof(float));
  ASSERT_RES(symm_tensor_register(comm, &inside, &n, 1, SYMM_DTYPE_F32, &t2),
             SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "overlaps");
  /* An allocation's memory is refused the same way. */
  symm_tensor_t *a = NULL;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_F32, &a));
  symm_user_mem_t of_alloc = *good;
  of_alloc.ptr = symm_tensor_data(a);
  ASSERT_RES(symm_tensor_register(comm, &of_alloc, &n, 1, SYMM_DTYPE_F32, &t2),
             SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "overlaps the allocated tensor");
  /* A rendezvous of the registered tensor against a peer's of the
   * allocated one: a mismatch on both, then in step again. */
  const bool first = symm_comm_rank(comm) == 0;
  ASSERT_RES(symm_tensor_rendezvous(first ? t : a), SYMM_ERR_MISMATCH);
  ASSERT_OK(symm_tensor_rendezvous(t));
  ASSERT_OK(symm_tensor_rendezvous(a));
  ASSERT_OK(symm_tensor_free(a));
  ASSERT_OK(symm_tensor_free(t));
}

static int refusals_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  user_file_t u = user_file(true, MAP_SHARED);
  for (int i = 0; i < N; i++) ((float *)(u.map + AT))[i] = value(rank, i);
  symm_user_mem_t good = desc_of(&u, AT);
  /* Private anonymous memory, with a real fd beside it. */
  void *anon = mmap(NULL, FILE_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT(anon != MAP_FAILED);
  symm_user_mem_t bad = good;
  bad.ptr = anon;
  bad.fd_offset = 0;
  refused_everywhere(comm, 1, &good, &bad, SYMM_ERR_INVALID_ARG, "private anonymous memory");
  /* The same file mapped private. */
  char *priv = mmap(NULL, FILE_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE, u.fd, 0);
  ASSERT(priv != MAP_FAILED);
  bad = good;
  bad.ptr = priv + AT;
  refused_everywhere(comm, 0, &good, &bad, SYMM_ERR_INVALID_ARG, "MAP_PRIVATE");
  bad = good;
  bad.fd_offset = AT + 4096;
  refused_everywhere(comm, 1, &good, &bad, SYMM_ERR_INVALID_ARG, "fd_offset is not the file");
  bad = good;
  bad.fd = -1;
  refused_everywhere(comm, 0, &good, &bad, SYMM_ERR_INVALID_ARG, "needs the fd");
  bad = good;
  bad.version = 99;
  refused_everywhere(comm, 1, &good, &bad, SYMM_ERR_INVALID_ARG, "SYMM_USER_MEM_INIT");
  check_shapes_differ(comm, &good);
  check_twice(comm, &good, &u);
  ASSERT_OK(symm_comm_barrier(comm));
  for (int i = 0; i < N; i++) ASSERT_EQ(((float *)(u.map + AT))[i], value(rank, i));
  symm_comm_destroy(comm);
  munmap(priv, FILE_BYTES);
  munmap(anon, FILE_BYTES);
  munmap(u.map, FILE_BYTES);
  close(u.fd);
  return 0;
}

TEST_IMPL(register_host_refusals) {
  ASSERT_EQ(test_run_ranks(2, refusals_rank, NULL), 0);
  return 0;
}
