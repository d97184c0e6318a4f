/*
 * What the GPU engine's host code (src/gpu/, C11) and the collective
 * kernels (coll_kernels.cu) agree on: the kernel parameter block, the
 * scratch and signal-pad layouts, the error record.  Plain C with
 * fixed-width types so that both compilers lay it out identically.
 *
 * Protocol summary (the full story is in coll_kernels.cu):
 *  - Every kernel of a communicator runs at an *epoch* e, a device-side
 *    counter kept in the local part of this rank's scratch signal pad, which
 *    the kernel itself advances: every block is counted at its start, and
 *    the block that completes the count stores the new epoch when done.
 *    The host never passes a sequence number, so a captured CUDA graph
 *    replays correctly.
 *  - Ranks meet through *headers*: the epoch e, which block b writes into
 *    every peer's pad (channel b), double-buffered by the parity of e, and
 *    one *announce* per kernel {e, signature, e, zero-copy key}.  A reader
 *    waits for e in the header, then compares the announced signature with
 *    its own.
 *  - Data is staged into the scratch's data area, also double-buffered by
 *    the parity of e; LL packets live in a separate area of the scratch.
 */
#ifndef SYMM_COLL_ABI_H
#define SYMM_COLL_ABI_H

#include <stdint.h>

#ifdef __CUDACC__
#define SYMM_COLL_HD __host__ __device__
#else
#define SYMM_COLL_HD
#endif

/* Version of the protocol and layouts below: raised by every change that
 * kernels built from an older coll_kernels.cu would misread.  A kernel file
 * (SYMM_COLL_KERNELS) must carry the same (see symm_coll_abi_version). */
#define SYMM_COLL_ABI_VERSION 6

/* Most ranks a GPU collective supports: the peers' pointers travel in the
 * kernel parameters (2 x 8 bytes per rank), not in device memory. */
#define SYMM_COLL_MAX_WORLD 32

/* Threads per block of the kernels that exchange headers, and the launch
 * bound of all (LL and LL128 run smaller blocks: gpu_coll_ll_launch). */
#define SYMM_COLL_THREADS 512

/* ---- signal pad of the scratch tensor (SYMM_SIGNAL_PAD_MIN_BYTES = 4096) ----
 * [headers: 2 phases x channels x world x 2 parities x 4 bytes (an epoch
 *  with its top bit set; the reader zeroes the slot after use)]
 * [copy-engine slots at symm_coll_ce_off: world x 4 bytes, the barriers
 *  of the copy-engine collectives (SYMM_SIGNAL_OP_CE): rank r's value
 *  for this rank in word r, consumed (zeroed) by this rank]
 * [announces at symm_coll_announce_off: world x 2 parities x 32 bytes
 *  {epoch, signature, epoch, 32 bits of the zero-copy key} and, written
 *  only when zero copy is offered, {epoch | top bit, key low, epoch,
 *  key high}: the set top bit keeps a never-written slot from matching
 *  when the epoch wraps to 0]
 * [local words at SYMM_COLL_PAD_LOCAL: epoch, blocks counted, timed out]
 * Peers write only headers, copy-engine slots and announces; the local words are this rank's
 * own.  The pad is zeroed when the scratch is made and header slots are
 * zeroed again when read, so a header is never stale; announces are
 * rewritten by every kernel and compared by their full epoch: each 8-byte
 * half carries it, so nothing in an announce can be older than this
 * kernel once both halves of each 16 bytes read carry its epoch, and the
 * whole 64-bit key needs no fence before or after it.  (The first 16 bytes
 * have room for 32 bits of the key only; a 32-bit collision between two
 * ranks' different recv buffers would send data to the wrong memory.) */
#define SYMM_COLL_PAD_BYTES 4096u
#define SYMM_COLL_PAD_LOCAL 4032u /* first byte of the local words */
/* Local words (uint32): 0 epoch, 1 blocks counted, 2 timed out (sticky),
 * 3 and 4 all-to-all-v's local barrier (blocks arrived, epoch passed). */
