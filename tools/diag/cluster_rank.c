/* railnet-diag --cluster, a rank's side (cluster.h): it joins rank 0, then for every round
 * rank 0 sends either runs the pair check against its partner (the client of the pair) and
 * reports the link, answers it (its pair server does), or sits the round out; DONE ends it
 * with the verdict's exit status. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "cluster.h"
#include "diag.h"

/* The first failing TCP device pair (NCCL's device k here and on the peer); 1 when found. */
static int tcpFailure(const pairState* st, railnetClusterLinkMsg* m) {
  for (int k = 0;; k++) {
    const railnetPairTcpResult* fail = NULL;
    int w = pairTcpDeviceWorks(st, k, &fail);
    if (w < 0) return 0;
    if (w) continue;
    if (fail)
      sfmt(m->cause, sizeof(m->cause), "TCP %s -> %s (NCCL's socket device %d) fails at %s: %s", fail->localIf,
           fail->peerIf, k, railnetPairTcpStepName(fail->step), strerror(fail->err));
    else
      sfmt(m->cause, sizeof(m->cause), "TCP on NCCL's socket device %d fails", k);
    char here[128], peer[128];
    pairWorkingIfaces(st, 0, here, sizeof(here));
    pairWorkingIfaces(st, 1, peer, sizeof(peer));
    if (here[0] && peer[0]) /* other interfaces work: NCCL can be told to use them */
      sfmt(m->fix, sizeof(m->fix), "NCCL_SOCKET_IFNAME=%s on rank %u and NCCL_SOCKET_IFNAME=%s on rank %u (those work), "
           "or fix the path: %s", here, m->a, peer, m->b, pairTcpHint(fail));
    else
      sfmt(m->fix, sizeof(m->fix), "%s", pairTcpHint(fail));
    return 1;
  }
}

/* The service port works and the peer's ephemeral ports (where NCCL's listeners are) do not:
 * a firewall that opens the one and not the range; 1 when so. */
static int ephemeralFailure(const pairState* st, railnetClusterLinkMsg* m) {
  char failed[64], range[32] = "unknown";
  int err = 0;
  if (pairEphemeralFailed(st, failed, sizeof(failed), &err) == 0) return 0;
  if (st->peer.portLow) sfmt(range, sizeof(range), "%u-%u", st->peer.portLow, st->peer.portHigh);
  sfmt(m->cause, sizeof(m->cause), "TCP to rank %u works on port %u but not on its ephemeral port(s) %s (range %s): %s",
       m->b, st->peer.probePort, failed, range, strerror(err));
  sfmt(m->fix, sizeof(m->fix), "open TCP %s inbound on rank %u (NCCL's sockets listen there) or narrow "
       "net.ipv4.ip_local_port_range on every node to a range that is open",
       st->peer.portLow ? range : "net.ipv4.ip_local_port_range", m->b);
  return 1;
}

/* The first failing RDMA path between the GIDs railnet uses on both sides; 1 when found. */
static int rdmaFailure(const pairState* st, railnetClusterLinkMsg* m) {
  for (int q = 0; q < st->nPaths; q++) {
    const pairRdmaPath* p = &st->paths[q];
    const railnetPairRdmaEntry *l = &st->lr[p->local], *r = &st->rr[p->remote];
    if (!p->tried || !(l->isAuto & RAILNET_PAIR_GID_CHOSEN) || !(r->isAuto & RAILNET_PAIR_GID_CHOSEN)) continue;
    if (pairRdmaPathOk(p)) continue;
    int step = p->setupStep, err = p->setupErr;
    for (int i = 0; step == 0 && i < 2; i++) step = p->out[i].step, err = p->out[i].err;
    if (step == 0) step = p->in.step, err = p->in.err;
    sfmt(m->cause, sizeof(m->cause), "RDMA %s:%u GID %d -> %s:%u GID %d fails at %s: %s", l->dev, l->port, l->gidIndex,
         r->dev, r->port, r->gidIndex, railnetPairRdmaStepName(step), strerror(err ? err : EIO));
    sfmt(m->fix, sizeof(m->fix), "%s", railnetPairRdmaHint(step, err));
    return 1;
  }
  return 0;
}

