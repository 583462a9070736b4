/*
 * The RMA contexts (rma.h): per context the devices of the group's vDevice and an RC QP to
 * every rank at a multiple of the rank stride from this one (itself included), connected
 * through one all-gather of every rank's QP numbers and addresses.
 */
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include "rma.h"
#include "debug.h"
#include "ibvwrap.h"
#include "param.h"
#include "../devices.h"
#include "../qp.h"
#include "../setup.h"

#define RAILNET_RMA_MAX_CONTEXTS 64

enum { P_GIN_IB_TC };
static const railnetParam rmaParams[] = {
    [P_GIN_IB_TC] = RAILNET_PARAM_INT_DEF("NCCL_GIN_IB_TC", -1, -1, 255,
                                          "RoCE traffic class of the one-sided (RMA) QPs (-1: NCCL_IB_TC)"),
};
RAILNET_PARAM_TABLE("net_ib/rma", rmaParams);

int railnetRmaParamTc(void) { return (int)railnetParamInt(&rmaParams[P_GIN_IB_TC]); }

/* RAILNET_RMA_RD_ATOMIC within a device limit (at least 1). */
static int rdAtomicLimit(int deviceMax) {
  int n = deviceMax < RAILNET_RMA_RD_ATOMIC ? deviceMax : RAILNET_RMA_RD_ATOMIC;
  return n < 1 ? 1 : n;
}

int railnetRmaCqEntries(const struct railnetRmaColl* cc, int npeers, int* room) {
  long want = (long)npeers * RAILNET_RMA_SQ_DEPTH + NET_IB_RECV_REQUESTS, have = want;
  const ncclNetVDeviceProps_t* v = &ncclIbMergedDevs[cc->vDev].vProps;
  for (int d = 0; d < v->ndevs; d++) {
    int m = ncclIbDevs[v->devs[d]].maxCqe;
    if (m > 0 && m < have) have = m;
  }
  if (have < RAILNET_RMA_MAX_WRS) {
    WARN("NET/IB RMA : %s: a CQ holds %ld entries, an operation needs up to %d", ncclIbMergedDevs[cc->vDev].devName,
         have, RAILNET_RMA_MAX_WRS);
    return -1;
  }
  if (have < want)
    INFO(NCCL_INIT | NCCL_NET, "NET/IB RMA : %s: a context of %d ranks could have %ld work requests in flight per "
         "device, its CQ holds %ld: at most that many are", ncclIbMergedDevs[cc->vDev].devName, npeers, want, have);
  *room = (int)have;
  return (int)have;
}

/* Is rank p connected to this one in a context of stride `stride`? */
static int connectedRank(const struct railnetRmaColl* cc, int stride, int p) {
  return ((p - cc->rank + cc->nranks) % cc->nranks) % stride == 0;
}

static void contextFree(struct railnetRmaContext* c, int nranks) {
  if (c->peers)
    for (int p = 0; p < nranks; p++)
      if (c->peers[p].qp) wrap_ibv_destroy_qp(c->peers[p].qp);
  for (int d = 0; d < NCCL_IB_MAX_DEVS_PER_NIC; d++)
    if (c->flush[d].qp) wrap_ibv_destroy_qp(c->flush[d].qp);
  while (c->orphans) { /* their QPs are gone: nothing completes into them any more */
    struct railnetRmaRequest* r = c->orphans;
    c->orphans = r->next;
    free(r);
  }
  free(c->peers);
  if (c->base) {
    for (int d = 0; d < c->base->vProps.ndevs; d++)
      if (c->scratchMrs[d]) wrap_ibv_dereg_mr(c->scratchMrs[d]);
    railnetIbCommFree(c->base);
  }
  free(c->scratch);
  pthread_mutex_destroy(&c->lock);
}

/* Context c's devices, its scratch word and a QP in INIT to each connected rank; what the
 * others need to connect to them into mine[nranks]. */
