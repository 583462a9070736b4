/* railnet-diag --pair HOST[:P]: the client's side of the conversation (pairproto.h). It
 * exchanges interfaces and RDMA entries with the server, prints the plan and the time it is
 * bounded by, probes every local x peer address pair, asks the server for its probes of
 * this host, runs the RDMA paths, and hands everything to the report. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "diag.h"
#include "pair.h"
#include "railnet.h"

/* HOST[:P] (or [v6]:P) to a connected control socket *fd within 5 s; 0 or an errno (why set). */
static int connectControl(const char* spec, int defPort, pairState* st, int* fdOut, char* why, size_t whySize) {
  char host[256];
  int port = defPort;
  snprintf(host, sizeof(host), "%s", spec);
  char* colon = strrchr(host, ':');
  if (host[0] == '[') {
    char* close = strchr(host, ']');
    if (close && close[1] == ':') port = atoi(close + 2);
    if (close) *close = '\0';
    memmove(host, host + 1, strlen(host));
  } else if (colon && strchr(host, ':') == colon) {
    *colon = '\0';
    port = atoi(colon + 1);
  }
  if (port <= 0 || port > 65535) {
    snprintf(why, whySize, "bad port in '%s'", spec);
    return EINVAL;
  }
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_socktype = SOCK_STREAM;
  int g = getaddrinfo(host, NULL, &hints, &res);
  if (g != 0 || res == NULL) {
    snprintf(why, whySize, "cannot resolve '%s': %s", host, gai_strerror(g));
    return EHOSTUNREACH;
  }
  int e = EHOSTUNREACH, fd = -1;
  for (struct addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    uint8_t addr[16];
    int fam = a->ai_family == AF_INET ? 4 : 6;
    if (fam == 4) memcpy(addr, &((struct sockaddr_in*)a->ai_addr)->sin_addr, 4);
    else memcpy(addr, &((struct sockaddr_in6*)a->ai_addr)->sin6_addr, 16);
    char txt[INET6_ADDRSTRLEN];
    railnetPairAddrString(fam, addr, txt, sizeof(txt));
    if (strcmp(host, txt) == 0) snprintf(st->peerName, sizeof(st->peerName), "%s port %d", txt, port);
    else snprintf(st->peerName, sizeof(st->peerName), "%s (%s port %d)", host, txt, port);
    e = railnetPairConnectFrom(NULL, fam, addr, (uint16_t)port, railnetClockNs() + 5000000000ull, &fd);
  }
  freeaddrinfo(res);
  if (e) {
    snprintf(why, whySize, "cannot connect to %s: %s", st->peerName, strerror(e));
    return e;
  }
  *fdOut = fd;
  return 0;
}

/* The earlier of now + ms and the whole check's end (st->endNs, 0: none yet). */
static uint64_t phaseEnd(const pairState* st, uint64_t ms) {
  uint64_t dl = railnetClockNs() + ms * 1000000ull;
  return st->endNs && st->endNs < dl ? st->endNs : dl;
}

/* HELLO, IFACES and RDMA_PORTS both ways, within 10 s and the check's end; 0 or an errno with why. */
static int exchangeFacts(pairState* st, int fd, char* why) {
  uint64_t dl = phaseEnd(st, 10000);
  railnetPairMsg m;
  int e = railnetPairSend(fd, RAILNET_PAIR_HELLO, &st->self, 1, dl);
  if (e == 0) e = railnetPairExpect(fd, RAILNET_PAIR_HELLO, &m, dl, why);
  if (e) return e;
  st->peer = *m.u.hello;
  railnetPairFree(&m);
  if (st->peer.jobToken != st->self.jobToken) { /* before anything of this host goes to it */
    snprintf(why, 128, "the peer's HELLO carries %s",
             st->self.jobToken ? (st->peer.jobToken ? "another token" : "no token (give it the same --token)")
                               : "a token (give this side the same --token)");
    return EPROTO;
  }
  if ((e = railnetPairSend(fd, RAILNET_PAIR_IFACES, st->local, (uint32_t)st->nLocal, dl)) != 0 ||
      (e = railnetPairExpect(fd, RAILNET_PAIR_IFACES, &m, dl, why)) != 0)
    return e;
  st->nRemote = (int)m.count;
  if (m.count) memcpy(st->remote, m.u.ifaces, m.count * sizeof(*m.u.ifaces));
  railnetPairFree(&m);
  if ((e = railnetPairSend(fd, RAILNET_PAIR_RDMA_PORTS, st->lr, (uint32_t)st->nLr, dl)) != 0 ||
      (e = railnetPairExpect(fd, RAILNET_PAIR_RDMA_PORTS, &m, dl, why)) != 0)
    return e;
  st->nRr = (int)m.count;
  if (m.count) memcpy(st->rr, m.u.rdma, m.count * sizeof(*m.u.rdma));
  railnetPairFree(&m);
  return 0;
}

