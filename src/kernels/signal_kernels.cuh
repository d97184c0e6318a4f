/* The signal kernel behind symm_signal_put / _wait / _barrier on a stream.
 *
 * A piece of coll_kernels.cu, which includes every piece in order into its
 * one translation unit; it is not compiled on its own. */
#ifndef SYMM_SIGNAL_KERNELS_CUH
#define SYMM_SIGNAL_KERNELS_CUH

/* ------------------------------------------------------------- signals */

/* symm_signal_put / _wait / _barrier on a stream: the symmem_device.cuh
 * functions, one peer per thread for the barrier. */
extern "C" __global__ void __launch_bounds__(SYMM_SIGNAL_THREADS)
    symm_signal_op(const symm_signal_params_t a) {
  symm_dev_error_t *err = (symm_dev_error_t *)(uintptr_t)a.err;
  const int t = (int)threadIdx.x;
  const unsigned ch = (unsigned)a.channel, W = (unsigned)a.world;
  uint32_t *mine = (uint32_t *)(uintptr_t)a.pads[a.rank];
  coll_after_prior_kernel();
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
