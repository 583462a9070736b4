/*
 * IB comm resources and QPs (qp.h). QP i of one side is connected to QP i of the other; QP i
 * lives on device i % ndevs of its side's vDevice. The connector decides the traffic class
 * and service level; the acceptor follows its QP count and data split.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "qp.h"
#include "eager.h"
#include "failover.h"
#include "matching.h"
#include "devices.h"
#include "gdr.h"
#include "gid.h"
#include "ibvwrap.h"
#include "param.h"
#include "reg.h"
#include "net_prof.h"
#include "prof.h"

enum {
  P_TIMEOUT, P_RETRY_CNT, P_SL, P_TC, P_FIFO_TC, P_PKEY, P_QPS_PER_CONN, P_USE_INLINE, P_ECE, P_SPLIT,
  P_GDR_FLUSH_DISABLE
};
static const railnetParam qpParams[] = {
    [P_TIMEOUT] = RAILNET_PARAM_INT_DEF("NCCL_IB_TIMEOUT", 20, 1, 31,
                                        "QP ACK timeout: 4.096 us x 2^value (ibv_qp_attr.timeout)"),
    [P_RETRY_CNT] = RAILNET_PARAM_INT_DEF("NCCL_IB_RETRY_CNT", 7, 0, 7, "QP transport retry count"),
    [P_SL] = RAILNET_PARAM_INT_DEF("NCCL_IB_SL", -1, -1, 15,
                                   "InfiniBand service level (-1: 0; the comm's traffic class never sets it)"),
    [P_TC] = RAILNET_PARAM_INT_DEF("NCCL_IB_TC", -1, -1, 255,
                                   "RoCE traffic class of the data (-1: the comm's traffic class, else 0)"),
    [P_FIFO_TC] = RAILNET_PARAM_INT_DEF("NCCL_IB_FIFO_TC", -1, -1, 255,
                                        "RoCE traffic class of the receiver's clear-to-send writes (-1: NCCL_IB_TC)"),
    [P_PKEY] = RAILNET_PARAM_INT_DEF("NCCL_IB_PKEY", 0, 0, 65535, "Partition key index of the QPs"),
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
RAILNET_PARAM_TABLE("net_ib/qp", qpParams);

int railnetIbParamQpsPerConn(void) { return (int)railnetParamInt(&qpParams[P_QPS_PER_CONN]); }
int railnetIbParamSplitDataOnQps(void) { return (int)railnetParamInt(&qpParams[P_SPLIT]); }

uint64_t railnetIbRetryTimeNs(void) {
  uint64_t t = 4096ull << railnetParamInt(&qpParams[P_TIMEOUT]);
  return t * (uint64_t)(railnetParamInt(&qpParams[P_RETRY_CNT]) + 1);
}

const char* railnetIbPeerStr(struct ncclIbNetCommBase* base, char* buf) {
  return ncclSocketToString(&base->sock.addr, buf, 1);
}

/* ------------------------------------------------------------------ QPs */

static ncclResult_t qpCreate(struct ncclIbNetCommBase* base, int devIndex, int accessFlags, struct ibv_qp** out) {
  struct ncclIbCommDev* cd = &base->devs[devIndex];
  struct ncclIbDev* dev = &ncclIbDevs[cd->ibDevN];
  struct ibv_qp_init_attr init;
  memset(&init, 0, sizeof(init));
  init.send_cq = cd->cq;
  init.recv_cq = cd->cq;
  init.qp_type = IBV_QPT_RC;
  /* Queue depths (a provider maps every entry into the process: rxe rounds them up to a
   * power of two): the receiver posts a receive per fifo slot, a clear-to-send write per slot
   * (unsignaled but one per RAILNET_IB_FIFO_SLOTS: at most twice that wait for their
   * completion) and on the flush QP a read per receive; the sender no receive, and its
   * writes (one or two per slot, up to nine for a multi-receive) are counted against
   * sqDepth by isend, which waits for completions when a slot would not fit. */
  init.cap.max_send_wr = (uint32_t)base->sqDepth;
  init.cap.max_recv_wr = base->isSend ? 1 : RAILNET_IB_FIFO_SLOTS;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.cap.max_inline_data = base->useInline ? sizeof(struct ncclIbSendFifo) * NCCL_NET_IB_MAX_RECVS : 0;
  struct ibv_qp* qp = NULL;
  if (wrap_ibv_create_qp(&qp, cd->pd, &init) != ncclSuccess || qp == NULL) {
    WARN("NET/IB : %s:%d: cannot create a queue pair", dev->devName, dev->portNum);
    return ncclSystemError;
  }
  /* the sender counts its writes against what its QPs were granted (at least what it asked) */
  if (base->isSend && (base->nqps == 0 || (int)init.cap.max_send_wr < base->sqDepth))
    base->sqDepth = (int)init.cap.max_send_wr;
  if (base->useInline) {
    if (init.cap.max_inline_data < sizeof(struct ncclIbSendFifo)) base->useInline = 0;
    else if (base->maxInline == 0 || init.cap.max_inline_data < base->maxInline) base->maxInline = init.cap.max_inline_data;
  }
  struct ibv_qp_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = (uint16_t)railnetParamInt(&qpParams[P_PKEY]);
  attr.port_num = dev->portNum;
  attr.qp_access_flags = accessFlags;
  if (wrap_ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) !=
      ncclSuccess) {
    WARN("NET/IB : %s:%d: QP %u RESET->INIT failed (NCCL_IB_PKEY=%d)", dev->devName, dev->portNum, qp->qp_num,
         (int)railnetParamInt(&qpParams[P_PKEY]));
    wrap_ibv_destroy_qp(qp);
    return ncclSystemError;
  }
  *out = qp;
  return ncclSuccess;
}

