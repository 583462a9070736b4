/* railnet-diag --pair --bw: a short bandwidth figure per working path between the transports' devices, measured
 * through railnet's own transports (include/railnet.h, railnetGetNet("socket" / "ib")), the
 * way NCCL would drive them, both ways on each path: the server listens on the device by name
 * and returns the handle over the control connection (BW_START / BW_HANDLE), the client
 * connects from its device and sends PAIR_BW_COUNT messages of PAIR_BW_BYTES, four in flight,
 * the server receives them and reports what it got (BW_RESULT); then the reverse: the client
 * listens and hands its handle over in BW_START, the server connects and sends, the client
 * receives. A direction that took less than PAIR_BW_SIZED_MS is measured again with as many
 * messages as take about that long (at most RAILNET_PAIR_BW_MAX_COUNT): a figure of a few
 * milliseconds is mostly noise. Everything ends by a deadline, and within the check's end. */
#include <errno.h>
#include <sched.h>
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
  static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER; /* sessions run in threads of their own */
  int k = strcmp(name, "ib") == 0;
  const ncclNet_t* net = railnetGetNet(k ? "ib" : "socket");
  if (net == NULL || (strcmp(name, "ib") && strcmp(name, "socket"))) {
    sfmt(why, whySize, "railnet has no transport '%s'", name);
    return EINVAL;
  }
  pthread_mutex_lock(&lock);
  if (state[k] == 0) state[k] = net->init(&ctxs[k], 0, NULL, NULL, NULL) == ncclSuccess ? 1 : -1;
  pthread_mutex_unlock(&lock);
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

/* The oldest message is not done: give the CPU to whoever moves the data (the transport's threads,
 * the peer on the same host) rather than spin against them. */
static int bwIdle(void* arg) {
  if (railnetClockNs() > ((bwRun*)arg)->dl) return ETIMEDOUT;
  sched_yield();
  return 0;
}

/* count messages of bytes through comm (send or receive), BW_WINDOW in flight; 0 or an errno. */
static int bwLoop(const ncclNet_t* net, void* comm, int send, void* buf, uint32_t bytes, uint32_t count, void* mh,
                  uint64_t dl, uint64_t* moved) {
  bwRun r = {net, comm, send, buf, bytes, mh, dl, moved, {0}};
  netWindowOps ops = {bwPost, bwTest, bwIdle, &r};
  int ret = netWindowRun(&ops, (int)count, BW_WINDOW);
  return ret < 0 ? -ret : ret;
}

static uint64_t minNs(uint64_t a, uint64_t b) { return a < b ? a : b; }

/* b->count messages of b->bytes through comm (send or receive) from a buffer registered for
 * it, by dl; res: the bytes moved, the time from the first post to the last completion, the
 * errno and why of a failure. */
static void bwMove(const ncclNet_t* net, void* comm, int send, const railnetPairBwStart* b, uint64_t dl,
                   railnetPairBwResult* res) {
  void* mh = NULL;
  void* buf = malloc(b->bytes);
  if (buf == NULL || net->regMr(comm, buf, b->bytes, NCCL_PTR_HOST, &mh) != ncclSuccess) {
    res->err = ENOMEM, sfmt(res->why, sizeof(res->why), "cannot register %u bytes", b->bytes);
  } else {
    if (send) memset(buf, 0x5a, b->bytes);
    uint64_t t0 = railnetClockNs();
    res->err = bwLoop(net, comm, send, buf, b->bytes, b->count, mh, dl, &res->bytes);
    res->usec = (uint32_t)((railnetClockNs() - t0) / 1000);
    if (res->err) sfmt(res->why, sizeof(res->why), "%s: %s", send ? "sending" : "receiving", strerror(res->err));
  }
  if (mh) net->deregMr(comm, mh);
  free(buf);
}

/* The sending comm to handle from device dev, by dl; NULL with res->err and why. */
static void* bwConnect(const ncclNet_t* net, void* ctx, int dev, const uint8_t* handle, uint64_t dl,
                       railnetPairBwResult* res) {
  uint8_t h[sizeof(((railnetPairBwStart*)0)->handle)];
  memcpy(h, handle, sizeof(h));
  void* sc = NULL;
  ncclNetDeviceHandle_t* dh = NULL;
  while (sc == NULL && railnetClockNs() < dl)
    if (net->connect(ctx, dev, h, &sc, &dh) != ncclSuccess) {
      res->err = ECONNREFUSED, sfmt(res->why, sizeof(res->why), "connect failed");
      return NULL;
    }
  if (sc == NULL) res->err = ETIMEDOUT, sfmt(res->why, sizeof(res->why), "connect did not complete");
  return sc;
}

