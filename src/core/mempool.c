/* The allocator that other memory managers load: plain C entry points with
 * PyTorch's CUDAPluggableAllocator signatures (symm_mempool_alloc /
 * symm_mempool_free), so that a torch.cuda.MemPool hands out ordinary
 * tensors inside symmetric allocations of one communicator, which the user
 * then rendezvouses (symm_tensor_lookup finds them from any interior
 * pointer).  Each block is a symm_tensor_t of uint8 marked as the
 * allocator's; free takes back only those.  One communicator per process
 * at a time; a lock serialises the entry points (a memory manager may call
 * them from any thread).
 *
 * The blocks handed out are remembered by address, so that a memory
 * manager that gives a block back after its communicator was destroyed
 * (torch frees a MemPool's cached blocks when the pool is deleted, often
 * after the communicator) is answered quietly: symm_comm_destroy already
 * released that memory.  Only an address never handed out, or given back
 * twice, is warned about. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_ALLOC
#include <pthread.h>
#include <stdlib.h>

#include "internal.h"

static pthread_mutex_t mempool_lock = PTHREAD_MUTEX_INITIALIZER;
static symm_comm_t *mempool_comm;

/* A block handed out: its data pointer and tensor (orphaned once its
 * communicator is destroyed, which released the memory). */
typedef struct {
  void *ptr;
  symm_tensor_t *tensor;
} mempool_block_t;

static mempool_block_t *blocks;
static size_t nblocks, blocks_cap;

static mempool_block_t *find_block(const void *ptr) {
  for (size_t i = 0; i < nblocks; i++)
    if (blocks[i].ptr == ptr) return &blocks[i];
  return NULL;
}

static void drop_block(mempool_block_t *b) { *b = blocks[--nblocks]; }

/* Takes b out of the list and gives its tensor back: to the pool, or,
 * when its communicator is gone, the orphaned handle (SYMM_ERR_STATE). */
static symm_result_t release_block(mempool_block_t *b) {
  symm_tensor_t *t = b->tensor;
  drop_block(b);
  t->mempool = false;
  return symm_tensor_free(t);
}

/* Remembers t's block; a block of a destroyed communicator at the same
 * address is released first (the address was reused: the new block wins). */
static symm_result_t remember_block(symm_tensor_t *t) {
  void *ptr = symm_tensor_data(t);
  mempool_block_t *old = find_block(ptr);
  if (old) (void)release_block(old);
  if (nblocks == blocks_cap) {
    size_t cap = blocks_cap ? 2 * blocks_cap : 64;
    mempool_block_t *grown = realloc(blocks, cap * sizeof *grown);
    if (!grown)
      return symm_error(SYMM_ERR_NO_MEMORY, "symm_mempool_alloc: no memory to track %zu blocks",
                        cap);
    blocks = grown;
    blocks_cap = cap;
  }
  blocks[nblocks++] = (mempool_block_t){ptr, t};
  return SYMM_SUCCESS;
}

/* Whether comm's allocations are local: a memory manager allocates when
 * it needs, not when every rank does. */
static bool allocates_locally(const symm_comm_t *comm) {
  return !comm->caps.collective_alloc && !comm->caps.registers;
}

symm_result_t symm_mempool_set_comm(symm_comm_t *comm) {
  if (comm && !allocates_locally(comm))
    return symm_error(SYMM_ERR_UNSUPPORTED, "symm_mempool_set_comm: the %s backend allocates "
                      "collectively (every rank at once), which a memory manager's allocations "
                      "are not; the host, native and cuda backends allocate locally",
                      comm->ops->name);
  pthread_mutex_lock(&mempool_lock);
  mempool_comm = comm;
  pthread_mutex_unlock(&mempool_lock);
  return SYMM_SUCCESS;
}

void symm_mempool_forget_comm(symm_comm_t *comm) {
  pthread_mutex_lock(&mempool_lock);
  if (mempool_comm == comm) mempool_comm = NULL;
  pthread_mutex_unlock(&mempool_lock);
}

void *symm_mempool_alloc(int64_t size, int device, symm_stream_t stream) {
  (void)stream; /* the memory is ready when the allocation returns */
  pthread_mutex_lock(&mempool_lock);
  symm_comm_t *comm = mempool_comm;
  symm_tensor_t *t = NULL;
  if (!comm) {
    symm_error(SYMM_ERR_STATE, "symm_mempool_alloc: no communicator (symm_mempool_set_comm)");
  } else if (size <= 0) {
    symm_error(SYMM_ERR_INVALID_ARG, "symm_mempool_alloc: %lld bytes", (long long)size);
  } else if (device != comm->device) {
    symm_error(SYMM_ERR_INVALID_ARG, "symm_mempool_alloc: device %d, but the communicator's "
               "memory is %s%d", device, comm->device < 0 ? "the host's, device " : "on device ",
               comm->device);
  } else if (symm_tensor_alloc(comm, &size, 1, SYMM_DTYPE_U8, &t) == SYMM_SUCCESS) {
    t->mempool = true;
    if (remember_block(t) != SYMM_SUCCESS) {
      t->mempool = false;
      (void)symm_tensor_free(t);
      t = NULL;
    }
  } else {
    t = NULL;
  }
  pthread_mutex_unlock(&mempool_lock);
  if (!t) SYMM_INFO(ALLOC, "%s", symm_last_error());
  return t ? symm_tensor_data(t) : NULL;
}

void symm_mempool_free(void *ptr, int64_t size, int device, symm_stream_t stream) {
  (void)size, (void)device, (void)stream;
  if (!ptr) return;
  pthread_mutex_lock(&mempool_lock);
  mempool_block_t *b = find_block(ptr);
  if (!b)
    SYMM_WARN(ALLOC, "symm_mempool_free(%p): not a block of symm_mempool_alloc, or given "
              "back twice; left alone", ptr);
  else if (release_block(b) == SYMM_ERR_STATE)
    SYMM_INFO(ALLOC, "symm_mempool_free(%p): its communicator was destroyed, which released "
              "it", ptr);
  pthread_mutex_unlock(&mempool_lock);
}
