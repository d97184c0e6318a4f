/*
 * symmem.h - symmetric memory across processes and GPUs.
 *
 * Every rank of a communicator allocates a buffer of the same shape; after a
 * collective rendezvous every rank can load from and store to every peer's
 * buffer directly (GPU peer mappings, or CPU shared memory for the `host`
 * backend).  This header is the whole application API and its documentation:
 * each function states what it does, whether it is collective, and what it
 * returns on each failure.
 *
 * Conventions
 *  - Every function that can fail returns symm_result_t.  On failure a
 *    human-readable message with the details is kept per thread and returned
 *    by symm_last_error() until the next failing call on that thread.
 *  - "Collective" means every rank of the communicator must make the call, in
 *    the same order relative to other collective calls, with the same
 *    arguments where stated.  Mismatched arguments are detected and reported
 *    as SYMM_ERR_MISMATCH on every rank.  All collective calls of a
 *    communicator, whatever their kind, are in one order: ranks that make
 *    calls of different kinds at the same place (an all-reduce against a
 *    barrier) get SYMM_ERR_MISMATCH too (on GPU backends, whose collectives
 *    only enqueue, collectives and host calls are ordered apart: see
 *    "Collectives").
 *  - Timeouts.  Every call that waits returns within the communicator's
 *    timeout (SYMM_TIMEOUT_MS / symm_config_t.timeout_ms; a store call's own
 *    where it takes one) plus a slack of max(250 ms, timeout / 10), counted
 *    from the call's entry: the timeout is one deadline for the whole call,
 *    shared by every wait inside it (connecting to the store, each exchange,
 *    the cleanup after a failure), never a fresh timeout per step, and the
 *    slack is for answers in flight when it comes and that cleanup (the
 *    waits for them end a tenth of the slack early, which is left for
 *    the call's own work after them on a loaded machine).  The
 *    message of SYMM_ERR_TIMEOUT names the ranks the call waited for, or the
 *    store and the rank that serves it when the store stopped answering.
 *  - A call that times out fails on every rank or succeeds on every rank,
 *    never some of each (host-side rounds: every bootstrap round of a
 *    barrier, rendezvous, collective allocation or free, and the host
 *    backend's collectives).  A rank that stops waiting gives the call up;
 *    a rank that gets there afterwards (slow, or stopped for longer than
 *    the timeout) gets SYMM_ERR_TIMEOUT at once, its message saying that
 *    it "came late" (SYMM_ERR_PEER_LOST naming the rank instead when a
 *    peer's process is gone: the likely reason its peers gave up, and
 *    the end of the job either way), and its buffers are undefined, as
 *    its peers' are.  A
 *    rank that gives up just as the last rank arrives finds the call
 *    complete and succeeds with the others.  What comes next: every
 *    call, failed or not, keeps its place in each rank's order, so the
 *    ranks' next calls pair up as made.  A rank that is ahead of a late
 *    peer waits (within its own timeout) until the peer has left the
 *    calls before, and fails the call it is in if the peer does not;
 *    the late rank's calls that its peers already gave up fail at once.
 *    To get back in step after a timeout, repeat a symm_comm_barrier on
 *    every rank until it succeeds (each failed attempt fails on every
 *    rank alike); a call whose number differs between ranks (a rank that
 *    skipped a call) is SYMM_ERR_MISMATCH "out of step" at the next host
 *    call, which puts every rank on the same number.
 *  - "Local" means the call involves only the calling process.
 *  - Objects are not thread-safe unless stated; the registry lookups
 *    (symm_tensor_lookup, symm_validate) may be called from any thread.
 *  - fork(): the child keeps none of the library's sockets (they become
 *    /dev/null in the child), so a rank that dies is still seen as lost by
 *    its peers while a forked child (a data-loader worker, say) lives on.
 *    The child may read and write mapped symmetric memory it inherited, but
 *    must not call into a communicator of its parent.
 */
#ifndef SYMMEM_H
#define SYMMEM_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define SYMM_API __attribute__((visibility("default")))
#else
#define SYMM_API
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                  */
/* ------------------------------------------------------------------------ */
#define SYMM_VERSION_MAJOR 0
#define SYMM_VERSION_MINOR 1
#define SYMM_VERSION_PATCH 0
#define SYMM_VERSION_CODE \
  (SYMM_VERSION_MAJOR * 10000 + SYMM_VERSION_MINOR * 100 + SYMM_VERSION_PATCH)

/* Version of the library actually loaded (SYMM_VERSION_CODE it was built as).
 * Local; never fails. */
SYMM_API int symm_version(void);

/* The CPUs this process may run on (its affinity, as symmem-run --bind-to
 * or another launcher left it): "cpus 2 (bound: 1 of this host's 8)" or
 * "cpus 0-7 (all 8 of this host: not bound)", NUL-terminated in out[cap]
 * (truncated to fit); returns out.  Local, no communicator needed. */
SYMM_API const char *symm_cpu_binding(char *out, size_t cap);

/* ------------------------------------------------------------------------ */
/* Results and errors                                                       */
/* ------------------------------------------------------------------------ */
typedef enum symm_result {
  SYMM_SUCCESS = 0,
  SYMM_ERR_INVALID_ARG = 1,  /* NULL pointer, bad size, rank out of range ... */
  SYMM_ERR_NO_MEMORY = 2,    /* host or device allocation failed */
  SYMM_ERR_UNSUPPORTED = 3,  /* not available with this backend / here */
  SYMM_ERR_MISMATCH = 4,     /* ranks passed different arguments to a collective */
  SYMM_ERR_TIMEOUT = 5,      /* a blocking wait ran past the timeout */
  SYMM_ERR_PEER_LOST = 6,    /* a peer process died or closed its connection */
  SYMM_ERR_SYSTEM = 7,       /* an operating-system call failed (errno in message) */
  SYMM_ERR_BACKEND = 8,      /* the backend library (CUDA, NCCL ...) failed */
  SYMM_ERR_NOT_FOUND = 9,    /* no such key / pointer not symmetric memory */
  SYMM_ERR_STATE = 10,       /* call not valid in this state (e.g. before rendezvous) */
  SYMM_ERR_PERMISSION = 11,  /* refused: wrong token, other uid */
  SYMM_ERR_PROTOCOL = 12,    /* malformed message from a peer or the store */
  SYMM_ERR_INTERNAL = 13,    /* a bug in symmem; please report */
  SYMM_ERR_BACKEND_UNAVAILABLE = 14 /* the backend's library or device is missing here */
} symm_result_t;

/* Short static description of a result code ("invalid argument").  Unknown
 * codes give "unknown error".  Never NULL. */
SYMM_API const char *symm_strerror(symm_result_t result);

/* Detailed message of the last failure on the calling thread ("rank 5 out of
 * range [0, 4) in symm_tensor_remote_view"), or "" if none.  The string is
 * owned by the library and valid until the next symm_ call on this thread. */
SYMM_API const char *symm_last_error(void);

/* ------------------------------------------------------------------------ */
/* Backends                                                                 */
/* ------------------------------------------------------------------------ */
typedef enum symm_backend {
  SYMM_BACKEND_AUTO = 0,    /* first usable of native, cuda, host */
  SYMM_BACKEND_HOST = 1,    /* CPU shared memory (memfd), no GPU needed */
  SYMM_BACKEND_NATIVE = 2,  /* CUDA VMM (cuMemCreate), fd / fabric handles */
  SYMM_BACKEND_CUDA = 3,    /* cuMemAlloc + CUDA IPC handles, no fd passing */
  SYMM_BACKEND_NCCL = 4,    /* NCCL symmetric windows */
  SYMM_BACKEND_NVSHMEM = 5, /* NVSHMEM symmetric heap */
  SYMM_BACKEND_COUNT_ = 6
} symm_backend_t;

/* Name of a backend ("auto", "host", "native", "cuda", "nccl", "nvshmem"), or
 * NULL for a value out of range.  Local. */
SYMM_API const char *symm_backend_name(symm_backend_t backend);

/* Parses a backend name (case-insensitive).  Returns SYMM_ERR_INVALID_ARG for
 * NULL arguments or an unknown name; the message lists the valid names.
 * Local. */
SYMM_API symm_result_t symm_backend_from_name(const char *name,
                                              symm_backend_t *backend);

/* Whether `backend` can be used in this process.  SYMM_SUCCESS if it can;
 * otherwise SYMM_ERR_BACKEND_UNAVAILABLE and, if why != NULL, a NUL-terminated reason
 * of at most why_len bytes ("libcuda.so.1 not found: ...").  Local. */
SYMM_API symm_result_t symm_backend_available(symm_backend_t backend, char *why,
                                              size_t why_len);

/* The backends of this library in `auto`'s order of preference (GPU
 * backends first, host last): index 0, 1, ...; SYMM_BACKEND_AUTO past the
 * last one (and for a negative index).  Local, no side effects. */
SYMM_API symm_backend_t symm_backend_preferred(int index);

/* Writes what symmem-info shows about `backend` on this machine (devices,
 * peer access, support flags), one item per line, to out; nothing for a
 * backend with nothing to say.  May load the backend's GPU libraries.
 * Returns SYMM_ERR_INVALID_ARG for NULL out or a backend this library does
 * not know.  Local. */
SYMM_API symm_result_t symm_backend_describe(symm_backend_t backend, FILE *out);

/* symmem never creates NVLink multicast objects (they can take a shared
 * host's GPUs out of service): writes that into why (at most why_len
 * bytes, NUL-terminated), naming the variables that keep the other
 * libraries in the process off NVLS (NCCL_NVLS_ENABLE=0, ...) and whether
 * they are set.  Local. */
SYMM_API void symm_multicast_status(char *why, size_t why_len);

/* ------------------------------------------------------------------------ */
/* Data types                                                               */
/* ------------------------------------------------------------------------ */
typedef enum symm_dtype {
  SYMM_DTYPE_F16 = 0,
  SYMM_DTYPE_BF16 = 1,
  SYMM_DTYPE_F32 = 2,
  SYMM_DTYPE_F64 = 3,
  SYMM_DTYPE_I8 = 4,
  SYMM_DTYPE_I16 = 5,
  SYMM_DTYPE_I32 = 6,
  SYMM_DTYPE_I64 = 7,
  SYMM_DTYPE_U8 = 8,
  SYMM_DTYPE_U16 = 9,
  SYMM_DTYPE_U32 = 10,
  SYMM_DTYPE_U64 = 11,
  SYMM_DTYPE_F8E4M3 = 12, /* FP8 E4M3 (finite, no Inf: PyTorch's float8_e4m3fn) */
  SYMM_DTYPE_F8E5M2 = 13, /* FP8 E5M2 (IEEE-like, with Inf) */
  SYMM_DTYPE_COUNT_ = 14
} symm_dtype_t;

/* Size in bytes of one element, or 0 for a value out of range.  Local. */
SYMM_API size_t symm_dtype_size(symm_dtype_t dtype);
/* "f16", "bf16", "f32", "f64", "i8" ... "u64", "f8e4m3", "f8e5m2", or NULL
 * out of range. */
SYMM_API const char *symm_dtype_name(symm_dtype_t dtype);
/* Parses a dtype name; SYMM_ERR_INVALID_ARG for NULL or an unknown name. */
SYMM_API symm_result_t symm_dtype_from_name(const char *name,
                                            symm_dtype_t *dtype);

/* ------------------------------------------------------------------------ */
/* Settings: the SYMM_* environment variables                               */
/* ------------------------------------------------------------------------ */
/*
 * Every SYMM_* variable is a setting declared once, with a type, a default
 * and a help text.  Values are parsed when a communicator is made:
 * integers in decimal (each within its stated range); sizes as bytes or
 * with a K, M or G suffix (64K, 1M, 4G: powers of 1024); booleans as
 * 1/0, true/false, yes/no or on/off; enumerations by name, in any case.  A
 * variable set to the empty string counts as unset.  A value that does not
 * parse, or is out of range, makes symm_comm_init fail with
 * SYMM_ERR_INVALID_ARG; a SYMM_* variable that is no setting draws one
 * warning per process naming the closest setting.  These calls list the
 * settings and judge the environment's values with the very parser
 * symm_comm_init uses, so a tool (symmem-info --env) and the library never
 * disagree.
 *
 * A testing aid: SYMM_FAULT="<phase>:<kill|stop>[:rank]" makes that rank
 * (every rank when none is named) send itself SIGKILL or SIGSTOP the first
 * time it reaches the phase, read at each symm_comm_init: init.hello (the
 * store accepted this rank, the others not met yet), init.shm (inside the
 * shared-memory bootstrap: rank 0 made the segment, another rank opened
 * it), alloc, rendezvous (after the exchange, before the peers are
 * mapped), barrier, collective, signal_wait (each before it waits on its
 * peers), free, destroy.  It lets a test kill or freeze a rank at an exact
 * point to check what its peers get (tests/test-faults.c); unset, it costs
 * nothing.  Never set it in production.
 */
