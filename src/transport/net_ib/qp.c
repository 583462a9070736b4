/*
 * The IB transport's queue pairs (qp.h): one made on a comm's device in INIT, and brought to
 * RTS towards a peer's QP with the user's timeouts (ibvqp.h fills the attributes). Below
 * everything that posts on QPs; the comm setup (setup.c) decides which QPs a comm has.
 */
#include <string.h>
#include "qp.h"
#include "devices.h"
#include "gid.h"
#include "ibvqp.h"
#include "ibvwrap.h"
#include "param.h"
#include "resiliency.h"

enum { P_TIMEOUT, P_RETRY_CNT, P_PKEY };
static const railnetParam qpParams[] = {
    [P_TIMEOUT] = RAILNET_PARAM_INT_DEF("NCCL_IB_TIMEOUT", 20, 1, 31,
                                        "QP ACK timeout: 4.096 us x 2^value (ibv_qp_attr.timeout)"),
    [P_RETRY_CNT] = RAILNET_PARAM_INT_DEF("NCCL_IB_RETRY_CNT", 7, 0, 7, "QP transport retry count"),
    [P_PKEY] = RAILNET_PARAM_INT_DEF("NCCL_IB_PKEY", 0, 0, 65535, "Partition key index of the QPs"),
};
RAILNET_PARAM_TABLE("net_ib/qp", qpParams);

uint64_t railnetIbRetryTimeNs(void) {
  uint64_t t = 4096ull << railnetParamInt(&qpParams[P_TIMEOUT]);
  return t * (uint64_t)(railnetParamInt(&qpParams[P_RETRY_CNT]) + 1);
}

/* ------------------------------------------------------------------ QPs */