/* The server's probes of this host; 0 or an errno. */
static int peerProbes(pairState* st, int fd, int nIn, char* why) {
  uint64_t dl = phaseEnd(st, (uint64_t)nIn * (uint64_t)st->self.timeoutMs + PAIR_REPLY_MS), now = railnetClockNs();
  uint64_t margin = PAIR_REPLY_MS * 1000000ull;
  /* the peer's probes end within what this side waits for them, less the answer's margin */
  railnetPairTcpRun run = {(uint32_t)(dl > now + margin ? (dl - now - margin) / 1000000ull : 0)};
  railnetPairMsg m;
  pairProgress("  TCP from the peer: %d paths (the peer probes this host)", nIn);
  int e = railnetPairSend(fd, RAILNET_PAIR_TCP_RUN, &run, 1, dl);
  if (e == 0) e = railnetPairExpect(fd, RAILNET_PAIR_TCP_RESULTS, &m, dl, why);
  pairProgress(NULL);
  if (e) return e;
  st->nIn = (int)m.count;
  if (m.count) memcpy(st->in, m.u.tcp, m.count * sizeof(*m.u.tcp));
  st->inReceived = 1;
  railnetPairFree(&m);
  return 0;
}

/* Prints the plan and sets the end of the whole check: the sum of what each phase below may
 * take (runChecks bounds each by it, and all of them by the end). */
static void printPlan(pairState* st, int nIn) {
  int nOut = pairTcpPathCount(st), nRdma = pairRdmaPlan(st);
  int nBw = st->bw ? pairBwTargets(st) : 0;
  uint64_t ms = (uint64_t)(nOut + nIn + RAILNET_PAIR_EPHEMERAL) * PAIR_PROBE_MS + PAIR_REPLY_MS + /* TCP */
                (uint64_t)nRdma * 3 * PAIR_RDMA_MS + PAIR_REPLY_MS +                 /* RDMA */
                (uint64_t)nBw * 2 * (2 * PAIR_BW_MS + 2000 + PAIR_BW_AGAIN_MS) +  /* --bw both ways */
                PAIR_BYE_MS;
  uint64_t end = railnetClockNs() + ms * 1000000ull;
  if (st->quiet) { /* --cluster: within the bound rank 0 gave, nothing printed */
    st->endNs = st->endNs && st->endNs < end ? st->endNs : end;
    return;
  }
  st->endNs = end;
  double bound = (double)((ms + 999) / 1000);
  text("railnet-diag %s on %s: pair check with %s (railnet-diag %s on %s)\n", railnetVersion(), st->self.host,
       st->peerName, st->peer.version, st->peer.host);
  text("plan: %d TCP paths from here and %d from the peer (each <= %d ms), %d RDMA paths (each <= %d ms): "
       "%sat most %.0f s\n",
       nOut, nIn, PAIR_PROBE_MS, nRdma, 3 * PAIR_RDMA_MS, st->bw ? "--bw both ways on each working path, " : "", bound);
  jStr("peer", st->peerName);
  jStr("peer_host", st->peer.host);
  jStr("peer_version", st->peer.version);
  jInt("tcp_paths_out", nOut);
  jInt("tcp_paths_in", nIn);
  jInt("rdma_paths", nRdma);
  jNum("bound_s", bound);
}