void clusterSummarize(const pairState* st, int rc, const char* why, railnetClusterLinkMsg* m) {
  m->ok = 1;
  if (rc) {
    m->ok = 0;
    sfmt(m->cause, sizeof(m->cause), "the pair check stopped: %s", why && why[0] ? why : strerror(rc));
    if (st->self.portLow && strncmp(why ? why : "", "cannot connect", 14) == 0) /* its listener's port is ephemeral */
      sfmt(m->fix, sizeof(m->fix), "check that rank %u's railnet-diag runs and that a firewall passes TCP to it on the "
           "ephemeral ports (%u-%u here), where it and NCCL listen", m->b, st->self.portLow, st->self.portHigh);
    else
      sfmt(m->fix, sizeof(m->fix), "check that the partner's railnet-diag runs and that TCP reaches it (firewall)");
    return;
  }
  if (tcpFailure(st, m) || ephemeralFailure(st, m) || rdmaFailure(st, m)) {
    m->ok = 0;
    return;
  }
  /* the path measured: IB before Socket, one measured both ways before one measured one way */
  const pairBw* best = NULL;
  int bestScore = 0;
  for (int i = 0; i < st->nBw; i++) {
    const pairBw* b = &st->bwRes[i];
    int ways = (b->err[0] == 0) + (b->err[1] == 0);
    int score = ways ? 4 * !strcmp(b->net, "ib") + ways : 0;
    if (score > bestScore) best = b, bestScore = score;
  }
  if (best) {
    m->kbps = best->err[0] ? 0 : (uint32_t)(best->mbps[0] * 1000.0);
    m->kbpsBack = best->err[1] ? 0 : (uint32_t)(best->mbps[1] * 1000.0);
    sfmt(m->net, sizeof(m->net), "%s", best->net);
    sfmt(m->devA, sizeof(m->devA), "%s", best->here);
    sfmt(m->devB, sizeof(m->devB), "%s", best->peer);
  }
  /* the fastest TCP probe each way: from here (st->out), from the peer (st->in) */
  for (int way = 0; way < 2; way++) {
    const railnetPairTcpResult* r = way ? st->in : st->out;
    uint32_t usec = 0;
    for (int i = 0; i < (way ? st->nIn : st->nOut); i++)
      if (r[i].step == 0 && (usec == 0 || r[i].usec < usec)) usec = r[i].usec;
    *(way ? &m->usecBack : &m->usec) = usec;
  }
}

void clusterCheck(const pairServer* sv, int self, const railnetClusterRoundMsg* r, railnetClusterLinkMsg* m) {
  memset(m, 0, sizeof(*m));
  m->round = r->round;
  m->a = (uint32_t)self;
  m->b = (uint32_t)r->partner;
  pairState* st = (pairState*)calloc(1, sizeof(*st));
  char why[512] = "", addr[INET6_ADDRSTRLEN], peer[INET6_ADDRSTRLEN + 16];
  if (st == NULL) {
    sfmt(m->cause, sizeof(m->cause), "out of memory");
    return;
  }
  railnetPairAddrString(r->family, r->addr, addr, sizeof(addr));
  sfmt(peer, sizeof(peer), r->family == 6 ? "[%s]:%u" : "%s:%u", addr, r->port);
  pairStateInit(st, pairServerListener(sv));
  st->self.jobToken = pairServerJobToken(sv);
  int rc = pairCheckQuiet(st, peer, r->boundMs, why, sizeof(why));
  clusterSummarize(st, rc, why, m);
  free(st);
}