ncclResult_t railnetIbQpCreateAccess(struct ncclIbNetCommBase* base, int devIndex, int accessFlags, int sqDepth,
                                     struct ibv_qp** out) {
  struct ncclIbCommDev* cd = &base->devs[devIndex];
  struct ncclIbDev* dev = &ncclIbDevs[cd->ibDevN];
  struct ibv_qp_init_attr init;
  memset(&init, 0, sizeof(init));
  init.send_cq = cd->cq;
  init.recv_cq = cd->cq;
  init.qp_type = IBV_QPT_RC;
  /* Queue depths (a provider maps every entry into the process: rxe rounds depth + 1 up to a
   * power of two, mlx5 the depth): the receiver posts a receive per fifo slot, a clear-to-send
   * write per slot (unsignaled but at least one per RAILNET_IB_FIFO_SLOTS / 2: at most twice
   * that wait for their completion, beside its signaled credit writes) and on the flush QP a
   * read per receive; the sender no receive, and its
   * writes (one or two per slot, up to nine for a multi-receive) are counted against
   * sqDepth by isend, which waits for completions when a slot would not fit. */
  init.cap.max_send_wr = (uint32_t)sqDepth;
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
  if (railnetIbvQpInit(qp, dev->portNum, (uint16_t)railnetParamInt(&qpParams[P_PKEY]), accessFlags, 1) != 0) {
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
                                   int retryCnt, int rdIn, int rdOut) {
  struct ncclIbCommDev* cd = &base->devs[devIndex];
  struct ncclIbDev* dev = &ncclIbDevs[cd->ibDevN];
  enum ibv_mtu mtu = dev->portAttr.active_mtu;
  if ((enum ibv_mtu)rem->mtu < mtu) mtu = (enum ibv_mtu)rem->mtu;
  struct railnetIbvQpPath path;
  memset(&path, 0, sizeof(path));
  path.port = dev->portNum;
  path.mtu = mtu;
  path.remoteQpn = qpn;
  path.global = rem->linkLayer == IBV_LINK_LAYER_ETHERNET;
  if (path.global) path.remoteGid = rem->gid;
  else path.remoteLid = (uint16_t)rem->lid;
  path.gidIndex = (uint8_t)cd->gidIndex;
  path.tc = (uint8_t)tc;
  path.sl = (uint8_t)sl;
  path.timeout = (uint8_t)timeout;
  path.retryCnt = (uint8_t)retryCnt;
  path.rnrRetry = 7;
  path.retryModify = 1;
  path.rdAtomicIn = (uint8_t)rdIn;
  path.rdAtomicOut = (uint8_t)rdOut;
  char g[INET6_ADDRSTRLEN] = "";
  ibvGetGidStr(&rem->gid, g, sizeof(g));
  enum ibv_qp_state failed = IBV_QPS_RTR;
  if (railnetIbvQpConnect(qp, &path, &failed) != 0) {
    if (failed == IBV_QPS_RTR)
      WARN("NET/IB : %s:%d: QP %u INIT->RTR towards QP %u (%s %s, GID index %d here) failed", dev->devName,
           dev->portNum, qp->qp_num, qpn, NCCL_IB_LLSTR(rem->linkLayer), g, cd->gidIndex);
    else
      WARN("NET/IB : %s:%d: QP %u RTR->RTS failed", dev->devName, dev->portNum, qp->qp_num);
    return ncclSystemError;
  }
  TRACE(NCCL_NET, "NET/IB: %s:%d QP %u connected to QP %u at %s mtu %d tc %d sl %d", dev->devName, dev->portNum,
        qp->qp_num, qpn, g, (int)mtu, tc, sl);
  return ncclSuccess;
}

/* ... with the user's NCCL_IB_TIMEOUT and NCCL_IB_RETRY_CNT */
ncclResult_t railnetIbQpConnectInfo(struct ncclIbNetCommBase* base, int devIndex, struct ibv_qp* qp,
                                    const struct ncclIbDevInfo* rem, uint32_t qpn, int tc, int sl) {
  return railnetIbQpConnectReads(base, devIndex, qp, rem, qpn, tc, sl, 1, 1);
}

ncclResult_t railnetIbQpConnectReads(struct ncclIbNetCommBase* base, int devIndex, struct ibv_qp* qp,
                                     const struct ncclIbDevInfo* rem, uint32_t qpn, int tc, int sl, int rdIn,
                                     int rdOut) {
  return qpConnectTimed(base, devIndex, qp, rem, qpn, tc, sl, (int)railnetParamInt(&qpParams[P_TIMEOUT]),
                        (int)railnetParamInt(&qpParams[P_RETRY_CNT]), rdIn, rdOut);
}

ncclResult_t railnetIbQpCreate(struct ncclIbNetCommBase* base, int devIndex, struct ibv_qp** out) {
  /* a failover receiver's QPs serve the sender's read of its completion records (failover.h) */
  int read = !base->isSend && railnetIbParamPortFailover() && railnetIbParamFailoverRecords() ? IBV_ACCESS_REMOTE_READ : 0;
  return railnetIbQpCreateAccess(base, devIndex, IBV_ACCESS_REMOTE_WRITE | read, base->sqDepth, out);
}

ncclResult_t railnetIbQpConnect(struct ncclIbNetCommBase* base, int devIndex, struct ibv_qp* qp, int remDevIndex,
                                uint32_t qpn) {
  return railnetIbQpConnectInfo(base, devIndex, qp, &base->remDevs[remDevIndex], qpn, base->qpTc, base->qpSl);
}

ncclResult_t railnetIbQpConnectTimed(struct ncclIbNetCommBase* base, int devIndex, struct ibv_qp* qp,
                                     int remDevIndex, uint32_t qpn, int timeout, int retryCnt) {
  return qpConnectTimed(base, devIndex, qp, &base->remDevs[remDevIndex], qpn, base->qpTc, base->qpSl, timeout,
                        retryCnt, 1, 1);
}

void railnetIbDevInfoFill(struct ncclIbNetCommBase* base, int i, struct ncclIbDevInfo* d, uint32_t rkey) {
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

ncclResult_t railnetIbQpSelf(struct ncclIbNetCommBase* base, int devIndex, int tc, int sl, struct ibv_qp** out) {
  struct ibv_qp* qp = NULL;
  /* a flush read per receive request in flight, and the eager NIC copies (NET_IB_RECV_REQUESTS) */
  NCCLCHECK(railnetIbQpCreateAccess(base, devIndex, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
                                    NET_IB_RECV_REQUESTS, &qp));
  struct ncclIbDevInfo self;
  memset(&self, 0, sizeof(self));
  railnetIbDevInfoFill(base, devIndex, &self, 1);
  ncclResult_t res = railnetIbQpConnectInfo(base, devIndex, qp, &self, qp->qp_num, tc, sl);
  if (res != ncclSuccess) {
    wrap_ibv_destroy_qp(qp);
    return res;
  }
  *out = qp;
  return ncclSuccess;
}

int railnetIbQpIndex(struct ncclIbNetCommBase* base, int d, uint32_t qpNum) {
  for (int q = 0; q < base->nqps; q++)
    if (base->qps[q].devIndex == d && base->qps[q].qp && base->qps[q].qp->qp_num == qpNum) return q;
  return -1;
}

struct ncclIbQp* railnetIbQpLive(struct ncclIbNetCommBase* base, struct ncclIbQp* qp) {
  int q = (int)(qp - base->qps);
  if (!qp->gone) return qp;
  for (int k = 1; k < base->nqps; k++) {
    int n = (q + k) % base->nqps;
    if (!base->qps[n].gone) return &base->qps[n];
  }
  return NULL;
}

int railnetIbQpLiveCount(const struct ncclIbNetCommBase* base) {
  int n = 0;
  for (int q = 0; q < base->nqps; q++) n += !base->qps[q].gone;
  return n;
}

int railnetIbQpDevInUse(const struct ncclIbNetCommBase* base, int d) {
  if (base->fo == NULL) return 1; /* nothing is ever gone: every device of the comm counts, with QPs or not */
  for (int q = 0; q < base->nqps; q++)
    if (base->qps[q].devIndex == d && !base->qps[q].gone) return 1;
  return 0;
}

int railnetIbQpSetGone(struct ncclIbNetCommBase* base, int q) {
  if (q < 0 || q >= base->nqps || base->qps[q].gone) return 0;
  base->qps[q].gone = 1;
  railnetIbQpDrained(&base->qps[q]);
  struct ibv_qp_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.qp_state = IBV_QPS_ERR;
  /* already in error after a failed completion: then this fails harmlessly */
  (void)wrap_ibv_modify_qp(base->qps[q].qp, &attr, IBV_QP_STATE);
  return 1;
}
