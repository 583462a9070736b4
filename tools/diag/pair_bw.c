/* railnet-diag --pair --bw: a short bandwidth figure per working path between the transports' devices, measured
 * through railnet's own transports (include/railnet.h, railnetGetNet("socket" / "ib")), the
 * way NCCL would drive them: the server listens on the device by name and returns the
 * handle over the control connection (BW_START / BW_HANDLE), the client connects from its
 * device and sends PAIR_BW_COUNT messages of PAIR_BW_BYTES, four in flight, the server
 * receives them and reports what it got (BW_RESULT). Everything ends by a deadline. */
#include <errno.h>
#include <stdio.h>
#include "diag.h"
#include "net_window.h"
#include "pair.h"
#include "plugin_load.h"
#include "railnet.h"

#define BW_WINDOW 4

/* The railnet transport `name` initialised once per process, and the index of device dev
 * (port 0: any) on it; 0 or an errno with why. */
static int bwOpen(const char* name, const char* dev, int port, const ncclNet_t** netOut, void** ctxOut, int* idx,
                  char* why, size_t whySize) {
  static void* ctxs[2];
  static int state[2]; /* 0 not tried, 1 ready, -1 failed */
  int k = strcmp(name, "ib") == 0;
  const ncclNet_t* net = railnetGetNet(k ? "ib" : "socket");
  if (net == NULL || (strcmp(name, "ib") && strcmp(name, "socket"))) {
    sfmt(why, whySize, "railnet has no transport '%s'", name);
    return EINVAL;
  }
  if (state[k] == 0) state[k] = net->init(&ctxs[k], 0, NULL, NULL, NULL) == ncclSuccess ? 1 : -1;
  int n = 0;
  if (state[k] < 0 || net->devices(&n) != ncclSuccess) {
    sfmt(why, whySize, "the %s transport did not initialise here", name);
    return ENODEV;
  }
  int d = pluginDeviceNamed(net, dev, port);
  if (d >= 0) {
    *netOut = net, *ctxOut = ctxs[k], *idx = d;
    return 0;
  }
  sfmt(why, whySize, "%s:%d is not among the %s transport's %d devices here", dev, port, name, n);
  return ENODEV;
}

/* One measurement's messages through a comm, for netWindowRun. */
typedef struct {
  const ncclNet_t* net;
  void* comm;
  int send;
  void* buf;
  uint32_t bytes;
  void* mh;
  uint64_t dl;
  uint64_t* moved;
  void* reqs[BW_WINDOW];
} bwRun;

static int bwPost(void* arg, int k) {
  bwRun* r = (bwRun*)arg;
  void** req = &r->reqs[k % BW_WINDOW];
  size_t size = r->bytes;
  int tag = 1;
  void* mh = r->mh;
  ncclResult_t res = r->send ? r->net->isend(r->comm, r->buf, r->bytes, tag, r->mh, NULL, req)
                             : r->net->irecv(r->comm, 1, &r->buf, &size, &tag, &mh, NULL, req);
  if (res != ncclSuccess) return -EIO;
  return *req ? 0 : 1;
}

static int bwTest(void* arg, int k) {
  bwRun* r = (bwRun*)arg;
  void** req = &r->reqs[k % BW_WINDOW];
  int done = 0, size = 0;
  if (r->net->test(*req, &done, &size) != ncclSuccess) return -EIO;
  if (!done) return 0;
  *req = NULL;
  *r->moved += (uint64_t)size;
  return 1;
}

static int bwIdle(void* arg) { return railnetClockNs() > ((bwRun*)arg)->dl ? ETIMEDOUT : 0; }

/* count messages of bytes through comm (send or receive), BW_WINDOW in flight; 0 or an errno. */
static int bwLoop(const ncclNet_t* net, void* comm, int send, void* buf, uint32_t bytes, uint32_t count, void* mh,
                  uint64_t dl, uint64_t* moved) {
  bwRun r = {net, comm, send, buf, bytes, mh, dl, moved, {0}};
  netWindowOps ops = {bwPost, bwTest, bwIdle, &r};
  int ret = netWindowRun(&ops, (int)count, BW_WINDOW);
  return ret < 0 ? -ret : ret;
}

