/* SHA-256 and HMAC-SHA256, written from FIPS 180-4 and RFC 2104 (the
 * tests check them against the standards' example vectors). */
#include "symm_sha256.h"

#include <string.h>

/* The first 32 bits of the fractional parts of the cube roots of the first
 * 64 primes (FIPS 180-4, 4.2.2). */
static const uint32_t k_round[64] = {
    0x428a2f98u, 0x71374491u, 0xb5c0fbcfu, 0xe9b5dba5u, 0x3956c25bu, 0x59f111f1u, 0x923f82a4u,
    0xab1c5ed5u, 0xd807aa98u, 0x12835b01u, 0x243185beu, 0x550c7dc3u, 0x72be5d74u, 0x80deb1feu,
    0x9bdc06a7u, 0xc19bf174u, 0xe49b69c1u, 0xefbe4786u, 0x0fc19dc6u, 0x240ca1ccu, 0x2de92c6fu,
    0x4a7484aau, 0x5cb0a9dcu, 0x76f988dau, 0x983e5152u, 0xa831c66du, 0xb00327c8u, 0xbf597fc7u,
    0xc6e00bf3u, 0xd5a79147u, 0x06ca6351u, 0x14292967u, 0x27b70a85u, 0x2e1b2138u, 0x4d2c6dfcu,
    0x53380d13u, 0x650a7354u, 0x766a0abbu, 0x81c2c92eu, 0x92722c85u, 0xa2bfe8a1u, 0xa81a664bu,
    0xc24b8b70u, 0xc76c51a3u, 0xd192e819u, 0xd6990624u, 0xf40e3585u, 0x106aa070u, 0x19a4c116u,
    0x1e376c08u, 0x2748774cu, 0x34b0bcb5u, 0x391c0cb3u, 0x4ed8aa4au, 0x5b9cca4fu, 0x682e6ff3u,
    0x748f82eeu, 0x78a5636fu, 0x84c87814u, 0x8cc70208u, 0x90befffau, 0xa4506cebu, 0xbef9a3f7u,
    0xc67178f2u};

static inline uint32_t rotr(uint32_t x, unsigned n) { return (x >> n) | (x << (32 - n)); }

static inline uint32_t load_be32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline void store_be32(uint8_t *p, uint32_t v) {
  p[0] = (uint8_t)(v >> 24);
  p[1] = (uint8_t)(v >> 16);
  p[2] = (uint8_t)(v >> 8);
  p[3] = (uint8_t)v;
}

/* One 64-byte block into the state (FIPS 180-4, 6.2.2). */
static void sha256_block(uint32_t state[8], const uint8_t *p) {
  uint32_t w[64];
  for (int t = 0; t < 16; t++) w[t] = load_be32(p + 4 * t);
  for (int t = 16; t < 64; t++) {
    const uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = w[t - 16] + s0 + w[t - 7] + s1;
  }
  uint32_t a = state[0], b = state[1], c = state[2], d = state[3];
  uint32_t e = state[4], f = state[5], g = state[6], h = state[7];
  for (int t = 0; t < 64; t++) {
    const uint32_t big1 = rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25);
    const uint32_t choose = (e & f) ^ (~e & g);
    const uint32_t t1 = h + big1 + choose + k_round[t] + w[t];
    const uint32_t big0 = rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22);
    const uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    const uint32_t t2 = big0 + majority;
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state[0] += a;
  state[1] += b;
  state[2] += c;
  state[3] += d;
  state[4] += e;
  state[5] += f;
  state[6] += g;
  state[7] += h;
}

void symm_sha256_init(symm_sha256_t *ctx) {
  /* The first 32 bits of the fractional parts of the square roots of the
   * first 8 primes (FIPS 180-4, 5.3.3). */
  static const uint32_t initial[8] = {0x6a09e667u, 0xbb67ae85u, 0x3c6ef372u, 0xa54ff53au,
                                      0x510e527fu, 0x9b05688cu, 0x1f83d9abu, 0x5be0cd19u};
  memcpy(ctx->state, initial, sizeof initial);
  ctx->total = 0;
  ctx->fill = 0;
}

