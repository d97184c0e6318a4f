/*
 * Rounds of a fixed group of processes through one word of shared memory
 * (shm_round.c): the collectives of the CPU engine and the shared-memory
 * bootstrap.
 *
 * A round either completes for every rank or for none.  Ranks arrive by
 * adding to the round's word; a rank that stops waiting (its deadline, a
 * lost peer) gives the round up by marking the word, which succeeds only
 * while some arrival is still missing.  Both are compare-and-swaps on the
 * same word, so a late rank cannot arrive after its peers gave up (it sees
 * the mark and fails too), and no rank gives up a round that every rank
 * already arrived at (it finds it complete and carries on).  A round may
 * be several synchronisations of the same ranks: the n-th is complete when
 * the count reaches n x ranks.
 *
 * The word holds the round's number, the mark and the count; the next
 * round of the same word takes it over (symm_round_take) once every rank
 * has left the previous one, which the caller checks through a word per
 * rank that says the last round it left.
 */
#ifndef SYMM_SHM_ROUND_H
#define SYMM_SHM_ROUND_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef _Atomic uint64_t symm_round_word_t;

/* Counts of up to 2^20 - 1 arrivals (ranks x synchronisations of a round),
 * round numbers of 43 bits. */
#define SYMM_ROUND_COUNT_MAX ((1u << 20) - 1)

typedef enum {
  SYMM_ROUND_WAIT = 0, /* arrivals still missing */
  SYMM_ROUND_DONE,     /* the count reached the target: complete for every rank */
  SYMM_ROUND_GIVEN_UP, /* some rank gave it up, or the word moved past it */
} symm_round_state_t;

/* Moves the word to round seq (count 0) if it holds an earlier one.
 * false: it holds a later one (this rank is behind its peers). */
bool symm_round_take(symm_round_word_t *word, uint64_t seq);
/* Adds this rank's arrival to round seq and says where the round stands
 * against `target` arrivals; GIVEN_UP adds nothing. */
symm_round_state_t symm_round_arrive(symm_round_word_t *word, uint64_t seq, uint32_t target);
/* Where round seq stands against `target`. */
symm_round_state_t symm_round_state(symm_round_word_t *word, uint64_t seq, uint32_t target);
/* Gives round seq up unless it reached `target` (UINT32_MAX: whatever the
 * count; for a rank that never arrived).  true: it is given up (now or
 * before), false: it completed after all.  A word that does not hold seq
 * is left alone (true: the round is not running). */
bool symm_round_give_up(symm_round_word_t *word, uint64_t seq, uint32_t target);
/* The round number in the word (for messages). */
uint64_t symm_round_seq(uint64_t word);
/* Blocks the calling thread until the word may have changed from `seen`
 * (a value it read), a symm_round_wake, or timeout_ns, whichever comes
 * first; returns at once where the word moved already.  For waits on a
 * host with more ranks than CPUs, where a waiter that wakes to look takes
 * a CPU from a rank with work: the waiter sleeps in the kernel (a futex
 * on the word's half that every arrival, mark and take changes) and costs
 * nothing until the round moves.  Spurious returns are allowed. */
void symm_round_block(symm_round_word_t *word, uint64_t seen, uint64_t timeout_ns);
/* Wakes every thread of any process blocked on the word: the arrival that
 * completes a round and a rank that gives it up call it. */
void symm_round_wake(symm_round_word_t *word);

#endif /* SYMM_SHM_ROUND_H */
