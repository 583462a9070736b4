/* railnet-diag --pair's report: the TCP table (both directions per address pair, the
 * interfaces ncclFindInterfaces picks on each side and whether NCCL's pairs of them work,
 * MTUs), the RDMA table (per port x GID path: works, or the step, errno and hint of the
 * failure; which port reaches which), and the verdict: the settings to use on each side and
 * the problems found, each with its cause and fix. PROBLEM only for the chosen paths. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include "diag.h"
#include "pair.h"
#include "socket.h"

/* ---------------------------------------------------------------- TCP */

/* The peer's probe of (its iface R -> our address L), or NULL. */
static const railnetPairTcpResult* findIn(const pairState* st, const railnetPairTcpResult* out) {
  for (int k = 0; k < st->nIn; k++) {
    const railnetPairTcpResult* in = &st->in[k];
    if (in->family == out->family && !memcmp(in->localAddr, out->peerAddr, 16) && !memcmp(in->peerAddr, out->localAddr, 16) &&
        !strcmp(in->localIf, out->peerIf) && !strcmp(in->peerIf, out->localIf))
      return in;
  }
  return NULL;
}

static const railnetPairIface* ifaceOf(const railnetPairIface* list, int n, const char* name, const uint8_t* addr) {
  for (int i = 0; i < n; i++)
    if (!strcmp(list[i].name, name) && !memcmp(list[i].addr, addr, 16)) return &list[i];
  return NULL;
}

/* Does the path work: here -> peer worked, and the peer's probe back worked or was left out
 * because that server probes only its client's own addresses (no token, RAILNET_PAIR_TCP_SCOPE:
 * no verdict on that direction, tcpSection says so once). */
static int pathOk(const railnetPairTcpResult* out, const railnetPairTcpResult* in) {
  return out->step == RAILNET_PAIR_TCP_OK && in && (in->step == RAILNET_PAIR_TCP_OK || in->step == RAILNET_PAIR_TCP_SCOPE);
}

static const char* tcpStatus(const railnetPairTcpResult* r, char* buf, size_t size) {
  if (r == NULL) return sfmt(buf, size, "not probed"), buf;
  if (r->step == RAILNET_PAIR_TCP_SCOPE) return sfmt(buf, size, "not probed (not on its subnets)"), buf;
  if (r->step == RAILNET_PAIR_TCP_OK) sfmt(buf, size, "ok %.1f ms", r->usec / 1000.0);
  else sfmt(buf, size, "FAIL %s: %s", railnetPairTcpStepName(r->step), strerror(r->err));
  return buf;
}

static void jTcp(const char* key, const railnetPairTcpResult* r) {
  jOpen(key, '{');
  jBool("ok", r && r->step == 0);
  if (r) {
    jStr("step", railnetPairTcpStepName(r->step));
    jInt("errno", r->err);
    jStr("error", r->err ? strerror(r->err) : NULL);
    jNum("ms", r->usec / 1000.0);
  }
  jClose('}');
}

static int samePrefix(const railnetPairIface* a, const railnetPairIface* b) {
  if (a->family != b->family || a->prefix != b->prefix) return 0;
  int bits = a->prefix;
  for (int i = 0; i < 16 && bits > 0; i++, bits -= 8) {
    uint8_t mask = bits >= 8 ? 0xff : (uint8_t)(0xff << (8 - bits));
    if ((a->addr[i] & mask) != (b->addr[i] & mask)) return 0;
  }
  return 1;
}

