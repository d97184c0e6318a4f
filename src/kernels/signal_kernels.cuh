/* The signal kernel behind symm_signal_put / _wait / _barrier on a stream.
 *
 * A piece of coll_kernels.cu, which includes every piece in order into its
 * one translation unit; it is not compiled on its own. */
#ifndef SYMM_SIGNAL_KERNELS_CUH
#define SYMM_SIGNAL_KERNELS_CUH

/* ------------------------------------------------------------- signals */

/* Records a copy-engine barrier's error (kind SYMM_COLL_KERNEL_CE) in the
 * collectives' record, as coll_fail does for theirs. */
static __device__ void signal_ce_fail(uint64_t err_addr, uint32_t code, uint32_t peer) {
  volatile symm_coll_error_t *err = (volatile symm_coll_error_t *)(uintptr_t)err_addr;
  if (err->code == 0u) {
    err->peer = peer;
    err->kind = SYMM_COLL_KERNEL_CE;
    err->epoch = 0u;
    err->why = 0u;
    __threadfence_system();
    err->code = code;
  } else {
    err->more = code;
  }
  __threadfence_system();
}

/* The barrier of the copy-engine collectives (SYMM_SIGNAL_OP_CE, see
 * coll_abi.h): thread t puts this rank's value for peer t, then takes
 * peer t's and checks it against what this rank's call expects. */
static __device__ void signal_ce_barrier(const symm_signal_params_t &a, int t) {
  if (t >= a.world || t == a.rank) return;
  const unsigned W = (unsigned)a.world;
  uint32_t got = 0u;
  symm_dev_error_t none = {0u, 0u};
  uint32_t *peer_pad = (uint32_t *)(uintptr_t)a.pads[t];
  uint32_t *own_pad = (uint32_t *)(uintptr_t)a.pads[a.rank];
  if (symm_dev_put_signal(peer_pad, symm_dev_signal_slot(0u, (unsigned)a.rank, W), a.put_value[t],
                          (unsigned)t, a.timeout_ns, &none) != SYMM_DEV_SUCCESS ||
      symm_dev_wait_signal(own_pad, symm_dev_signal_slot(0u, (unsigned)t, W), (unsigned)t,
                           a.timeout_ns, &none, &got) != SYMM_DEV_SUCCESS)
    signal_ce_fail(a.err, SYMM_DEV_ERR_TIMEOUT, (uint32_t)t);
  else if (got != a.want_value[t])
    signal_ce_fail(a.err, SYMM_DEV_ERR_MISMATCH, (uint32_t)t);
}

/* symm_signal_put / _wait / _barrier on a stream: the symmem_device.cuh
 * functions, one peer per thread for the barrier. */
extern "C" __global__ void __launch_bounds__(SYMM_SIGNAL_THREADS)
    symm_signal_op(const symm_signal_params_t a) {
  symm_dev_error_t *err = (symm_dev_error_t *)(uintptr_t)a.err;
  const int t = (int)threadIdx.x;
  const unsigned ch = (unsigned)a.channel, W = (unsigned)a.world;
  uint32_t *mine = (uint32_t *)(uintptr_t)a.pads[a.rank];
  coll_after_prior_kernel();
  if (a.op == SYMM_SIGNAL_OP_CE) {
    signal_ce_barrier(a, t);
    return;
  }
  if (a.op == 1 || a.op == 2) {
    if (t != 0) return;
    if (a.op == 1)
      symm_dev_put_signal((uint32_t *)(uintptr_t)a.pads[a.peer],
                          symm_dev_signal_slot(ch, (unsigned)a.rank, W), 1u, (unsigned)a.peer,
                          a.timeout_ns, err);
    else
      symm_dev_wait_signal(mine, symm_dev_signal_slot(ch, (unsigned)a.peer, W),
                           (unsigned)a.peer, a.timeout_ns, err, NULL);
    return;
  }
  if (t < a.world && t != a.rank &&
      symm_dev_put_signal((uint32_t *)(uintptr_t)a.pads[t],
                          symm_dev_signal_slot(ch, (unsigned)a.rank, W), 1u, (unsigned)t,
                          a.timeout_ns, err) == SYMM_DEV_SUCCESS)
    symm_dev_wait_signal(mine, symm_dev_signal_slot(ch, (unsigned)t, W), (unsigned)t,
                         a.timeout_ns, err, NULL);
}

#endif /* SYMM_SIGNAL_KERNELS_CUH */
