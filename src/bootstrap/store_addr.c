/* Store addresses: "host:port", host a name or an IPv4 or IPv6 literal. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_STORE
#include <string.h>

#include "store.h"

symm_result_t symm_store_parse_addr(const char *addr, char *host, size_t cap,
                                    int *port) {
  if (!addr || !host || !cap || !port)
    return symm_error(SYMM_ERR_INVALID_ARG, "store address: NULL argument");
  const char *h = addr, *colon;
  size_t hlen;
  if (addr[0] == '[') {
    const char *close = strchr(addr, ']');
    if (!close || close[1] != ':')
      return symm_error(SYMM_ERR_INVALID_ARG, "store address \"%s\": expected [v6]:port", addr);
    h = addr + 1;
    hlen = (size_t)(close - h);
    colon = close + 1;
  } else {
    /* The last colon splits, so a bare "::1:29500" works too. */
    colon = strrchr(addr, ':');
    if (!colon)
      return symm_error(SYMM_ERR_INVALID_ARG, "store address \"%s\": expected host:port", addr);
    hlen = (size_t)(colon - addr);
  }
  if (hlen == 0 || hlen >= cap)
    return symm_error(SYMM_ERR_INVALID_ARG, "store address \"%s\": empty or too long host", addr);
  const char *p = colon + 1;
  long v = 0;
  if (!*p) v = -1;
  for (; *p && v >= 0; p++)
    v = (*p >= '0' && *p <= '9' && v <= 65535) ? v * 10 + (*p - '0') : -1;
  if (v < 1 || v > 65535)
    return symm_error(SYMM_ERR_INVALID_ARG, "store address \"%s\": port must be 1..65535", addr);
  memcpy(host, h, hlen);
  host[hlen] = 0;
  *port = (int)v;
  return SYMM_SUCCESS;
}
