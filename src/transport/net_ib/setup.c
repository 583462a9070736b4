/*
 * IB comm setup (setup.h): a comm's resources (PD, CQ, GID per device; QPs; the fifo and
 * sizes registrations; the GPUDirect flush QP) and the connection metadata that describes
 * them to the peer. QP i of one side is connected to QP i of the other; QP i lives on device
 * i % ndevs of its side's vDevice. The connector decides the traffic class and service
 * level; the acceptor follows its QP count and data split. connect.c drives these through
 * its state machines; nothing here touches the socket.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "setup.h"
#include "completion.h"
#include "devices.h"
#include "eager/eager.h"
#include "resilience/failover.h"
#include "gdr.h"
#include "gid.h"
#include "ibvwrap.h"
#include "matching.h"
#include "net_prof.h"
#include "param.h"
#include "prof.h"
#include "qp.h"
#include "reg.h"
#include "records.h"

enum { P_SL, P_TC, P_FIFO_TC, P_QPS_PER_CONN, P_USE_INLINE, P_ECE, P_SPLIT, P_GDR_FLUSH_DISABLE };
static const railnetParam setupParams[] = {
    [P_SL] = RAILNET_PARAM_INT_DEF("NCCL_IB_SL", -1, -1, 15,
                                   "InfiniBand service level (-1: 0; the comm's traffic class never sets it)"),
    [P_TC] = RAILNET_PARAM_INT_DEF("NCCL_IB_TC", -1, -1, 255,
                                   "RoCE traffic class of the data (-1: the comm's traffic class, else 0)"),
    [P_FIFO_TC] = RAILNET_PARAM_INT_DEF("NCCL_IB_FIFO_TC", -1, -1, 255,
                                        "RoCE traffic class of the receiver's clear-to-send writes (-1: NCCL_IB_TC)"),
    [P_QPS_PER_CONN] = RAILNET_PARAM_INT_DEF("NCCL_IB_QPS_PER_CONNECTION", 1, 1, NCCL_IB_MAX_QPS,
                                             "Queue pairs per connection and device"),
    [P_USE_INLINE] = RAILNET_PARAM_INT_DEF("NCCL_IB_USE_INLINE", 0, 0, 1,
                                           "Send the clear-to-send entries inline in the work request"),
    [P_ECE] = RAILNET_PARAM_INT_DEF("NCCL_IB_ECE_ENABLE", 1, 0, 1,
                                    "Exchange Enhanced Connection Establishment options where the NIC has them"),
    [P_SPLIT] = RAILNET_PARAM_INT_DEF("NCCL_IB_SPLIT_DATA_ON_QPS", 0, 0, 1,
                                      "1: split every message across all QPs; 0: one QP per message, round robin"),
    [P_GDR_FLUSH_DISABLE] = RAILNET_PARAM_INT_DEF("NCCL_GDR_FLUSH_DISABLE", 0, 0, 1,
                                                  "Do not flush GPUDirect receives with an RDMA read"),
};
RAILNET_PARAM_TABLE("net_ib/setup", setupParams);

int railnetIbParamQpsPerConn(void) { return (int)railnetParamInt(&setupParams[P_QPS_PER_CONN]); }
int railnetIbParamTc(void) { return (int)railnetParamInt(&setupParams[P_TC]); }
int railnetIbParamSl(void) { return (int)railnetParamInt(&setupParams[P_SL]); }
int railnetIbParamSplitDataOnQps(void) { return (int)railnetParamInt(&setupParams[P_SPLIT]); }

/* The GID index of a comm's device, chosen again for every comm as NCCL does (unless fixed at
 * discovery), and its GID: the choice read it already (the port count from discovery spares an
 * ibv_query_device per comm). */
static ncclResult_t commGid(struct ncclIbDev* dev, struct ncclIbCommDev* cd) {
  cd->gidIndex = dev->gidIndex;
  if (cd->gidIndex < 0) {
    struct railnetIbGidReader r = railnetIbGidReaderVerbs(dev->context);
    r.physPorts = dev->physPorts;
    struct railnetIbGidChoice ch;
    NCCLCHECK(railnetIbChooseGidFrom(&r, dev->devName, dev->portNum, &dev->portAttr, &ch));
    cd->gidIndex = ch.index;
    if (railnetIbGidConfigured(&ch.gid)) {
      cd->gid = ch.gid;
      return ncclSuccess;
    }
  }
  if (dev->link == IBV_LINK_LAYER_ETHERNET || cd->gidIndex != 0 || dev->portAttr.gid_tbl_len > 0)
    NCCLCHECK(wrap_ibv_query_gid(dev->context, dev->portNum, cd->gidIndex, &cd->gid));
  return ncclSuccess;
}

