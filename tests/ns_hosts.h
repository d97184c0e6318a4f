/* "Hosts" for the tests (tests/ns_hosts.c): each a network namespace and
 * a UTS namespace of its own, with a host name of its own (symmem tells
 * hosts apart by the host name's hash), joined by veth pairs to a bridge
 * that lives in one more network namespace of the test's, so that nothing
 * of the machine's own network changes.  Host h has the address
 * 10.213.<subnet>.<h + 1>/24 on eth0, and its loopback up; the bridge
 * itself has no address.  Those addresses exist only inside the test's
 * namespaces (no route leads there from the machine's), so tests running
 * side by side may even use the same subnet; each passes its own anyway,
 * to tell them apart in logs.
 *
 * Each namespace is held by a process of its own (the namespaces and
 * every link in them die with their last process), forked with
 * PR_SET_PDEATHSIG, so that they go away with the test even when it
 * aborts; ns_hosts_close deletes the links first.  Ranks are forked by the
 * harness and moved into their host (setns) before they run.
 *
 * It needs root, or else an unprivileged user namespace (the test then
 * runs inside one, as its root), and iproute2's `ip` with the kernel's
 * veth and bridge drivers; where any is missing ns_hosts_open says why
 * ("SKIP: ...") and the test returns TEST_SKIP. */
#ifndef SYMM_TEST_NS_HOSTS_H
#define SYMM_TEST_NS_HOSTS_H

#include <stdbool.h>
#include <sys/types.h>

#include "harness.h"

#define NS_HOSTS_MAX 4
/* The port rank 0's store listens on in host 0 (a fresh namespace: free). */
#define NS_HOSTS_STORE_PORT 29600

typedef struct ns_hosts {
  int count, subnet;
  pid_t bridge;                    /* holds the bridge's network namespace */
  pid_t holder[NS_HOSTS_MAX];      /* hold each host's namespaces */
  int net_fd[NS_HOSTS_MAX], uts_fd[NS_HOSTS_MAX];
  char name[NS_HOSTS_MAX][32];     /* host names: symm-host0 ... */
  char addr[NS_HOSTS_MAX][20];     /* 10.213.<subnet>.<h + 1> */
  char store_addr[40];             /* host 0's address, NS_HOSTS_STORE_PORT */
} ns_hosts_t;

/* Makes `count` hosts (2 to NS_HOSTS_MAX) on 10.213.<subnet>.0/24 and
 * waits until every link is up.  false: it cannot be done here, with
 * "SKIP: <why>" printed (the test returns TEST_SKIP). */
bool ns_hosts_open(ns_hosts_t *t, int count, int subnet);
/* Deletes the links, then ends the namespaces' processes. */
void ns_hosts_close(ns_hosts_t *t);

/* In a process of the test's (a fork): moves it into host h's network and
 * UTS namespaces; a failure fails the test. */
void ns_hosts_enter(const ns_hosts_t *t, int h);

/* test_run_ranks_opts with rank r on host host_of[r]: rank 0 (on host 0
 * as a rule) serves the store on t->store_addr, bound to that address, and
 * every rank dials it there.  opts: as for test_run_ranks_opts (NULL:
 * defaults); its enter and store fields are set here. */
int ns_hosts_run_ranks(const ns_hosts_t *t, int n, const int *host_of, test_rank_fn fn,
                       void *arg, const test_job_opts_t *opts);

/* In a rank of ns_hosts_run_ranks: the host it runs on. */
int ns_hosts_my_host(void);

#endif