/* INIT -> RTR -> RTS towards remote QP qpn on the peer's device info rem. */
static ncclResult_t qpConnectTimed(struct ncclIbNetCommBase* base, int devIndex, struct ibv_qp* qp,
                                   const struct ncclIbDevInfo* rem, uint32_t qpn, int tc, int sl, int timeout,
                                   int retryCnt) {
  struct ncclIbCommDev* cd = &base->devs[devIndex];
  struct ncclIbDev* dev = &ncclIbDevs[cd->ibDevN];
  struct ibv_qp_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.qp_state = IBV_QPS_RTR;
  enum ibv_mtu mtu = dev->portAttr.active_mtu;
  if ((enum ibv_mtu)rem->mtu < mtu) mtu = (enum ibv_mtu)rem->mtu;
  attr.path_mtu = mtu;
  attr.dest_qp_num = qpn;
  attr.rq_psn = 0;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  if (rem->linkLayer == IBV_LINK_LAYER_ETHERNET) {
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = rem->gid;
    attr.ah_attr.grh.flow_label = 0;
    attr.ah_attr.grh.sgid_index = (uint8_t)cd->gidIndex;
    attr.ah_attr.grh.hop_limit = 255;
    attr.ah_attr.grh.traffic_class = (uint8_t)tc;
  } else {
    attr.ah_attr.is_global = 0;
    attr.ah_attr.dlid = (uint16_t)rem->lid;
  }
  attr.ah_attr.sl = (uint8_t)sl;
  attr.ah_attr.src_path_bits = 0;
  attr.ah_attr.port_num = dev->portNum;
  char g[INET6_ADDRSTRLEN] = "";
  ibvGetGidStr(&rem->gid, g, sizeof(g));
  if (wrap_ibv_modify_qp(qp, &attr,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != ncclSuccess) {
    WARN("NET/IB : %s:%d: QP %u INIT->RTR towards QP %u (%s %s, GID index %d here) failed", dev->devName,
         dev->portNum, qp->qp_num, qpn, NCCL_IB_LLSTR(rem->linkLayer), g, cd->gidIndex);
    return ncclSystemError;
  }
  memset(&attr, 0, sizeof(attr));
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = (uint8_t)timeout;
  attr.retry_cnt = (uint8_t)retryCnt;
  attr.rnr_retry = 7;
  attr.sq_psn = 0;
  attr.max_rd_atomic = 1;
  if (wrap_ibv_modify_qp(qp, &attr,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                             IBV_QP_MAX_QP_RD_ATOMIC) != ncclSuccess) {
    WARN("NET/IB : %s:%d: QP %u RTR->RTS failed", dev->devName, dev->portNum, qp->qp_num);
    return ncclSystemError;
  }
  TRACE(NCCL_NET, "NET/IB: %s:%d QP %u connected to QP %u at %s mtu %d tc %d sl %d", dev->devName, dev->portNum,
        qp->qp_num, qpn, g, (int)mtu, tc, sl);
  return ncclSuccess;
}

/* ... with the user's NCCL_IB_TIMEOUT and NCCL_IB_RETRY_CNT */
static ncclResult_t qpConnect(struct ncclIbNetCommBase* base, int devIndex, struct ibv_qp* qp,
                              const struct ncclIbDevInfo* rem, uint32_t qpn, int tc, int sl) {
  return qpConnectTimed(base, devIndex, qp, rem, qpn, tc, sl, (int)railnetParamInt(&qpParams[P_TIMEOUT]),
                        (int)railnetParamInt(&qpParams[P_RETRY_CNT]));
}

ncclResult_t railnetIbQpCreate(struct ncclIbNetCommBase* base, int devIndex, struct ibv_qp** out) {
  return qpCreate(base, devIndex, IBV_ACCESS_REMOTE_WRITE, out);
}

ncclResult_t railnetIbQpConnect(struct ncclIbNetCommBase* base, int devIndex, struct ibv_qp* qp, int remDevIndex,
                                uint32_t qpn) {
  return qpConnect(base, devIndex, qp, &base->remDevs[remDevIndex], qpn, base->qpTc, base->qpSl);
}

ncclResult_t railnetIbQpConnectTimed(struct ncclIbNetCommBase* base, int devIndex, struct ibv_qp* qp,
                                     int remDevIndex, uint32_t qpn, int timeout, int retryCnt) {
  return qpConnectTimed(base, devIndex, qp, &base->remDevs[remDevIndex], qpn, base->qpTc, base->qpSl, timeout,
                        retryCnt);
}

/* ------------------------------------------------------------------ comm resources */

/* PD, CQ and GID of every device of vDevice vDev, for nqps QPs spread over them. A CQ holds
 * what its QPs signal at most: per QP a data completion per fifo slot (the sender signals
 * only the last write of a slot); the receiver also its clear-to-send writes (two per
 * RAILNET_IB_FIFO_SLOTS) and the flush reads. */
static ncclResult_t commDevsInit(struct ncclIbNetCommBase* base, int vDev, int nqps) {
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
    int qpsHere = (nqps + base->vProps.ndevs - 1) / base->vProps.ndevs;
    /* + 2: a path probe (probe.c) in flight */
    int cqe = base->isSend ? RAILNET_IB_FIFO_SLOTS * qpsHere + 2
                           : 2 * RAILNET_IB_FIFO_SLOTS * qpsHere + RAILNET_IB_FIFO_SLOTS + 2;
    NCCLCHECK(wrap_ibv_create_cq(&cd->cq, dev->context, cqe, NULL, NULL, 0));
    cd->gidIndex = dev->gidIndex;
    if (cd->gidIndex < 0) NCCLCHECK(ncclIbGetGidIndex(dev->context, dev->portNum, &dev->portAttr, &cd->gidIndex));
    if (dev->link == IBV_LINK_LAYER_ETHERNET || cd->gidIndex != 0 || dev->portAttr.gid_tbl_len > 0)
      NCCLCHECK(wrap_ibv_query_gid(dev->context, dev->portNum, cd->gidIndex, &cd->gid));
  }
  return ncclSuccess;
}