/* PD, CQ and GID of every device of vDevice vDev, for nqps QPs spread over them. A CQ holds
 * what its QPs signal at most: per QP a data completion per fifo slot (the sender signals
 * only the last write of a slot); the receiver also its clear-to-send writes (at least one per
 * RAILNET_IB_FIFO_SLOTS / 2) and the flush reads. */
static ncclResult_t commDevsInit(struct ncclIbNetCommBase* base, int vDev, int nqps) {
  int qpsHere = (nqps + ncclIbMergedDevs[vDev].vProps.ndevs - 1) / ncclIbMergedDevs[vDev].vProps.ndevs;
  /* + 2: a path probe (probe.c) in flight */
  int cqe = base->isSend ? RAILNET_IB_FIFO_SLOTS * qpsHere + 2
                         : 2 * RAILNET_IB_FIFO_SLOTS * qpsHere + RAILNET_IB_FIFO_SLOTS + 2;
  return railnetIbCommDevsInit(base, vDev, cqe);
}

ncclResult_t railnetIbCommDevsInit(struct ncclIbNetCommBase* base, int vDev, int cqe) {
  struct ncclIbMergedDev* m = &ncclIbMergedDevs[vDev];
  base->vDev = vDev;
  base->vProps = m->vProps;
  for (int i = 0; i < base->vProps.ndevs; i++) {
    struct ncclIbCommDev* cd = &base->devs[i];
    cd->ibDevN = base->vProps.devs[i];
    struct ncclIbDev* dev = &ncclIbDevs[cd->ibDevN];
    /* events from before the comm are not its own (a QP number may be used again) */
    cd->portErrSeen = __atomic_load_n(&dev->stats.portErrors, __ATOMIC_ACQUIRE);
    cd->qpErrSeen = __atomic_load_n(&dev->stats.qpErrors, __ATOMIC_ACQUIRE);
    NCCLCHECK(railnetIbPdAcquire(cd->ibDevN, &cd->pd));
    NCCLCHECK(wrap_ibv_create_cq(&cd->cq, dev->context, cqe, NULL, NULL, 0));
    NCCLCHECK(commGid(dev, cd));
  }
  return ncclSuccess;
}

/* The comms' local control blocks (comm.h ctrl): registered 8 at a time for all the comms of a
 * set of devices, so that a comm's setup registers one memory region (the one its peer writes)
 * instead of two. Local write only: no rkey of them leaves the process. */
static struct railnetIbRegPool ctrlPool = RAILNET_IB_REGPOOL_INIT("IB control blocks", "the host is out of memory", 8);

static ncclResult_t ctrlTake(struct ncclIbNetCommBase* base, size_t bytes) {
  struct railnetIbRegDevs devs;
  railnetIbCommRegDevs(base, &devs);
  int got = 0;
  return railnetIbRegPoolTake(&ctrlPool, &devs, bytes, IBV_ACCESS_LOCAL_WRITE, 0, &base->ctrl, &got);
}