/* The server's end of one measurement: listen, hand the handle over, accept, receive. */
int pairBwServe(int fd, const railnetPairBwStart* b, uint64_t sessionDl) {
  railnetPairBwHandle h;
  railnetPairBwResult res;
  memset(&h, 0, sizeof(h));
  memset(&res, 0, sizeof(res));
  const ncclNet_t* net = NULL;
  void *ctx = NULL, *lc = NULL, *rc = NULL, *mh = NULL;
  int dev = 0;
  /* the transport's first init (discovery) may take seconds on a slow host: before the clock */
  h.err = bwOpen(b->net, b->dev, b->port, &net, &ctx, &dev, h.why, sizeof(h.why));
  uint64_t dl = railnetClockNs() + PAIR_BW_MS * 1000000ull;
  if (dl > sessionDl) dl = sessionDl;
  if (h.err == 0 && net->listen(ctx, dev, h.handle, &lc) != ncclSuccess)
    h.err = EIO, sfmt(h.why, sizeof(h.why), "listen on %s failed", b->dev);
  int e = railnetPairSend(fd, RAILNET_PAIR_BW_HANDLE, &h, 1, dl);
  if (e || h.err) {
    if (lc) net->closeListen(lc);
    return e;
  }
  ncclNetDeviceHandle_t* dh = NULL;
  while (rc == NULL && railnetClockNs() < dl && net->accept(lc, &rc, &dh) == ncclSuccess) {
  }
  void* buf = malloc(b->bytes);
  if (rc == NULL) res.err = ETIMEDOUT, sfmt(res.why, sizeof(res.why), "no connection to accept");
  else if (buf == NULL || net->regMr(rc, buf, b->bytes, NCCL_PTR_HOST, &mh) != ncclSuccess)
    res.err = ENOMEM, sfmt(res.why, sizeof(res.why), "cannot register %u bytes", b->bytes);
  if (res.err == 0) {
    uint64_t t0 = railnetClockNs();
    res.err = bwLoop(net, rc, 0, buf, b->bytes, b->count, mh, dl, &res.bytes);
    res.usec = (uint32_t)((railnetClockNs() - t0) / 1000);
    if (res.err) sfmt(res.why, sizeof(res.why), "receiving: %s", strerror(res.err));
  }
  if (mh) net->deregMr(rc, mh);
  if (rc) net->closeRecv(rc);
  net->closeListen(lc);
  free(buf);
  return railnetPairSend(fd, RAILNET_PAIR_BW_RESULT, &res, 1, sessionDl);
}

/* The client's end: connect from local dev to the peer's handle and send. */
static void bwSend(int fd, const railnetPairBwStart* b, const char* localDev, int localPort, pairBw* out) {
  const ncclNet_t* net = NULL;
  void *ctx = NULL, *sc = NULL, *mh = NULL;
  ncclNetDeviceHandle_t* dh = NULL;
  int dev = 0;
  /* this side's transport first (its first init may take seconds), then the peer's handle
   * (its init, then its listen: PAIR_BW_MS), then the transfer (PAIR_BW_MS again) */
  out->err = bwOpen(b->net, localDev, localPort, &net, &ctx, &dev, out->why, sizeof(out->why));
  if (out->err) return;
  uint64_t dl = railnetClockNs() + PAIR_BW_MS * 1000000ull;
  railnetPairMsg m;
  char why[128] = "";
  int e = railnetPairSend(fd, RAILNET_PAIR_BW_START, b, 1, dl);
  if (e == 0) e = railnetPairExpect(fd, RAILNET_PAIR_BW_HANDLE, &m, dl, why);
  if (e) {
    out->err = e;
    if (why[0]) sfmt(out->why, sizeof(out->why), "%s", why);
    else sfmt(out->why, sizeof(out->why), "no listen handle from the peer within %d ms", PAIR_BW_MS);
    return;
  }
  railnetPairBwHandle h = *m.u.bwHandle;
  railnetPairFree(&m);
  dl = railnetClockNs() + PAIR_BW_MS * 1000000ull;
  if (h.err) {
    out->err = h.err, sfmt(out->why, sizeof(out->why), "on the peer: %s", h.why);
    return;
  }
  void* buf = malloc(b->bytes);
  while (out->err == 0 && sc == NULL && railnetClockNs() < dl)
    if (net->connect(ctx, dev, h.handle, &sc, &dh) != ncclSuccess) out->err = ECONNREFUSED;
  if (out->err == 0 && sc == NULL) out->err = ETIMEDOUT, sfmt(out->why, sizeof(out->why), "connect did not complete");
  if (out->err == 0 && (buf == NULL || net->regMr(sc, buf, b->bytes, NCCL_PTR_HOST, &mh) != ncclSuccess))
    out->err = ENOMEM, sfmt(out->why, sizeof(out->why), "cannot register %u bytes", b->bytes);
  uint64_t moved = 0, t0 = railnetClockNs();
  if (out->err == 0) {
    if (buf) memset(buf, 0x5a, b->bytes);
    out->err = bwLoop(net, sc, 1, buf, b->bytes, b->count, mh, dl, &moved);
    if (out->err) sfmt(out->why, sizeof(out->why), "sending: %s", strerror(out->err));
  }
  double secs = (double)(railnetClockNs() - t0) / 1e9;
  if (mh) net->deregMr(sc, mh);
  if (sc) net->closeSend(sc);
  free(buf);
  /* the server answers whether or not the send worked (its accept or receive ends by dl) */
  if (railnetPairExpect(fd, RAILNET_PAIR_BW_RESULT, &m, dl + 2000000000ull, why) == 0) {
    if (out->err == 0 && m.u.bwResult->err) out->err = m.u.bwResult->err, sfmt(out->why, sizeof(out->why), "on the peer: %s", m.u.bwResult->why);
    else if (out->err == 0 && m.u.bwResult->bytes != moved)
      out->err = EIO, sfmt(out->why, sizeof(out->why), "the peer received %llu of %llu bytes",
                           (unsigned long long)m.u.bwResult->bytes, (unsigned long long)moved);
    railnetPairFree(&m);
  }
  if (out->err == 0) out->mbps = secs > 0 ? (double)moved / secs / (1 << 20) : 0;
}