typedef struct symm_setting_info {
  const char *name;          /* "SYMM_TIMEOUT_MS" */
  const char *type;          /* "int", "size", "bool", "string", "enum" */
  const char *default_value; /* as text; NULL: unset */
  const char *help;          /* what it does, what it accepts */
  const char *value;         /* the environment's value as it may be shown (a
                                secret's is a placeholder, never the value);
                                NULL when unset or empty */
  const char *problem;       /* NULL, or why symm_comm_init refuses the value
                                ("not an integer", "out of range (accepted:
                                an integer in 1..2147483647)") */
  int secret;                /* 1: its value is never shown (the job's token) */
  int per_job;               /* 1: the launcher sets it per job (identity, not a choice) */
} symm_setting_info_t;

/* Number of settings.  Local; never fails. */
SYMM_API size_t symm_setting_count(void);

/* Describes setting `index` (0 .. symm_setting_count() - 1, in a fixed
 * order) with the environment's current value and, if it would be refused,
 * why.  Local; reads the environment at each call.  SYMM_ERR_INVALID_ARG for
 * index >= symm_setting_count() or NULL info.  The strings are the
 * library's: valid until the next call from this thread. */
SYMM_API symm_result_t symm_setting_get(size_t index, symm_setting_info_t *info);

/* ------------------------------------------------------------------------ */
/* Configuration                                                            */
/* ------------------------------------------------------------------------ */
#define SYMM_CONFIG_VERSION 3
#define SYMM_MAX_DIMS 8

/*
 * Bring your own bootstrap: the out-of-band channel the ranks meet through
 * at init, instead of symmem's TCP store (MPI, PMIx, a framework's store;
 * include/symmem_mpi.h builds one from an MPI_Comm).  Set
 * symm_config_t.bootstrap; symmem then opens no store and no port.
 * Always start from SYMM_BOOTSTRAP_CALLBACKS_INIT (size and version, as
 * symm_config_t).  symmem calls the callbacks from the thread that called
 * into symmem, only during calls that are collective over the
 * communicator (init, rendezvous, barrier, split, destroy's agreement),
 * in the same order on every rank (the note callbacks and lost_rank
 * excepted: each rank calls them alone, see below, also from the
 * collectives and allocations that wait in a provider library such as
 * NCCL); it keeps the pointer to this struct
 * and `ctx` until symm_comm_destroy returns, so both must live that long.
 *
 * Timeouts: every callback gets `timeout_ms`, what is left of the calling
 * symmem function's deadline (at least 1).  A callback returns 0 when
 * done, or a symm_result_t: SYMM_ERR_TIMEOUT when the deadline passed
 * before every rank took part, SYMM_ERR_PEER_LOST when a rank is known to
 * be gone, anything else for other failures.  The calling symmem function
 * returns that code (SYMM_ERR_BACKEND for a value that is no
 * symm_result_t), with the callback's name and rank in the message.
 * symmem never waits on its own around a callback: a callback that
 * ignores timeout_ms makes symmem wait as long as it does.
 */
#define SYMM_BOOTSTRAP_CALLBACKS_VERSION 2
typedef struct symm_bootstrap_callbacks {
  size_t size;          /* sizeof(symm_bootstrap_callbacks_t) as compiled by the caller */
  unsigned version;     /* SYMM_BOOTSTRAP_CALLBACKS_VERSION as compiled by the caller */
  int rank, world_size; /* this rank and the number of ranks, 0 <= rank < world_size */
  int local_rank, local_size; /* on this host; -1: symmem works them out */
  void *ctx;            /* passed to every callback */
  /* Required: recv[r * len .. (r + 1) * len) = rank r's `send`, for every
   * rank r (this rank's too), len the same on every rank. */
  int (*allgather)(void *ctx, const void *send, void *recv, size_t len, int timeout_ms);
  /* Optional (NULL: through allgather): root's buf to every rank. */
  int (*broadcast)(void *ctx, void *buf, size_t len, int root, int timeout_ms);
  /* Optional (NULL: an allgather of nothing): every rank has called it. */
  int (*barrier)(void *ctx, int timeout_ms);
  /* Optional: this rank failed a step its peers may still be waiting in
   * (code and reason say why); make their callbacks return (MPI_Abort,
   * closing a connection), or do nothing.  Called at most once per
   * communicator, from the failing call. */
  void (*abort)(void *ctx, int code, const char *reason);
  /* Optional: a channel for the ranks of this one that pass the same color
   * (>= 0; -1: none, *child untouched), ranked by key then rank, for the
   * groups of symm_comm_split; collective over this channel's ranks
   * (MPI_Comm_split).  Fills *child (already initialised with
   * SYMM_BOOTSTRAP_CALLBACKS_INIT) and returns 0, or an error as above.
   * NULL: symm_comm_split of a communicator on these callbacks is refused
   * (SYMM_ERR_UNSUPPORTED). */
  int (*split)(void *ctx, int color, int key, struct symm_bootstrap_callbacks *child,
               int timeout_ms);
  /* Optional: symmem is done with the channel (the communicator made on it
   * is destroyed); called for the channels `split` made, never for the
   * caller's own. */
  void (*release)(void *ctx);
  /* members above: version 1 */
  /*
   * Notes: a side channel for what a rank must tell its peers while they
   * wait outside the all-gather (its NCCL init failed; a peer it watches
   * is gone).  Unlike the callbacks above they are not collective: one
   * rank calls note_put alone, the others call note_get alone, now and
   * then, while they wait; both return at once (they never wait for
   * peers).  Keys and values are short strings (a key below 256 bytes, a
   * value below 1024), a key unique per communicator (symmem prefixes
   * it).  note_put: every rank of the channel may later read the value;
   * a key put twice keeps its first value, at least as each reader sees
   * it.  note_get: 0 with *found 1 and the value (cut to cap, always
   * terminated), or 0 with *found 0 when no value reached this rank yet.
   * lost_rank: a rank of the channel known to be gone (the launcher or
   * runtime saw it exit), or -1 when none is, or it cannot say.  Any other
   * return is an error code as above, which symmem treats as "nothing
   * known".
   * Optional, and all of a version-1 struct are absent: without notes a
   * failure on one rank (ncclCommInitRank, the fd exchange) reaches the
   * others only as their own SYMM_ERR_TIMEOUT at the deadline, and a rank
   * gone in another PID namespace or on another host likewise, unless
   * lost_rank says so.  symm_mpi_bootstrap fills note_put and note_get
   * (point-to-point messages on a duplicate communicator); so do the PMIx
   * bootstrap (values committed to the PMIx server without a fence: read
   * at once by the ranks of the putter's node, by the others only at
   * their deadline) and the Python package's store (one with `check`)
   * and mpi4py channels.  None of these has lost_rank: their launchers
   * end the whole job when a rank dies.
   */
  int (*note_put)(void *ctx, const char *key, const char *value);
  int (*note_get)(void *ctx, const char *key, char *value, size_t cap, int *found);
  int (*lost_rank)(void *ctx);
  /* members above: version 2 */
} symm_bootstrap_callbacks_t;

#define SYMM_BOOTSTRAP_CALLBACKS_INIT                                       \
  {                                                                         \
    sizeof(symm_bootstrap_callbacks_t), SYMM_BOOTSTRAP_CALLBACKS_VERSION,   \
        -1, -1, -1, -1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,     \
        NULL, NULL                                                          \
  }

/*
 * Communicator configuration.  Always start from SYMM_CONFIG_INIT: it sets
 * `size` and `version`, which let later library versions add fields while
 * accepting structs from older programs.  Fields left at their "unset" value
 * are taken from the environment:
 *
 *   rank / world_size  SYMM_RANK / SYMM_WORLD_SIZE (symmem-run), else RANK /
 *                      WORLD_SIZE (torchrun), OMPI_COMM_WORLD_RANK / _SIZE
 *                      (Open MPI), PMI_RANK / PMI_SIZE (MPICH/Hydra),
 *                      SLURM_PROCID / SLURM_NTASKS (srun); else 0 / 1.
 *   local_rank / size  SYMM_LOCAL_RANK / SYMM_LOCAL_SIZE, LOCAL_RANK /
 *                      LOCAL_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK / _SIZE,
 *                      MPI_LOCALRANKID / MPI_LOCALNRANKS, SLURM_LOCALID; else
 *                      computed from the hostnames at init.
 *   store_addr         SYMM_STORE_ADDR ("host:port"), else MASTER_ADDR and
 *                      SYMM_STORE_PORT (see README: torchrun's own store
 *                      occupies MASTER_PORT).  If none is set and world_size
 *                      > 1, init fails with SYMM_ERR_INVALID_ARG.
 *   token              SYMM_TOKEN (symmem-run sets a random one).
 *   job_id             SYMM_JOB_ID, else derived from the store address.
 *   backend            SYMM_BACKEND (auto|host|native|cuda|nccl|nvshmem).
 *   timeout_ms         SYMM_TIMEOUT_MS (default 60000).
 *   device             SYMM_DEVICE, else the local rank (GPU backends).
 *   signal_pad_bytes   SYMM_SIGNAL_PAD_BYTES (default 4096).
 */
typedef struct symm_config {
  size_t size;          /* sizeof(symm_config_t) as compiled by the caller */
  unsigned version;     /* SYMM_CONFIG_VERSION as compiled by the caller */
  int rank;             /* -1: from environment */
  int world_size;       /* -1: from environment */
  int local_rank;       /* -1: from environment or computed */
  int local_size;       /* -1: from environment or computed */
  int device;           /* -1: SYMM_DEVICE or local rank */
  symm_backend_t backend; /* SYMM_BACKEND_AUTO: SYMM_BACKEND or auto */
  int timeout_ms;       /* 0: SYMM_TIMEOUT_MS; negative: SYMM_ERR_INVALID_ARG */
  const char *store_addr; /* NULL: from environment */
  const char *token;    /* NULL: SYMM_TOKEN */
  const char *job_id;   /* NULL: SYMM_JOB_ID or derived */
  int store_server;     /* -1: rank 0 serves the store unless SYMM_STORE_EXTERNAL=1
                           (symmem-run sets it); 0: never; 1: this rank serves */
  /* members above: version 1 */
  /* Bytes of every tensor's signal pad (PyTorch's set_signal_pad_size):
   * 0: SYMM_SIGNAL_PAD_BYTES; else a multiple of 4096 in [4096, 1 MiB]
   * (else SYMM_ERR_INVALID_ARG), the same on every rank (else
   * SYMM_ERR_MISMATCH).  Larger pads give users' kernels more channels
   * per peer (symm_signal_channels). */
  size_t signal_pad_bytes;
  /* members above: version 2 */
  /* The ranks meet through these callbacks instead of a store (NULL: the
   * store).  rank, world_size, local_rank and local_size then come from
   * them (the config's must be -1 or the same; SYMM_ERR_INVALID_ARG
   * otherwise), and store_addr, token and store_server are not used. */
  const symm_bootstrap_callbacks_t *bootstrap;
  /* members above: version 3 */
} symm_config_t;

#define SYMM_CONFIG_INIT                                                    \
  {                                                                         \
    sizeof(symm_config_t), SYMM_CONFIG_VERSION, -1, -1, -1, -1, -1,         \
        SYMM_BACKEND_AUTO, 0, NULL, NULL, NULL, -1, 0, NULL                 \
  }


/* ------------------------------------------------------------------------ */
/* Communicator                                                             */
/* ------------------------------------------------------------------------ */
typedef struct symm_comm symm_comm_t;