/* The receiving comm of listen comm lc, by dl; NULL with res->err and why. */
static void* bwAccept(const ncclNet_t* net, void* lc, uint64_t dl, railnetPairBwResult* res) {
  void* rc = NULL;
  ncclNetDeviceHandle_t* dh = NULL;
  while (rc == NULL && railnetClockNs() < dl)
    if (net->accept(lc, &rc, &dh) != ncclSuccess) {
      res->err = ECONNABORTED, sfmt(res->why, sizeof(res->why), "accept failed");
      return NULL;
    }
  if (rc == NULL) res->err = ETIMEDOUT, sfmt(res->why, sizeof(res->why), "no connection to accept");
  return rc;
}

/* The server's end of one BW_START: forward, listen on b->dev, hand the handle over, accept,
 * receive; reverse, say it is ready, connect to the client's handle, send. Then BW_RESULT. */
int pairBwServe(int fd, const railnetPairBwStart* b, uint64_t sessionDl) {
  railnetPairBwHandle h;
  railnetPairBwResult res;
  memset(&h, 0, sizeof(h));
  memset(&res, 0, sizeof(res));
  const ncclNet_t* net = NULL;
  void *ctx = NULL, *lc = NULL, *comm = NULL;
  int dev = 0;
  /* the transport's first init (discovery) may take seconds on a slow host: before the clock */
  h.err = bwOpen(b->net, b->dev, b->port, &net, &ctx, &dev, h.why, sizeof(h.why));
  uint64_t dl = minNs(railnetClockNs() + PAIR_BW_MS * 1000000ull, sessionDl);
  if (h.err == 0 && !b->reverse && net->listen(ctx, dev, h.handle, &lc) != ncclSuccess)
    h.err = EIO, sfmt(h.why, sizeof(h.why), "listen on %s failed", b->dev);
  int e = railnetPairSend(fd, RAILNET_PAIR_BW_HANDLE, &h, 1, dl);
  if (e || h.err) {
    if (lc) net->closeListen(lc);
    return e;
  }
  comm = b->reverse ? bwConnect(net, ctx, dev, b->handle, dl, &res) : bwAccept(net, lc, dl, &res);
  if (comm) bwMove(net, comm, b->reverse, b, dl, &res);
  if (comm && b->reverse) net->closeSend(comm);
  if (comm && !b->reverse) net->closeRecv(comm);
  if (lc) net->closeListen(lc);
  return railnetPairSend(fd, RAILNET_PAIR_BW_RESULT, &res, 1, sessionDl);
}

/* Both ends' accounts of one direction into out's direction d: the bytes received over the
 * longer of the two times (each side times its own transfer). A transfer cut by its deadline
 * that moved data still gives a figure (a very slow direction must not read as unmeasured). */
static void bwCombine(const railnetPairBwResult* mine, const railnetPairBwResult* peer, int gotPeer, int d, pairBw* out) {
  const railnetPairBwResult *snd = d ? peer : mine, *rcv = d ? mine : peer;
  uint32_t usec = mine->usec > peer->usec ? mine->usec : peer->usec;
  int cut = mine->err == ETIMEDOUT || peer->err == ETIMEDOUT;
  out->err[d] = 0;
  if (!gotPeer) out->err[d] = ETIMEDOUT, sfmt(out->why[d], sizeof(out->why[d]), "no result from the peer");
  else if (cut && rcv->bytes > 0 && usec > 0)
    sfmt(out->why[d], sizeof(out->why[d]), "cut at the deadline: %llu of %llu bytes in %u ms",
         (unsigned long long)rcv->bytes, (unsigned long long)snd->bytes, usec / 1000);
  else if (mine->err) out->err[d] = mine->err, sfmt(out->why[d], sizeof(out->why[d]), "%s", mine->why);
  else if (peer->err) out->err[d] = peer->err, sfmt(out->why[d], sizeof(out->why[d]), "on the peer: %s", peer->why);
  else if (rcv->bytes != snd->bytes)
    out->err[d] = EIO, sfmt(out->why[d], sizeof(out->why[d]), "%llu of %llu bytes received",
                            (unsigned long long)rcv->bytes, (unsigned long long)snd->bytes);
  if (out->err[d] == 0) out->mbps[d] = usec > 0 ? (double)rcv->bytes / (usec / 1e6) / (1 << 20) : 0;
  out->usec[d] = usec;
}

/* The client's end of one direction of a path (d 0: here -> peer, 1: peer -> here) from its
 * device localDev: the START (reverse: with the handle it listens on), the peer's HANDLE, the
 * connection, the transfer, the peer's RESULT; everything by end. */
