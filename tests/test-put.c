/* One-sided puts and gets (symm_put, symm_get, symm_put_signal,
 * symm_put_batch) in real processes.  The ranks_ tests run on every backend
 * (conformance: over the fake GPU libraries too, whose copies move real
 * bytes): every size class and alignment into the right neighbour, read
 * back with a get from the left, a batch, and the refusals.  The signal
 * tests need signals that run (host backend): data always there before
 * the signal, over many rounds. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define NBYTES 4099 /* odd: every alignment of the end too */

static symm_comm_t *init_comm(void) {
  symm_comm_t *comm = NULL;
  ASSERT_OK(symm_comm_init(NULL, &comm));
  return comm;
}

static symm_tensor_t *tensor_of(symm_comm_t *comm, size_t bytes) {
  int64_t n = (int64_t)bytes;
  symm_tensor_t *t = NULL;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &t));
  ASSERT_OK(symm_tensor_rendezvous(t));
  return t;
}

/* Byte i of what rank r puts in round k. */
static unsigned char byte_of(int r, int k, size_t i) {
  return (unsigned char)(r * 31 + k * 7 + i * 13 + 1);
}

static const size_t sizes[] = {0, 1, 3, 8, 15, 64, 255, 1000, 4096};
static const size_t offsets[] = {0, 1, 2, 3, 7, 64};

/* Round k: rank r puts `size` bytes at `off` into rank r + 1, every rank
 * checks what its left neighbour put (and that nothing around it moved),
 * then gets the same bytes back from its right neighbour. */
static void put_round(symm_comm_t *comm, symm_tensor_t *t, int k, size_t off, size_t size) {
  const int r = symm_comm_rank(comm), w = symm_comm_size(comm);
  const int right = (r + 1) % w, left = (r + w - 1) % w;
  unsigned char src[NBYTES], got[NBYTES];
  for (size_t i = 0; i < size; i++) src[i] = byte_of(r, k, i);
  memset(symm_tensor_data(t), 0xEE, NBYTES);
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT_OK(symm_put(t, right, off, src, size, NULL));
  ASSERT_OK(symm_comm_barrier(comm));
  const unsigned char *mine = symm_tensor_data(t);
  for (size_t i = 0; i < NBYTES; i++) {
    const bool in = i >= off && i < off + size;
    const unsigned char want = in ? byte_of(left, k, i - off) : 0xEE;
    ASSERT_MSG(mine[i] == want, "round %d (%zu bytes at %zu): byte %zu is %#x, want %#x", k,
               size, off, i, mine[i], want);
  }
  memset(got, 0, sizeof got);
  ASSERT_OK(symm_get(t, right, off, got, size, NULL));
  for (size_t i = 0; i < size; i++)
    ASSERT_MSG(got[i] == byte_of(r, k, i), "round %d: got byte %zu %#x back", k, i, got[i]);
  ASSERT_OK(symm_comm_barrier(comm));
}