void railnetIbCommFree(struct ncclIbNetCommBase* base) {
  if (base == NULL) return;
  railnetIbProfFree(base);
  railnetIbFoFree(base); /* its QPs first: they use the CQs */
  for (int q = 0; q < base->nqps; q++)
    if (base->qps[q].qp) wrap_ibv_destroy_qp(base->qps[q].qp);
  for (int i = 0; i < base->vProps.ndevs; i++) /* a loopback QP may copy out of the eager ring */
    if (base->devs[i].flushQp) wrap_ibv_destroy_qp(base->devs[i].flushQp);
  /* after the QPs, which may still read or write them */
  if (base->isSend) railnetIbEagerSendFree(((struct ncclIbSendComm*)base)->eager);
  else railnetIbEagerRecvFree(((struct ncclIbRecvComm*)base)->eager);
  railnetIbRegPoolGive(&ctrlPool, &base->ctrl);
  free(base->qps);
  for (int c = 1; c < NET_IB_MAX_REQUESTS / NET_IB_REQ_CHUNK; c++) free(base->reqChunks[c]); /* 0: reqFirst */
  for (int i = 0; i < base->vProps.ndevs; i++) {
    struct ncclIbCommDev* cd = &base->devs[i];
    if (cd->flushMr) wrap_ibv_dereg_mr(cd->flushMr);
    if (cd->fifoMr) wrap_ibv_dereg_mr(cd->fifoMr);
    if (cd->cq) wrap_ibv_destroy_cq(cd->cq);
    if (cd->pd) railnetIbPdRelease(cd->ibDevN);
  }
  if (base->sock.fd >= 0) ncclSocketClose(&base->sock);
  free(base);
}

ncclResult_t railnetIbCommAlloc(int isSend, struct ncclIbNetCommBase** out) {
  size_t sz = isSend ? sizeof(struct ncclIbSendComm) : sizeof(struct ncclIbRecvComm);
  void* p = NULL;
  if (posix_memalign(&p, 64, sz) != 0 || p == NULL) {
    WARN("NET/IB : out of memory for a %s comm (%zu bytes)", isSend ? "send" : "receive", sz);
    return ncclSystemError;
  }
  memset(p, 0, sz);
  struct ncclIbNetCommBase* b = (struct ncclIbNetCommBase*)p;
  b->isSend = isSend;
  b->maxReqs = isSend ? NET_IB_MAX_REQUESTS : NET_IB_RECV_REQUESTS;
  /* the sender's writes: one per slot takes all the slots (a multi-receive or an
   * adaptive-routing message takes more and waits for room); the receiver's writes: see
   * railnetIbQpCreateAccess (2 x RAILNET_IB_FIFO_SLOTS - 1: rxe maps 64 entries for it, 128
   * for 2 x RAILNET_IB_FIFO_SLOTS; mlx5 64 for both) */
  b->sqDepth = isSend ? RAILNET_IB_FIFO_SLOTS : 2 * RAILNET_IB_FIFO_SLOTS - 1;
  /* a failover sender's slot takes three (data, sizes, completion record: failover.h) and all
   * slots may end up on one QP, beside the read of the records */
  if (isSend && railnetIbFoWanted()) b->sqDepth = 3 * RAILNET_IB_FIFO_SLOTS + 1;
  b->prof = railnetProfGet(RAILNET_PROF_IB);
  b->reqChunks[0] = b->reqFirst; /* (zeroed and touched above with the comm) */
  b->sock.fd = -1;
  b->sock.acceptFd = -1;
  *out = b;
  return ncclSuccess;
}

/* Traffic class and service level of a connection (the connector decides). The comm
 * config's trafficClass is a traffic class: it never becomes the 4-bit service level. */
static void connTcSl(void* ctx, int* tc, int* sl) {
  int cfg = ctx ? ((ncclNetCommConfig_t*)ctx)->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
  int64_t envTc = railnetParamInt(&setupParams[P_TC]), envSl = railnetParamInt(&setupParams[P_SL]);
  *tc = envTc != -1 ? (int)envTc : (cfg != NCCL_NET_TRAFFIC_CLASS_UNDEF && cfg >= 0 && cfg <= 255) ? cfg : 0;
  *sl = envSl != -1 ? (int)envSl : 0;
}

/* Link layers must match between every QP's two ends. */
static ncclResult_t checkLinkLayers(struct ncclIbNetCommBase* base, const struct ncclIbConnectionMetadata* rem,
                                    const char* peer) {
  for (int q = 0; q < base->nqps; q++) {
    struct ncclIbDev* dev = &ncclIbDevs[base->devs[base->qps[q].devIndex].ibDevN];
    const struct ncclIbDevInfo* rd = &rem->devs[rem->qpInfo[q].devIndex];
    if (rd->linkLayer != dev->link) {
      WARN("NET/IB : peer %s: link layer mismatch on QP %d: %s:%d is %s, the peer's device %d is %s. Select NICs of "
           "one link layer with NCCL_IB_HCA",
           peer, q, dev->devName, dev->portNum, NCCL_IB_LLSTR(dev->link), rem->qpInfo[q].devIndex,
           NCCL_IB_LLSTR(rd->linkLayer));
      return ncclRemoteError;
    }
  }
  return ncclSuccess;
}