/*
 * Creates a communicator.  Collective over all world_size ranks: each rank
 * connects to the store (rank 0 starts it unless told otherwise), the ranks
 * exchange their identities, and the backend is initialised.  `config` may be
 * NULL (everything from the environment).
 * Returns SYMM_ERR_INVALID_ARG (comm NULL, bad config size/version (or a
 * version newer than this library's), a negative timeout_ms, rank out
 * of range, unknown SYMM_BACKEND, missing store address; a SYMM_* setting
 * whose value does not parse or is out of range, the message naming the
 * variable, the value and what is accepted; native: a
 * SYMM_COLL_KERNELS file that cannot be read, loaded or run, or that was
 * built for another ABI), SYMM_ERR_BACKEND_UNAVAILABLE (the chosen
 * backend's library or device is missing here or on another rank; the
 * message says what was looked for), SYMM_ERR_UNSUPPORTED (the device or
 * the library cannot do what the backend needs), SYMM_ERR_PERMISSION (store refused the
 * token, or the process answering at the store's address could not prove
 * it holds the token: another user's on that port, or another SYMM_TOKEN;
 * the token is never sent, so it learnt nothing; a peer's fd server runs
 * as another user), SYMM_ERR_TIMEOUT (the
 * other ranks, or the store, did not answer in time), SYMM_ERR_PEER_LOST (a
 * rank died or the store connection closed during init), SYMM_ERR_MISMATCH
 * (ranks disagree on world size, backend, ABI or SYMM_HOST_SLICE_BYTES;
 * native: ranks would run different collective kernels),
 * SYMM_ERR_NO_MEMORY, SYMM_ERR_PROTOCOL (malformed store reply),
 * SYMM_ERR_SYSTEM (sockets, the store's port, the fd server's name in use),
 * SYMM_ERR_BACKEND (GPU driver failures).  A failure of the backend's
 * setup on one rank is returned on every rank.  On failure *comm is NULL;
 * a rank serving the store stops it then, after giving the ranks failing
 * with it max(250 ms, timeout / 10) to read their answers.
 * A rank that dies before it joins a communicator is reported too (within
 * about a second, SYMM_ERR_PEER_LOST naming it), by the store that served
 * it in an earlier communicator (rank 0's store kept serving by another of
 * its communicators, or symmem-run's), where the ranks are the launcher's:
 * rank and world size from the environment above, or config values equal
 * to them; every such communicator then has the process at the same rank.
 * The store takes a process for gone when its pid names no process any
 * more (on the store's host and PID namespace), or elsewhere when its last
 * store connection closed and one of them closed without BYE.  Not
 * covered, so waiting until the timeout: communicators whose config ranks
 * differ from the environment's (the store cannot know the missing
 * process's rank there), a process that never connected to this store,
 * and a store started afresh (rank 0's stops once none of its
 * communicators uses it).  Under symmem-run the launcher reports any of
 * its ranks' deaths (symm_store_server_mark_lost).  Without a store
 * (symm_config_t.bootstrap) the same reports travel through the
 * callbacks' notes and lost_rank where they have them (a rank that sees a
 * peer's process gone notes it for the ranks that cannot see it); a rank
 * whose NCCL init fails tells its peers there too.  Without them, and
 * under a launcher that is not symmem-run (mpirun, srun: they end the
 * whole job when a rank dies), a loss the pid watch below cannot see is a
 * timeout.
 * Waits on shared memory (the shared-memory bootstrap's rounds, the host
 * backend's signals and collectives, the fd exchange) watch each peer of
 * this host and PID namespace through a pidfd opened at init and checked
 * against the start time the peer published, so that a dead rank whose
 * pid the kernel gave to another process is still SYMM_ERR_PEER_LOST
 * (within about 20 ms), not a timeout.  Where pidfd_open is missing
 * (valgrind) the start time is compared at each look instead, which cannot
 * tell a successor started within the same clock tick (10 ms).
 * The nvshmem backend runs one NVSHMEM instance per process: a second
 * communicator over the same ranks in the same order shares it (they must
 * then allocate and free in the same order on every rank), any other is
 * refused with SYMM_ERR_UNSUPPORTED.
 * Identity: a communicator is told apart from others on its store by the
 * number of communicators that each process made before on that store
 * address, so the ranks of a communicator must make theirs on one store in
 * the same order; communicators on other stores, made before, beside or
 * from other threads at the same time, do not count.  Communicators made
 * at once from several threads of a process therefore need a store (an
 * address) each.
 * Settings that must be the same on every rank (SYMM_WORLD_SIZE and
 * SYMM_JOB_ID, or the config fields that replace them, the backend asked
 * for, SYMM_BOOTSTRAP_SHM, SYMM_ALLREDUCE_ALGO, SYMM_HOST_SLICE_BYTES)
 * are compared in init's first exchange: where any differs, every rank
 * returns SYMM_ERR_MISMATCH as soon as it and rank 0 have published
 * theirs, the message naming the setting, both values and both ranks,
 * never a timeout.  (The GPU kernels' tuning, SYMM_COLL_MAX_BLOCKS and
 * SYMM_COLL_LL_THREADS, is compared by the kernels' signatures instead.)
 */
SYMM_API symm_result_t symm_comm_init(const symm_config_t *config,
                                      symm_comm_t **comm);

/*
 * Destroys a communicator: frees every tensor still allocated on it, empties
 * the pool, closes the connections.  Local: not collective, and it does not
 * wait on peers, except on the rank that serves the store (rank 0 unless
 * symmem-run or SYMM_STORE_EXTERNAL / symm_config_t.store_server says
 * otherwise): there it waits up to min(timeout, 10 s), plus the slack of
 * that (see Timeouts above), for the other ranks to
 * close this communicator's store connections before stopping the store, so
 * that a peer still finishing a call is not cut off (it would see
 * SYMM_ERR_PEER_LOST).  The store is not stopped while another communicator
 * of this process serves through it (same address and token), nor while
 * ranks of a later one are connected already; the next communicator on that
 * address takes it over.
 * Peers that still map this rank's memory keep their mappings valid until
 * they unmap.  Tensors of the communicator that were not freed lose their
 * memory here; their handles stay valid for one thing only: every call on
 * them returns SYMM_ERR_STATE, and symm_tensor_free releases the handle
 * (returning SYMM_ERR_STATE to say the memory went with the communicator).
 * A communicator with live groups (symm_comm_split) stays alive for them:
 * destroy returns at once and its resources, the store it may serve
 * included, go when its last group is destroyed; the handle must not be
 * used after destroy either way.
 * NULL is accepted and ignored.
 */
SYMM_API void symm_comm_destroy(symm_comm_t *comm);

/*
 * Groups (MPI_Comm_split / ncclCommSplit).  symm_comm_split: the ranks of
 * `comm` that pass the same `color` make a new communicator, *newcomm,
 * ranked by `key` (ties: by rank in comm); SYMM_SPLIT_NONE joins no group
 * (*newcomm NULL, SYMM_SUCCESS), SYMM_SPLIT_BY_HOST groups the ranks of
 * each host.  Collective over comm: every rank calls it, in the same order
 * as its other calls on comm (a rank in another call gets
 * SYMM_ERR_MISMATCH).  The group meets on comm's store (no new port) with
 * comm's backend, device, timeout and signal-pad size, and has its own
 * ranks, store keys, tensors, signal pads, scratch, pool and call
 * numbering: calls of one group never see another's, overlapping groups
 * included.  Groups of a group work alike.  Destroy each with
 * symm_comm_destroy; it keeps comm alive until the last goes.
 * How each backend makes a group: host, native and cuda as symm_comm_init
 * does, over the group's ranks; nccl from comm's NCCL communicator by
 * ncclCommSplit where the loaded NCCL has it (every rank of comm takes
 * part, opting-out ones included, and no new unique id is made), else a
 * new NCCL communicator per group (ncclGetUniqueId, ncclCommInitRank;
 * SYMM_DEBUG=INFO and symmem-info say which); nvshmem makes none.
 * Errors: SYMM_ERR_INVALID_ARG (NULL comm or newcomm, a negative color
 * other than those two; the call still takes its place: the other ranks
 * get SYMM_ERR_MISMATCH naming this rank), SYMM_ERR_MISMATCH,
 * SYMM_ERR_UNSUPPORTED (nvshmem: its allocations are collective over
 * every rank of its world, which a group cannot make), the provider's
 * split failing on any rank (nccl: SYMM_ERR_BACKEND, SYMM_ERR_TIMEOUT or
 * SYMM_ERR_PEER_LOST on every rank of comm, naming the rank and why; no
 * rank keeps a group, and comm's NCCL communicator is aborted on every
 * rank, since NCCL cannot cancel a split otherwise: comm's allocations
 * and NCCL's collectives then return SYMM_ERR_STATE, its tensors' peer
 * memory went with NCCL's windows (free them), host calls such as
 * barriers go on, and its later groups get new NCCL communicators), and
 * those of symm_comm_init for making the group (every rank of a group
 * fails together).
 * symm_comm_split_2d: the usual 2-D layout from one call: `row` is this
 * rank's group of group_size consecutive ranks (tensor parallel: ranks
 * r / group_size alike), `column` the ranks at the same place in every
 * row (data parallel: r % group_size alike).  Collective, two splits;
 * SYMM_ERR_INVALID_ARG when group_size does not divide the size (both
 * NULL on any failure).
 */
#define SYMM_SPLIT_NONE (-1)
#define SYMM_SPLIT_BY_HOST (-2)
SYMM_API symm_result_t symm_comm_split(symm_comm_t *comm, int color, int key,
                                       symm_comm_t **newcomm);
SYMM_API symm_result_t symm_comm_split_2d(symm_comm_t *comm, int group_size, symm_comm_t **row,
                                          symm_comm_t **column);

/* Accessors.  Local; NULL comm gives -1 (or SYMM_BACKEND_AUTO). */
SYMM_API int symm_comm_rank(const symm_comm_t *comm);
SYMM_API int symm_comm_size(const symm_comm_t *comm);
SYMM_API int symm_comm_local_rank(const symm_comm_t *comm);
SYMM_API int symm_comm_local_size(const symm_comm_t *comm);
/* GPU ordinal used by this rank, or -1 for the host backend. */
SYMM_API int symm_comm_device(const symm_comm_t *comm);
/* The backend in use (never SYMM_BACKEND_AUTO after a successful init). */
SYMM_API symm_backend_t symm_comm_backend(const symm_comm_t *comm);
/* Timeout applied to every blocking wait, in milliseconds. */
SYMM_API int symm_comm_timeout_ms(const symm_comm_t *comm);

/*
 * Host-side barrier over all ranks.  Collective.  Returns SYMM_ERR_TIMEOUT if
 * some rank did not arrive within the timeout, SYMM_ERR_PEER_LOST if the
 * store reports a rank gone (or a rank's process on this host is gone),
 * SYMM_ERR_MISMATCH (on every rank) if some rank is in another collective
 * call of the communicator (a rendezvous or an all-reduce, say) instead of
 * a barrier (against a collective on a GPU backend: see "Collectives"),
 * SYMM_ERR_INVALID_ARG for NULL; SYMM_ERR_NO_MEMORY, SYMM_ERR_PROTOCOL and
 * SYMM_ERR_SYSTEM from the store connection below.
 */
SYMM_API symm_result_t symm_comm_barrier(symm_comm_t *comm);

/*
 * The provider's own communicator object, for interoperability: the
 * ncclComm_t for the nccl backend, so that a program mixes symmetric
 * tensors with its own calls into the provider.  Local.  Returns
 * SYMM_ERR_UNSUPPORTED (the message names the backends that have one) when
 * the backend has none, SYMM_ERR_INVALID_ARG for NULL arguments.
 */
SYMM_API symm_result_t symm_comm_backend_handle(symm_comm_t *comm, void **handle);
/* The former name of symm_comm_backend_handle, kept for existing code. */
SYMM_API symm_result_t symm_comm_native_handle(symm_comm_t *comm,
                                               void **handle);

/* Drops every pooled (freed but still mapped) allocation of this
 * communicator and releases its memory.  Local.  Returns the number of bytes
 * released through *released if non-NULL. */
SYMM_API symm_result_t symm_comm_pool_trim(symm_comm_t *comm, size_t *released);

/* ------------------------------------------------------------------------ */
/* Store: the job's key-value store                                         */
/* ------------------------------------------------------------------------ */
/*
 * Every communicator is connected to one key-value store (served by rank 0 or
 * by symmem-run).  Applications may use it for their own small exchanges;
 * keys starting with "symm/" are symmem's own: symm_store_set, _add,
 * _compare_set and _delete refuse them (SYMM_ERR_INVALID_ARG), so that an
 * application cannot corrupt a communicator's bootstrap.  Communicators on the same store
 * address (rank 0's store is shared by a process's communicators there, one
 * after another or at once; symmem-run's by all of the job's) see the same
 * keys: name yours per communicator if they must not meet.  Keys are
 * 1..255 bytes, values at most 16 MiB.  All calls are local requests to the store (not collective),
 * thread-unsafe per communicator, and bounded by the communicator timeout
 * unless a timeout is given: a call returns within that timeout plus the
 * slack of the communicator's (see Timeouts above), also when the store
 * has stopped answering.  Errors common to all: SYMM_ERR_INVALID_ARG (NULL
 * or oversized arguments), SYMM_ERR_PEER_LOST (store connection gone; for
 * waiting calls also a rank the store saw go), SYMM_ERR_TIMEOUT (the store
 * made no progress with the request within the timeout), SYMM_ERR_SYSTEM
 * (a socket error), SYMM_ERR_NO_MEMORY (no memory for the request or the
 * reply, here or in the store), SYMM_ERR_PROTOCOL (malformed reply).
 */
typedef struct symm_store symm_store_t;

/* The store of `comm` (owned by comm), or NULL if comm is NULL. */
SYMM_API symm_store_t *symm_comm_store(symm_comm_t *comm);

/* Sets key to value (replacing any previous value). */
SYMM_API symm_result_t symm_store_set(symm_store_t *store, const char *key,
                                      const void *value, size_t len);

/* Gets the value of key, waiting up to timeout_ms (negative: the
 * communicator timeout; 0: do not wait) for it to be set.  Copies at most
 * cap bytes into buf and stores the full length in *len.  SYMM_ERR_TIMEOUT if
 * the key did not appear in time; SYMM_ERR_NO_MEMORY if cap < the length
 * (nothing copied, *len set). */
SYMM_API symm_result_t symm_store_get(symm_store_t *store, const char *key,
                                      void *buf, size_t cap, size_t *len,
                                      int timeout_ms);

/* Atomically adds delta to the integer stored at key (absent: 0) and returns
 * the new value in *result (may be NULL).  SYMM_ERR_INVALID_ARG if the key
 * holds a value that is not an integer counter. */
SYMM_API symm_result_t symm_store_add(symm_store_t *store, const char *key,
                                      int64_t delta, int64_t *result);

