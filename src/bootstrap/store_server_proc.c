/* The store server's view of its clients' processes: which process each
 * rank connection is of (HELLO's process fields), whether that process is
 * gone, and the losses that follow for communicators it never joined.
 *
 * A connection that closes without BYE marks its rank lost in its own
 * communicator (store_server_conn.c).  A process can also be missing from
 * a communicator that it never joined: it died before it got there, with
 * its connections of earlier communicators closed without BYE (killed) or
 * with BYE (it destroyed them first).  Where communicators number their
 * ranks as the job does (SYMM_HELLO_JOB_RANKS: the launcher's rank and
 * world size), that process has the same rank in all of them, so its loss
 * is recorded for every such communicator that it did not join
 * (SRV_JOB_COMM).  A process is taken for gone:
 *   - on this host and in this PID namespace: when its pid names no
 *     process any more (or a zombie), looked at every SRV_PROC_LOOK_NS
 *     while some request is parked, whether or not it is connected;
 *   - elsewhere (its pid means nothing here): when its last connection
 *     closes and one of them closed without BYE.
 * Communicators with ranks of their own (explicit config ranks) are not
 * covered: the server cannot know a missing process's rank there. */
#define SYMM_LOG_SUBSYS SYMM_SUBSYS_STORE
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "store_server_int.h"


void srv_proc_self(symm_store_server_t *s) {
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  s->host_hash = symm_hash64(host, strlen(host), 0);
  symm_pid_namespace(&s->ns_ino, &s->ns_dev);
}

void srv_read_process(symm_proto_reader_t *r, srv_hello_process_t *p) {
  memset(p, 0, sizeof *p);
  if (r->err || r->left == 0) return; /* a client that says none */
  p->pid = symm_proto_get_i32(r);
  p->host_hash = (uint64_t)symm_proto_get_i64(r);
  p->ns_ino = (uint64_t)symm_proto_get_i64(r);
  p->ns_dev = (uint64_t)symm_proto_get_i64(r);
  p->flags = symm_proto_get_u8(r);
  if (!r->err && p->pid < 0) r->err = "negative pid";
}

/* Whether the server can look at p's pid: same host and PID namespace. */
static bool srv_proc_watchable(const symm_store_server_t *s, const srv_proc_t *p) {
  return p->pid > 0 && p->host_hash == s->host_hash && s->ns_ino != 0 &&
         p->ns_ino == s->ns_ino && p->ns_dev == s->ns_dev;
}

static srv_proc_t *srv_proc_find(symm_store_server_t *s, const srv_hello_process_t *h) {
  for (size_t i = 0; i < s->nprocs; i++) {
    srv_proc_t *p = s->procs[i];
    if (!p->gone && p->pid == h->pid && p->host_hash == h->host_hash &&
        p->ns_ino == h->ns_ino && p->ns_dev == h->ns_dev)
      return p;
  }
  return NULL;
}

static srv_proc_t *srv_proc_new(symm_store_server_t *s, const srv_hello_process_t *h) {
  if (s->nprocs == s->procs_cap) {
    size_t cap = s->procs_cap ? 2 * s->procs_cap : 16;
    srv_proc_t **a = realloc(s->procs, cap * sizeof *a);
    if (!a) return NULL;
    s->procs = a;
    s->procs_cap = cap;
  }
  srv_proc_t *p = calloc(1, sizeof *p);
  if (!p) return NULL;
  p->pid = h->pid;
  p->host_hash = h->host_hash;
  p->ns_ino = h->ns_ino;
  p->ns_dev = h->ns_dev;
  p->job_rank = -1;
  s->procs[s->nprocs++] = p;
  return p;
}

static bool srv_proc_add_comm(srv_proc_t *p, uint32_t comm) {
  for (size_t i = 0; i < p->ncomms; i++)
    if (p->comms[i] == comm) return true;
  if (p->ncomms == p->comms_cap) {
    size_t cap = p->comms_cap ? 2 * p->comms_cap : 4;
    uint32_t *a = realloc(p->comms, cap * sizeof *a);
    if (!a) return false;
    p->comms = a;
    p->comms_cap = cap;
  }
  p->comms[p->ncomms++] = comm;
  return true;
}


void srv_proc_join(symm_store_server_t *s, srv_conn_t *c, const srv_hello_process_t *h) {
  c->job_ranks = (h->flags & SYMM_HELLO_JOB_RANKS) != 0;
  if (h->pid == 0) return; /* a client that said no process */
  srv_proc_t *p = srv_proc_find(s, h);
  if (!p) p = srv_proc_new(s, h);
  /* Without memory the process is not followed: its connections still
   * count, and mark their own communicator's losses. */
  if (!p || !srv_proc_add_comm(p, c->comm)) {
    SYMM_WARN(STORE, "store: out of memory following the process of rank %d", c->rank);
    return;
  }
  if (c->job_ranks) p->job_rank = c->rank;
  p->open++;
  c->proc = p;
}

/* Records p as gone: lost, under its job rank, in every communicator
 * numbered as the job's that it did not join. */
static void srv_proc_gone(symm_store_server_t *s, srv_proc_t *p, const char *why) {
  p->gone = true;
  if (p->job_rank < 0) return;
  srv_mark_process_lost(s, p, p->pid, p->job_rank, why);
}

void srv_proc_left(symm_store_server_t *s, srv_conn_t *c, bool bye, bool stopping) {
  srv_proc_t *p = c->proc;
  c->proc = NULL;
  if (!p) return;
  p->open--;
  if (!bye) p->abandoned = true;
  if (stopping || p->gone || p->open > 0 || !p->abandoned || srv_proc_watchable(s, p)) return;
  srv_proc_gone(s, p, "its process (on another host) closed its last connection without BYE");
}

void srv_proc_look(symm_store_server_t *s, uint64_t now) {
  if (!s->npending || now < s->next_proc_look) return;
  s->next_proc_look = now + SRV_PROC_LOOK_NS;
  for (size_t i = 0; i < s->nprocs && s->npending; i++) {
    srv_proc_t *p = s->procs[i];
    if (p->gone || p->job_rank < 0 || !srv_proc_watchable(s, p)) continue;
    if (symm_process_gone(p->pid))
      srv_proc_gone(s, p, "its process is gone");
  }
}

uint64_t srv_proc_next_look(const symm_store_server_t *s) {
  if (!s->npending) return UINT64_MAX;
  for (size_t i = 0; i < s->nprocs; i++) {
    const srv_proc_t *p = s->procs[i];
    if (!p->gone && p->job_rank >= 0 && srv_proc_watchable(s, p)) return s->next_proc_look;
  }
  return UINT64_MAX;
}

void srv_procs_free(symm_store_server_t *s) {
  for (size_t i = 0; i < s->nprocs; i++) {
    free(s->procs[i]->comms);
    free(s->procs[i]);
  }
  free(s->procs);
  s->procs = NULL;
  s->nprocs = s->procs_cap = 0;
}