int clusterSplitHostPort(const char* spec, char* host, size_t hostSize, int* port) {
  const char* colon = strrchr(spec, ':');
  if (colon == NULL || colon == spec) return EINVAL;
  size_t n = (size_t)(colon - spec);
  if (spec[0] == '[' && n >= 2 && spec[n - 1] == ']') spec++, n -= 2;
  if (n == 0 || n >= hostSize) return EINVAL;
  memcpy(host, spec, n);
  host[n] = '\0';
  char* end;
  long p = strtol(colon + 1, &end, 10);
  if (*end || p <= 0 || p > 65535) return EINVAL;
  *port = (int)p;
  return 0;
}

/* A connection to rank 0, tried again until the deadline (it may not listen yet). */
static int joinRendezvous(const clusterOptions* o, uint64_t deadline, int* fdOut, char* why, size_t whySize) {
  char host[256];
  int port = 0;
  if (clusterSplitHostPort(o->rendezvous, host, sizeof(host), &port)) {
    sfmt(why, whySize, "bad rendezvous '%s' (HOST:PORT)", o->rendezvous);
    return EINVAL;
  }
  int e = ETIMEDOUT;
  while (railnetClockNs() < deadline) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, NULL, &hints, &res) == 0 && res) {
      uint8_t a[16];
      int fam = res->ai_family == AF_INET ? 4 : 6;
      if (fam == 4) memcpy(a, &((struct sockaddr_in*)res->ai_addr)->sin_addr, 4);
      else memcpy(a, &((struct sockaddr_in6*)res->ai_addr)->sin6_addr, 16);
      freeaddrinfo(res);
      e = railnetPairConnectFrom(NULL, fam, a, (uint16_t)port, railnetClockNs() + 2000000000ull, fdOut);
      if (e == 0) return 0;
    }
    usleep(200000);
  }
  sfmt(why, whySize, "rank 0 did not answer at %s within %d s: %s", o->rendezvous, o->joinSec, strerror(e));
  return e;
}

int clusterFollow(const clusterOptions* o, const pairServer* sv) {
  uint64_t joinDl = railnetClockNs() + (uint64_t)o->joinSec * 1000000000ull;
  char why[512] = "";
  int fd = -1;
  if (joinRendezvous(o, joinDl, &fd, why, sizeof(why)) != 0) {
    fprintf(stderr, "railnet-diag --cluster: rank %d: %s\n", o->rank, why);
    return 1;
  }
  railnetClusterJoinMsg j;
  memset(&j, 0, sizeof(j));
  j.rank = (uint32_t)o->rank, j.size = (uint32_t)o->size;
  gethostname(j.host, sizeof(j.host) - 1);
  j.listenPort = pairServerListener(sv)->port;
  j.listenToken = pairServerListener(sv)->token;
  j.jobToken = o->token;
  int rc = 1;
  if (railnetPairSend(fd, RAILNET_CLUSTER_JOIN, &j, 1, joinDl) == 0) {
    for (;;) {
      railnetPairMsg m;
      /* rank 0 waits for every rank, then runs the rounds: each within its bound */
      uint64_t dl = railnetClockNs() + (uint64_t)(o->joinSec + 2 * CLUSTER_CHECK_MS / 1000 + 10) * 1000000000ull;
      int e = railnetPairRecv(fd, &m, dl, why);
      if (e) {
        fprintf(stderr, "railnet-diag --cluster: rank %d: rank 0 went away: %s\n", o->rank,
                e == EPROTO ? why : strerror(e));
        break;
      }
      if (m.type == RAILNET_CLUSTER_DONE) {
        rc = m.u.done->exitCode;
        railnetPairFree(&m);
        break;
      }
      if (m.type == RAILNET_CLUSTER_ROUND && m.u.round->partner >= 0 && m.u.round->client) {
        railnetClusterLinkMsg l;
        clusterCheck(sv, o->rank, m.u.round, &l);
        railnetPairSend(fd, RAILNET_CLUSTER_LINK, &l, 1, railnetClockNs() + 10000000000ull);
      }
      railnetPairFree(&m);
    }
  }
  close(fd);
  return rc;
}
