/*
 * The split of symmem-bench --coll all_to_all_v, header-only and plain C so
 * that bench/mpi_alltoallv.c moves exactly the same counts with
 * MPI_Alltoallv.
 *
 * Every rank sends n elements, split over the ranks by shares: rank p's
 * share is skew^(k_p / (world - 1)), k a permutation of 0 .. world - 1
 * drawn from a fixed seed, so the hottest rank gets `skew` times what the
 * coldest gets and the others lie geometrically between.  Every sender
 * uses the same shares, as in mixture-of-experts routing, where the same
 * experts are popular with every sender: the hottest rank receives the
 * most.  skew 1 is the uniform split.
 */
#ifndef SYMM_BENCH_SPLIT_H
#define SYMM_BENCH_SPLIT_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#define BENCH_SPLIT_SEED 0x5eed2026ull

/* splitmix64: a small generator whose sequence every platform agrees on. */
static inline uint64_t bench_split_next(uint64_t *state) {
  uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* shares[p] for every rank p < world: the largest over the smallest is
 * skew (>= 1). */
static inline void bench_split_shares(int world, double skew, double *shares) {
  uint64_t state = BENCH_SPLIT_SEED;
  for (int p = 0; p < world; p++) shares[p] = p;
  for (int i = world - 1; i > 0; i--) { /* Fisher-Yates */
    int j = (int)(bench_split_next(&state) % (uint64_t)(i + 1));
    double t = shares[i];
    shares[i] = shares[j];
    shares[j] = t;
  }
  for (int p = 0; p < world; p++)
    shares[p] = world > 1 ? pow(skew, shares[p] / (world - 1)) : 1.0;
}

/* counts[p]: the elements every rank sends rank p, n in all: the cuts
 * between ranks are the running sums of the shares scaled to n and rounded
 * down, so the counts are never negative and add up to n exactly.
 * shares: room for world doubles. */
static inline void bench_split_counts(size_t n, int world, double skew, double *shares,
                                      size_t *counts) {
  bench_split_shares(world, skew, shares);
  double total = 0, running = 0;
  for (int p = 0; p < world; p++) total += shares[p];
  size_t cut = 0;
  for (int p = 0; p < world; p++) {
    running += shares[p];
    size_t next = p == world - 1 ? n : (size_t)floor((double)n * (running / total));
    if (next > n) next = n;
    if (next < cut) next = cut;
    counts[p] = next - cut;
    cut = next;
  }
}

#endif /* SYMM_BENCH_SPLIT_H */