static ncclResult_t contextCreate(struct railnetRmaCtx* x, struct railnetRmaContext* c, struct railnetRmaQpInfo* mine) {
  struct railnetRmaColl* cc = x->coll;
  pthread_mutex_init(&c->lock, NULL);
  int npeers = cc->nranks / x->rankStride;
  NCCLCHECK(railnetIbCommAlloc(1, &c->base));
  int cqe = railnetRmaCqEntries(cc, npeers, &c->cqRoom);
  if (cqe < 0) return ncclSystemError;
  NCCLCHECK(railnetIbCommDevsInit(c->base, cc->vDev, cqe));
  NCCLCHECK(RAILNET_CALLOC(&c->peers, (size_t)cc->nranks, "the RMA context's ranks"));
  if (posix_memalign((void**)&c->scratch, 64, 64) != 0) {
    c->scratch = NULL;
    WARN("NET/IB RMA : out of memory for a context's scratch word");
    return ncclSystemError;
  }
  memset(c->scratch, 0, 64);
  int ndevs = c->base->vProps.ndevs;
  for (int d = 0; d < ndevs; d++)
    NCCLCHECK(wrap_ibv_reg_mr(&c->scratchMrs[d], c->base->devs[d].pd, c->scratch, 64, IBV_ACCESS_LOCAL_WRITE));
  for (int p = 0; p < cc->nranks; p++) {
    if (!connectedRank(cc, x->rankStride, p)) continue;
    struct railnetRmaPeer* peer = &c->peers[p];
    /* the connected ranks are rank + k x stride: spread by k, so that a stride that is a
     * multiple of the device count does not put every QP on one device */
    peer->devIndex = (((p - cc->rank + cc->nranks) % cc->nranks) / x->rankStride) % ndevs;
    NCCLCHECK(railnetIbQpCreateAccess(c->base, peer->devIndex,
                                      IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
                                      RAILNET_RMA_SQ_DEPTH, &peer->qp));
    peer->depth = RAILNET_RMA_SQ_DEPTH;
    mine[p].qpn = peer->qp->qp_num;
    mine[p].devIndex = peer->devIndex;
    mine[p].rdAtomic = (uint32_t)rdAtomicLimit(ncclIbDevs[c->base->devs[peer->devIndex].ibDevN].maxRdAtom);
    railnetIbDevInfoFill(c->base, peer->devIndex, &mine[p].dev, 0);
  }
  return ncclSuccess;
}

/* Context c's QPs to RTS towards the QPs the others made for this rank (all: every rank's
 * mine[] of every context, rank-major). */
static ncclResult_t contextConnect(struct railnetRmaCtx* x, int ci, const struct railnetRmaQpInfo* all) {
  struct railnetRmaColl* cc = x->coll;
  struct railnetRmaContext* c = &x->contexts[ci];
  for (int p = 0; p < cc->nranks; p++) {
    struct railnetRmaPeer* peer = &c->peers[p];
    if (peer->qp == NULL) continue;
    const struct railnetRmaQpInfo* rem = &all[((size_t)p * x->nContexts + ci) * cc->nranks + cc->rank];
    struct ncclIbDev* dev = &ncclIbDevs[c->base->devs[peer->devIndex].ibDevN];
    if (rem->qpn == 0 || rem->dev.linkLayer != dev->link) {
      WARN("NET/IB RMA : rank %d: rank %d %s; every rank must create its contexts with the same configuration and "
           "select NICs of one link layer (NCCL_IB_HCA)", cc->rank, p,
           rem->qpn == 0 ? "made no QP for this rank (another rank stride?)" : "is on another link layer");
      return ncclInvalidUsage;
    }
    if (rem->devIndex < 0 || rem->devIndex >= NCCL_IB_MAX_DEVS_PER_NIC || rem->rdAtomic < 1 || rem->rdAtomic > 255) {
      WARN("NET/IB RMA : rank %d: rank %d names device %d of its vDevice and serves %u reads at once: not a "
           "railnet RMA peer of this version", cc->rank, p, rem->devIndex, rem->rdAtomic);
      return ncclRemoteError;
    }
    peer->remDevIndex = rem->devIndex;
    int in = rdAtomicLimit(dev->maxRdAtom), out = rdAtomicLimit(dev->maxInitRdAtom);
    if ((int)rem->rdAtomic < out) out = (int)rem->rdAtomic;
    NCCLCHECK(railnetIbQpConnectReads(c->base, peer->devIndex, peer->qp, &rem->dev, rem->qpn, x->tc, x->sl, in, out));
  }
  return ncclSuccess;
}

/* The traffic class: NCCL_GIN_IB_TC, else NCCL_IB_TC, else the config's (INT_MIN: none), else 0. */
static int contextTc(int configTc) {
  if (railnetRmaParamTc() != -1) return railnetRmaParamTc();
  if (railnetIbParamTc() != -1) return railnetIbParamTc();
  return configTc != INT_MIN && configTc >= 0 && configTc <= 255 ? configTc : 0;
}

