/* The allocator that other memory managers load: plain C entry points with
 * PyTorch's CUDAPluggableAllocator signatures (symm_mempool_alloc /
 * symm_mempool_free), so that a torch.cuda.MemPool hands out ordinary
 * tensors inside symmetric allocations of one communicator, which the user
 * then rendezvouses (symm_tensor_lookup finds them from any interior
 * pointer).  Each block is a symm_tensor_t of uint8 marked as the
 * allocator's; free takes back only those.  One communicator per process
 * at a time; a lock serialises the entry points (a memory manager may call
 * them from any thread). */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_ALLOC
#include <pthread.h>

#include "internal.h"

static pthread_mutex_t mempool_lock = PTHREAD_MUTEX_INITIALIZER;
static symm_comm_t *mempool_comm;

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
  symm_tensor_t *t = NULL;
  int rank = -1;
  size_t offset = 0;
  if (symm_tensor_lookup(ptr, &t, &rank, &offset) != SYMM_SUCCESS || !t->mempool ||
      rank != t->comm->rank || offset != 0)
    SYMM_WARN(ALLOC, "symm_mempool_free(%p): not a block of symm_mempool_alloc; left alone",
              ptr);
  else
    symm_tensor_free(t);
  pthread_mutex_unlock(&mempool_lock);
}