/* Create nqps QPs in INIT and describe them in meta. */
static ncclResult_t createQps(struct ncclIbNetCommBase* base, int nqps, struct ncclIbConnectionMetadata* meta) {
  int ece = (int)railnetParamInt(&setupParams[P_ECE]);
  NCCLCHECK(RAILNET_CALLOC(&base->qps, nqps, "IB queue pairs"));
  for (int q = 0; q < nqps; q++) {
    struct ncclIbQp* qp = &base->qps[q];
    qp->devIndex = q % base->vProps.ndevs;
    NCCLCHECK(railnetIbQpCreate(base, qp->devIndex, &qp->qp));
    base->nqps = q + 1;
    meta->qpInfo[q].qpn = qp->qp->qp_num;
    meta->qpInfo[q].devIndex = qp->devIndex;
    if (ece && base->isSend) {
      NCCLCHECK(wrap_ibv_query_ece(qp->qp, &meta->qpInfo[q].ece, &qp->eceSupported));
      meta->qpInfo[q].eceSupported = qp->eceSupported;
    }
  }
  return ncclSuccess;
}

/* Connect every QP to its peer (RTR, RTS), applying the peer's ECE options first. */
static ncclResult_t connectQps(struct ncclIbNetCommBase* base, const struct ncclIbConnectionMetadata* rem, int tc,
                               int ctsTc, int sl, struct ncclIbConnectionMetadata* local) {
  int ece = (int)railnetParamInt(&setupParams[P_ECE]);
  for (int q = 0; q < base->nqps; q++) {
    struct ncclIbQp* qp = &base->qps[q];
    const struct ncclIbQpInfo* ri = &rem->qpInfo[q];
    qp->remDevIndex = ri->devIndex;
    if (ece && ri->eceSupported) {
      struct ibv_ece e = ri->ece;
      NCCLCHECK(wrap_ibv_set_ece(qp->qp, &e, &qp->eceSupported));
      if (!base->isSend && local) {
        /* the acceptor answers with what its QP agreed to */
        NCCLCHECK(wrap_ibv_query_ece(qp->qp, &local->qpInfo[q].ece, &local->qpInfo[q].eceSupported));
      }
    }
    /* the receiver writes the clear-to-send entries: those go with NCCL_IB_FIFO_TC */
    int qtc = base->isSend ? tc : ctsTc;
    base->qpTc = qtc;
    base->qpSl = sl;
    NCCLCHECK(railnetIbQpConnectInfo(base, qp->devIndex, qp->qp, &rem->devs[ri->devIndex], ri->qpn, qtc, sl));
  }
  return ncclSuccess;
}