const char* pairTcpHint(const railnetPairTcpResult* r) {
  if (r && r->step == RAILNET_PAIR_TCP_SCOPE)
    return "not probed: a server without a token probes only its client's own addresses; give both ends the same "
           "--token T to probe every path";
  if (r && r->step == RAILNET_PAIR_TCP_BOUND)
    return "not probed: the check's bound was reached first (many addresses); run railnet-diag --pair between the "
           "two nodes to probe every path";
  if (r && r->step == RAILNET_PAIR_TCP_GREET)
    return "something answered at that address and port but not the peer's railnet-diag (another program owns "
           "the port, or a proxy/NAT sits between): it was sent nothing; check that the address is the peer's";
  switch (r ? r->err : 0) {
    case ETIMEDOUT: return "packets are dropped on the way (a firewall or ACL on the TCP ports, or no route back)";
    case ECONNREFUSED: return "the peer refused it (a firewall 'reject' rule, or nothing listens on that address)";
    case ENETUNREACH:
    case EHOSTUNREACH: return "no route from that interface to that address (another subnet or rail)";
    default: return "see the error";
  }
}

/* One row per (local, peer) address pair; judges the ones worth a finding. */
static void tcpRow(const pairState* st, const railnetPairTcpResult* o, int* anyOk) {
  const railnetPairTcpResult* in = findIn(st, o);
  const railnetPairIface* L = ifaceOf(st->local, st->nLocal, o->localIf, o->localAddr);
  const railnetPairIface* R = ifaceOf(st->remote, st->nRemote, o->peerIf, o->peerAddr);
  char la[INET6_ADDRSTRLEN], ra[INET6_ADDRSTRLEN], s1[96], s2[96];
  railnetPairAddrString(o->family, o->localAddr, la, sizeof(la));
  railnetPairAddrString(o->family, o->peerAddr, ra, sizeof(ra));
  int ok = pathOk(o, in);
  int chosen = L && R && L->selected && L->selected == R->selected;
  *anyOk |= ok;
  text("  %-8s %-15s %-5u %s %-8s %-15s %-5u %-36s %s\n", o->localIf, la, L ? L->mtu : 0, chosen ? "*" : " ",
       o->peerIf, ra, R ? R->mtu : 0, tcpStatus(o, s1, sizeof(s1)), tcpStatus(in, s2, sizeof(s2)));
  jOpen(NULL, '{');
  jStr("here_if", o->localIf);
  jStr("here_addr", la);
  jInt("here_mtu", L ? L->mtu : 0);
  jStr("peer_if", o->peerIf);
  jStr("peer_addr", ra);
  jInt("peer_mtu", R ? R->mtu : 0);
  jBool("chosen", chosen);
  jTcp("here_to_peer", o);
  jTcp("peer_to_here", in);
  jBool("ok", ok);
  jClose('}');
  if (!L || !R) return;
  if (ok && L->mtu && R->mtu && L->mtu != R->mtu)
    WARNING("set the same MTU on both ends (ip link set <if> mtu N) and on the switch ports between them",
            "MTU differs on %s (%u here) and the peer's %s (%u): large frames are dropped or fragmented", L->name,
            L->mtu, R->name, R->mtu);
  if (!ok && !chosen && samePrefix(L, R)) {
    const railnetPairTcpResult* bad = o->step ? o : in;
    WARNING(pairTcpHint(bad), "TCP between %s (%s) and the peer's %s (%s) fails in the same subnet: %s", la,
            L->name, ra, R->name, bad ? strerror(bad->err) : "not probed");
  }
}

static void chosenPair(const pairState* st, int k, const railnetPairIface** L, const railnetPairIface** R) {
  *L = *R = NULL;
  for (int i = 0; i < st->nLocal && !*L; i++) *L = st->local[i].selected == k + 1 ? &st->local[i] : NULL;
  for (int j = 0; j < st->nRemote && !*R; j++) *R = st->remote[j].selected == k + 1 ? &st->remote[j] : NULL;
}

int pairTcpDeviceWorks(const pairState* st, int k, const railnetPairTcpResult** fail) {
  const railnetPairIface *L, *R;
  chosenPair(st, k, &L, &R);
  if (fail) *fail = NULL;
  if (!L || !R) return -1;
  for (int r = 0; r < st->nOut; r++) {
    const railnetPairTcpResult* o = &st->out[r];
    if (strcmp(o->localIf, L->name) || strcmp(o->peerIf, R->name)) continue;
    const railnetPairTcpResult* in = findIn(st, o);
    if (pathOk(o, in)) return 1;
    if (fail && !*fail) *fail = o->step ? o : in;
  }
  return 0;
}