void railnetIbCommFree(struct ncclIbNetCommBase* base) {
  if (base == NULL) return;
  railnetIbProfFree(base);
  railnetIbFoFree(base); /* its QPs first: they use the CQs */
  for (int q = 0; q < base->nqps; q++)
    if (base->qps[q].qp) wrap_ibv_destroy_qp(base->qps[q].qp);
  /* after the QPs, which may still read or write them */
  railnetIbEagerFree(base->isSend ? ((struct ncclIbSendComm*)base)->eager : ((struct ncclIbRecvComm*)base)->eager);
  free(base->qps);
  for (int c = 0; c < NET_IB_MAX_REQUESTS / NET_IB_REQ_CHUNK; c++) free(base->reqChunks[c]);
  for (int i = 0; i < base->vProps.ndevs; i++) {
    struct ncclIbCommDev* cd = &base->devs[i];
    if (cd->flushQp) wrap_ibv_destroy_qp(cd->flushQp);
    if (cd->flushMr) wrap_ibv_dereg_mr(cd->flushMr);
    if (cd->fifoMr) wrap_ibv_dereg_mr(cd->fifoMr);
    if (cd->localMr) wrap_ibv_dereg_mr(cd->localMr);
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
   * adaptive-routing message takes more and waits for room); the receiver's writes: see qpCreate */
  b->sqDepth = isSend ? RAILNET_IB_FIFO_SLOTS : 2 * RAILNET_IB_FIFO_SLOTS;
  b->prof = railnetProfGet(RAILNET_PROF_IB);
  b->sock.fd = -1;
  b->sock.acceptFd = -1;
  *out = b;
  return ncclSuccess;
}

