/* CPU engine: the copy every collective's data moves by.
 *
 * memcpy is the fastest copy there is, except at one placement: where the
 * destination lies a few bytes after the source modulo the 4 KiB page.
 * glibc (2.36 measured) copies from 2 KiB up with `rep movsb` on CPUs that
 * advertise fast string moves, and an AMD EPYC (Zen) runs it at a tenth of
 * its speed there: 384 KiB in cache, 2.7-2.9 GB/s at every distance from 1
 * to 31 bytes, 24-34 GB/s at 0 and from 32 (docs/tuning.md).  That
 * placement is a common one, not a corner: glibc's malloc serves blocks
 * of 128 KiB and more from their own mappings, 16 bytes past a page
 * boundary, and the scratch and tensors start on one, so every copy from
 * the scratch into such a receive buffer had dst - src = 16.
 *
 * There the copy goes through a bounce buffer on the stack, placed half a
 * page from the source, so that neither of its two copies has the short
 * distance: each runs at full speed in L1 (21-25 GB/s in all, against
 * 2.8).  The window taken is a whole cache line (1-63 bytes), wider than
 * the one measured, for cores that compare addresses by line.
 */
#include <string.h>

#include "cpu/cpu.h"

#define BOUNCE_PIECE_BYTES 8192u /* per round trip through the bounce buffer (L1) */

void cpu_memcpy(void *dst, const void *src, size_t n) {
  if (!n) return; /* dst or src may be NULL then */
  if (!cpu_copy_slow_at(dst, src, n)) {
    memcpy(dst, src, n);
    return;
  }
  char room[BOUNCE_PIECE_BYTES + 4096];
  char *tmp = cpu_bounce_in(room, src);
  const char *s = src;
  char *d = dst;
  for (size_t done = 0; done < n; done += BOUNCE_PIECE_BYTES) {
    const size_t len = n - done < BOUNCE_PIECE_BYTES ? n - done : BOUNCE_PIECE_BYTES;
    memcpy(tmp, s + done, len);
    memcpy(d + done, tmp, len);
  }
}

void cpu_memmove(void *dst, const void *src, size_t n) {
  if (cpu_coll_overlap(dst, n, src, n)) memmove(dst, src, n);
  else cpu_memcpy(dst, src, n);
}