/* ncclFindInterfaces' choice here, read again: the probes leave out interfaces other hosts
 * cannot reach (loopback, link-local only), so st->local does not hold them. */
typedef struct {
  char names[MAX_IFS * MAX_IF_NAME_SIZE];
  int n;
} localChoice;
static void readLocalChoice(localChoice* c) {
  union ncclSocketAddress addrs[MAX_IFS];
  memset(c, 0, sizeof(*c));
  if (railnetFindInterfaces(c->names, addrs, MAX_IF_NAME_SIZE, MAX_IFS, &c->n, NULL) != ncclSuccess) c->n = 0;
}

/* The highest device index either side's choice gives a probed interface, plus one. */
static int chosenCount(const pairState* st) {
  int n = 0;
  for (int i = 0; i < st->nLocal; i++) n = st->local[i].selected > n ? st->local[i].selected : n;
  for (int j = 0; j < st->nRemote; j++) n = st->remote[j].selected > n ? st->remote[j].selected : n;
  return n;
}

static const char* chosenFix =
    "set NCCL_SOCKET_IFNAME on both nodes to the interfaces that work (see the verdict; e.g. add ',lo' to a '^' "
    "list); railnet-diag without options on each node says why the choice is what it is";

/* NCCL pairs device k here with the peer's device k: does TCP work for each k? A device that
 * is no probed interface on either side (lo, link-local) cannot reach the peer: a problem,
 * and so is a choice in which no device works. */
static int judgeChosen(const pairState* st, char* here, size_t hs, char* peer, size_t ps) {
  size_t hl = 0, pl = 0;
  int allOk = 1, any = 0, max = chosenCount(st);
  localChoice lc;
  readLocalChoice(&lc);
  for (int k = 0; k < RAILNET_PAIR_MAX_IFACES; k++) {
    const railnetPairIface *L, *R;
    chosenPair(st, k, &L, &R);
    if (!L && !R && k >= max) break;
    const char* lname = L ? L->name : k < lc.n ? lc.names + k * MAX_IF_NAME_SIZE : NULL;
    if (lname && hl < hs) hl += (size_t)sfmt(here + hl, hs - hl, "%s%s [%d]", hl ? ", " : "", lname, k);
    if (R && pl < ps) pl += (size_t)sfmt(peer + pl, ps - pl, "%s%s [%d]", pl ? ", " : "", R->name, k);
    if (!L && !R) {
      allOk = 0;
      text("  device %d: %s here, not an interface that reaches the peer: FAILS\n", k, lname ? lname : "?");
      PROBLEM(chosenFix, "ncclFindInterfaces picks %s as device %d here, an interface other hosts cannot "
              "reach (loopback or link-local), and the peer has no probed interface as device %d either: NCCL's "
              "bootstrap and device %d cannot connect", lname ? lname : "an unprobed interface", k, k, k);
      continue;
    }
    if (!L || !R) continue;
    any = 1;
    const railnetPairTcpResult* fail = NULL;
    int ok = pairTcpDeviceWorks(st, k, &fail) == 1;
    text("  device %d: %s here <-> %s on the peer: %s\n", k, L->name, R->name, ok ? "works" : "FAILS");
    if (!ok) {
      allOk = 0;
      char fix[400];
      sfmt(fix, sizeof(fix), "%s; set NCCL_SOCKET_IFNAME to the interfaces that work (see the verdict) or fix the path",
           pairTcpHint(fail));
      PROBLEM(fix, "ncclFindInterfaces picks %s here and %s on the peer (device %d), and TCP between them fails%s%s%s",
              L->name, R->name, k, fail ? " (" : "", fail ? strerror(fail->err) : "", fail ? ")" : "");
    }
  }
  if (!any && allOk)
    PROBLEM(chosenFix, "no chosen path works: ncclFindInterfaces picks %s here and %s on the peer, and no "
            "device k is an interface on both nodes that reaches the other one",
            hl ? here : "no interface that reaches the peer", pl ? peer : "no interface that reaches this node");
  return any ? allOk : 0;
}