/* Atomically: if the value at key equals `expected` (expected_len 0 with
 * expected NULL means "key absent"), replace it with `desired`.  The value
 * after the operation is copied to buf (cap, *len as in symm_store_get);
 * buf may be NULL with cap 0.  Returns SYMM_SUCCESS whether or not the swap
 * happened; compare the result with `desired` to know. */
SYMM_API symm_result_t symm_store_compare_set(
    symm_store_t *store, const char *key, const void *expected,
    size_t expected_len, const void *desired, size_t desired_len, void *buf,
    size_t cap, size_t *len);

/* Waits until every one of the n keys exists, up to timeout_ms (negative: the
 * communicator timeout).  SYMM_ERR_TIMEOUT otherwise. */
SYMM_API symm_result_t symm_store_wait(symm_store_t *store,
                                       const char *const *keys, size_t n,
                                       int timeout_ms);

/* Deletes key.  SYMM_ERR_NOT_FOUND if it did not exist. */
SYMM_API symm_result_t symm_store_delete(symm_store_t *store, const char *key);

/* Sets *present to 1 if all n keys exist now, else 0.  Does not wait. */
SYMM_API symm_result_t symm_store_check(symm_store_t *store,
                                        const char *const *keys, size_t n,
                                        int *present);

/* What a store server has served since it started, counted by the server:
 * connections that proved the token, requests (every message a client
 * sent, the handshake's and this query's included) and their bytes
 * (headers included), and the bytes of its replies sent.  Over the store
 * bootstrap (SYMM_BOOTSTRAP_SHM=0, or ranks on several hosts) a bootstrap
 * all-gather of N ranks costs about 2N requests and N replies each
 * carrying all N contributions; over shared memory none. */
typedef struct symm_store_stats {
  uint64_t connections;
  uint64_t requests;
  uint64_t request_bytes;
  uint64_t reply_bytes;
} symm_store_stats_t;

/* Asks the store's server for its counters (one request, counted in
 * *stats; its reply not yet).  Local.  Errors as for every store call;
 * SYMM_ERR_INVALID_ARG for NULL arguments. */
SYMM_API symm_result_t symm_store_stats(symm_store_t *store, symm_store_stats_t *stats);

/*
 * Serving the store in a launcher.  A process that starts a job's ranks
 * (as symmem-run does) may serve their store itself: it starts a server,
 * passes its address and token to the ranks (SYMM_STORE_ADDR=host:port,
 * SYMM_TOKEN, and SYMM_STORE_EXTERNAL=1 so that rank 0 serves none), and
 * tells it when a rank process dies.  The server is a thread of the
 * calling process; these calls are thread-safe.
 */
typedef struct symm_store_server symm_store_server_t;

/* Starts a server thread listening on bind_host:port (port 0: any free
 * port; bind_host NULL or "": 127.0.0.1; "[v6]" accepted).  Every
 * connection must prove that it holds `token`, and the server proves it
 * holds it to each client, by a challenge-response keyed by the token
 * that never sends it (a client refuses a server that cannot prove it);
 * NULL or "" is the empty token, which any process can prove (logged at
 * WARN), and clients with another token refuse such a server.
 * A connection that has not proved the token within SYMM_STORE_HANDSHAKE_MS
 * of connecting (counted from when the kernel set it up, which may be long
 * before the server accepts it) is closed.  At most 64 connections that
 * have not proved it are held: past that, the one accepted first is
 * closed once it has had 200 ms, so that connections which never prove
 * the token (a flood of thousands) cannot keep a job's ranks out.  Starting
 * a server raises the process's soft RLIMIT_NOFILE to its hard limit.
 * A connection that does not prove the token is refused (a rank with a
 * stale token fails at once with SYMM_ERR_PERMISSION) and says nothing
 * about the job's ranks: only a connection that proved the token can end
 * other ranks' waits (by closing without BYE, or its process going), so no
 * process without the token, of any user on any host, can end a job's
 * init by claiming its ranks.  Refusals are logged one by one up to 5 in
 * 10 s, then counted in one line; each costs the server the same small
 * work however many sockets the host has.
 * Errors: SYMM_ERR_INVALID_ARG (NULL server, port out of range,
 * token over 1024 bytes), SYMM_ERR_SYSTEM (the address cannot be resolved
 * or bound, no thread), SYMM_ERR_NO_MEMORY. */
SYMM_API symm_result_t symm_store_server_start(const char *bind_host, int port,
                                               const char *token,
                                               symm_store_server_t **server);
/* The port actually bound; -1 for NULL. */
SYMM_API int symm_store_server_port(const symm_store_server_t *server);
/* Records rank as lost in every communicator the store serves: its
 * pending and later blocking requests fail with SYMM_ERR_PEER_LOST naming
 * it, instead of waiting out their timeout.  A rank that connects again
 * is no longer lost.  NULL server or rank < 0: nothing.  The server also
 * finds lost ranks itself: a rank connection that closes without BYE, and
 * a rank's process that is gone (see symm_comm_init). */
SYMM_API void symm_store_server_mark_lost(symm_store_server_t *server, int rank);
/* A launcher stopping the process `pid` on purpose (symmem-run after a
 * rank failed) says so first: when that process's connections close
 * without BYE, the loss is recorded as any (its peers' waits fail at once
 * with SYMM_ERR_PEER_LOST) but logged at INFO instead of as a warning.
 * NULL server or pid <= 0: nothing.  Thread-safe. */
SYMM_API void symm_store_server_expect_gone(symm_store_server_t *server, int32_t pid);
/* The server's counters now (see symm_store_stats).  Thread-safe; NULL
 * server or stats: nothing. */
SYMM_API void symm_store_server_stats(const symm_store_server_t *server,
                                      symm_store_stats_t *stats);
/* Stops the thread, closes every connection, frees everything.  NULL ok. */
SYMM_API void symm_store_server_stop(symm_store_server_t *server);

/* ------------------------------------------------------------------------ */
/* Symmetric tensors                                                        */
/* ------------------------------------------------------------------------ */
typedef struct symm_tensor symm_tensor_t;
/* A CUDA stream (cudaStream_t) for GPU backends; NULL for the host backend. */
typedef void *symm_stream_t;

/*
 * A view: a pointer plus shape, strides (in elements) and dtype.  Views do
 * not own memory; they stay valid while their tensor is alive.  `rank` is the
 * rank whose memory `data` points to (-1 for a contiguous view spanning all
 * ranks); `device` is the GPU ordinal, -1 for CPU memory.
 */
typedef struct symm_view {
  void *data;
  int ndim;
  int64_t sizes[SYMM_MAX_DIMS];
  int64_t strides[SYMM_MAX_DIMS];
  symm_dtype_t dtype;
  int device;
  int rank;
} symm_view_t;

/*
 * Allocates a symmetric tensor of shape sizes[0..ndim) and dtype, row-major.
 * Local: no communication, on the host, native and cuda backends; the tensor
 * becomes accessible to peers with symm_tensor_rendezvous.  Collective on
 * a backend whose provider allocates collectively or registers each
 * allocation (NVSHMEM's symmetric heap, NCCL's windows): every rank calls
 * it with the same shape and dtype in the same order, and ranks that do
 * not all get SYMM_ERR_MISMATCH (never a hang, nothing allocated).  The allocation is rounded up to the backend's
 * granularity; a zeroed signal pad (symm_tensor_signal_pad) precedes the data
 * in the same allocation.  The data itself is not initialised, except that
 * the host backend returns zeroed memory for fresh (non-pooled) allocations.
 * The memory is backed when this returns (host: the memfd is allocated in
 * full, about 0.3 ms per MiB; a size the machine cannot back is
 * SYMM_ERR_NO_MEMORY here, not a SIGBUS at first touch; the memfd is then
 * sealed, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL, so that nobody, the
 * owner included, can cut short the memory that peers map).  The host
 * backend also refuses, with SYMM_ERR_NO_MEMORY naming the limit, a size
 * beyond the room the process's memory cgroups leave (the least over its
 * cgroup and their ancestors of v2 memory.max - memory.current, or v1
 * memory.limit_in_bytes - memory.usage_in_bytes, inactive file cache
 * counted as free) and a size beyond RLIMIT_FSIZE (ulimit -f), which
 * memfds count against: an error here, never the OOM killer or SIGXFSZ.
 * Returns SYMM_ERR_INVALID_ARG (NULL, ndim < 1 or > SYMM_MAX_DIMS, a size
 * <= 0, bad dtype, total size overflowing), SYMM_ERR_NO_MEMORY,
 * SYMM_ERR_SYSTEM / SYMM_ERR_BACKEND for failures below; where it is
 * collective also SYMM_ERR_MISMATCH, SYMM_ERR_TIMEOUT, SYMM_ERR_PEER_LOST
 * (nccl: a failed, timed-out or abandoned window registration aborts the
 * NCCL communicator; later calls needing it return SYMM_ERR_STATE), and
 * SYMM_ERR_UNSUPPORTED with nccl when the NCCL communicator has no
 * symmetric-memory support (ncclCommWindowRegister gives no window).
 */
SYMM_API symm_result_t symm_tensor_alloc(symm_comm_t *comm,
                                         const int64_t *sizes, int ndim,
                                         symm_dtype_t dtype,
                                         symm_tensor_t **tensor);

/*
 * Memory the caller already has, described for symm_tensor_register.
 * Always start from SYMM_USER_MEM_INIT (size and version, as
 * symm_config_t), then set what the backend needs:
 *  - ptr: where the tensor's data starts in this process.
 *  - host backend: fd, a memfd (memfd_create) or a regular file open for
 *    reading and writing, and fd_offset, the file offset that ptr maps;
 *    [ptr, ptr + bytes) must lie in one MAP_SHARED mapping of that file.
 *    symmem duplicates fd (the caller may close its own) and peers map
 *    the file from it.
 *  - GPU backends: ptr is device memory of the communicator's device (fd
 *    stays -1): native, inside a cuMemCreate allocation mapped with
 *    cuMemMap (the physical allocation is shared, so it must have been
 *    created with a shareable handle type the communicator uses, e.g.
 *    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR); cuda, inside a cuMemAlloc
 *    allocation (CUDA IPC); nccl, inside a cuMemCreate mapping of this
 *    GPU (ncclMemAlloc's or the caller's own), ptr on a 4096-byte
 *    boundary of its allocation and the window's whole 4 KiB pages inside
 *    it (NCCL registers the window collectively: ncclCommWindowRegister);
 *    nvshmem, ptr at the start of a cuMemCreate mapping of this GPU
 *    created with a shareable handle type, which
 *    nvshmemx_buffer_register_symmetric registers whole (NVSHMEM's
 *    dynamic VMM heap, i.e. NVSHMEM_DISABLE_CUDA_VMM unset, and a
 *    mapping size that is a multiple of NVSHMEM_CUMEM_GRANULARITY, 512 MiB
 *    unless set, the same on every rank: another size is refused with
 *    SYMM_ERR_INVALID_ARG before NVSHMEM sees it, since NVSHMEM 3.4.5
 *    faults the context on it); SYMM_NVSHMEM_REGISTER=off refuses it
 *    (SYMM_ERR_UNSUPPORTED).
 */
#define SYMM_USER_MEM_VERSION 1
typedef struct symm_user_mem {
  size_t size;        /* sizeof(symm_user_mem_t) */
  int version;        /* SYMM_USER_MEM_VERSION */
  void *ptr;          /* the data in this process */
  int fd;             /* host: memfd or file mapped MAP_SHARED at ptr; else -1 */
  uint64_t fd_offset; /* host: the file offset ptr maps */
} symm_user_mem_t;
#define SYMM_USER_MEM_INIT {sizeof(symm_user_mem_t), SYMM_USER_MEM_VERSION, NULL, -1, 0}

/*
 * Makes memory the caller already has symmetric: a tensor of shape
 * sizes[0..ndim) and dtype whose data is the caller's memory `mem`
 * (symm_user_mem_t above), row-major from mem->ptr.  Then, as for an
 * allocated tensor, symm_tensor_rendezvous maps the peers, and every view
 * (local, remote; not the contiguous one), signal, one-sided put and
 * collective works on it, zero copy included.  The signal pad lives in a
 * small allocation of the library's beside it (symm_tensor_signal_pad;
 * the smallest allocation the backend makes), zeroed.
 * Collective on every backend: every rank calls it with the same shape and
 * dtype, in the same order; ranks that differ all get SYMM_ERR_MISMATCH.
 * A rank that refuses its own arguments makes every rank fail: that rank
 * with its own error, its peers with the same code and a message naming
 * it; nothing stays registered anywhere.
 * The caller keeps ownership: symm_tensor_free of a registered tensor
 * unmaps the peers' memory and frees the library's pad and handles, never
 * the caller's memory, which stays as it was (never pooled).  Freeing or
 * unmapping the memory while it is registered is undefined (peers may
 * still write to it); the host backend warns at symm_tensor_free when it
 * finds the memory gone, and shrinking the file under a peer's mapping
 * makes that peer take SIGBUS when it touches the lost pages (seal a memfd
 * with F_SEAL_SHRINK to rule that out).
 * Errors (on every rank alike): SYMM_ERR_INVALID_ARG (NULL comm, mem, ptr
 * or tensor; a descriptor of another size or version; a bad shape or
 * dtype; memory that overlaps a live tensor's, a registered one's
 * included, the message naming it: the same range registered twice is
 * refused so; host: an fd that is not a memfd or regular file open for
 * reading and writing, a file shorter than fd_offset + the bytes, ptr
 * not mapped from fd at fd_offset, private memory, which cannot be shared
 * ("private anonymous memory (malloc, MAP_PRIVATE | MAP_ANONYMOUS) cannot
 * be shared"; a MAP_PRIVATE file mapping likewise); native: memory not of
 * a VMM allocation, of another device, or whose allocation cannot be
 * exported as the communicator shares memory; cuda: memory not of
 * cuMemAlloc; nccl: memory not of a VMM mapping of this GPU, a window
 * off a 4096-byte boundary of its allocation or running past it; nvshmem:
 * memory not of a VMM mapping of this GPU, ptr not its mapping's start,
 * no shareable handle type, or what NVSHMEM itself refuses on every rank
 * (no VMM heap, a size off its granularity) -- the refusals a provider
 * would make inside its collective call are made before it, so no rank
 * is left waiting there), SYMM_ERR_UNSUPPORTED (a backend that cannot register
 * memory, the message naming those that can; nvshmem: SYMM_NVSHMEM_REGISTER
 * is off, or the loaded NVSHMEM has no nvshmemx_buffer_register_symmetric,
 * the message naming its version), SYMM_ERR_MISMATCH, SYMM_ERR_TIMEOUT, SYMM_ERR_PEER_LOST,
 * SYMM_ERR_NO_MEMORY, SYMM_ERR_SYSTEM / SYMM_ERR_BACKEND from below.
 */
