/* Rounds through one word of shared memory (shm_round.h).
 *
 * Word: bits 63..21 the round's number, bit 20 the give-up mark, bits
 * 19..0 the arrivals.  Every change is a compare-and-swap that first
 * checks the number, so a rank of an older round never counts in a newer
 * one.  Sequentially consistent throughout: the callers pair these with
 * stores of their own "left" words (a rank that gives up a round it never
 * arrived at stores its left, then looks at the word; a rank that takes
 * the word over looks at every left afterwards), and one of the two must
 * see the other. */
#include "symm_shm_round.h"

#include <limits.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define COUNT_BITS 20
#define MARK ((uint64_t)1 << COUNT_BITS)
#define SEQ_SHIFT (COUNT_BITS + 1)
#define SEQ_MASK ((UINT64_C(1) << (64 - SEQ_SHIFT)) - 1)

static uint64_t word_seq(uint64_t w) { return w >> SEQ_SHIFT; }
static uint32_t word_count(uint64_t w) { return (uint32_t)(w & (MARK - 1)); }
static uint64_t seq_bits(uint64_t seq) { return seq & SEQ_MASK; }

uint64_t symm_round_seq(uint64_t word) { return word_seq(word); }

bool symm_round_take(symm_round_word_t *word, uint64_t seq) {
  const uint64_t s = seq_bits(seq);
  uint64_t w = atomic_load(word);
  for (;;) {
    if (word_seq(w) == s) return true;
    if (word_seq(w) > s) return false;
    if (atomic_compare_exchange_weak(word, &w, s << SEQ_SHIFT)) return true;
  }
}

static symm_round_state_t state_of(uint64_t w, uint64_t s, uint32_t target) {
  if (word_seq(w) != s || (w & MARK)) return SYMM_ROUND_GIVEN_UP;
  return word_count(w) >= target ? SYMM_ROUND_DONE : SYMM_ROUND_WAIT;
}

symm_round_state_t symm_round_arrive(symm_round_word_t *word, uint64_t seq, uint32_t target) {
  const uint64_t s = seq_bits(seq);
  uint64_t w = atomic_load(word);
  for (;;) {
    if (word_seq(w) != s || (w & MARK) || word_count(w) >= SYMM_ROUND_COUNT_MAX)
      return SYMM_ROUND_GIVEN_UP;
    if (atomic_compare_exchange_weak(word, &w, w + 1)) return state_of(w + 1, s, target);
  }
}

symm_round_state_t symm_round_state(symm_round_word_t *word, uint64_t seq, uint32_t target) {
  return state_of(atomic_load(word), seq_bits(seq), target);
}

bool symm_round_give_up(symm_round_word_t *word, uint64_t seq, uint32_t target) {
  const uint64_t s = seq_bits(seq);
  uint64_t w = atomic_load(word);
  for (;;) {
    if (word_seq(w) != s || (w & MARK)) return true;
    if (target != UINT32_MAX && word_count(w) >= target) return false;
    if (atomic_compare_exchange_weak(word, &w, w | MARK)) return true;
  }
}

/* The word's low 32 bits, where the count and the mark live: what every
 * change of the word changes.  A futex of processes that share the
 * memory (no FUTEX_PRIVATE_FLAG). */
static uint32_t *low_half(symm_round_word_t *word) {
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  return (uint32_t *)word + 1;
#else
  return (uint32_t *)word;
#endif
}

void symm_round_block(symm_round_word_t *word, uint64_t seen, uint64_t timeout_ns) {
  struct timespec ts = {(time_t)(timeout_ns / 1000000000u), (long)(timeout_ns % 1000000000u)};
  (void)syscall(SYS_futex, low_half(word), FUTEX_WAIT, (uint32_t)seen, &ts, NULL, 0);
}

void symm_round_wake(symm_round_word_t *word) {
  (void)syscall(SYS_futex, low_half(word), FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}