#define SYMM_COLL_WORD_TIMED_OUT 2
#define SYMM_COLL_WORD_ORDER_COUNT 3
#define SYMM_COLL_WORD_ORDER_PASSED 4
#define SYMM_COLL_PHASES 2u
/* Channels (= most blocks of a kernel that exchanges headers). */
#define SYMM_COLL_MAX_CHANNELS 128u
#define SYMM_COLL_ANNOUNCE_BYTES 32u
SYMM_COLL_HD static inline unsigned symm_coll_announce_off(unsigned world) {
  return SYMM_COLL_PAD_LOCAL - 2u * SYMM_COLL_ANNOUNCE_BYTES * world;
}
SYMM_COLL_HD static inline unsigned symm_coll_ce_off(unsigned world) {
  return symm_coll_announce_off(world) - 4u * world;
}
SYMM_COLL_HD static inline unsigned symm_coll_channels(unsigned world) {
  unsigned n = symm_coll_ce_off(world) / (4u * 2u * SYMM_COLL_PHASES * world);
  return n > SYMM_COLL_MAX_CHANNELS ? SYMM_COLL_MAX_CHANNELS : n;
}

/* ---- data area of the scratch tensor ----
 * [LL area at 0: 2 parity halves x world regions of 16-byte packets, each
 *  carrying 8 bytes of data]
 * [LL128 area at SYMM_COLL_LL128_OFF: 2 parity halves x world regions of
 *  128-byte lines, each carrying 120 bytes of data and an 8-byte flag]
 * [staging at SYMM_COLL_STAGE_OFF: 2 parity halves of stage_half bytes]
 * Staging halves start 16-byte aligned (multiples of 256 bytes). */
#define SYMM_COLL_LL_BYTES ((uint64_t)4 << 20)
#define SYMM_COLL_LL128_BYTES ((uint64_t)24 << 20)
#define SYMM_COLL_LL128_OFF SYMM_COLL_LL_BYTES
#define SYMM_COLL_STAGE_OFF (SYMM_COLL_LL128_OFF + SYMM_COLL_LL128_BYTES)

/* Error record in pinned host memory, written by kernels with plain
 * stores (GPUs without host-native atomics may not use atomics there):
 * the fields, then `code`; a kernel that finds `code` set (an error the
 * host has not read) leaves the fields alone and stores its code into
 * `more`, so that the host still reports that a later collective failed.
 * Read and cleared by the host (gpu_poll_async_error). */
typedef struct symm_coll_error {
  uint32_t code;   /* symm_result_t: SYMM_ERR_MISMATCH, SYMM_ERR_TIMEOUT,
                      SYMM_ERR_INVALID_ARG (all-to-all-v's counts) */
  uint32_t peer;   /* the rank that differed or never arrived; with `why`,
                      the rank whose counts were refused */
  uint32_t kind;   /* SYMM_COLL_KERNEL_* of the kernel that saw it */
  uint32_t epoch;  /* device epoch of that kernel */
  uint32_t more;   /* code of an error recorded while `code` was unread, else 0 */
  uint32_t why;    /* SYMM_COLL_WHY_*: what was wrong with the counts, else 0 */
  uint32_t other;  /* SYMM_COLL_WHY_COUNT: the receiving rank; RECV_ROWS: the
                      first source whose rows do not fit */
  uint32_t mode;   /* all-to-all-v: symm_v_mode_t of the call */
  uint64_t got;    /* the figures of `why` (see there) */
  uint64_t limit;
} symm_coll_error_t;

/* symm_result_t's SYMM_ERR_INVALID_ARG, for the kernels. */
#define SYMM_COLL_ERR_INVALID_ARG 1u

/* What an all-to-all-v refused (symm_coll_error_t.why); `peer` is the rank
 * whose counts were wrong.  Every rank of the call records the same one
 * (the lowest rank's) and writes nothing. */
enum {
  SYMM_COLL_WHY_NEG_COUNT = 1,  /* got: the split's index, limit: its value (int64) */
  SYMM_COLL_WHY_NEG_OFFSET = 2, /* got: the offset's index, limit: its value (int64) */
  SYMM_COLL_WHY_SEND_ROWS = 3,  /* the rows it sends reach row `got`, send_rows `limit` */
  SYMM_COLL_WHY_RECV_ROWS = 4,  /* its placement needs `got` rows, recv_rows is `limit` */
  SYMM_COLL_WHY_COUNT = 5,      /* sent `got` to rank `other`, whose recv_counts says
                                   `limit` (code SYMM_ERR_MISMATCH) */
  SYMM_COLL_WHY_SCRATCH = 6     /* its staging needs `got` bytes, a staging half
                                   holds `limit` (the host refused, see v.refused) */
};