void symm_sha256_update(symm_sha256_t *ctx, const void *data, size_t len) {
  const uint8_t *p = data;
  ctx->total += len;
  if (ctx->fill) {
    size_t take = SYMM_SHA256_BLOCK - ctx->fill;
    if (take > len) take = len;
    memcpy(ctx->block + ctx->fill, p, take);
    ctx->fill += take;
    p += take;
    len -= take;
    if (ctx->fill < SYMM_SHA256_BLOCK) return;
    sha256_block(ctx->state, ctx->block);
    ctx->fill = 0;
  }
  for (; len >= SYMM_SHA256_BLOCK; p += SYMM_SHA256_BLOCK, len -= SYMM_SHA256_BLOCK)
    sha256_block(ctx->state, p);
  if (len) memcpy(ctx->block, p, len);
  ctx->fill = len;
}

void symm_sha256_final(symm_sha256_t *ctx, uint8_t digest[SYMM_SHA256_BYTES]) {
  /* Padding (FIPS 180-4, 5.1.1): a 1 bit, zeros up to 8 bytes short of a
   * block boundary, then the message length in bits, big-endian. */
  const uint64_t bits = ctx->total * 8;
  ctx->block[ctx->fill++] = 0x80;
  if (ctx->fill > SYMM_SHA256_BLOCK - 8) {
    memset(ctx->block + ctx->fill, 0, SYMM_SHA256_BLOCK - ctx->fill);
    sha256_block(ctx->state, ctx->block);
    ctx->fill = 0;
  }
  memset(ctx->block + ctx->fill, 0, SYMM_SHA256_BLOCK - 8 - ctx->fill);
  store_be32(ctx->block + 56, (uint32_t)(bits >> 32));
  store_be32(ctx->block + 60, (uint32_t)bits);
  sha256_block(ctx->state, ctx->block);
  for (int i = 0; i < 8; i++) store_be32(digest + 4 * i, ctx->state[i]);
  memset(ctx, 0, sizeof *ctx);
}

void symm_sha256(const void *data, size_t len, uint8_t digest[SYMM_SHA256_BYTES]) {
  symm_sha256_t ctx;
  symm_sha256_init(&ctx);
  symm_sha256_update(&ctx, data, len);
  symm_sha256_final(&ctx, digest);
}

/* HMAC (RFC 2104): H((K ^ opad) || H((K ^ ipad) || message)), K the key
 * padded with zeros to a block (hashed first if longer than one). */
void symm_hmac_init(symm_hmac_t *mac, const void *key, size_t key_len) {
  uint8_t k[SYMM_SHA256_BLOCK] = {0}, pad[SYMM_SHA256_BLOCK];
  if (key_len > SYMM_SHA256_BLOCK)
    symm_sha256(key, key_len, k);
  else if (key_len)
    memcpy(k, key, key_len);
  for (int i = 0; i < SYMM_SHA256_BLOCK; i++) pad[i] = k[i] ^ 0x36;
  symm_sha256_init(&mac->inner);
  symm_sha256_update(&mac->inner, pad, sizeof pad);
  for (int i = 0; i < SYMM_SHA256_BLOCK; i++) pad[i] = k[i] ^ 0x5c;
  symm_sha256_init(&mac->outer);
  symm_sha256_update(&mac->outer, pad, sizeof pad);
  memset(k, 0, sizeof k);
  memset(pad, 0, sizeof pad);
}

void symm_hmac_update(symm_hmac_t *mac, const void *data, size_t len) {
  symm_sha256_update(&mac->inner, data, len);
}

void symm_hmac_final(symm_hmac_t *mac, uint8_t out[SYMM_SHA256_BYTES]) {
  uint8_t inner[SYMM_SHA256_BYTES];
  symm_sha256_final(&mac->inner, inner);
  symm_sha256_update(&mac->outer, inner, sizeof inner);
  symm_sha256_final(&mac->outer, out);
  memset(inner, 0, sizeof inner);
}

bool symm_secret_equal(const void *a, const void *b, size_t n) {
  const volatile uint8_t *x = a, *y = b;
  uint8_t diff = 0;
  for (size_t i = 0; i < n; i++) diff |= (uint8_t)(x[i] ^ y[i]);
  return diff == 0;
}