SYMM_API symm_result_t symm_tensor_register(symm_comm_t *comm, const symm_user_mem_t *mem,
                                            const int64_t *sizes, int ndim, symm_dtype_t dtype,
                                            symm_tensor_t **tensor);

/*
 * Makes every rank's buffer of this tensor accessible from every other rank.
 * Collective: every rank calls it for its own tensor, in the same order.  The
 * ranks first compare shapes and dtypes; if any rank differs, every rank gets
 * SYMM_ERR_MISMATCH (message names the first differing rank) and nothing is
 * mapped.  Idempotent: a second call on a rendezvoused tensor returns
 * SYMM_SUCCESS at once and is *not* collective.  Also SYMM_ERR_TIMEOUT /
 * SYMM_ERR_PEER_LOST when a peer does not arrive (or its process or fd
 * server is gone while this rank maps its memory; the whole call, exchange,
 * mapping and the agreement on it, keeps to one timeout), SYMM_ERR_INVALID_ARG for NULL, SYMM_ERR_NO_MEMORY, and,
 * from mapping peers' memory (host and native): SYMM_ERR_SYSTEM (sockets,
 * mmap), SYMM_ERR_PERMISSION (a peer's fd server runs as another user, or
 * refused this one), SYMM_ERR_NOT_FOUND (a peer no longer offers the memory
 * it announced), SYMM_ERR_PROTOCOL (malformed fd-exchange reply; host: a
 * peer's memory that is not a memfd sealed against shrinking, or smaller
 * than announced, or an announced layout whose data and signal-pad offsets
 * do not fit it or leave less data than this rank's: the ranks that refuse
 * it name the peer, the peer itself names a rank that refused it);
 * SYMM_ERR_BACKEND for GPU driver
 * failures (cuda: a peer's CUDA IPC handle that does not open, named with
 * the rank and the driver's error); SYMM_ERR_UNSUPPORTED where a peer's GPU
 * cannot be reached (native, cuda: no peer path; cuda: a peer in this same
 * process).  A mapping failure on one rank is returned on every rank.
 * A rank that cannot take part (its backend cannot export the memory, or
 * it is out of memory) still meets its peers' exchange: every rank returns
 * at once, that rank with its own error, its peers with the same code and
 * a message naming it ("rank 1 could not take part (out of memory): ...").
 *
 * When peers are mapped.  With SYMM_MAP_PEERS=on_use (the default) on a
 * backend whose mapping is local and cheap (host), the rendezvous
 * exchanges and checks shapes but maps no peer: this rank maps a peer's
 * memory the first time it uses it (symm_tensor_remote_view,
 * symm_tensor_signal_pad, symm_put / symm_get, the signals), and every
 * peer at once for symm_tensor_peer_ptrs, the device arrays, the
 * contiguous view, a signal barrier, and a collective whose buffer lies
 * in the tensor; so a rank of hundreds that uses a few peers maps a few.
 * The mapping errors listed above then come from that first use, on this
 * rank only, and a peer whose process is gone by then is
 * SYMM_ERR_PEER_LOST there.  With SYMM_MAP_PEERS=at_rendezvous, and on
 * the other backends, every peer is mapped here, as described above.
 */
SYMM_API symm_result_t symm_tensor_rendezvous(symm_tensor_t *tensor);

/* 1 if the tensor has been rendezvoused, 0 otherwise (or NULL). */
SYMM_API int symm_tensor_is_rendezvoused(const symm_tensor_t *tensor);

/* Local accessors; NULL tensor gives NULL / 0 / -1. */
SYMM_API void *symm_tensor_data(const symm_tensor_t *tensor);
SYMM_API int symm_tensor_ndim(const symm_tensor_t *tensor);
SYMM_API const int64_t *symm_tensor_sizes(const symm_tensor_t *tensor);
SYMM_API const int64_t *symm_tensor_strides(const symm_tensor_t *tensor);
SYMM_API symm_dtype_t symm_tensor_dtype(const symm_tensor_t *tensor);
SYMM_API size_t symm_tensor_numel(const symm_tensor_t *tensor);
/* Bytes of data (numel * element size, before rounding). */
SYMM_API size_t symm_tensor_nbytes(const symm_tensor_t *tensor);
SYMM_API symm_comm_t *symm_tensor_comm(const symm_tensor_t *tensor);

/* The local tensor as a view.  Local.  SYMM_ERR_INVALID_ARG for NULL. */
SYMM_API symm_result_t symm_tensor_local_view(const symm_tensor_t *tensor,
                                              symm_view_t *view);

/*
 * View of rank `rank`'s buffer, with the local shape and strides, directly
 * loadable/storable from this process (or from kernels on this rank's GPU).
 * Local; a peer's view requires a rendezvoused tensor, this rank's own is
 * its local view at any time.  Returns SYMM_ERR_INVALID_ARG (NULL, rank
 * out of [0, world_size)), SYMM_ERR_STATE (a peer's, not rendezvoused),
 * SYMM_ERR_UNSUPPORTED (peer not load/store reachable with this backend;
 * with nccl: NCCL maps no pointer to it, or the NCCL found predates 2.29.2,
 * the first with ncclGetPeerDevicePointer, which the message names).
 * Where peers are mapped on use (symm_tensor_rendezvous), the first view
 * of a peer maps it, and may also return what the rendezvous's mapping
 * returns: SYMM_ERR_PEER_LOST for a peer whose process is gone,
 * SYMM_ERR_PROTOCOL, SYMM_ERR_SYSTEM, SYMM_ERR_NO_MEMORY ...  Thread-safe
 * against other views of the same tensor.
 */
SYMM_API symm_result_t symm_tensor_remote_view(const symm_tensor_t *tensor,
                                               int rank, symm_view_t *view);

/*
 * Host array of world_size data pointers, index r = rank r's buffer (entry
 * for this rank = symm_tensor_data).  Owned by the tensor.  Local; requires a
 * rendezvoused tensor (SYMM_ERR_STATE otherwise).  Maps every peer not
 * mapped yet (symm_tensor_rendezvous), with the errors of a first view
 * (SYMM_ERR_PEER_LOST for a peer that is gone ...).
 */
SYMM_API symm_result_t symm_tensor_peer_ptrs(const symm_tensor_t *tensor,
                                             void *const **ptrs);

/*
 * The same world_size data pointers as a device array, for kernels that
 * take a `void **` (native backend: device memory of this rank's GPU).
 * Owned by the tensor: made on the first call after a rendezvous, kept
 * until the tensor is freed or its peers are mapped anew.  Local; requires a
 * rendezvoused tensor (SYMM_ERR_STATE).  SYMM_ERR_UNSUPPORTED for backends
 * whose memory the CPU reaches directly (host: use symm_tensor_peer_ptrs);
 * SYMM_ERR_BACKEND / SYMM_ERR_NO_MEMORY when the copy fails.
 */
SYMM_API symm_result_t symm_tensor_peer_ptrs_device(symm_tensor_t *tensor,
                                                    void *const **dev_ptrs);

/*
 * The same for the signal pads: a device array of world_size pointers,
 * index r = rank r's signal pad as this rank maps it (NULL for a rank not
 * load/store reachable), for kernels that signal through the pads
 * (PyTorch symm_mem's signal_pad_ptrs_dev).  Owned by the tensor, made on
 * the first call after a rendezvous, kept as symm_tensor_peer_ptrs_device's.
 * Local; the same errors as symm_tensor_peer_ptrs_device (host backend:
 * SYMM_ERR_UNSUPPORTED, use symm_tensor_signal_pad).
 */
SYMM_API symm_result_t symm_tensor_signal_pad_ptrs_device(symm_tensor_t *tensor,
                                                          void *const **dev_ptrs);

/*
 * Signal pad of rank `rank` (this process's mapping of it):
 * symm_comm_signal_pad_bytes(comm) bytes, zeroed at allocation, in front of
 * the data (at a lower address of the same symmetric allocation).
 * Local; remote ranks need a rendezvoused tensor (SYMM_ERR_STATE); the
 * first use of a peer maps it, with the errors of a first view
 * (symm_tensor_remote_view).
 */
SYMM_API symm_result_t symm_tensor_signal_pad(const symm_tensor_t *tensor,
                                              int rank, void **pad);
/* Bytes of every signal pad of comm's tensors (symm_config_t's
 * signal_pad_bytes, else SYMM_SIGNAL_PAD_BYTES): the same on every rank;
 * 0 for NULL.  Local. */
SYMM_API size_t symm_comm_signal_pad_bytes(const symm_comm_t *comm);
/* The smallest and default pad (4096 bytes), the unit of every pad's size. */
SYMM_API size_t symm_signal_pad_bytes(void);

/*
 * Stream-ordered signals over a tensor's signal pads: the slots and the
 * self-resetting semantics of include/symmem_device.cuh (slot = channel *
 * world_size + sender; a put waits while the receiver has not consumed the
 * previous signal on that slot; a wait consumes the signal, so the pads are
 * all zero again after every balanced put/wait pair and the same sequence
 * can be replayed, CUDA graphs included).
 *  - symm_signal_put: signals rank `peer` on `channel`, after, and
 *    releasing (system scope), everything this rank wrote before it on
 *    `stream` (GPU) or in program order (host).
 *  - symm_signal_wait: waits for rank `peer`'s signal on `channel` and
 *    consumes it; later work on `stream` (or later code) sees everything
 *    the peer wrote before its put (acquire, system scope).
 *  - symm_signal_barrier: put to every peer, then wait for every peer, on
 *    `channel`.  Collective over the tensor's communicator.
 * Put and wait are not collective: they pair up between two ranks.  Every
 * call is bounded by the communicator's timeout (SYMM_TIMEOUT_MS), one
 * deadline for all its waits: a barrier's puts and waits, one per peer,
 * share it.
 * GPU backends (native): one small kernel on `stream` (a cudaStream_t; NULL
 * is the legacy default stream), no host synchronisation, capturable in
 * CUDA graphs; a wait that times out is reported later by
 * symm_comm_check_async_error as SYMM_ERR_TIMEOUT naming the peer, and the
 * tensor's pads should then be treated as unusable.  Host backend: runs at
 * once (stream must be NULL), polling with backoff so that oversubscribed
 * ranks still progress, and returns SYMM_ERR_TIMEOUT itself.
 * Errors: SYMM_ERR_INVALID_ARG (NULL tensor; peer out of range or this
 * rank; channel outside [0, symm_signal_channels); a stream on the host
 * backend), SYMM_ERR_STATE (tensor not rendezvoused), SYMM_ERR_UNSUPPORTED
 * (backend without stream-ordered signals, or a native build without CUDA
 * kernels), SYMM_ERR_TIMEOUT / SYMM_ERR_PEER_LOST (host backend: the peer
 * never signalled, or its process is gone), SYMM_ERR_BACKEND (the launch
 * failed).
 */
SYMM_API symm_result_t symm_signal_put(symm_tensor_t *tensor, int peer, int channel,
                                       symm_stream_t stream);
SYMM_API symm_result_t symm_signal_wait(symm_tensor_t *tensor, int peer, int channel,
                                        symm_stream_t stream);
SYMM_API symm_result_t symm_signal_barrier(symm_tensor_t *tensor, int channel,
                                           symm_stream_t stream);
/* Channels of a tensor's pads: symm_comm_signal_pad_bytes() / 4 /
 * world_size; -1 for a NULL tensor. */
SYMM_API int symm_signal_channels(const symm_tensor_t *tensor);