/* Which kernel (also mixed into the signature). */
enum {
  SYMM_COLL_KERNEL_AR_ONE_SHOT = 1,
  SYMM_COLL_KERNEL_AR_TWO_SHOT = 2,
  SYMM_COLL_KERNEL_AR_LL = 3,
  SYMM_COLL_KERNEL_REDUCE_SCATTER = 4,
  SYMM_COLL_KERNEL_ALL_GATHER = 5,
  SYMM_COLL_KERNEL_BROADCAST = 6,
  SYMM_COLL_KERNEL_ALL_TO_ALL = 7,
  SYMM_COLL_KERNEL_AR_LL128 = 8,
  SYMM_COLL_KERNEL_ALL_TO_ALL_V = 9,
  SYMM_COLL_KERNEL_CE = 10 /* the copy-engine collectives' barrier (symm_signal_op) */
};

/* ---- all-to-all-v (coll_a2av.cuh) ----
 * Chunks: a sender's rows for (destination q, local expert e), index
 * q * n_experts + e, world x n_experts of them (n_experts 1 but in the 2-D
 * modes), at most SYMM_COLL_V_MAX_CHUNKS.  Every block b of the kernel
 * keeps its own copy of its rank's table of chunks, and stages and pulls
 * its own pieces of every chunk: a reader may trust, after the header
 * exchange on channel b, only what block b of the writer wrote.
 * A staging half holds: [grid x table_bytes: per-block tables, each a
 * symm_coll_v_header_t then world x n_experts symm_coll_v_entry_t]
 * [grid x plan_bytes: per-block working arrays, read by their own block
 * only] [at data_off: the rows staged, each at the row it has in sendbuf]. */
#define SYMM_COLL_V_MAX_CHUNKS 4096
/* Most bytes of the tables and plans of one staging half: the grid shrinks
 * to fit (symm_comm_scratch_bytes counts on it). */
#define SYMM_COLL_V_BLOCK_AREA ((uint64_t)4 << 20)
typedef struct symm_coll_v_header {
  uint32_t why, zero;  /* SYMM_COLL_WHY_* of the sender's own counts, 0: good */
  uint64_t got, limit; /* its figures */
  uint64_t rows;       /* rows the sender staged (sum of its chunks) */
  /* The receiver's verdict on what it will receive, published before the
   * second header exchange; every rank acts on the lowest rank's. */
  uint32_t v_why, v_code, v_peer, v_other; /* symm_coll_error_t's fields */
  uint64_t v_got, v_limit;
} symm_coll_v_header_t;
typedef struct symm_coll_v_entry {
  uint64_t rows;   /* rows of the chunk */
  uint64_t staged; /* its first row in the sender's staged rows */
} symm_coll_v_entry_t;
/* Bytes of one block's table and working arrays (rows, source, place and
 * piece lists per chunk, an offset per expert). */
SYMM_COLL_HD static inline uint64_t symm_coll_v_table_bytes(uint64_t chunks) {
  return sizeof(symm_coll_v_header_t) + chunks * sizeof(symm_coll_v_entry_t);
}
SYMM_COLL_HD static inline uint64_t symm_coll_v_plan_bytes(uint64_t chunks, uint64_t experts) {
  return chunks * 6 * 8 + (experts * 8 + 15) / 16 * 16;
}

/* What an all-to-all-v call adds to the parameters: its mode and row
 * shape, the capacities and, for host counts, the counts themselves (in
 * rows of row_bytes), copied here so that a captured graph replays them
 * without reading host memory. */
typedef struct symm_coll_v_params {
  uint64_t send_counts[SYMM_COLL_MAX_WORLD], send_displs[SYMM_COLL_MAX_WORLD];
  uint64_t recv_counts[SYMM_COLL_MAX_WORLD], recv_displs[SYMM_COLL_MAX_WORLD];
  uint64_t in_splits;   /* device modes: int64 counts (and offsets: combine) */
  uint64_t out_splits;  /* device modes: int64 [2][chunks] written by block 0 */
  uint64_t row_bytes;   /* bytes per row */
  uint64_t send_rows;   /* capacity of send, and of this rank's staged rows */
  uint64_t recv_rows;   /* capacity of recv */
  uint64_t major_align; /* SYMM_V_DEV_2D: each expert's block starts at a multiple */
  uint64_t table_bytes; /* one block's table (symm_coll_v_table_bytes) */
  uint64_t plan_bytes;  /* one block's working arrays (symm_coll_v_plan_bytes) */
  uint64_t data_off;    /* the staged rows' offset in a staging half */
  int32_t mode;         /* symm_v_mode_t */
  int32_t n_experts;    /* chunks per destination */
  int32_t ordered;      /* 1: a buffer written overlaps one read (recv and send,
                           in place): every block of this rank has read before
                           any block writes */
  int32_t refused;      /* SYMM_COLL_WHY_SCRATCH: this rank stages nothing and
                           tells its peers why, 0: a call to run */
} symm_coll_v_params_t;

