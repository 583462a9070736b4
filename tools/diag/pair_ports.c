/* The ephemeral ports of a pair check (pair.h): NCCL's bootstrap, proxy and Socket transport
 * listeners bind port 0, so the kernel gives them ports of net.ipv4.ip_local_port_range, and
 * every connection between the nodes goes to such a port. A firewall that passes the
 * probe's service port but not that range lets the service-port probes work while NCCL's
 * job hangs: each side listens on a few ports of its range too (the kernel's own pick, and
 * the two ends of the range), and the client probes the peer's from an address pair that
 * worked on the service port. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "diag.h"
#include "pair.h"

/* A listener on the first free port from `from` stepping by `step` (at most 32 tries). */
static void listenNear(pairListener* l, int k, int from, int step, int lo, int hi) {
  for (int t = 0, p = from; t < 32 && p >= lo && p <= hi; t++, p += step)
    if (railnetPairListen((uint16_t)p, &l->ephFd[k], &l->ephPort[k]) == 0) return;
  l->ephFd[k] = -1, l->ephPort[k] = 0;
}

void pairListenEphemeral(pairListener* l) {
  char line[64];
  int lo = 0, hi = 0;
  if (readLine("/proc/sys/net/ipv4/ip_local_port_range", line, sizeof(line)) == 0 &&
      sscanf(line, "%d %d", &lo, &hi) == 2 && lo > 0 && lo <= hi && hi <= 65535) {
    l->portLow = (uint16_t)lo, l->portHigh = (uint16_t)hi;
  } else {
    lo = hi = 0;
  }
  /* the kernel's pick, exactly as NCCL gets its ports */
  if (railnetPairListen(0, &l->ephFd[0], &l->ephPort[0]) != 0) l->ephFd[0] = -1, l->ephPort[0] = 0;
  if (lo == 0) return;
  listenNear(l, 1, lo, 1, lo, hi);  /* the low end */
  listenNear(l, 2, hi, -1, lo, hi); /* the high end */
  if (l->ephPort[2] && l->ephPort[2] == l->ephPort[1]) close(l->ephFd[2]), l->ephFd[2] = -1, l->ephPort[2] = 0;
}

static const railnetPairIface* findIface(const railnetPairIface* list, int n, const char* name, const uint8_t* addr) {
  for (int i = 0; i < n; i++)
    if (!strcmp(list[i].name, name) && !memcmp(list[i].addr, addr, 16)) return &list[i];
  return NULL;
}

/* The probe here -> peer that worked on the service port, NCCL's device 0 pair first. */
static const railnetPairTcpResult* workingOut(const pairState* st) {
  const railnetPairTcpResult* any = NULL;
  for (int r = 0; r < st->nOut; r++) {
    const railnetPairTcpResult* o = &st->out[r];
    if (o->step != RAILNET_PAIR_TCP_OK) continue;
    const railnetPairIface* L = findIface(st->local, st->nLocal, o->localIf, o->localAddr);
    const railnetPairIface* R = findIface(st->remote, st->nRemote, o->peerIf, o->peerAddr);
    if (L && R && L->selected == 1 && R->selected == 1) return o;
    if (any == NULL) any = o;
  }
  return any;
}

void pairProbeEphemeral(pairState* st, int timeoutMs) {
  st->nEph = 0;
  const railnetPairTcpResult* o = workingOut(st);
  if (o == NULL) return;
  const railnetPairIface* L = findIface(st->local, st->nLocal, o->localIf, o->localAddr);
  const railnetPairIface* R = findIface(st->remote, st->nRemote, o->peerIf, o->peerAddr);
  if (L == NULL || R == NULL) return;
  for (int k = 0; k < RAILNET_PAIR_EPHEMERAL; k++) {
    uint16_t port = st->peer.ephemeralPorts[k];
    if (port == 0 || port == st->peer.probePort) continue;
    pairProgress("  TCP to the peer's ephemeral port %u", port);
    pairProbeOne(st, L, R, port, timeoutMs, &st->eph[st->nEph]);
    st->ephPort[st->nEph++] = port;
  }
  pairProgress(NULL);
}

int pairEphemeralFailed(const pairState* st, char* failed, size_t size, int* err) {
  size_t len = 0;
  int n = 0;
  failed[0] = '\0', *err = 0;
  for (int k = 0; k < st->nEph; k++) {
    const railnetPairTcpResult* r = &st->eph[k];
    if (r->step == RAILNET_PAIR_TCP_OK || r->step == RAILNET_PAIR_TCP_GREET || r->step >= RAILNET_PAIR_TCP_BOUND) continue;
    if (len < size) len += (size_t)sfmt(failed + len, size - len, "%s%u", len ? ", " : "", st->ephPort[k]);
    if (*err == 0) *err = r->err;
    n++;
  }
  return n;
}

/* One row per ephemeral port probed. */
static void ephemeralRows(const pairState* st) {
  jOpen("ephemeral", '[');
  for (int k = 0; k < st->nEph; k++) {
    const railnetPairTcpResult* r = &st->eph[k];
    int ok = r->step == RAILNET_PAIR_TCP_OK;
    char how[96];
    if (ok) sfmt(how, sizeof(how), "ok %.1f ms", r->usec / 1000.0);
    else sfmt(how, sizeof(how), "FAIL %s: %s", railnetPairTcpStepName(r->step), strerror(r->err));
    text("    port %-5u %s\n", st->ephPort[k], how);
    jOpen(NULL, '{');
    jInt("port", st->ephPort[k]);
    jBool("ok", ok);
    jStr("step", railnetPairTcpStepName(r->step));
    jStr("error", r->err ? strerror(r->err) : NULL);
    jClose('}');
  }
  jClose(']');
}

int pairEphemeralReport(const pairState* st) {
  if (st->nEph == 0) {
    if (st->peer.ephemeralPorts[0] == 0) text("  (the peer listens on no ephemeral port: an older railnet-diag?)\n");
    return 1;
  }
  const railnetPairTcpResult* o = &st->eph[0];
  char a[INET6_ADDRSTRLEN], range[32] = "its ephemeral range";
  if (st->peer.portLow) sfmt(range, sizeof(range), "%u-%u", st->peer.portLow, st->peer.portHigh);
  text("  ephemeral ports of the peer (ip_local_port_range %s: where NCCL's listeners are), from %s here to %s:\n",
       range, o->localIf, railnetPairAddrString(o->family, o->peerAddr, a, sizeof(a)));
  char failed[128];
  int err = 0;
  ephemeralRows(st);
  if (pairEphemeralFailed(st, failed, sizeof(failed), &err) == 0) return 1;
  char fix[512];
  sfmt(fix, sizeof(fix), "open TCP %s inbound on the peer (e.g. nft add rule inet filter input tcp dport %s accept), "
       "or narrow it with net.ipv4.ip_local_port_range (sysctl -w net.ipv4.ip_local_port_range=\"50000 51000\" on "
       "every node) and open exactly that range", range, range);
  PROBLEM(fix, "a firewall passes port %u but not the ephemeral range %s that NCCL's sockets use: TCP from %s here "
          "to the peer's %s works on port %u and fails on port(s) %s (%s); NCCL's bootstrap, proxy and Socket "
          "transport connect to such ports, so the job hangs where this check passed",
          st->peer.probePort, range, o->localIf, a, st->peer.probePort, failed, strerror(err));
  return 0;
}
