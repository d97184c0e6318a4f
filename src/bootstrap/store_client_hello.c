/* The store client's handshake (store_proto.h): each side proves that it
 * holds the job's token without sending it, and HELLO tells the server
 * who the client is (rank, communicator, process). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_STORE
#include <string.h>
#include <unistd.h>

#include "store_client_int.h"

/* HELLO's communicator and process fields (store_proto.h), so that the
 * server can tell when this process is gone. */
static void cli_put_process(symm_store_t *s) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  uint64_t ino, dev;
  symm_pid_namespace(&ino, &dev);
  symm_proto_put_u32(&s->req, s->comm);
  symm_proto_put_i32(&s->req, (int32_t)getpid());
  symm_proto_put_i64(&s->req, (int64_t)symm_hash64(host, strlen(host), 0));
  symm_proto_put_i64(&s->req, (int64_t)ino);
  symm_proto_put_i64(&s->req, (int64_t)dev);
  symm_proto_put_u8(&s->req, s->job_ranks ? SYMM_HELLO_JOB_RANKS : 0);
}

/* The handshake (store_proto.h): HELLO with this client's nonce, the
 * server's proof checked before anything that depends on the token is
 * sent, then AUTH with ours.  Both answered by the connect's deadline plus
 * its grace: a server that cannot answer by then (stopped, or swamped)
 * fails the connect. */
symm_result_t cli_hello(symm_store_t *s, const char *token, uint64_t deadline,
                        int timeout_ms) {
  uint8_t client_nonce[SYMM_PROTO_NONCE], proof[SYMM_PROTO_PROOF];
  symm_random_bytes(client_nonce, sizeof client_nonce);
  size_t at = cli_begin(s, SYMM_OP_HELLO);
  symm_proto_put_bytes(&s->req, client_nonce, sizeof client_nonce);
  symm_proto_put_i32(&s->req, s->rank);
  if (s->rank >= 0) cli_put_process(s);
  cli_reply_t rep;
  symm_result_t res = cli_call(s, SYMM_OP_HELLO, at, deadline, timeout_ms, "hello", &rep);
  if (res != SYMM_SUCCESS) return res;
  if (rep.status == SYMM_ERR_PROTOCOL) {
    s->broken = true;
    return symm_error(SYMM_ERR_PROTOCOL,
                      "store at %s refused rank %d's HELLO as malformed: a store of another "
                      "symmem version? (symmem-run and the library must be the same version)",
                      s->addr, s->rank);
  }
  const uint8_t *server_nonce = symm_proto_take(&rep.r, SYMM_PROTO_NONCE, "truncated nonce");
  const uint8_t *server_proof = symm_proto_take(&rep.r, SYMM_PROTO_PROOF, "truncated proof");
  if (rep.status != SYMM_SUCCESS || !symm_proto_end(&rep.r))
    return cli_bad_reply(s, "hello", rep.r.err ? rep.r.err : "unexpected status");
  symm_proto_proof(token, strlen(token), SYMM_PROTO_SERVER_LABEL, server_nonce, client_nonce,
                   proof);
  if (!symm_secret_equal(proof, server_proof, sizeof proof)) {
    s->broken = true; /* closed without a word more: it learns nothing */
    return symm_error(SYMM_ERR_PERMISSION,
                      "the store at %s did not prove that it holds this job's token: another "
                      "process holds that port, or its SYMM_TOKEN is not this rank's (rank %d "
                      "sent it nothing secret)", s->addr, s->rank);
  }
  symm_proto_proof(token, strlen(token), SYMM_PROTO_CLIENT_LABEL, server_nonce, client_nonce,
                   proof);
  at = cli_begin(s, SYMM_OP_AUTH);
  symm_proto_put_bytes(&s->req, proof, sizeof proof);
  res = cli_call(s, SYMM_OP_AUTH, at, deadline, timeout_ms, "hello", &rep);
  if (res != SYMM_SUCCESS) return res;
  if (rep.status == SYMM_ERR_PERMISSION) {
    s->broken = true; /* the server closes it */
    return symm_error(SYMM_ERR_PERMISSION,
                      "store at %s refused rank %d: wrong token (check SYMM_TOKEN)",
                      s->addr, s->rank);
  }
  if (rep.status != SYMM_SUCCESS || !symm_proto_end(&rep.r))
    return cli_bad_reply(s, "hello", rep.r.err ? rep.r.err : "unexpected status");
  return SYMM_SUCCESS;
}