/*
 * Parameters of one launch (passed by value), one launch per public call.
 * Element counts and offsets are in elements of `esize` bytes.
 */
typedef struct symm_coll_params {
  uint64_t peer_data[SYMM_COLL_MAX_WORLD]; /* scratch data of every rank */
  uint64_t peer_pad[SYMM_COLL_MAX_WORLD];  /* scratch signal pad of every rank */
  uint64_t peer_recv[SYMM_COLL_MAX_WORLD]; /* zc != 0: every rank's mapping of recv */
  uint64_t send;        /* this rank's input (device pointer) */
  uint64_t recv;        /* this rank's output */
  uint64_t count;       /* elements per rank segment (RS send, AG recv, A2A both
                           hold world segments of count elements) */
  uint64_t seg;         /* two-shot: elements per segment; one-shot: per region */
  uint64_t stage_half;  /* bytes per staging half */
  uint64_t ll_region;   /* bytes of one rank's LL region in one half */
  uint64_t ll128_region; /* bytes of one rank's LL128 region in one half */
  uint64_t zc_key;      /* the whole 64-bit key, compared through the announces */
  uint64_t err;         /* symm_coll_error_t * (device view of pinned memory) */
  uint64_t timeout_ns;  /* bound of every wait */
  uint32_t sig;         /* signature: every rank must have the same */
  uint32_t nonce;       /* per-scratch salt of the flags (same on every rank) */
  uint32_t zc;          /* two-shot, all-gather: 32 bits of recv's key (tensor, offset)
                           for the announce, 0: no zero copy offered */
  int32_t rank, world, root;
  int32_t esize;        /* bytes per element */
  int32_t vec;          /* 1: all buffers and segment offsets 16-byte aligned */
  int32_t kind;         /* SYMM_COLL_KERNEL_* */
  int32_t channels;     /* symm_coll_channels(world): header slots per phase */
  symm_coll_v_params_t v; /* SYMM_COLL_KERNEL_ALL_TO_ALL_V only */
} symm_coll_params_t;

/* Parameters of the signal kernel (symm_signal_put / _wait / _barrier):
 * one block of SYMM_SIGNAL_THREADS threads; errors go to the collectives'
 * error record with kind 0.
 * Op SYMM_SIGNAL_OP_CE is the barrier of the copy-engine collectives
 * (src/gpu/gpu_coll_ce.c): pads[r] is rank r's copy-engine slots
 * (symm_coll_ce_off of the scratch pad), channel 0; thread t puts
 * put_value[t] into peer t's slot of this rank, waits for peer t's slot
 * here and compares what came with want_value[t]: a value that differs is
 * SYMM_ERR_MISMATCH, recorded with kind SYMM_COLL_KERNEL_CE.  Values are
 * never 0 (a valid call's are odd, a refused call's 2). */
#define SYMM_SIGNAL_THREADS 32
#define SYMM_SIGNAL_OP_CE 4
#define SYMM_SIGNAL_CE_REFUSED 2u
typedef struct symm_signal_params {
  uint64_t pads[SYMM_COLL_MAX_WORLD]; /* every rank's pad of the tensor, as mapped here */
  uint64_t err;                       /* symm_coll_error_t * (device view) */
  uint64_t timeout_ns;
  int32_t op; /* 1 put, 2 wait, 3 barrier (SYMM_SIGNAL_* of core/internal.h), 4 CE */
  int32_t rank, world, peer, channel;
  uint32_t put_value[SYMM_COLL_MAX_WORLD];  /* SYMM_SIGNAL_OP_CE: for peer r */
  uint32_t want_value[SYMM_COLL_MAX_WORLD]; /* SYMM_SIGNAL_OP_CE: from peer r */
} symm_signal_params_t;

#endif /* SYMM_COLL_ABI_H */