static void addTarget(pairState* st, int fd, const char* net, const char* here, int hp, const char* peer, int pp) {
  if (st->nBw >= PAIR_MAX_BW) return;
  pairBw* o = &st->bwRes[st->nBw++];
  memset(o, 0, sizeof(*o));
  sfmt(o->net, sizeof(o->net), "%s", net);
  sfmt(o->here, sizeof(o->here), "%s%s%.0d", here, hp ? ":" : "", hp);
  sfmt(o->peer, sizeof(o->peer), "%s%s%.0d", peer, pp ? ":" : "", pp);
  railnetPairBwStart b;
  memset(&b, 0, sizeof(b));
  sfmt(b.net, sizeof(b.net), "%s", net);
  sfmt(b.dev, sizeof(b.dev), "%s", peer);
  b.port = (uint8_t)pp, b.bytes = PAIR_BW_BYTES, b.count = PAIR_BW_COUNT;
  pairProgress("  bandwidth %s: %s -> %s", net, o->here, o->peer);
  bwSend(fd, &b, here, hp, o);
}

/* Did TCP from an address of interface l here reach an address of the peer's interface r? */
static int tcpReached(const pairState* st, const char* l, const char* r) {
  for (int k = 0; k < st->nOut; k++)
    if (st->out[k].step == 0 && !strcmp(st->out[k].localIf, l) && !strcmp(st->out[k].peerIf, r)) return 1;
  return 0;
}

/* The chosen interfaces of a side, each name once (an interface has an entry per address). */
static int chosenNames(const railnetPairIface* ifs, int n, const char* names[RAILNET_PAIR_MAX_IFACES]) {
  int k = 0;
  for (int i = 0; i < n; i++) {
    int seen = !ifs[i].selected;
    for (int j = 0; j < k && !seen; j++) seen = !strcmp(names[j], ifs[i].name);
    if (!seen && k < RAILNET_PAIR_MAX_IFACES) names[k++] = ifs[i].name;
  }
  return k;
}

/* The paths --bw measures, in order. run: measure those that work (the probes ran); else
 * count every candidate, for the plan's bound before the probes. */
static int bwTargets(pairState* st, int fd, int run) {
  const char *here[RAILNET_PAIR_MAX_IFACES], *peer[RAILNET_PAIR_MAX_IFACES];
  int nh = chosenNames(st->local, st->nLocal, here), np = chosenNames(st->remote, st->nRemote, peer), n = 0;
  /* the Socket transport's devices are ncclFindInterfaces' choice on each side */
  for (int i = 0; i < nh; i++)
    for (int j = 0; j < np; j++) {
      if (run && !tcpReached(st, here[i], peer[j])) continue;
      n++;
      if (run) addTarget(st, fd, "socket", here[i], 0, peer[j], 0);
    }
  for (int q = 0; q < st->nPaths; q++) {
    const pairRdmaPath* p = &st->paths[q];
    const railnetPairRdmaEntry *a = &st->lr[p->local], *b = &st->rr[p->remote];
    if (!(a->isAuto & RAILNET_PAIR_GID_CHOSEN) || !(b->isAuto & RAILNET_PAIR_GID_CHOSEN)) continue;
    if (run && !pairRdmaPathOk(p)) continue;
    n++;
    if (run) addTarget(st, fd, "ib", a->dev, a->port, b->dev, b->port);
  }
  return n;
}

int pairBwTargets(const pairState* st) { return bwTargets((pairState*)st, -1, 0); }

void pairBwRunClient(pairState* st, int fd) {
  st->nBw = 0;
  bwTargets(st, fd, 1);
  pairProgress(NULL);
}
