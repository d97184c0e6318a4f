/*
 * The CPU engine's collective frame, shared by cpu_coll.c (the protocol,
 * described at its top, and the fixed-size collectives) and cpu_coll_v.c
 * (all-to-all-v).  Private to src/cpu/.
 */
#ifndef SYMM_CPU_COLL_INT_H
#define SYMM_CPU_COLL_INT_H

#include <stdatomic.h>

#include "cpu/cpu.h"

#define SCRATCH_ALIGN 64
/* Reductions (cpu_coll.c) and all-to-all-v senders (cpu_coll_v.c) read
 * symmetric send data in place from this much: below it a copy costs less
 * than the exit barrier. */
#define ZERO_COPY_MIN_BYTES ((size_t)64 << 10)

/* A flag is 4 * seq + phase; PHASE_GIVEN_UP marks call seq given up. */
enum { PHASE_GIVEN_UP = 0, PHASE_ARRIVED = 1, PHASE_STAGED = 2, PHASE_DONE = 3, PHASES = 4 };

typedef struct {
  uint64_t sig;
  uint64_t group;  /* 0: this rank's send data is staged in its scratch */
  uint64_t offset; /* of sendbuf in the group's tensor on this rank; with
                      cross-memory attach, sendbuf's address */
} coll_brief_t;

/* An all-to-all-v's verdict on its counts (cpu_coll_v.c): what a rank
 * found wrong, for every rank's message. */
typedef struct {
  int32_t code;    /* 0: nothing wrong; else a V_* of cpu_coll_v.c */
  int32_t peer;    /* the other rank it concerns, or -1 */
  uint64_t a, b;   /* the two numbers that disagree */
} coll_verdict_t;

typedef struct {
  uint64_t count;
  int32_t kind, dtype, op, root;
  int32_t algo;    /* all-reduce: the algorithm that runs */
  int32_t in_place; /* all-to-all-v: this rank's send data is read where it lies */
  uint64_t need;   /* all-to-all-v: bytes of this rank's staging (table, data) */
  uint64_t room;   /* all-to-all-v, cross-memory attach: bytes of sendbuf */
  /* all-to-all-v: this rank's verdict [0] on its own counts, published with
   * its first arrival, [1] on what it receives, with its second: apart, so
   * that a peer still reading [0] never sees [1] early. */
  coll_verdict_t verdict[2];
  /* Cross-memory attach: the errno of this rank's read of rank read_peer
   * that failed (0: none), published with its exit arrival. */
  int32_t read_errno, read_peer;
} coll_detail_t;

/* What a rank publishes for the calls of one parity, in one cache line:
 * a peer's first miss on it brings the flag, the signature and, for small
 * calls, the data. */
#define INLINE_BYTES 32
typedef struct {
  _Alignas(64) _Atomic uint64_t flag; /* 4 * seq + phase of this parity's last call */
  coll_brief_t brief;
  unsigned char data[INLINE_BYTES]; /* send data of calls that fit (inline) */
} coll_slot_t;

typedef struct coll_pad {
  coll_slot_t slot[2];
  _Alignas(64) coll_detail_t detail[2];
  _Alignas(64) _Atomic uint64_t left; /* the last call this rank has left */
} coll_pad_t;

_Static_assert(sizeof(coll_slot_t) == 64, "a slot is one cache line");

_Static_assert(sizeof(coll_pad_t) <= SYMM_SIGNAL_PAD_MIN_BYTES, "collective pad outgrew the signal pad");

/* One call in progress. */
typedef struct {
  symm_comm_t *comm;
  const symm_coll_args_t *a;
  const symm_coll_args_t *whole; /* the call a is a slice of (messages) */
  uint64_t sig;                  /* of the whole call (every slice carries it) */
  int w, me, h;
  uint64_t seq;
  size_t esize;
  size_t out_off, half; /* IN at 0 of each half, OUT at out_off; half: bytes needed */
  size_t half_stride;   /* where the second half starts: half the scratch */
  coll_pad_t **pads;    /* [w]: the engine's (cpu_state_t.pads), from attach on */
  const char **src;     /* [w] where rank r's send data is read */
  symm_tensor_t *scratch;
  bool zero_copy;       /* src[] are the peers' buffers, read in place */
  bool cma;             /* peers' send data is read in their processes (cpu_cma.c) */
  int read_errno, read_peer; /* cma: this rank's failed read, if any */
} coll_t;

/* Rank r's brief of this call, as every rank reads it: its own too, from
 * its pad, so that all decide on the same table. */
static inline const coll_brief_t *cpu_coll_brief(const coll_t *c, int r) {
  return &c->pads[r]->slot[c->h].brief;
}

/* The frame's steps (cpu_frame.c). */
const char *cpu_coll_kind_name(int kind);
/* Works on scratch s from now on (its pads; the gate). */
symm_result_t cpu_coll_attach(coll_t *c, symm_tensor_t *s, bool grown);
/* Makes the communicator's scratch at least `bytes` (collective), into *s,
 * each half (cpu_coll_half_capacity) at least bytes / 2. */
symm_result_t cpu_coll_grow(coll_t *c, size_t bytes, symm_tensor_t **s);
/* Arrives at `phase` and waits for every rank to, or fails the call. */
symm_result_t cpu_coll_sync(coll_t *c, int phase, const char *what);
/* Its two halves: arrives at `phase` (after what it published), and waits
 * until every rank arrived there. */
symm_result_t cpu_coll_arrive(coll_t *c, int phase);
symm_result_t cpu_coll_wait(coll_t *c, int phase, const char *what);
/* Whether some rank arrived in a host call of this number. */
bool cpu_coll_peer_in_host_call(const coll_t *c);
/* After the first sync: SYMM_ERR_MISMATCH unless every rank's call agrees. */
symm_result_t cpu_coll_check_match(const coll_t *c);
/* The exit of a call read with cross-memory attach: this rank's failed
 * read (c->read_errno, read_peer) published, phase 3, and every rank's
 * marks read after it, so that all fail alike. */
symm_result_t cpu_coll_cma_finish(coll_t *c);
/* Publishes this rank's brief and detail of the call. */
void cpu_coll_publish(coll_t *c, uint64_t group, uint64_t offset);
/* Zero copy: the rendezvoused tensor of this comm whose data of this rank
 * holds [ptr, ptr + bytes), with ptr's offset in it; NULL (no error) when
 * there is none. */
symm_tensor_t *cpu_coll_own_tensor(const coll_t *c, const void *ptr, size_t bytes, size_t *off);
/* Rank r's scratch half of this call, and what one half holds. */
char *cpu_coll_half(const coll_t *c, int r);
size_t cpu_coll_half_capacity(const symm_tensor_t *s);
/* The all-to-all-v (cpu_coll_v.c), on a frame. */
symm_result_t cpu_coll_v_run(coll_t *c);

#endif /* SYMM_CPU_COLL_INT_H */
