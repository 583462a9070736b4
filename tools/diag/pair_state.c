/* The state of one pair check (pair.h): this host's side of it (hello, interfaces, RDMA
 * entries) and the TCP probes from this host's addresses to the peer's, which the client and
 * the server both run. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <errno.h>
#include <string.h>
#include <stdio.h>
#include <unistd.h>
#include "diag.h"
#include "pair.h"
#include "railnet.h"

void pairStateInit(pairState* st, const pairListener* l) {
  gethostname(st->self.host, sizeof(st->self.host) - 1);
  snprintf(st->self.version, sizeof(st->self.version), "%s", railnetVersion());
  st->self.probePort = l->port;
  st->self.listenToken = l->token;
  st->self.timeoutMs = PAIR_PROBE_MS;
  st->self.portLow = l->portLow;
  st->self.portHigh = l->portHigh;
  for (int k = 0; k < RAILNET_PAIR_EPHEMERAL; k++) st->self.ephemeralPorts[k] = l->ephPort[k];
  if (railnetPairListIfaces(st->local, RAILNET_PAIR_MAX_IFACES, &st->nLocal) != ncclSuccess) st->nLocal = 0;
  pairRdmaList(st);
  if (st->nLr) st->self.flags |= RAILNET_PAIR_F_RDMA;
}

uint64_t pairTokenHash(const char* text) {
  uint64_t h = 1469598103934665603ull; /* FNV-1a: a fixed-size record on the wire */
  for (const char* p = text; *p; p++) h = (h ^ (uint8_t)*p) * 1099511628211ull;
  return h ? h : 1;
}

int pairTcpPathCount(const pairState* st) {
  int n = 0;
  for (int i = 0; i < st->nLocal; i++)
    for (int j = 0; j < st->nRemote; j++) n += st->local[i].family == st->remote[j].family;
  return n;
}

/* Do addresses a and b share a's subnet (its prefix)? */
static int sameSubnet(const railnetPairIface* a, const railnetPairIface* b) {
  int bits = a->prefix, len = a->family == 4 ? 4 : 16;
  if (a->family != b->family || bits > 8 * len) return 0;
  for (int i = 0; i < len && bits > 0; i++, bits -= 8) {
    uint8_t mask = (uint8_t)(bits >= 8 ? 0xff : 0xff << (8 - bits));
    if ((a->addr[i] & mask) != (b->addr[i] & mask)) return 0;
  }
  return 1;
}

/* May a server probe the client's address r? Every address when the session carries a job
 * token (st->scoped 0); else only the client's own: the address its connection came from, and
 * addresses on this host's subnets (a stranger cannot make it connect to a third host on
 * another network, where the greeting alone would still tell which ports are open). */
int pairProbeInScope(const pairState* st, const railnetPairIface* r) {
  if (!st->scoped) return 1;
  int len = r->family == 4 ? 4 : 16;
  if (r->family == st->ctlFamily && memcmp(r->addr, st->ctlAddr, (size_t)len) == 0) return 1;
  for (int i = 0; i < st->nLocal; i++)
    if (sameSubnet(&st->local[i], r)) return 1;
  return 0;
}

void pairStateScope(pairState* st, int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof(ss);
  st->scoped = 1;
  if (getpeername(fd, (struct sockaddr*)&ss, &len) != 0) return; /* then only this host's subnets */
  if (ss.ss_family == AF_INET) {
    st->ctlFamily = 4;
    memcpy(st->ctlAddr, &((struct sockaddr_in*)&ss)->sin_addr, 4);
  } else if (ss.ss_family == AF_INET6) {
    const struct in6_addr* a = &((struct sockaddr_in6*)&ss)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(a)) st->ctlFamily = 4, memcpy(st->ctlAddr, a->s6_addr + 12, 4);
    else st->ctlFamily = 6, memcpy(st->ctlAddr, a->s6_addr, 16);
  }
}

/* 0: the pair NCCL's devices use on both sides, 1: the same subnet, 2: any other. */
static int probeRank(const railnetPairIface* l, const railnetPairIface* r) {
  if (l->selected && l->selected == r->selected) return 0;
  return sameSubnet(l, r) ? 1 : 2;
}

/* A probe's timeout within the check's end (st->endNs, 0: none): timeoutMs or less, 0 when the
 * end has passed. */
static int probeBudgetMs(const pairState* st, int timeoutMs) {
  uint64_t now = railnetClockNs();
  if (st->endNs == 0) return timeoutMs;
  if (now >= st->endNs) return 0;
  uint64_t left = (st->endNs - now) / 1000000ull;
  return left < (uint64_t)timeoutMs ? (int)left : timeoutMs;
}

void pairProbeOne(const pairState* st, const railnetPairIface* l, const railnetPairIface* r, uint16_t port,
                  int timeoutMs, railnetPairTcpResult* out) {
  if (!pairProbeInScope(st, r)) {
    railnetPairTcpOutOfScope(l, r, out);
    return;
  }
  int ms = probeBudgetMs(st, timeoutMs);
  if (ms <= 0) {
    railnetPairTcpNotRun(l, r, out);
    return;
  }
  railnetPairTcpProbeRun(l, r, port, ms, PAIR_PROBE_BYTES, st->peer.listenToken, out);
  /* cut short by the check's end, not by the network: not a verdict on the path */
  if (ms < timeoutMs && out->step != RAILNET_PAIR_TCP_OK && out->err == ETIMEDOUT) out->step = RAILNET_PAIR_TCP_BOUND;
}

void pairProbeTcp(pairState* st, uint16_t peerPort, int timeoutMs, const char* label) {
  int total = pairTcpPathCount(st), k = 0;
  st->nOut = 0;
  /* the paths that matter first (NCCL's pairs, then each subnet's), so that a check cut by
   * its bound (--cluster on hosts with many addresses) has probed those */
  for (int rank = 0; rank < 3; rank++)
    for (int i = 0; i < st->nLocal; i++) {
      for (int j = 0; j < st->nRemote && st->nOut < RAILNET_PAIR_MAX_RESULTS; j++) {
        const railnetPairIface *l = &st->local[i], *r = &st->remote[j];
        if (l->family != r->family || probeRank(l, r) != rank) continue;
        char a[INET6_ADDRSTRLEN];
        if (label)
          pairProgress("  %s [%d/%d] %s -> %s (%s)", label, ++k, total, l->name,
                       railnetPairAddrString(r->family, r->addr, a, sizeof(a)), r->name);
        pairProbeOne(st, l, r, peerPort, timeoutMs, &st->out[st->nOut++]);
      }
    }
  if (label) pairProgress(NULL);
}