static int runChecks(pairState* st, int fd, char* why, size_t whySize) {
  uint64_t greeted = 0;
  int e = railnetPairAwaitGreet(fd, 0, railnetClockNs() + PAIR_REPLY_MS * 1000000ull, &greeted);
  if (e) {
    snprintf(why, whySize, "%.300s greeted with no pair protocol GREET: %s (an older railnet-diag, or another program)",
             st->peerName, e == EPERM ? "other bytes" : strerror(e));
    return e;
  }
  if ((e = exchangeFacts(st, fd, why)) != 0) return e;
  if (st->peer.listenToken != greeted) {
    snprintf(why, whySize, "the peer's HELLO names another listener than the one that greeted");
    return EPROTO;
  }
  int nIn = 0;
  for (int i = 0; i < st->nRemote; i++)
    for (int j = 0; j < st->nLocal; j++) nIn += st->remote[i].family == st->local[j].family;
  printPlan(st, nIn);
  /* this side's probes take their share of the time left (the peer's probes of this host get
   * theirs): on hosts with many addresses the bound cuts them evenly */
  uint64_t end = st->endNs, now = railnetClockNs(), margin = 2 * PAIR_REPLY_MS * 1000000ull;
  int mine = pairTcpPathCount(st) + RAILNET_PAIR_EPHEMERAL;
  if (end > now + margin) st->endNs = now + (end - now - margin) / (uint64_t)(mine + nIn) * (uint64_t)mine;
  else st->endNs = now;
  pairProbeTcp(st, st->peer.probePort, PAIR_PROBE_MS, "TCP");
  pairProbeEphemeral(st, PAIR_PROBE_MS);
  st->endNs = end;
  if ((e = peerProbes(st, fd, nIn, why)) != 0) return e;
  pairRdmaRunClient(st, fd, phaseEnd(st, (uint64_t)st->nPaths * 3 * PAIR_RDMA_MS + PAIR_REPLY_MS));
  if (st->bw) pairBwRunClient(st, fd);
  railnetPairSend(fd, RAILNET_PAIR_BYE, NULL, 0, phaseEnd(st, PAIR_BYE_MS));
  return 0;
}

int pairCheckQuiet(pairState* st, const char* peer, uint64_t boundMs, char* why, size_t whySize) {
  st->quiet = 1;
  st->bw = 1;
  st->endNs = railnetClockNs() + boundMs * 1000000ull;
  int fd = -1;
  int e = connectControl(peer, RAILNET_PAIR_DEFAULT_PORT, st, &fd, why, whySize);
  if (e) return e;
  e = runChecks(st, fd, why, whySize);
  close(fd);
  return e;
}

int pairClient(const pairOptions* o) {
  pairState* st = (pairState*)calloc(1, sizeof(*st));
  pairListener l;
  if (st == NULL) return 1;
  int e = pairListen(&l, (uint16_t)o->port, 1);
  if (e) {
    PROBLEM("free a TCP port or pick one with --port", "cannot listen for the peer's probes: %s", strerror(e));
    free(st);
    return 1;
  }
  pairServeInThread(&l);
  pairStateInit(st, &l);
  st->bw = o->bw;
  st->self.jobToken = o->token; /* the server refuses a HELLO without its --token, and it without ours */
  char why[512] = "";
  int fd = -1;
  if (connectControl(o->peer, o->port, st, &fd, why, sizeof(why)) != 0) {
    section("pair", "Pair check");
    PROBLEM("start 'railnet-diag --serve' on the peer first, and allow its TCP port (default 18517) through "
            "its firewall",
            "%s", why);
  } else {
    e = runChecks(st, fd, why, sizeof(why));
    close(fd);
    if (e) {
      section("pair", "Pair check");
      PROBLEM("check that the peer runs the same railnet-diag (--serve) and that nothing cuts the connection",
              "the conversation with %s stopped: %s", st->peerName, why[0] ? why : strerror(e));
    } else {
      pairReport(st);
    }
  }
  pairListenStop(&l);
  free(st);
  return 0;
}