ncclResult_t railnetIbSendCommSetup(void* ctx, struct ncclIbSendComm* comm, struct ncclIbConnectionMetadata* meta) {
  struct ncclIbNetCommBase* base = &comm->base;
  int nqps = railnetIbParamQpsPerConn() * ncclIbMergedDevs[base->vDev].vProps.ndevs;
  if (nqps > NCCL_IB_MAX_QPS) nqps = NCCL_IB_MAX_QPS;
  NCCLCHECK(commDevsInit(base, base->vDev, nqps));
  base->useInline = (int)railnetParamInt(&setupParams[P_USE_INLINE]);
  base->splitDataOnQps = railnetIbParamSplitDataOnQps();
  NCCLCHECK(createQps(base, nqps, meta));
  /* the sizes of a multi-send, then what the comm's first eager message is written from */
  size_t sizesBytes = sizeof(int) * RAILNET_IB_FIFO_SLOTS * NCCL_NET_IB_MAX_RECVS;
  NCCLCHECK(ctrlTake(base, sizesBytes + (railnetIbEagerSize() > 0 ? RAILNET_IB_EAGER_FIRST_BYTES : 0)));
  comm->sizes = (int(*)[NCCL_NET_IB_MAX_RECVS])base->ctrl.buf;
  for (int i = 0; i < base->vProps.ndevs; i++) {
    struct ncclIbCommDev* cd = &base->devs[i];
    /* the fifo and, after it, the eager credit word (eager.h) */
    size_t fifoBytes = (size_t)((char*)&comm->eagerCredit + sizeof(comm->eagerCredit) - (char*)comm->fifo);
    NCCLCHECK(wrap_ibv_reg_mr(&cd->fifoMr, cd->pd, comm->fifo, fifoBytes,
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ));
    railnetIbDevInfoFill(base, i, &meta->devs[i], cd->fifoMr->rkey);
  }
  if (railnetIbFoWanted()) meta->devs[0].flags |= RAILNET_IB_FLAG_FAILOVER;
  railnetIbEagerSendMeta(comm, meta);
  comm->ar = ncclIbDevs[base->devs[0].ibDevN].ar;
  meta->magic = RAILNET_IB_META_MAGIC;
  meta->version = RAILNET_IB_META_VERSION;
  meta->ndevs = base->vProps.ndevs;
  meta->nqps = base->nqps;
  meta->splitDataOnQps = base->splitDataOnQps;
  connTcSl(ctx, &meta->tc, &meta->sl);
  meta->fifoAddr = (uint64_t)(uintptr_t)comm->fifo;
  snprintf(meta->devName, sizeof(meta->devName), "%s", ncclIbMergedDevs[base->vDev].devName);
  return ncclSuccess;
}

/* Each feature's agreement with the peer, in one order on both sides: how completions are
 * matched, port failover, its completion records, eager messages. */
static ncclResult_t negotiateSend(struct ncclIbSendComm* comm, const struct ncclIbConnectionMetadata* remote,
                                  const char* peer) {
  railnetIbSendModeSetup(comm, remote);
  int peerFo = (remote->devs[0].flags & RAILNET_IB_FLAG_FAILOVER) != 0;
  NCCLCHECK(railnetIbFoSetup(&comm->base, peerFo, peer, railnetIbPollDev));
  NCCLCHECK(railnetIbRecordsSendSetup(&comm->base, remote));
  return railnetIbEagerSendConnect(comm, remote, peer);
}

static ncclResult_t negotiateRecv(struct ncclIbRecvComm* comm, const struct ncclIbConnectionMetadata* rem,
                                  struct ncclIbConnectionMetadata* meta, const char* peer) {
  struct ncclIbNetCommBase* base = &comm->base;
  NCCLCHECK(railnetIbRecvModeSetup(comm, meta, peer));
  int peerFo = (rem->devs[0].flags & RAILNET_IB_FLAG_FAILOVER) != 0;
  NCCLCHECK(railnetIbFoSetup(base, peerFo, peer, railnetIbPollDev));
  if (base->fo) meta->devs[0].flags |= RAILNET_IB_FLAG_FAILOVER;
  NCCLCHECK(railnetIbRecordsRecvSetup(base, meta));
  return railnetIbEagerRecvSetup(comm, rem, meta, peer);
}

ncclResult_t railnetIbSendCommConnect(struct ncclIbSendComm* comm, const struct ncclIbConnectionMetadata* local,
                                      const struct ncclIbConnectionMetadata* remote, const char* peer) {
  struct ncclIbNetCommBase* base = &comm->base;
  NCCLCHECK(checkLinkLayers(base, remote, peer));
  base->nRemDevs = remote->ndevs;
  memcpy(base->remDevs, remote->devs, sizeof(base->remDevs));
  snprintf(base->remDevName, sizeof(base->remDevName), "%.*s", (int)sizeof(remote->devName) - 1, remote->devName);
  comm->remSizesAddr = remote->fifoAddr;
  for (int i = 0; i < remote->ndevs; i++) comm->remSizesRkeys[i] = remote->devs[i].fifoRkey;
  NCCLCHECK(negotiateSend(comm, remote, peer));
  return connectQps(base, remote, local->tc, local->tc, local->sl, NULL);
}