static void fillDevInfo(struct ncclIbNetCommBase* base, int i, struct ncclIbDevInfo* d, uint32_t rkey) {
  struct ncclIbCommDev* cd = &base->devs[i];
  struct ncclIbDev* dev = &ncclIbDevs[cd->ibDevN];
  d->lid = dev->portAttr.lid;
  d->ibPort = dev->portNum;
  d->linkLayer = dev->link;
  d->mtu = (uint8_t)dev->portAttr.active_mtu;
  d->gidIndex = cd->gidIndex;
  d->gid = cd->gid;
  d->fifoRkey = rkey;
  d->physDev = (uint32_t)cd->ibDevN + 1;
}

/* Traffic class and service level of a connection (the connector decides). The comm
 * config's trafficClass is a traffic class: it never becomes the 4-bit service level. */
static void connTcSl(void* ctx, int* tc, int* sl) {
  int cfg = ctx ? ((ncclNetCommConfig_t*)ctx)->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
  int64_t envTc = railnetParamInt(&qpParams[P_TC]), envSl = railnetParamInt(&qpParams[P_SL]);
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
  int ece = (int)railnetParamInt(&qpParams[P_ECE]);
  NCCLCHECK(RAILNET_CALLOC(&base->qps, nqps, "IB queue pairs"));
  for (int q = 0; q < nqps; q++) {
    struct ncclIbQp* qp = &base->qps[q];
    qp->devIndex = q % base->vProps.ndevs;
    NCCLCHECK(qpCreate(base, qp->devIndex, IBV_ACCESS_REMOTE_WRITE, &qp->qp));
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
  int ece = (int)railnetParamInt(&qpParams[P_ECE]);
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
    NCCLCHECK(qpConnect(base, qp->devIndex, qp->qp, &rem->devs[ri->devIndex], ri->qpn, qtc, sl));
  }
  return ncclSuccess;
}