/*
 * One-sided puts and gets from the host, stream-ordered: no kernel of the
 * caller's, no peer taking part.
 *  - symm_put: `bytes` from src (this process's memory: host memory, or
 *    device memory on GPU backends) to rank `peer`'s data of `tensor` at
 *    byte dst_offset.
 *  - symm_get: `bytes` of rank `peer`'s data of `tensor` from byte
 *    src_offset into dst.
 *  - symm_put_signal: symm_put, then symm_signal_put to `peer` on
 *    `channel`: the peer's symm_signal_wait on that channel returns only
 *    once the data has landed (the signal follows the copy on the stream;
 *    host backend: the copy, then the signal's release store).
 *  - symm_put_batch: n puts {peer, dst_offset, src, bytes} on one stream,
 *    in order; all are checked before the first is issued.
 * GPU backends copy with the copy engine (cuMemcpyAsync on `stream`, a
 * cudaStream_t; NULL: the legacy default stream), leaving the SMs to
 * kernels, and can be captured in a CUDA graph; the host backend copies at
 * once (stream must be NULL).  peer may be this rank (a local copy).  What
 * the peer reads without a signal or barrier in between is unordered with
 * the copy, as with any remote write.
 * Errors: SYMM_ERR_INVALID_ARG (NULL tensor, src or dst with bytes > 0;
 * peer out of range; the range [offset, offset + bytes) not inside the
 * tensor's nbytes, both named; channel out of range; a stream on the
 * host backend), SYMM_ERR_STATE (tensor not rendezvoused),
 * SYMM_ERR_UNSUPPORTED (the peer is not load/store reachable and the
 * backend has no put of its own: the message names the peer; where the
 * backend has one, puts, gets and signals to such peers, barriers too,
 * go through the provider's own transfers),
 * SYMM_ERR_BACKEND (the copy could not be issued).  Local.
 */
SYMM_API symm_result_t symm_put(symm_tensor_t *tensor, int peer, size_t dst_offset,
                                const void *src, size_t bytes, symm_stream_t stream);
SYMM_API symm_result_t symm_get(symm_tensor_t *tensor, int peer, size_t src_offset, void *dst,
                                size_t bytes, symm_stream_t stream);
SYMM_API symm_result_t symm_put_signal(symm_tensor_t *tensor, int peer, size_t dst_offset,
                                       const void *src, size_t bytes, int channel,
                                       symm_stream_t stream);
typedef struct symm_put_desc {
  int peer;
  size_t dst_offset;
  const void *src;
  size_t bytes;
} symm_put_desc_t;
SYMM_API symm_result_t symm_put_batch(symm_tensor_t *tensor, const symm_put_desc_t *puts,
                                      size_t n, symm_stream_t stream);

/*
 * Stream-ordered 32-bit writes (PyTorch symm_mem's stream_write_value32_
 * and memset32_), for flags and signal words of one's own protocols.
 * symm_write_value32 writes `value` to the 32-bit word at ptr after the
 * work enqueued on `stream` before it, with what that work wrote made
 * visible first (a flag that a peer polls after the data); symm_memset32
 * writes it to `count` consecutive words (count 0: nothing).  ptr: 4-byte
 * aligned memory of the communicator's kind that this process can write
 * (a tensor's data or signal pad, this rank's or a peer's mapping, or
 * memory of one's own).
 * GPU backends: cuStreamWriteValue32 (one word) / cuMemsetD32Async on
 * `stream` (a cudaStream_t; NULL: the legacy default stream); capturable
 * in a CUDA graph.  Host backend: at once on the calling thread, a release
 * fence then the stores; `stream` must be NULL.
 * Local.  Errors: SYMM_ERR_INVALID_ARG (NULL comm or ptr, ptr not 4-byte
 * aligned, count * 4 overflows, a stream on the host backend),
 * SYMM_ERR_BACKEND (the driver refused: memory of another device, not
 * device memory ...; the message names the call).
 */
SYMM_API symm_result_t symm_write_value32(symm_comm_t *comm, void *ptr, uint32_t value,
                                          symm_stream_t stream);
SYMM_API symm_result_t symm_memset32(symm_comm_t *comm, void *ptr, uint32_t value, size_t count,
                                     symm_stream_t stream);

/*
 * All ranks' buffers mapped back to back in one virtual range, viewed as
 * shape [world_size, sizes...].  Rank r's buffer starts at
 * data + r * strides[0] elements; strides[0] equals numel when the tensor's
 * byte size is a multiple of the backend granularity, and is larger (the
 * rounded size) otherwise.  The mapping is made on the first call and kept
 * until the tensor is freed.  Local; requires a rendezvoused tensor.
 * Returns SYMM_ERR_STATE (not rendezvoused), SYMM_ERR_UNSUPPORTED
 * ("contiguous view needs the native or host backend"), SYMM_ERR_SYSTEM /
 * SYMM_ERR_BACKEND when mapping fails, SYMM_ERR_INVALID_ARG (NULL; or ndim ==
 * SYMM_MAX_DIMS, leaving no room for the extra dimension).
 */
SYMM_API symm_result_t symm_tensor_contiguous_view(symm_tensor_t *tensor,
                                                   symm_view_t *view);

/*
 * Finds the live symmetric tensor containing ptr (any of the tensor's bytes
 * in the local data, in a peer mapping, or in a contiguous view; the
 * rounding to the backend's granularity behind them is not the tensor's).  Thread-safe, O(log n).
 * *tensor receives the tensor; *rank (may be NULL) the rank whose memory ptr
 * is in, and *offset (may be NULL) the byte offset from the start of that
 * rank's data; for a pointer into a contiguous view, *rank is -1 and
 * *offset counts from the start of the view (rank r's data starts at
 * r * strides[0] elements of the view).  SYMM_ERR_NOT_FOUND if no live
 * tensor contains ptr, SYMM_ERR_INVALID_ARG for NULL arguments.
 */
SYMM_API symm_result_t symm_tensor_lookup(const void *ptr,
                                          symm_tensor_t **tensor, int *rank,
                                          size_t *offset);

/*
 * Checks whether [ptr, ptr + nbytes) is usable symmetric memory of `comm`:
 * returns SYMM_SUCCESS, or the reason as the result and in symm_last_error():
 * SYMM_ERR_INVALID_ARG (NULL, nbytes 0), SYMM_ERR_NOT_FOUND (not inside any
 * tensor's bytes: the rounding behind them is not), SYMM_ERR_MISMATCH (belongs
 * to another communicator), SYMM_ERR_INVALID_ARG (the range runs past the
 * end of the tensor's bytes; in a contiguous view, past the last rank's),
 * SYMM_ERR_STATE (tensor not yet rendezvoused), plus backend-specific
 * reasons (native: memory not VMM, wrong device ...).  Local, thread-safe.
 */
SYMM_API symm_result_t symm_validate(symm_comm_t *comm, const void *ptr,
                                     size_t nbytes);

/*
 * Frees a tensor.  Local, never collective, on every backend whose
 * provider frees locally (host, native, cuda): on host and native, peers
 * that mapped this buffer keep valid mappings of it until they free their
 * own tensor; on cuda the driver asks that every peer has closed its IPC
 * handle (freed its tensor) before the owner's memory is really freed
 * (pool trim, destroy, or a free the pool cannot keep), so peers must be
 * done with it by then.  The memory
 * goes to the communicator's pool (limit SYMM_POOL_BYTES) when it fits,
 * where a later allocation of the same rounded size reuses it, mappings
 * included; its signal pad is zeroed again when it is handed out.  As with
 * any memory, GPU work on any rank that still reads or writes this tensor
 * (its data or its signal pad) must have completed before the free: pooled
 * memory may be given to the next tensor at once.  NULL is accepted and
 * ignored (SYMM_SUCCESS).
 *
 * On a backend whose provider frees collectively (its allocations are
 * collective too: symm_tensor_alloc is then called by every rank with the
 * same shape, in the same order), every rank frees the same tensor in the
 * same order; a rank that frees another one gets SYMM_ERR_MISMATCH, as do
 * its peers, never a hang, and nothing is freed (free the tensors again in
 * the order they were allocated).  symm_comm_pool_trim and
 * symm_comm_destroy are collective there too.
 *
 * Returns SYMM_SUCCESS, or on a collective-free backend SYMM_ERR_MISMATCH,
 * SYMM_ERR_TIMEOUT or SYMM_ERR_PEER_LOST (the tensor stays valid);
 * SYMM_ERR_STATE for a tensor whose communicator was destroyed first (its
 * handle is released all the same).
 */
SYMM_API symm_result_t symm_tensor_free(symm_tensor_t *tensor);


/* ------------------------------------------------------------------------ */
/* Collectives                                                              */
/* ------------------------------------------------------------------------ */
/*
 * Collectives built on direct loads and stores into peers' symmetric memory.
 * Common contract for all of them:
 *  - Collective over every rank of `comm`, in the same order, with the same
 *    count, dtype, op and root on every rank.  Ranks that disagree get
 *    SYMM_ERR_MISMATCH (host backend: from the call; GPU backends: from
 *    symm_comm_check_async_error, since the call only enqueues work).
 *  - Buffers are memory of this rank (CPU memory for the host backend, memory
 *    of symm_comm_device for GPU backends).  When every rank's buffer lies
 *    inside the same rendezvoused tensor of `comm` at the same offset, the
 *    operation uses the peers' mappings of it (zero copy: host backend, all
 *    operations; native backend, the two-shot all-reduce's output); any
 *    other buffer is staged through the communicator's scratch tensor.
 *    Ranks may mix the two: they agree at run time, and fall back to
 *    staging.  The scratch grows (collectively) on the
 *    first call that needs more than it holds; reserve it up front with
 *    symm_comm_reserve_scratch (sized by symm_comm_scratch_bytes) before
 *    capturing calls in a CUDA graph.
 *    Each rank decides to grow from its own arguments, so on GPU backends a
 *    call whose count or dtype differs between ranks and makes only some
 *    of them grow gives SYMM_ERR_TIMEOUT (after SYMM_TIMEOUT_MS, the
 *    message says why) instead of SYMM_ERR_MISMATCH, unless the ranks that
 *    did not grow make a host call first (then it is a mismatch); with the
 *    scratch reserved it is a mismatch.  Native needs 28 MiB for its
 *    low-latency areas (LL and LL128 need nothing more) plus two staging
 *    halves, each
 *    of world x the buffer (one-shot), about 2 x the buffer (two-shot),
 *    world x count elements (reduce-scatter, all-to-all) or count elements
 *    (all-gather, broadcast).
 *    sendbuf == recvbuf is allowed (in place) where the shapes agree.
 *  - `stream`: the cudaStream_t to enqueue on for GPU backends (NULL: the
 *    legacy default stream); calls are stream-ordered, do not synchronise
 *    the host and do not allocate, so they can be captured in CUDA graphs
 *    once the scratch is reserved.  Must be NULL for the host backend, where
 *    every call is synchronous: the calling thread waits for its peers,
 *    spinning with `pause` while this host's ranks have a CPU each among
 *    the CPUs they run on together (else yielding at once), then backing
 *    off; a wait ends at the call's deadline (SYMM_ERR_TIMEOUT) or when
 *    the peer's process is gone (SYMM_ERR_PEER_LOST), and the call then
 *    fails on every rank, never succeeding on some and failing on others.  The collectives and stream-ordered signals
 *    of one communicator share its scratch and a device-side sequence: on
 *    GPUs, two of them must never run at the same time.  Enqueue them on
 *    one stream, or order their streams yourself (an event recorded after
 *    one, waited for before the next); two in flight at once on different
 *    streams corrupt each other's data.  Collectives of *different*
 *    communicators may overlap, but like NCCL's they spin on their peers:
 *    issue overlapping ones (and other libraries' collectives) in the same
 *    order on every rank.  An LL kernel can take every slot of the GPU (up
 *    to 1024 blocks), so two issued in opposite orders on two ranks can
 *    wait for each other until SYMM_TIMEOUT_MS (SYMM_COLL_MAX_BLOCKS
 *    leaves room).
 *  - native on sm_90 and newer (SYMM_NATIVE_PDL=0 turns it off): kernels are
 *    launched with programmatic dependent launch.  Ours wait for the kernel
 *    before them on the stream as any launch would; a kernel of yours that
 *    you launch after ours *with* the programmatic-serialization attribute
 *    may start before ours ends, and must call
 *    cudaGridDependencySynchronize() before it touches (reads or writes)
 *    any buffer of the collective (the usual contract of that attribute).
 *    Kernels launched without it see nothing new.
 *  - dtypes and ops: all-gather, broadcast and all-to-all move any dtype.
 *    Reductions: every dtype with every op (sum, prod, min, max, avg), on
 *    the CPU engine and in every GPU algorithm (one-shot, two-shot, LL,
 *    LL128).  f16, bf16 and FP8 are reduced in f32 and rounded to
 *    nearest-even once (FP8 saturating: beyond the largest finite value,
 *    Inf included, the result is that value; NaN stays NaN), f64 in f64;
 *    integers add and multiply with two's-complement wrap-around; avg is
 *    the sum divided by the number of ranks (integers: the wrapped sum,
 *    truncated toward zero, as NCCL's).  Floating-point min and max: the
 *    CPU keeps the first operand when a NaN is compared, the GPU kernels
 *    (fminf/fmaxf) the number.  A kernel file of SYMM_COLL_KERNELS built
 *    without some pair refuses it with SYMM_ERR_UNSUPPORTED naming the
 *    engine (the call still takes its place: the peers get
 *    SYMM_ERR_MISMATCH).
 *  - A call that fails its argument checks on some ranks only still counts
 *    as that rank's call (it never pairs with its peers' next one) and
 *    touches no buffer; that rank gets SYMM_ERR_INVALID_ARG.  Host backend:
 *    it still takes part in the call's agreement (so it returns once its
 *    peers have arrived, or after the timeout) and its peers get
 *    SYMM_ERR_MISMATCH naming it.  Native backend: it enqueues one block on
 *    `stream` that meets the peers without moving data, so their call (and
 *    its own, through symm_comm_check_async_error) reports
 *    SYMM_ERR_MISMATCH.  A NULL comm counts as no call at all.
 *  - Errors: SYMM_ERR_INVALID_ARG (NULL comm or buffer with count > 0, bad
 *    dtype/op/root), SYMM_ERR_NO_MEMORY
 *    (the scratch tensor could not grow to the data's size: on the rank
 *    that could not, naming why, e.g. RLIMIT_FSIZE or its memory cgroup,
 *    and at once on its peers, naming that rank),
 *    SYMM_ERR_UNSUPPORTED (the backend has no collectives, e.g. a GPU backend
 *    in a build without CUDA; a dtype and op its engine does not reduce), SYMM_ERR_MISMATCH, SYMM_ERR_TIMEOUT /
 *    SYMM_ERR_PEER_LOST (a rank never arrived within the timeout; on
 *    every rank alike, see Timeouts above: a rank that comes late gets
 *    SYMM_ERR_TIMEOUT "came late" and never its peers' later data; a
 *    rank whose buffer a late peer may still read waits for it before it
 *    reuses the scratch).  After a
 *    GPU timeout, a peer that was late but alive may still write the
 *    output of the collective that timed out (zero copy) or its share of
 *    the scratch: treat that output as undefined, and the communicator's
 *    collectives as unusable (they report the timeout again).
 *  - count 0 moves nothing, but is still collective: every rank must call
 *    it (GPU: a rank whose count is 0 while a peer's is not gets
 *    SYMM_ERR_MISMATCH like any other difference).
 *  - Another kind of call at the same place: the collectives share one
 *    order with symm_comm_barrier, symm_tensor_rendezvous,
 *    symm_comm_reserve_scratch (when it grows the scratch) and, where they
 *    are collective, symm_tensor_alloc, symm_tensor_free and
 *    symm_comm_pool_trim (calls that return at once without meeting the
 *    peers, such as a second rendezvous of a tensor, take no place).
 *    Host backend: ranks in a collective while a peer makes one of those
 *    calls all get SYMM_ERR_MISMATCH at once, every rank, with a message
 *    naming both calls as made ("rank 1 called symm_comm_barrier while
 *    rank 0 called symm_all_reduce(count 100, f32, sum)"); no buffer is
 *    touched and the communicator stays usable (the next calls that match
 *    succeed).  Ranks whose numbers differ (a rank that made a call its
 *    peers did not) get SYMM_ERR_MISMATCH at their next barrier or
 *    other host call ("the ranks are out of step") and are in step again
 *    after it.  GPU backends: a collective only enqueues work, so its
 *    order against host calls is free (a rank may rendezvous a tensor
 *    before its all-reduce while a peer does it after), and collectives
 *    and host calls are each in their own order.  A rank making a host
 *    call where its peers make a collective therefore pairs that host
 *    call with the peers' next host call (a SYMM_ERR_MISMATCH if that is
 *    another kind, else it succeeds; SYMM_ERR_TIMEOUT if none comes within
 *    SYMM_TIMEOUT_MS; at once SYMM_ERR_MISMATCH on every rank if the
 *    collective had to grow the scratch), and its peers' kernels pair with
 *    its later kernels: they report SYMM_ERR_MISMATCH, or
 *    SYMM_ERR_TIMEOUT after SYMM_TIMEOUT_MS (device-side), through
 *    symm_comm_check_async_error.  The device-side sequence stays out of
 *    step after that: destroy the communicator.
 */