ncclResult_t railnetIbRecvCommSetup(int vDev, struct ncclIbRecvComm* comm, const struct ncclIbConnectionMetadata* rem,
                                    struct ncclIbConnectionMetadata* meta, const char* peer) {
  struct ncclIbNetCommBase* base = &comm->base;
  NCCLCHECK(commDevsInit(base, vDev, rem->nqps));
  base->useInline = (int)railnetParamInt(&setupParams[P_USE_INLINE]);
  base->splitDataOnQps = rem->splitDataOnQps;
  if (rem->nqps != railnetIbParamQpsPerConn() * base->vProps.ndevs || rem->splitDataOnQps != railnetIbParamSplitDataOnQps())
    INFO(NCCL_NET, "NET/IB : peer %s uses %d QPs%s; following it (here NCCL_IB_QPS_PER_CONNECTION=%d x %d devices, "
         "NCCL_IB_SPLIT_DATA_ON_QPS=%d)", peer, rem->nqps, rem->splitDataOnQps ? ", data split across QPs" : "",
         railnetIbParamQpsPerConn(), base->vProps.ndevs, railnetIbParamSplitDataOnQps());
  NCCLCHECK(createQps(base, rem->nqps, meta));
  /* the clear-to-send entries, then the eager credit words (eager.h) */
  NCCLCHECK(ctrlTake(base, sizeof(struct ncclIbSendFifo) * RAILNET_IB_FIFO_SLOTS * NCCL_NET_IB_MAX_RECVS +
                               sizeof(struct railnetIbEagerCredit)));
  comm->elems = (struct ncclIbSendFifo(*)[NCCL_NET_IB_MAX_RECVS])base->ctrl.buf;
  NCCLCHECK(checkLinkLayers(base, rem, peer));
  int64_t fifoTc = railnetParamInt(&setupParams[P_FIFO_TC]);
  int ctsTc = (ncclIbDevs[base->devs[0].ibDevN].link == IBV_LINK_LAYER_ETHERNET && fifoTc != -1) ? (int)fifoTc
                                                                                                 : rem->tc;
  NCCLCHECK(connectQps(base, rem, rem->tc, ctsTc, rem->sl, meta));
  for (int i = 0; i < base->vProps.ndevs; i++) {
    struct ncclIbCommDev* cd = &base->devs[i];
    /* the sizes records and, after them, the first-message box */
    size_t peerBytes = (size_t)((char*)comm->first + sizeof(comm->first) - (char*)comm->sizes);
    NCCLCHECK(wrap_ibv_reg_mr(&cd->fifoMr, cd->pd, comm->sizes, peerBytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
    railnetIbDevInfoFill(base, i, &meta->devs[i], cd->fifoMr->rkey);
  }
  NCCLCHECK(negotiateRecv(comm, rem, meta, peer));
  base->nRemDevs = rem->ndevs;
  memcpy(base->remDevs, rem->devs, sizeof(base->remDevs));
  snprintf(base->remDevName, sizeof(base->remDevName), "%.*s", (int)sizeof(rem->devName) - 1, rem->devName);
  comm->remFifoAddr = rem->fifoAddr;
  /* GPUDirect receives are flushed with an RDMA read through a QP connected to itself */
  comm->flushEnabled = ncclIbGdrSupport() == ncclSuccess && !railnetParamInt(&setupParams[P_GDR_FLUSH_DISABLE]);
  for (int i = 0; comm->flushEnabled && i < base->vProps.ndevs; i++) {
    struct ncclIbCommDev* cd = &base->devs[i];
    NCCLCHECK(wrap_ibv_reg_mr(&cd->flushMr, cd->pd, comm->flushBuf, sizeof(comm->flushBuf), IBV_ACCESS_LOCAL_WRITE));
    if (cd->flushQp == NULL) NCCLCHECK(railnetIbQpSelf(base, i, rem->tc, rem->sl, &cd->flushQp));
  }
  meta->magic = RAILNET_IB_META_MAGIC;
  meta->version = RAILNET_IB_META_VERSION;
  meta->ndevs = base->vProps.ndevs;
  meta->nqps = base->nqps;
  meta->splitDataOnQps = base->splitDataOnQps;
  meta->tc = rem->tc;
  meta->sl = rem->sl;
  meta->fifoAddr = (uint64_t)(uintptr_t)comm->sizes;
  snprintf(meta->devName, sizeof(meta->devName), "%s", ncclIbMergedDevs[base->vDev].devName);
  return ncclSuccess;
}