static void bwMeasure(int fd, railnetPairBwStart* b, const char* localDev, int localPort, uint64_t end, int d,
                      pairBw* out) {
  const ncclNet_t* net = NULL;
  void *ctx = NULL, *lc = NULL, *comm = NULL;
  int dev = 0;
  railnetPairBwResult mine, peer;
  memset(&mine, 0, sizeof(mine));
  memset(&peer, 0, sizeof(peer));
  /* this side's transport first (its first init may take seconds), then the peer's answer
   * (its init, then its listen: PAIR_BW_MS), then the transfer (PAIR_BW_MS again), the
   * result within 2 s of that: the plan counts 2 x PAIR_BW_MS + 2 s a direction */
  out->err[d] = bwOpen(b->net, localDev, localPort, &net, &ctx, &dev, out->why[d], sizeof(out->why[d]));
  if (out->err[d]) return;
  uint64_t last = end > 2000000000ull ? end - 2000000000ull : 0; /* the transfer's latest end */
  if (railnetClockNs() >= last) {
    out->err[d] = ETIMEDOUT, sfmt(out->why[d], sizeof(out->why[d]), "not measured: the check's bound was reached");
    return;
  }
  uint64_t dl = minNs(railnetClockNs() + PAIR_BW_MS * 1000000ull, last);
  b->reverse = (uint8_t)d;
  if (d && net->listen(ctx, dev, b->handle, &lc) != ncclSuccess) {
    out->err[d] = EIO, sfmt(out->why[d], sizeof(out->why[d]), "listen on %s here failed", localDev);
    return;
  }
  railnetPairMsg m;
  char why[128] = "";
  int e = railnetPairSend(fd, RAILNET_PAIR_BW_START, b, 1, dl);
  if (e == 0) e = railnetPairExpect(fd, RAILNET_PAIR_BW_HANDLE, &m, dl, why);
  if (e) {
    out->err[d] = e;
    sfmt(out->why[d], sizeof(out->why[d]), "%s", why[0] ? why : "no answer from the peer within the bound");
    if (lc) net->closeListen(lc);
    return;
  }
  railnetPairBwHandle h = *m.u.bwHandle;
  railnetPairFree(&m);
  if (h.err) {
    out->err[d] = h.err, sfmt(out->why[d], sizeof(out->why[d]), "on the peer: %s", h.why);
    if (lc) net->closeListen(lc);
    return;
  }
  dl = minNs(railnetClockNs() + PAIR_BW_MS * 1000000ull, last);
  comm = d ? bwAccept(net, lc, dl, &mine) : bwConnect(net, ctx, dev, h.handle, dl, &mine);
  if (comm) bwMove(net, comm, !d, b, dl, &mine);
  if (comm && d) net->closeRecv(comm);
  if (comm && !d) net->closeSend(comm);
  if (lc) net->closeListen(lc);
  /* the server answers whether or not the transfer worked (its side ends by its deadline) */
  int got = railnetPairExpect(fd, RAILNET_PAIR_BW_RESULT, &m, dl + 2000000000ull, why) == 0;
  if (got) peer = *m.u.bwResult, railnetPairFree(&m);
  bwCombine(&mine, &peer, got, d, out);
}

static void addTarget(pairState* st, int fd, const char* net, const char* here, int hp, const char* peer, int pp) {
  if (st->nBw >= PAIR_MAX_BW) return;
  pairBw* o = &st->bwRes[st->nBw++];
  memset(o, 0, sizeof(*o));
  sfmt(o->net, sizeof(o->net), "%s", net);
  sfmt(o->here, sizeof(o->here), "%s%s%.0d", here, hp ? ":" : "", hp);
  sfmt(o->peer, sizeof(o->peer), "%s%s%.0d", peer, pp ? ":" : "", pp);
  uint64_t end = st->endNs ? st->endNs : railnetClockNs() + 3600000000000ull;
  for (int d = 0; d < 2; d++) {
    railnetPairBwStart b;
    memset(&b, 0, sizeof(b));
    sfmt(b.net, sizeof(b.net), "%s", net);
    sfmt(b.dev, sizeof(b.dev), "%s", peer);
    b.port = (uint8_t)pp, b.bytes = PAIR_BW_BYTES, b.count = PAIR_BW_COUNT;
    pairProgress("  bandwidth %s: %s %s %s", net, o->here, d ? "<-" : "->", o->peer);
    bwMeasure(fd, &b, here, hp, end, d, o);
    /* a figure of a few milliseconds says little (one hiccup of a host weighs on it): once
     * more, sized to take about PAIR_BW_SIZED_MS, all within PAIR_BW_AGAIN_MS */
    uint64_t want = o->err[d] ? 0 : (uint64_t)PAIR_BW_COUNT * PAIR_BW_SIZED_MS * 1000 / (o->usec[d] ? o->usec[d] : 1);
    if (want <= PAIR_BW_COUNT) continue;
    b.count = want > RAILNET_PAIR_BW_MAX_COUNT ? RAILNET_PAIR_BW_MAX_COUNT : (uint32_t)want;
    pairBw again = *o;
    bwMeasure(fd, &b, here, hp, minNs(end, railnetClockNs() + PAIR_BW_AGAIN_MS * 1000000ull), d, &again);
    if (again.err[d] == 0) {
      o->mbps[d] = again.mbps[d], o->usec[d] = again.usec[d];
      memcpy(o->why[d], again.why[d], sizeof(o->why[d]));
    }
  }
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
