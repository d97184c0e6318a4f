/*
 * SHA-256 (FIPS 180-4) and HMAC-SHA256 (RFC 2104), for the store's
 * challenge-response: each side proves it holds the job's token without
 * sending it (store_proto.h).  Small and portable rather than fast: a
 * handshake hashes a few hundred bytes.  Not installed.
 */
#ifndef SYMM_SHA256_H
#define SYMM_SHA256_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SYMM_SHA256_BYTES 32
#define SYMM_SHA256_BLOCK 64

typedef struct symm_sha256 {
  uint32_t state[8];
  uint64_t total;                  /* bytes hashed so far */
  uint8_t block[SYMM_SHA256_BLOCK]; /* a partial block, `fill` bytes */
  size_t fill;
} symm_sha256_t;

void symm_sha256_init(symm_sha256_t *ctx);
void symm_sha256_update(symm_sha256_t *ctx, const void *data, size_t len);
/* Writes the digest; ctx is then spent (init it again to reuse it). */
void symm_sha256_final(symm_sha256_t *ctx, uint8_t digest[SYMM_SHA256_BYTES]);
void symm_sha256(const void *data, size_t len, uint8_t digest[SYMM_SHA256_BYTES]);

/* HMAC-SHA256 with a key of any length (a longer one than a block is
 * hashed first, as RFC 2104 says). */
typedef struct symm_hmac {
  symm_sha256_t inner, outer;
} symm_hmac_t;

void symm_hmac_init(symm_hmac_t *mac, const void *key, size_t key_len);
void symm_hmac_update(symm_hmac_t *mac, const void *data, size_t len);
void symm_hmac_final(symm_hmac_t *mac, uint8_t out[SYMM_SHA256_BYTES]);

/* Whether a and b hold the same n bytes, in a time that depends on n only:
 * how far a guess of a secret matches never shows in how long it takes. */
bool symm_secret_equal(const void *a, const void *b, size_t n);

#endif /* SYMM_SHA256_H */