/* A batch: rank r writes one byte into every rank's byte r (itself too). */
static void batch_round(symm_comm_t *comm, symm_tensor_t *t) {
  const int r = symm_comm_rank(comm), w = symm_comm_size(comm);
  unsigned char v = (unsigned char)(0x40 + r);
  symm_put_desc_t puts[16];
  for (int p = 0; p < w; p++) puts[p] = (symm_put_desc_t){p, (size_t)r, &v, 1};
  memset(symm_tensor_data(t), 0, NBYTES);
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT_OK(symm_put_batch(t, puts, (size_t)w, NULL));
  ASSERT_OK(symm_comm_barrier(comm));
  for (int p = 0; p < w; p++) ASSERT_EQ(((unsigned char *)symm_tensor_data(t))[p], 0x40 + p);
  /* A bad entry anywhere: nothing of the batch is issued. */
  puts[w - 1].dst_offset = NBYTES;
  memset(symm_tensor_data(t), 0, NBYTES);
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT_RES(symm_put_batch(t, puts, (size_t)w, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "put ");
  ASSERT_OK(symm_comm_barrier(comm));
  for (int p = 0; p < w; p++) ASSERT_EQ(((unsigned char *)symm_tensor_data(t))[p], 0);
}

static void check_refusals(symm_comm_t *comm, symm_tensor_t *t) {
  unsigned char b[8] = {0};
  const int w = symm_comm_size(comm);
  ASSERT_RES(symm_put(t, w, 0, b, 1, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_put(t, -1, 0, b, 1, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_put(t, 0, NBYTES, b, 1, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_STR_CONTAINS(symm_last_error(), "not inside the tensor's 4099 bytes");
  ASSERT_RES(symm_get(t, 0, NBYTES - 2, b, 3, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_put(t, 0, SIZE_MAX, b, 2, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_put(t, 0, 0, NULL, 2, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_put(NULL, 0, 0, b, 2, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_OK(symm_put(t, 0, NBYTES, NULL, 0, NULL)); /* nothing, at the end: fine */
  symm_tensor_t *fresh = NULL;
  int64_t n = 16;
  ASSERT_OK(symm_tensor_alloc(comm, &n, 1, SYMM_DTYPE_U8, &fresh));
  ASSERT_RES(symm_put(fresh, 0, 0, b, 1, NULL), SYMM_ERR_STATE);
  ASSERT_OK(symm_tensor_free(fresh));
}

static int put_get_rank(int rank, int size, void *arg) {
  (void)rank, (void)size, (void)arg;
  symm_comm_t *comm = init_comm();
  symm_tensor_t *t = tensor_of(comm, NBYTES);
  int k = 0;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    for (size_t j = 0; j < sizeof offsets / sizeof offsets[0]; j++)
      if (offsets[j] + sizes[i] <= NBYTES) put_round(comm, t, k++, offsets[j], sizes[i]);
  put_round(comm, t, k++, 0, NBYTES);
  batch_round(comm, t);
  check_refusals(comm, t);
  ASSERT_OK(symm_tensor_free(t));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(ranks_put_get) {
  ASSERT_EQ(test_run_ranks(3, put_get_rank, NULL), 0);
  return 0;
}

/* Rank 0 streams rounds to rank 1 with put_signal; rank 1 waits, checks
 * the whole round (the data came before the signal), and acks on channel
 * 1 so that the next round may overwrite. */
static int put_signal_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  symm_comm_t *comm = init_comm();
  symm_tensor_t *t = tensor_of(comm, NBYTES);
  unsigned char src[NBYTES];
  for (int k = 0; k < 300; k++) {
    const size_t len = (size_t)(k * 97) % NBYTES + 1;
    if (rank == 0) {
      for (size_t i = 0; i < len; i++) src[i] = byte_of(0, k, i);
      ASSERT_OK(symm_put_signal(t, 1, 0, src, len, 0, NULL));
      ASSERT_OK(symm_signal_wait(t, 1, 1, NULL));
    } else if (rank == 1) {
      ASSERT_OK(symm_signal_wait(t, 0, 0, NULL));
      const unsigned char *d = symm_tensor_data(t);
      for (size_t i = 0; i < len; i++)
        ASSERT_MSG(d[i] == byte_of(0, k, i), "round %d: byte %zu of %zu not there at the signal",
                   k, i, len);
      ASSERT_OK(symm_signal_put(t, 0, 1, NULL));
    }
  }
  unsigned char b = 0;
  ASSERT_RES(symm_put_signal(t, rank, 0, &b, 1, 0, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_RES(symm_put_signal(t, (rank + 1) % 2, 0, &b, 1, 1 << 20, NULL), SYMM_ERR_INVALID_ARG);
  ASSERT_OK(symm_comm_barrier(comm));
  ASSERT_OK(symm_tensor_free(t));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(put_signal_order) {
  ASSERT_EQ(test_run_ranks(2, put_signal_rank, NULL), 0);
  return 0;
}

/* The host backend's copy (the CPU engine's, which puts and gets run on)
 * at every placement of dst after src modulo the page near the window it
 * copies through a bounce buffer (1-63 bytes: glibc's memcpy is slow
 * there on some CPUs, src/cpu/cpu_memcpy.c) and either side of it, at
 * sizes either side of where it starts bouncing (2 KiB) and of its 8 KiB
 * pieces, source aligned and not: a get from this rank's own data into
 * ordinary memory and a put back, every byte copied, none written around
 * the destination.  Then puts whose source overlaps the destination in
 * the tensor, either way round (memmove's result). */
#define PLACE_PAGE 4096
#define PLACE_GUARD 64
#define PLACE_MOST (65536 + 63)
/* Room for a copy of PLACE_MOST at any gap past the guard, rounded up to
 * a multiple of the page (aligned_alloc takes only such sizes). */
#define PLACE_SPAN ((PLACE_MOST + 3 * PLACE_PAGE + PLACE_PAGE - 1) / PLACE_PAGE * PLACE_PAGE)

/* dst's bytes outside [at, at + n) still `fill`. */
static void check_around(const unsigned char *dst, size_t at, size_t n, unsigned char fill,
                         const char *what, size_t gap) {
  for (size_t i = 0; i < PLACE_SPAN; i++)
    if (i < at || i >= at + n)
      ASSERT_MSG(dst[i] == fill, "%s, gap %zu, %zu bytes: byte %td written outside dst", what,
                 gap, n, (ptrdiff_t)i - (ptrdiff_t)at);
}

/* Where in a buffer at `base` a copy from src starts so that it lies gap
 * bytes past src modulo the page (past the guard). */
static size_t place_at(const unsigned char *base, const unsigned char *src, size_t gap) {
  return PLACE_GUARD + (((uintptr_t)src + gap - (uintptr_t)(base + PLACE_GUARD)) % PLACE_PAGE);
}

static int placements_rank(int rank, int size, void *arg) {
  (void)size, (void)arg;
  static const size_t lens[] = {0, 1, 2047, 2048, 2049, 8191, 8192, 8193, 3 * 8192 + 5,
                                PLACE_MOST};
  symm_comm_t *comm = init_comm();
  symm_tensor_t *t = tensor_of(comm, PLACE_SPAN);
  unsigned char *data = symm_tensor_data(t), *mem = aligned_alloc(PLACE_PAGE, PLACE_SPAN);
  unsigned char *pattern = malloc(PLACE_SPAN);
  ASSERT(data && mem && pattern);
  for (size_t i = 0; i < PLACE_SPAN; i++) pattern[i] = (unsigned char)(i * 131u + (i >> 8) + 7u);
  for (size_t gap = 0; gap < PLACE_PAGE; gap = gap == 70 ? PLACE_PAGE - 70 : gap + 1)
    for (size_t s = 0; s < 2; s++)
      for (size_t k = 0; k < sizeof lens / sizeof lens[0]; k++) {
        const size_t n = lens[k], from = PLACE_GUARD + s * 24;
        memcpy(data, pattern, PLACE_SPAN);
        memset(mem, 0xA5, PLACE_SPAN);
        const size_t into = place_at(mem, data + from, gap);
        ASSERT_OK(symm_get(t, rank, from, mem + into, n, NULL));
        ASSERT_MSG(memcmp(mem + into, pattern + from, n) == 0, "get, gap %zu, %zu bytes: "
                   "wrong bytes", gap, n);
        check_around(mem, into, n, 0xA5, "get", gap);
        const size_t back = place_at(data, mem + into, gap);
        memset(data, 0x5A, PLACE_SPAN);
        ASSERT_OK(symm_put(t, rank, back, mem + into, n, NULL));
        ASSERT_MSG(memcmp(data + back, pattern + from, n) == 0, "put, gap %zu, %zu bytes: "
                   "wrong bytes", gap, n);
        check_around(data, back, n, 0x5A, "put", gap);
      }
  /* Overlapping, in the tensor: 16 bytes back, and 16 forward. */
  for (int dir = 0; dir < 2; dir++) {
    const size_t n = 3 * 8192 + 5;
    const size_t src = PLACE_GUARD + (dir ? 0 : 16), dst = PLACE_GUARD + (dir ? 16 : 0);
    memcpy(data, pattern, PLACE_SPAN);
    memcpy(mem, pattern, PLACE_SPAN);
    memmove(mem + dst, mem + src, n);
    ASSERT_OK(symm_put(t, rank, dst, data + src, n, NULL));
    ASSERT_MSG(memcmp(data, mem, PLACE_SPAN) == 0, "overlapping put, %s: not memmove's result",
               dir ? "forward" : "back");
  }
  free(mem);
  free(pattern);
  ASSERT_OK(symm_tensor_free(t));
  symm_comm_destroy(comm);
  return 0;
}

TEST_IMPL(put_get_placements) {
  ASSERT_EQ(test_run_ranks(1, placements_rank, NULL), 0);
  return 0;
}