typedef enum symm_redop {
  SYMM_REDUCE_SUM = 0,
  SYMM_REDUCE_MIN = 1,
  SYMM_REDUCE_MAX = 2,
  SYMM_REDUCE_PROD = 3,
  SYMM_REDUCE_AVG = 4, /* the sum divided by the number of ranks */
  SYMM_REDUCE_COUNT_ = 5
} symm_redop_t;

typedef enum symm_algo {
  SYMM_ALGO_AUTO = 0,     /* chosen by size and world size */
  SYMM_ALGO_ONE_SHOT = 1, /* every rank reads every peer's data and reduces */
  SYMM_ALGO_TWO_SHOT = 2, /* reduce-scatter then all-gather */
  SYMM_ALGO_LL = 3,       /* low-latency: data and flags in one packet (GPU) */
  SYMM_ALGO_LL128 = 4,    /* low-latency, 128-byte lines of 120 data bytes and a flag (GPU) */
  SYMM_ALGO_CE = 5,       /* the GPU's copy engines: data moved by cuMemcpyAsync, no SM
                             (all-gather, broadcast, all-to-all(-v); symm_comm_set_copy_algo) */
  SYMM_ALGO_COUNT_ = 6
} symm_algo_t;


/* "sum", "min", "max", "prod", "avg" / "auto", "one_shot", "two_shot", "ll",
 * "ll128", "ce"; NULL out of range. */
SYMM_API const char *symm_redop_name(symm_redop_t op);
SYMM_API const char *symm_algo_name(symm_algo_t algo);
/* Parses those names; SYMM_ERR_INVALID_ARG (listing valid names) otherwise. */
SYMM_API symm_result_t symm_redop_from_name(const char *name, symm_redop_t *op);
SYMM_API symm_result_t symm_algo_from_name(const char *name, symm_algo_t *algo);

/*
 * Makes sure the communicator's scratch tensor holds at least `bytes` per
 * rank (by default the first collective that needs it reserves
 * SYMM_SCRATCH_BYTES of staging, plus about 28 MiB for LL and LL128 on the
 * native backend, or what the call needs if that is more).  Collective (it
 * allocates and rendezvouses), never inside a CUDA graph capture.  Errors as
 * symm_tensor_alloc / symm_tensor_rendezvous; a rank that cannot grow it
 * fails every rank's call at once (its own error there, its code naming it
 * on the others).
 */
SYMM_API symm_result_t symm_comm_reserve_scratch(symm_comm_t *comm, size_t bytes);

/*
 * Scratch bytes per rank with which every collective of this communicator
 * on buffers of at most max_bytes (per call, the larger of this rank's send
 * and receive buffer) runs without growing the scratch, whatever the
 * algorithm: pass it to symm_comm_reserve_scratch before capturing such
 * calls in a CUDA graph.  The largest need is one-shot's (native: world x
 * the buffer, plus about 28 MiB for LL and LL128), which auto picks only for
 * small buffers; two-shot needs about 2 x the buffer.  Local and cheap; the
 * same on every rank.  Errors: SYMM_ERR_INVALID_ARG (NULL comm or bytes, a
 * size that overflows or exceeds what a tensor can hold),
 * SYMM_ERR_UNSUPPORTED (the backend has no collectives, or none here).
 */
SYMM_API symm_result_t symm_comm_scratch_bytes(symm_comm_t *comm, size_t max_bytes,
                                               size_t *bytes);

/* All-reduce algorithm for this communicator (SYMM_ALLREDUCE_ALGO sets the
 * default).  Local.  What a call runs (symm_all_reduce_algo) must be the
 * same on every rank: ranks whose choices run different algorithms get
 * SYMM_ERR_MISMATCH; choices that run the same agree (e.g. LL and one-shot
 * on the host; on native, LL too large for its area and LL128).
 * SYMM_ALGO_CE is SYMM_ERR_UNSUPPORTED: an all-reduce reduces, and the copy
 * engines only copy (so does a reduce-scatter, which keeps its kernel). */
SYMM_API symm_result_t symm_comm_set_allreduce_algo(symm_comm_t *comm, symm_algo_t algo);

/* The all-reduce algorithm this communicator was told to use: the one set
 * with symm_comm_set_allreduce_algo, else SYMM_ALLREDUCE_ALGO's, else
 * SYMM_ALGO_AUTO (the choice by size; what a call runs is
 * symm_all_reduce_algo).  Local.  Errors: SYMM_ERR_INVALID_ARG (NULL comm
 * or algo). */
SYMM_API symm_result_t symm_comm_allreduce_algo(const symm_comm_t *comm, symm_algo_t *algo);

/*
 * Algorithm of the collectives that only move data: symm_all_gather,
 * symm_broadcast, symm_all_to_all and symm_all_to_all_v (SYMM_COPY_ALGO=
 * auto|ce sets the default, the same on every rank).  Local.
 *  - SYMM_ALGO_AUTO: the engine's own (GPU: the collective kernels).
 *  - SYMM_ALGO_CE, GPU backends: the copy engines, in one of two paths.
 *    Direct, where the buffer holding every rank's pieces lies in a
 *    rendezvoused tensor at the same offset on every rank (all-gather and
 *    broadcast: recvbuf, else for all-gather sendbuf; all-to-all: sendbuf
 *    not overlapping recvbuf): this rank's own piece is copied into its
 *    recvbuf (out of place only), a barrier of one 32-thread block (the
 *    signal kernel: every rank reached the call), one cuMemcpyAsync per
 *    source rank straight from that rank's buffer into this rank's
 *    recvbuf, a second barrier (no peer reads this rank's buffers any
 *    more) and a third (as the staged path's).  Nothing is staged: no size limit, no scratch growth.  Staged,
 *    otherwise (and always for all-to-all-v): the barrier, one
 *    cuMemcpyAsync per rank of this rank's piece into that rank's
 *    collective scratch, a second barrier (every piece has arrived), the
 *    copy of this rank's scratch into recvbuf (all-to-all-v: one per
 *    source rank), and a third barrier (every rank has copied its scratch
 *    out, so the next collective may write into it).  Either way a rank writes only its own recvbuf and
 *    library memory.  No SM moves data, so a kernel on another stream (a
 *    GEMM) keeps every SM; nothing is read back, so calls can be captured
 *    in CUDA graphs once the scratch is reserved (symm_comm_scratch_bytes
 *    covers them).  Scratch of the staged path: the fixed-size calls stage
 *    what a rank receives (world x count elements; broadcast: count) and
 *    grow it as their kernels do; all-to-all-v never grows it and gives
 *    each pair of ranks an equal slot of the staging
 *    (symm_comm_scratch_bytes(comm, B) / world, less the 28 MiB of LL
 *    areas): a rank that sends or receives more returns
 *    SYMM_ERR_STATE.  The barriers compare the ranks' calls (their
 *    signatures and paths: every rank must pass its buffers alike, all in
 *    the same symmetric place or none; all-to-all-v also each pair's
 *    count): a rank whose call or path differs, or was refused, makes its
 *    peers record SYMM_ERR_MISMATCH
 *    (symm_comm_check_async_error); the copies, enqueued by the host, run
 *    anyway, inside the scratch and each rank's own recvbuf, whose content
 *    is then undefined.  All-to-all-v: the receiver of a count that differs
 *    from its sender's reports it.  Ranks running ce where their peers run
 *    the kernels for the same call wait for each other until
 *    SYMM_TIMEOUT_MS (a device-side SYMM_ERR_TIMEOUT).
 *    Refused with SYMM_ERR_UNSUPPORTED naming the reason, never run by
 *    another algorithm: the device-split forms (symm_all_to_all_vdev*:
 *    their counts are in device memory, and the host that issues the
 *    copies would have to wait for them, which no graph could capture;
 *    the peers get SYMM_ERR_MISMATCH), and peers that are not load/store
 *    reachable (ranks of other hosts under nccl or nvshmem, whose own
 *    collectives run under SYMM_ALGO_AUTO).  SYMM_ALGO_AUTO never picks
 *    the copy engines: they win only where SMs are scarce, which the
 *    library cannot see.
 *  - SYMM_ALGO_CE, host backend: the same as SYMM_ALGO_AUTO (the CPU
 *    engine's collectives are the calling thread's copies already).
 * symm_comm_set_copy_algo: SYMM_ERR_INVALID_ARG for NULL comm or another
 * algorithm.  symm_comm_copy_algo: the one set (SYMM_ERR_INVALID_ARG for
 * NULL comm or algo).
 */
SYMM_API symm_result_t symm_comm_set_copy_algo(symm_comm_t *comm, symm_algo_t algo);
SYMM_API symm_result_t symm_comm_copy_algo(const symm_comm_t *comm, symm_algo_t *algo);

