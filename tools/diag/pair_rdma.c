/* The RDMA part of railnet-diag --pair: this host's ports x GIDs of interest (the index the
 * IB transport's own selection picks, railnetIbExplainGidIndex, and the other RoCE entries), the
 * paths worth trying between the two lists, and both ends of each path: the client opens its
 * QP, the server answers with its own (already at RTS), the client connects, writes and
 * reads back a small and a 1 MiB buffer, then asks the server to do the same its way. */
#include <errno.h>
#include <stdio.h>
#include "ib_explain.h" /* the transport's own port choice and GID selection */
#include "pair.h"

void pairRdmaList(pairState* st) {
  if (railnetPairRdmaList(st->lr, RAILNET_PAIR_MAX_RDMA, &st->nLr,
                          st->rdmaWhy, sizeof(st->rdmaWhy)) != ncclSuccess)
    st->nLr = 0;
}

static int gidV4(const uint8_t* g) {
  static const uint8_t pre[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(g, pre, 12) == 0;
}

/* Worth a QP pair: both chosen entries, or two RoCE entries of one version and kind, or an
 * empty (forced) slot against the peer's chosen entry. */
static int compatible(const railnetPairRdmaEntry* a, const railnetPairRdmaEntry* b) {
  int ca = a->isAuto & RAILNET_PAIR_GID_CHOSEN, cb = b->isAuto & RAILNET_PAIR_GID_CHOSEN;
  if (a->linkLayer != b->linkLayer) return 0;
  if (ca && cb) return 1;
  if (a->linkLayer != IBV_LINK_LAYER_ETHERNET) return 0;
  if (a->roceVer == 0) return cb;
  if (b->roceVer == 0) return ca;
  return a->roceVer == b->roceVer && gidV4(a->gid) == gidV4(b->gid);
}

int pairRdmaPlan(pairState* st) {
  st->nPaths = 0;
  for (int i = 0; i < st->nLr; i++)
    for (int j = 0; j < st->nRr && st->nPaths < PAIR_MAX_PATHS; j++) {
      if (!compatible(&st->lr[i], &st->rr[j])) continue;
      pairRdmaPath* p = &st->paths[st->nPaths++];
      memset(p, 0, sizeof(*p));
      p->local = i;
      p->remote = j;
    }
  return st->nPaths;
}

/* Setup with the server's end; 0 with *side connected, else the failure is in p. -1: the
 * conversation itself failed. */
static int setupPath(pairRdmaPath* p, int fd, struct railnetPairRdmaSide* side, uint64_t dl) {
  railnetPairMsg m;
  char why[128] = "";
  if (railnetPairSend(fd, RAILNET_PAIR_RDMA_QP, &p->mine, 1, dl) != 0 ||
      railnetPairExpect(fd, RAILNET_PAIR_RDMA_QP, &m, dl, why) != 0) {
    p->setupStep = RAILNET_PAIR_RDMA_PEER, p->setupErr = EPROTO, p->setupPeer = 1;
    return -1;
  }
  p->theirs = *m.u.qp;
  railnetPairFree(&m);
  if (p->theirs.err) {
    p->setupStep = p->theirs.step, p->setupErr = p->theirs.err, p->setupPeer = 1;
    return 1;
  }
  int step = 0;
  p->setupErr = railnetPairRdmaConnect(side, &p->theirs, &step);
  p->setupStep = step;
  return p->setupErr ? 1 : 0;
}

/* One path, both directions; -1 when the conversation failed. */
static int runPath(pairState* st, pairRdmaPath* p, int fd, uint32_t id, uint64_t dl) {
  struct railnetPairRdmaSide* side = NULL;
  p->tried = 1;
  railnetPairRdmaOpen(&st->lr[p->local], PAIR_RDMA_BIG, &side, &p->mine);
  p->mine.id = id;
  p->mine.entry = (uint16_t)p->local;
  p->mine.peerEntry = (uint16_t)p->remote;
  if (side == NULL) {
    p->setupStep = p->mine.step, p->setupErr = p->mine.err;
    return 0;
  }
  int r = setupPath(p, fd, side, dl);
  if (r == 0) {
    railnetPairRdmaWriteRead(side, &p->theirs, PAIR_RDMA_SMALL, PAIR_RDMA_MS, &p->out[0]);
    if (p->out[0].step == 0) railnetPairRdmaWriteRead(side, &p->theirs, PAIR_RDMA_BIG, PAIR_RDMA_MS, &p->out[1]);
    railnetPairRdmaRun run = {id, PAIR_RDMA_BIG};
    railnetPairMsg m;
    char why[128] = "";
    if (railnetPairSend(fd, RAILNET_PAIR_RDMA_RUN, &run, 1, dl) != 0 ||
        railnetPairExpect(fd, RAILNET_PAIR_RDMA_RESULT, &m, dl, why) != 0) {
      r = -1;
    } else {
      p->in = *m.u.result;
      railnetPairFree(&m);
    }
  }
  railnetPairRdmaClose(side);
  return r < 0 ? -1 : 0;
}

void pairRdmaRunClient(pairState* st, int fd, uint64_t dl) {
  for (int k = 0; k < st->nPaths; k++) {
    pairRdmaPath* p = &st->paths[k];
    const railnetPairRdmaEntry *a = &st->lr[p->local], *b = &st->rr[p->remote];
    pairProgress("  RDMA [%d/%d] %s:%d gid %d -> %s:%d gid %d", k + 1, st->nPaths, a->dev, a->port, a->gidIndex,
                 b->dev, b->port, b->gidIndex);
    if (runPath(st, p, fd, (uint32_t)k, dl) < 0) break;
  }
  pairProgress(NULL);
}

/* ---------------------------------------------------------------- the server's end */

static struct railnetPairRdmaSide* srvSide;
static railnetPairRdmaQp srvPeer;

void pairRdmaServeEnd(void) {
  railnetPairRdmaClose(srvSide);
  srvSide = NULL;
}

static int serveQp(pairState* st, int fd, const railnetPairRdmaQp* q, uint64_t dl) {
  railnetPairRdmaQp mine;
  pairRdmaServeEnd();
  memset(&mine, 0, sizeof(mine));
  if (q->peerEntry >= st->nLr) {
    mine.step = RAILNET_PAIR_RDMA_OPEN, mine.err = EINVAL;
  } else {
    railnetPairRdmaOpen(&st->lr[q->peerEntry], PAIR_RDMA_BIG, &srvSide, &mine);
    int step = 0;
    int e = srvSide ? railnetPairRdmaConnect(srvSide, q, &step) : 0;
    if (e) {
      mine.step = (uint8_t)step, mine.err = e;
      pairRdmaServeEnd();
    }
  }
  mine.id = q->id;
  mine.entry = q->peerEntry < RAILNET_PAIR_MAX_RDMA ? q->peerEntry : 0;
  mine.peerEntry = q->entry;
  srvPeer = *q;
  return railnetPairSend(fd, RAILNET_PAIR_RDMA_QP, &mine, 1, dl);
}

int pairRdmaServe(pairState* st, int fd, const railnetPairMsg* m, uint64_t dl) {
  if (m->type == RAILNET_PAIR_RDMA_QP) return serveQp(st, fd, m->u.qp, dl);
  railnetPairRdmaResult r;
  memset(&r, 0, sizeof(r));
  r.id = m->u.run->id;
  if (srvSide == NULL || srvPeer.id != m->u.run->id) {
    r.step = RAILNET_PAIR_RDMA_PEER, r.err = ENOENT;
    snprintf(r.why, sizeof(r.why), "no QP is up for path %u", m->u.run->id);
  } else {
    railnetPairRdmaWriteRead(srvSide, &srvPeer, PAIR_RDMA_SMALL, PAIR_RDMA_MS, &r);
    if (r.step == 0) railnetPairRdmaWriteRead(srvSide, &srvPeer, m->u.run->bytes, PAIR_RDMA_MS, &r);
    r.id = m->u.run->id;
  }
  int e = railnetPairSend(fd, RAILNET_PAIR_RDMA_RESULT, &r, 1, dl);
  pairRdmaServeEnd();
  return e;
}