static int tcpSection(const pairState* st) {
  section("pair_tcp", "TCP: every address here x every address of the peer, both directions");
  text("  %-8s %-15s %-5s   %-8s %-15s %-5s %-36s %s\n", "here", "address", "mtu", "peer", "address", "mtu",
       "here -> peer", "peer -> here");
  int anyOk = 0;
  jOpen("paths", '[');
  for (int r = 0; r < st->nOut; r++) tcpRow(st, &st->out[r], &anyOk);
  jClose(']');
  if (!st->inReceived) text("  (the peer's probes of this host did not come back)\n");
  int unscoped = 0;
  for (int r = 0; r < st->nIn; r++) unscoped += st->in[r].step == RAILNET_PAIR_TCP_SCOPE;
  if (unscoped)
    WARNING("start both ends with the same --token T (railnet-diag --serve --token T, railnet-diag --pair HOST "
            "--token T) to have the peer probe every address of this host",
            "the peer did not probe %d path(s) to this host's addresses: a --serve without a token probes only its "
            "client's own addresses (the one it connected from, and those on the server's subnets), so the direction "
            "peer -> here of those paths (routed rails) is not checked", unscoped);
  char here[512] = "", peer[512] = "";
  text("  (* = both ends are the same device index in ncclFindInterfaces' choice; NCCL pairs device k with device k)\n");
  int ok = judgeChosen(st, here, sizeof(here), peer, sizeof(peer));
  ok &= pairEphemeralReport(st);
  text("  ncclFindInterfaces picks here: %s; on the peer: %s\n", here[0] ? here : "none", peer[0] ? peer : "none");
  jStr("chosen_here", here);
  jStr("chosen_peer", peer);
  jBool("chosen_ok", ok);
  for (int j = 0; j < st->nRemote; j++)
    for (int i = 0; i < st->nLocal; i++)
      if (st->remote[j].family == st->local[i].family && !memcmp(st->remote[j].addr, st->local[i].addr, 16)) {
        char a[INET6_ADDRSTRLEN];
        WARNING("give every node its own addresses (both ends on one host only in a test)",
                "the peer's %s has the address %s of this host's %s: a duplicate address, or both ends on one host",
                st->remote[j].name, railnetPairAddrString(st->local[i].family, st->local[i].addr, a, sizeof(a)),
                st->local[i].name);
        break;
      }
  if (!anyOk)
    PROBLEM("check the cabling, addresses, routes and firewalls between the two nodes (TCP on the probe port)",
            "no address pair works in both directions: the nodes cannot bootstrap NCCL");
  return ok;
}

void pairWorkingIfaces(const pairState* st, int side, char* buf, size_t size) {
  size_t len = 0;
  const railnetPairIface* list = side ? st->remote : st->local;
  int n = side ? st->nRemote : st->nLocal;
  buf[0] = '\0';
  for (int i = 0; i < n; i++) {
    int ok = 0, dup = 0;
    for (int j = 0; j < i; j++) dup |= !strcmp(list[j].name, list[i].name);
    for (int r = 0; r < st->nOut && !ok && !dup; r++) {
      const railnetPairTcpResult* o = &st->out[r];
      const railnetPairTcpResult* in = findIn(st, o);
      ok = pathOk(o, in) && !strcmp(side ? o->peerIf : o->localIf, list[i].name);
    }
    if (ok && len < size) len += (size_t)sfmt(buf + len, size - len, "%s%s", len ? "," : "=", list[i].name);
  }
}

/* ---------------------------------------------------------------- verdict */

