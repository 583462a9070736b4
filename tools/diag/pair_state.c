/* The state of one pair check (pair.h): this host's side of it (hello, interfaces, RDMA
 * entries) and the TCP probes from this host's addresses to the peer's, which the client and
 * the server both run. */
#include <arpa/inet.h>
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

int pairTcpPathCount(const pairState* st) {
  int n = 0;
  for (int i = 0; i < st->nLocal; i++)
    for (int j = 0; j < st->nRemote; j++) n += st->local[i].family == st->remote[j].family;
  return n;
}

void pairProbeTcp(pairState* st, uint16_t peerPort, int timeoutMs, const char* label) {
  int total = pairTcpPathCount(st), k = 0;
  st->nOut = 0;
  for (int i = 0; i < st->nLocal; i++) {
    for (int j = 0; j < st->nRemote && st->nOut < RAILNET_PAIR_MAX_RESULTS; j++) {
      if (st->local[i].family != st->remote[j].family) continue;
      char a[INET6_ADDRSTRLEN];
      if (label)
        pairProgress("  %s [%d/%d] %s -> %s (%s)", label, ++k, total, st->local[i].name,
                     railnetPairAddrString(st->remote[j].family, st->remote[j].addr, a, sizeof(a)), st->remote[j].name);
      railnetPairTcpProbeRun(&st->local[i], &st->remote[j], peerPort, timeoutMs, PAIR_PROBE_BYTES,
                             st->peer.listenToken, &st->out[st->nOut++]);
    }
  }
  if (label) pairProgress(NULL);
}