static ncclResult_t checkConfig(const struct railnetRmaColl* cc, const ncclRmaConfig_v14_t* config) {
  if (config->nContexts < 1 || config->nContexts > RAILNET_RMA_MAX_CONTEXTS) {
    WARN("NET/IB RMA : createContext: %d contexts, the most is %d", config->nContexts, RAILNET_RMA_MAX_CONTEXTS);
    return ncclInvalidArgument;
  }
  if (config->rankStride <= 0 || cc->nranks % config->rankStride != 0) {
    WARN("NET/IB RMA : createContext: rank stride %d: it must be > 0 and divide the group's %d ranks",
         config->rankStride, cc->nranks);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

ncclResult_t railnetRmaCreateContext(void* collComm, ncclRmaConfig_v14_t* config, void** rmaCtx) {
  struct railnetRmaColl* cc = (struct railnetRmaColl*)collComm;
  if (cc == NULL || config == NULL || rmaCtx == NULL) return ncclInvalidArgument;
  *rmaCtx = NULL;
  NCCLCHECK(checkConfig(cc, config));
  struct railnetRmaCtx* x;
  NCCLCHECK(RAILNET_CALLOC(&x, 1, "an RMA context set"));
  x->coll = cc;
  x->nranks = cc->nranks;
  x->lost = -1;
  x->nContexts = config->nContexts;
  x->rankStride = config->rankStride;
  x->tc = contextTc(config->trafficClass);
  x->sl = railnetIbParamSl() != -1 ? railnetIbParamSl() : 0;
  size_t per = (size_t)x->nContexts * (size_t)cc->nranks;
  struct railnetRmaQpInfo* all = NULL;
  ncclResult_t r = RAILNET_CALLOC(&x->contexts, (size_t)x->nContexts, "the RMA contexts");
  if (r == ncclSuccess) r = RAILNET_CALLOC(&all, per * (size_t)cc->nranks, "the RMA QP exchange");
  struct railnetRmaQpInfo* mine = all ? all + per * (size_t)cc->rank : NULL;
  for (int ci = 0; r == ncclSuccess && ci < x->nContexts; ci++)
    r = contextCreate(x, &x->contexts[ci], mine + (size_t)ci * cc->nranks);
  /* a rank that failed here still takes part, with no QP for anyone: the others fail at once
   * (contextConnect) instead of waiting for it */
  if (all != NULL) {
    if (r != ncclSuccess) memset(mine, 0, per * sizeof(*all));
    ncclResult_t g = railnetRmaGroupAllGather(cc->group, mine, all, per * sizeof(*all));
    if (r == ncclSuccess) r = g;
  }
  if (all == NULL) railnetRmaGroupAbort(cc->group, -1); /* cannot take part: the others must not wait */
  int failedAt = -1;
  if (all != NULL) {
    for (int ci = 0; r == ncclSuccess && ci < x->nContexts; ci++) r = contextConnect(x, ci, all);
    /* every rank's outcome, which every rank takes part in (a barrier only the ranks that
     * connected would join would hold the others): nobody writes before every QP towards it
     * is ready to receive, and a rank that failed fails every rank */
    int32_t mine32 = r == ncclSuccess ? 0 : 1, *codes = NULL;
    ncclResult_t g = RAILNET_CALLOC(&codes, (size_t)cc->nranks, "the RMA context outcomes");
    if (g == ncclSuccess) g = railnetRmaGroupAllGather(cc->group, &mine32, codes, sizeof(mine32));
    else railnetRmaGroupAbort(cc->group, -1);
    for (int p = 0; g == ncclSuccess && p < cc->nranks && failedAt < 0; p++) failedAt = codes[p] ? p : -1;
    free(codes);
    if (r == ncclSuccess && g != ncclSuccess) r = g;
  }
  if (r == ncclSuccess && failedAt >= 0) {
    WARN("NET/IB RMA : rank %d: rank %d could not create its contexts (its log says why)", cc->rank, failedAt);
    r = ncclRemoteError;
  }
  free(all);
  if (r != ncclSuccess) {
    railnetRmaDestroyContext(x);
    return r;
  }
  INFO(NCCL_INIT | NCCL_NET, "NET/IB RMA : rank %d: %d context(s), %d rank(s) each (stride %d), tc %d sl %d",
       cc->rank, x->nContexts, cc->nranks / x->rankStride, x->rankStride, x->tc, x->sl);
  *rmaCtx = x;
  return ncclSuccess;
}

ncclResult_t railnetRmaDestroyContext(void* rmaCtx) {
  struct railnetRmaCtx* x = (struct railnetRmaCtx*)rmaCtx;
  if (x == NULL) return ncclSuccess;
  if (x->contexts)
    for (int ci = 0; ci < x->nContexts; ci++) contextFree(&x->contexts[ci], x->nranks); /* coll may be closed */
  free(x->contexts);
  free(x);
  return ncclSuccess;
}