void pairReport(pairState* st) {
  int tcpOk = tcpSection(st);
  int rdmaOk = rdmaSection(st);
  if (st->bw) pairBwReport(st);
  section("pair_verdict", "Verdict");
  char hereIf[256], peerIf[256];
  pairWorkingIfaces(st, 0, hereIf, sizeof(hereIf));
  pairWorkingIfaces(st, 1, peerIf, sizeof(peerIf));
  char hereIb[512] = "", peerIb[512] = "", hereGid[64] = "", peerGid[64] = "";
  rdmaSettings(st, 0, hereIb, sizeof(hereIb), hereGid, sizeof(hereGid));
  rdmaSettings(st, 1, peerIb, sizeof(peerIb), peerGid, sizeof(peerGid));
  text("  here (%s):  NCCL_SOCKET_IFNAME=%s%s%s%s%s\n", st->self.host, hereIf[0] ? hereIf : "(none works)",
       hereIb[0] ? "  NCCL_IB_HCA=" : "", hereIb, hereGid[0] ? "  NCCL_IB_GID_INDEX=" : "", hereGid);
  text("  peer (%s):  NCCL_SOCKET_IFNAME=%s%s%s%s%s\n", st->peer.host, peerIf[0] ? peerIf : "(none works)",
       peerIb[0] ? "  NCCL_IB_HCA=" : "", peerIb, peerGid[0] ? "  NCCL_IB_GID_INDEX=" : "", peerGid);
  jOpen("here", '{');
  jStr("NCCL_SOCKET_IFNAME", hereIf[0] ? hereIf : NULL);
  jStr("NCCL_IB_HCA", hereIb[0] ? hereIb : NULL);
  jStr("NCCL_IB_GID_INDEX", hereGid[0] ? hereGid : NULL);
  jClose('}');
  jOpen("peer", '{');
  jStr("NCCL_SOCKET_IFNAME", peerIf[0] ? peerIf : NULL);
  jStr("NCCL_IB_HCA", peerIb[0] ? peerIb : NULL);
  jStr("NCCL_IB_GID_INDEX", peerGid[0] ? peerGid : NULL);
  jClose('}');
  jBool("tcp_chosen_ok", tcpOk);
  jStr("rdma_chosen", rdmaOk > 0 ? "ok" : rdmaOk == 0 ? "fails" : "not available");
  text("  the chosen paths: TCP %s, RDMA %s\n", tcpOk ? "works" : "FAILS",
       rdmaOk > 0 ? "works" : rdmaOk == 0 ? "FAILS" : "not available on both sides");
}

/* ---------------------------------------------------------------- --bw */

void pairBwReport(const pairState* st) {
  section("pair_bw", "Bandwidth (--bw: through railnet's transports, 1 MiB messages, 4 in flight, both ways)");
  jOpen("paths", '[');
  for (int i = 0; i < st->nBw; i++) {
    const pairBw* b = &st->bwRes[i];
    for (int d = 0; d < 2; d++) {
      const char* arrow = d ? "<-" : "->";
      if (b->err[d])
        text("  %-7s %-20s %s %-20s FAIL %s (%s)\n", b->net, b->here, arrow, b->peer, b->why[d], strerror(b->err[d]));
      else
        text("  %-7s %-20s %s %-20s %.1f MB/s%s%s\n", b->net, b->here, arrow, b->peer, b->mbps[d], b->why[d][0] ? "  " : "",
             b->why[d]);
      jOpen(NULL, '{');
      jStr("transport", b->net);
      jStr("here", b->here);
      jStr("peer", b->peer);
      jStr("direction", d ? "peer_to_here" : "here_to_peer");
      jBool("ok", b->err[d] == 0);
      if (b->err[d]) jStr("failure", b->why[d]);
      else jNum("MBps", b->mbps[d]);
      if (b->err[d] == 0 && b->why[d][0]) jStr("note", b->why[d]);
      jClose('}');
      if (b->err[d])
        WARNING("run railnet-perf between the two nodes with NCCL_DEBUG=INFO for the transport's own messages",
                "the %s transport could not move data %s %s %s although the probe worked: %s", b->net, b->here,
                d ? "<-" : "->", b->peer, b->why[d]);
    }
  }
  jClose(']');
  if (st->nBw == 0) text("  no working path to measure\n");
}