/*
 * The algorithm symm_all_reduce runs for `count` elements of `dtype` on this
 * communicator: the one set with symm_comm_set_allreduce_algo (or
 * SYMM_ALLREDUCE_ALGO), or auto's choice by size and number of ranks (GPU:
 * LL up to 64 KiB / (W - 1), LL128 up to 8 MiB / (W (W - 1)), two-shot
 * above), after the backend's fallbacks (native: LL that does not fit its
 * area (1 MiB / W of data) runs LL128; LL128 that cannot run (no
 * NVLink-class link) or does not fit its area (11.25 MiB / W of data)
 * is LL up to 256 KiB where that fits, one-shot up to 1 MiB and two-shot
 * above; count 0 runs one-shot, or two-shot when asked; host: LL and
 * LL128 are one-shot).  Never SYMM_ALGO_AUTO.  Local and cheap; the same on every
 * rank for the same arguments.  Errors: SYMM_ERR_INVALID_ARG (NULL comm or
 * algo, dtype that cannot be reduced, count that overflows),
 * SYMM_ERR_UNSUPPORTED (the backend has no collectives).
 */
SYMM_API symm_result_t symm_all_reduce_algo(symm_comm_t *comm, size_t count, symm_dtype_t dtype,
                                            symm_algo_t *algo);

/* On a communicator of one rank every collective below is its input: in
 * place it returns at once, out of place it is one stream-ordered copy
 * (GPU: cuMemcpyAsync, no kernel, no scratch), as NCCL does. */
/* recvbuf[i] = op over ranks of sendbuf[i], i < count. */
SYMM_API symm_result_t symm_all_reduce(symm_comm_t *comm, const void *sendbuf, void *recvbuf,
                                       size_t count, symm_dtype_t dtype, symm_redop_t op,
                                       symm_stream_t stream);
/* recvbuf[r * count + i] = rank r's sendbuf[i]. */
SYMM_API symm_result_t symm_all_gather(symm_comm_t *comm, const void *sendbuf, void *recvbuf,
                                       size_t count, symm_dtype_t dtype, symm_stream_t stream);
/* recvbuf[i] = op over ranks of sendbuf[rank * count + i]. */
SYMM_API symm_result_t symm_reduce_scatter(symm_comm_t *comm, const void *sendbuf,
                                           void *recvbuf, size_t count, symm_dtype_t dtype,
                                           symm_redop_t op, symm_stream_t stream);
/* recvbuf[i] = root's sendbuf[i] (sendbuf is read on root only). */
SYMM_API symm_result_t symm_broadcast(symm_comm_t *comm, const void *sendbuf, void *recvbuf,
                                      size_t count, symm_dtype_t dtype, int root,
                                      symm_stream_t stream);
/* recvbuf[r * count + i] = rank r's sendbuf[rank * count + i]. */
SYMM_API symm_result_t symm_all_to_all(symm_comm_t *comm, const void *sendbuf, void *recvbuf,
                                       size_t count, symm_dtype_t dtype, symm_stream_t stream);

/*
 * All-to-all with a different amount for every pair of ranks.
 *
 * symm_all_to_all_v: MPI_Alltoallv's contract, counts on the host, in
 * elements of dtype: this rank sends send_counts[p] elements from
 * sendbuf + send_displs[p] to rank p, which receives them at recvbuf +
 * recv_displs[rank]; recv_counts[p] is what this rank expects from rank p
 * and must equal rank p's send_counts[rank] (otherwise SYMM_ERR_MISMATCH on
 * every rank, naming both ranks and both counts, and no recvbuf is
 * written).  NULL displs: packed (the exclusive prefix sums of the counts).
 * Receive ranges must not overlap each other (SYMM_ERR_INVALID_ARG);
 * sendbuf and recvbuf may overlap (every rank's data is staged before any
 * rank writes).  Arrays of comm's size, read during the call only (GPU
 * backends copy them into the launch: a CUDA graph replays the counts it
 * captured).
 *
 * The device-split forms, for mixture-of-experts dispatch and combine,
 * move rows of row_elems elements and take their counts from memory the
 * previous kernel wrote (the GPU's for GPU backends, the host's for the
 * host backend): they are stream-ordered with no host synchronisation and
 * can be captured in a CUDA graph.  Counts are int64 rows; sendbuf holds
 * send_rows rows, recvbuf recv_rows rows (the capacities).
 *  - symm_all_to_all_vdev: in_splits[p] rows go to rank p, taken packed in
 *    rank order from sendbuf; every rank receives packed in source-rank
 *    order and writes out_splits_offsets[0][p] (rows received from rank p)
 *    and out_splits_offsets[1][p] (their first row in recvbuf), 2 x world
 *    int64.  (PyTorch's all_to_all_vdev.)
 *  - symm_all_to_all_vdev_2d: n_experts experts per rank, expert e of rank
 *    p being global expert p * n_experts + e; in_splits[p * n_experts + e]
 *    rows go to it, taken packed in that (rank-major) order.  Every rank
 *    receives expert-major: its local expert e's rows from rank 0, 1, ...
 *    in one block that starts at a multiple of major_align rows (a block
 *    of an expert that got no rows is empty but still aligned, as grouped
 *    GEMMs want), and writes out_splits_offsets[0][e * world + p] and
 *    [1][e * world + p], 2 x n_experts x world int64.  major_align 0 or 1:
 *    no padding.  (PyTorch's all_to_all_vdev_2d.)
 *  - symm_all_to_all_vdev_2d_combine: the inverse: in_splits_offsets
 *    [0][e * world + p] rows at row [1][e * world + p] of sendbuf (local
 *    expert e's rows for rank p, as the dispatch's out_splits_offsets
 *    left them) go back to rank p, which receives rank-major and packed
 *    (rank 0's experts 0, 1, ..., then rank 1's...: the order of its
 *    dispatch input) and writes out_splits_offsets[0][q * n_experts + e]
 *    and [1][...], 2 x world x n_experts int64.  (PyTorch's
 *    all_to_all_vdev_2d_offset.)
 * A count that is negative, splits whose rows exceed send_rows, or rows
 * that would land past recv_rows are refused before any data moves, on
 * every rank: the host backend returns SYMM_ERR_INVALID_ARG (the offending
 * rank's message names the counts and the capacity; its peers' name it;
 * host counts that do not add up: SYMM_ERR_MISMATCH), on GPU backends the
 * kernel writes nothing on any rank and the same codes come from
 * symm_comm_check_async_error; out_splits_offsets is then unspecified.
 * Never memory corruption.  Offsets of chunks of 0 rows are not checked,
 * and an empty expert's aligned block may start past recv_rows (nothing
 * is written there).  out_splits_offsets must not overlap recvbuf
 * (SYMM_ERR_INVALID_ARG).  Rows of dtype elements only: byte-exact any
 * layout.
 * GPU backends do not grow the scratch for these calls (the ranks' needs
 * differ, growing is collective): reserve symm_comm_scratch_bytes of the
 * largest buffer first (symm_comm_reserve_scratch); a rank whose rows do
 * not fit returns SYMM_ERR_STATE at once and its peers get
 * SYMM_ERR_INVALID_ARG from symm_comm_check_async_error.  They run at
 * most 4096 chunks (world x n_experts; SYMM_ERR_UNSUPPORTED above).
 *
 * Collective; the same dtype, row_elems, n_experts and major_align on every
 * rank (SYMM_ERR_MISMATCH otherwise); counts and capacities differ by rank.
 * Errors as symm_all_to_all, plus SYMM_ERR_INVALID_ARG for NULL arrays, a
 * row of 0 elements, n_experts < 1, sizes that overflow; GPU backends
 * run worlds of at most 32 ranks (SYMM_ERR_UNSUPPORTED above) and take
 * device counts only in device memory; SYMM_ERR_UNSUPPORTED on a backend
 * whose peers are not all load/store reachable (device splits there are
 * never read on the host).  GPU scratch: symm_comm_scratch_bytes of the
 * larger of the send and receive buffers covers them.
 */
SYMM_API symm_result_t symm_all_to_all_v(symm_comm_t *comm, const void *sendbuf,
                                         const size_t *send_counts, const size_t *send_displs,
                                         void *recvbuf, const size_t *recv_counts,
                                         const size_t *recv_displs, symm_dtype_t dtype,
                                         symm_stream_t stream);
SYMM_API symm_result_t symm_all_to_all_vdev(symm_comm_t *comm, const void *sendbuf,
                                            size_t send_rows, void *recvbuf, size_t recv_rows,
                                            size_t row_elems, symm_dtype_t dtype,
                                            const int64_t *in_splits,
                                            int64_t *out_splits_offsets, symm_stream_t stream);
SYMM_API symm_result_t symm_all_to_all_vdev_2d(symm_comm_t *comm, const void *sendbuf,
                                               size_t send_rows, void *recvbuf, size_t recv_rows,
                                               size_t row_elems, symm_dtype_t dtype,
                                               const int64_t *in_splits,
                                               int64_t *out_splits_offsets, int n_experts,
                                               size_t major_align, symm_stream_t stream);
SYMM_API symm_result_t symm_all_to_all_vdev_2d_combine(symm_comm_t *comm, const void *sendbuf,
                                                       size_t send_rows, void *recvbuf,
                                                       size_t recv_rows, size_t row_elems,
                                                       symm_dtype_t dtype,
                                                       const int64_t *in_splits_offsets,
                                                       int64_t *out_splits_offsets,
                                                       int n_experts, symm_stream_t stream);

/*
 * Error raised asynchronously by device-side work of this communicator (a
 * signal wait that timed out, ranks that enqueued different collectives):
 * SYMM_SUCCESS if none.  Reading it clears it.  Local; does not synchronise
 * streams (call it after synchronising to see the errors of finished work).
 * Always SYMM_SUCCESS for the host backend, whose calls report directly.
 */
SYMM_API symm_result_t symm_comm_check_async_error(symm_comm_t *comm);

/* ------------------------------------------------------------------------ */
/* An allocator for other memory managers                                   */
/* ------------------------------------------------------------------------ */
/*
 * Plain C entry points with the signatures of PyTorch's
 * CUDAPluggableAllocator (`void *alloc(ssize_t size, int device,
 * cudaStream_t stream)`, `void free(void *ptr, ssize_t size, int device,
 * cudaStream_t stream)`; int64_t is ssize_t on 64-bit Linux), so that
 * `torch.cuda.MemPool(torch.cuda.memory.CUDAPluggableAllocator(
 * "libsymmem.so", "symm_mempool_alloc", "symm_mempool_free").allocator())`
 * hands out ordinary tensors inside symmetric allocations.  Each block is
 * a uint8 tensor of `size` bytes of the communicator set with
 * symm_mempool_set_comm; symm_tensor_lookup finds it from any pointer
 * into it, and symm_tensor_rendezvous of that tensor (collective: every
 * rank's memory manager must have made a block of the same size in the
 * same order) maps the peers' blocks.
 *
 * symm_mempool_set_comm: the communicator later blocks come from (NULL:
 * none); SYMM_ERR_UNSUPPORTED for a backend that allocates collectively
 * (nccl, nvshmem), whose allocations must happen on every rank at once.
 * symm_comm_destroy of that communicator unsets it.  Local, thread-safe.
 * symm_mempool_alloc: the block's data pointer, or NULL (no communicator,
 * size <= 0, `device` not the communicator's device (-1 on the host
 * backend), out of memory; the reason in symm_last_error() of the calling
 * thread and at SYMM_DEBUG=INFO).  `stream` is not used: the memory is
 * ready when the call returns.  Local.
 * symm_mempool_free: gives a block back (to the communicator's pool, as
 * symm_tensor_free).  A block whose communicator was destroyed first
 * (symm_comm_destroy released its memory; torch gives a MemPool's cached
 * blocks back when the pool is deleted, often later) is forgotten quietly,
 * unless a new block took its address.  A pointer that is not a block's
 * start, or a block given back twice, is left alone with a warning.
 * symm_tensor_free of a block's tensor is refused (SYMM_ERR_INVALID_ARG):
 * the block is its memory manager's.  Local.
 * The three are serialised among themselves (a memory manager may call
 * them from any thread); like any call on a communicator, not while
 * another thread calls into the same communicator.
 */
SYMM_API symm_result_t symm_mempool_set_comm(symm_comm_t *comm);
SYMM_API void *symm_mempool_alloc(int64_t size, int device, symm_stream_t stream);
SYMM_API void symm_mempool_free(void *ptr, int64_t size, int device, symm_stream_t stream);

/* ------------------------------------------------------------------------ */
/* For language bindings                                                    */
/* ------------------------------------------------------------------------ */
/*
 * A PyCapsule destructor (PyCapsule_Destructor) for DLPack capsules named
 * "dltensor" or "dltensor_versioned" whose pointer is a DLManagedTensor or
 * DLManagedTensorVersioned: if the capsule still has that name (nobody
 * consumed it), it calls the managed tensor's deleter; a consumed one
 * ("used_...") is the consumer's.  Any exception pending when it runs (a
 * consumer that raised, then dropped the capsule) is set aside around the
 * deleter and left pending, as CPython requires of a destructor.  Written
 * in C so that bindings through ctypes or cffi need no destructor of their
 * own: one in the binding's language would run interpreter code under the
 * pending exception.  Only for capsules in a Python process, with the GIL
 * held; the Python C API is found in the process at run time (libsymmem
 * links no Python), and without it the call does nothing.
 */
SYMM_API void symm_dlpack_capsule_destructor(void *capsule);

#ifdef __cplusplus
}
#endif
#endif /* SYMMEM_H */