ncclResult_t railnetIbSendCommSetup(void* ctx, struct ncclIbSendComm* comm, struct ncclIbConnectionMetadata* meta) {
  struct ncclIbNetCommBase* base = &comm->base;
  int nqps = railnetIbParamQpsPerConn() * ncclIbMergedDevs[base->vDev].vProps.ndevs;
  if (nqps > NCCL_IB_MAX_QPS) nqps = NCCL_IB_MAX_QPS;
  NCCLCHECK(commDevsInit(base, base->vDev, nqps));
  base->useInline = (int)railnetParamInt(&qpParams[P_USE_INLINE]);
  base->splitDataOnQps = railnetIbParamSplitDataOnQps();
  NCCLCHECK(createQps(base, nqps, meta));
  for (int i = 0; i < base->vProps.ndevs; i++) {
    struct ncclIbCommDev* cd = &base->devs[i];
    /* the fifo and, after it, the eager credit word (eager.h) */
    size_t fifoBytes = (size_t)((char*)&comm->eagerReleased + sizeof(comm->eagerReleased) - (char*)comm->fifo);
    NCCLCHECK(wrap_ibv_reg_mr(&cd->fifoMr, cd->pd, comm->fifo, fifoBytes,
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ));
    NCCLCHECK(wrap_ibv_reg_mr(&cd->localMr, cd->pd, comm->sizes, sizeof(comm->sizes), IBV_ACCESS_LOCAL_WRITE));
    fillDevInfo(base, i, &meta->devs[i], cd->fifoMr->rkey);
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

ncclResult_t railnetIbSendCommConnect(struct ncclIbSendComm* comm, const struct ncclIbConnectionMetadata* local,
                                      const struct ncclIbConnectionMetadata* remote, const char* peer) {
  struct ncclIbNetCommBase* base = &comm->base;
  NCCLCHECK(checkLinkLayers(base, remote, peer));
  base->nRemDevs = remote->ndevs;
  memcpy(base->remDevs, remote->devs, sizeof(base->remDevs));
  snprintf(base->remDevName, sizeof(base->remDevName), "%.*s", (int)sizeof(remote->devName) - 1, remote->devName);
  comm->remSizesAddr = remote->fifoAddr;
  for (int i = 0; i < remote->ndevs; i++) comm->remSizesRkeys[i] = remote->devs[i].fifoRkey;
  NCCLCHECK(railnetIbSendModeSetup(comm, remote, peer));
  NCCLCHECK(railnetIbEagerSendConnect(comm, remote, peer));
  return connectQps(base, remote, local->tc, local->tc, local->sl, NULL);
}

ncclResult_t railnetIbRecvCommSetup(int vDev, struct ncclIbRecvComm* comm, const struct ncclIbConnectionMetadata* rem,
                                    struct ncclIbConnectionMetadata* meta, const char* peer) {
  struct ncclIbNetCommBase* base = &comm->base;
  NCCLCHECK(commDevsInit(base, vDev, rem->nqps));
  base->useInline = (int)railnetParamInt(&qpParams[P_USE_INLINE]);
  base->splitDataOnQps = rem->splitDataOnQps;
  if (rem->nqps != railnetIbParamQpsPerConn() * base->vProps.ndevs || rem->splitDataOnQps != railnetIbParamSplitDataOnQps())
    INFO(NCCL_NET, "NET/IB : peer %s uses %d QPs%s; following it (here NCCL_IB_QPS_PER_CONNECTION=%d x %d devices, "
         "NCCL_IB_SPLIT_DATA_ON_QPS=%d)", peer, rem->nqps, rem->splitDataOnQps ? ", data split across QPs" : "",
         railnetIbParamQpsPerConn(), base->vProps.ndevs, railnetIbParamSplitDataOnQps());
  NCCLCHECK(createQps(base, rem->nqps, meta));
  NCCLCHECK(checkLinkLayers(base, rem, peer));
  int64_t fifoTc = railnetParamInt(&qpParams[P_FIFO_TC]);
  int ctsTc = (ncclIbDevs[base->devs[0].ibDevN].link == IBV_LINK_LAYER_ETHERNET && fifoTc != -1) ? (int)fifoTc
                                                                                                 : rem->tc;
  NCCLCHECK(connectQps(base, rem, rem->tc, ctsTc, rem->sl, meta));
  NCCLCHECK(railnetIbRecvModeSetup(comm, rem, meta, peer));
  for (int i = 0; i < base->vProps.ndevs; i++) {
    struct ncclIbCommDev* cd = &base->devs[i];
    NCCLCHECK(wrap_ibv_reg_mr(&cd->fifoMr, cd->pd, comm->sizes, sizeof(comm->sizes),
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
    NCCLCHECK(wrap_ibv_reg_mr(&cd->localMr, cd->pd, comm->elems, sizeof(comm->elems), IBV_ACCESS_LOCAL_WRITE));
    fillDevInfo(base, i, &meta->devs[i], cd->fifoMr->rkey);
  }
  NCCLCHECK(railnetIbEagerRecvSetup(comm, rem, meta, peer));
  base->nRemDevs = rem->ndevs;
  memcpy(base->remDevs, rem->devs, sizeof(base->remDevs));
  snprintf(base->remDevName, sizeof(base->remDevName), "%.*s", (int)sizeof(rem->devName) - 1, rem->devName);
  comm->remFifoAddr = rem->fifoAddr;
  /* GPUDirect receives are flushed with an RDMA read through a QP connected to itself */
  comm->flushEnabled = ncclIbGdrSupport() == ncclSuccess && !railnetParamInt(&qpParams[P_GDR_FLUSH_DISABLE]);
  for (int i = 0; comm->flushEnabled && i < base->vProps.ndevs; i++) {
    struct ncclIbCommDev* cd = &base->devs[i];
    NCCLCHECK(wrap_ibv_reg_mr(&cd->flushMr, cd->pd, comm->flushBuf, sizeof(comm->flushBuf), IBV_ACCESS_LOCAL_WRITE));
    NCCLCHECK(qpCreate(base, i, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, &cd->flushQp));
    struct ncclIbDevInfo self;
    memset(&self, 0, sizeof(self));
    fillDevInfo(base, i, &self, 1);
    NCCLCHECK(qpConnect(base, i, cd->flushQp, &self, cd->flushQp->qp_num, rem->tc, rem->sl));
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
