/*
 * The IB transport's queue pairs (qp.c): made in INIT on a comm's device, brought to RTS
 * towards a peer's QP, and the time a data QP retries. Which QPs a comm has, and the
 * metadata that describes them, is the comm setup's (setup.h).
 */
#ifndef RAILNET_NET_IB_QP_H
#define RAILNET_NET_IB_QP_H
#include "comm.h"
#include "wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A QP on device devIndex of a comm, in INIT, with these remote access flags and send queue
 * depth (and sized for the comm's side: the receiver's fifo receives, inline clear-to-send). */
ncclResult_t railnetIbQpCreateAccess(struct ncclIbNetCommBase* base, int devIndex, int accessFlags, int sqDepth,
                                     struct ibv_qp** out);
/* Its INIT -> RTR -> RTS towards QP qpn of the device rem describes, with this traffic class
 * and service level and the user's NCCL_IB_TIMEOUT / NCCL_IB_RETRY_CNT. */
ncclResult_t railnetIbQpConnectInfo(struct ncclIbNetCommBase* base, int devIndex, struct ibv_qp* qp,
                                    const struct ncclIbDevInfo* rem, uint32_t qpn, int tc, int sl);
/* ... serving rdIn of the peer's RDMA reads and atomics at once and keeping rdOut of its own in
 * flight (the one above: 1 and 1, as NCCL's QPs; the RMA QPs more, rma_ctx.c). */
ncclResult_t railnetIbQpConnectReads(struct ncclIbNetCommBase* base, int devIndex, struct ibv_qp* qp,
                                     const struct ncclIbDevInfo* rem, uint32_t qpn, int tc, int sl, int rdIn,
                                     int rdOut);
/* Port recovery (resilience/failover.h) and the comm setup: a data QP (remote write) on device devIndex,
 * in INIT; and its INIT -> RTR -> RTS towards the peer's QP qpn on its device remDevIndex, with
 * the traffic class and service level the comm's QPs got. */
ncclResult_t railnetIbQpCreate(struct ncclIbNetCommBase* base, int devIndex, struct ibv_qp** out);
ncclResult_t railnetIbQpConnect(struct ncclIbNetCommBase* base, int devIndex, struct ibv_qp* qp, int remDevIndex,
                                uint32_t qpn);
/* ... with its own ACK timeout and retry count (port failover's path probes, probe.c). */
ncclResult_t railnetIbQpConnectTimed(struct ncclIbNetCommBase* base, int devIndex, struct ibv_qp* qp,
                                     int remDevIndex, uint32_t qpn, int timeout, int retryCnt);
/* What the peer needs to connect to device i's QPs (fifoRkey: rkey), or a QP to itself. */
void railnetIbDevInfoFill(struct ncclIbNetCommBase* base, int i, struct ncclIbDevInfo* d, uint32_t rkey);
/* A receive comm's QP on device devIndex connected to itself, in RTS (remote read and write):
 * the GPUDirect flush reads and the NIC's copies of eager messages go through it. */
ncclResult_t railnetIbQpSelf(struct ncclIbNetCommBase* base, int devIndex, int tc, int sl, struct ibv_qp** out);
/* How long a data QP retries before it gives up on an unanswered work request:
 * 4.096 us x 2^NCCL_IB_TIMEOUT x (NCCL_IB_RETRY_CNT + 1): 34 s at NCCL's defaults. */
uint64_t railnetIbRetryTimeNs(void);

/* Index of the comm's QP on device d with number qpNum, -1 if none. */
int railnetIbQpIndex(struct ncclIbNetCommBase* base, int d, uint32_t qpNum);

/* ---- the QP set: which of a comm's QPs are gone (port failover took them out of use; none
 * without failover). Only these read or change ncclIbQp.gone. */
/* QP q is gone (0 for q < 0). */
static inline int railnetIbQpGone(const struct ncclIbNetCommBase* base, int q) {
  return q >= 0 && q < base->nqps && base->qps[q].gone;
}
/* The QP that carries what was meant for qp: qp itself, or the next QP not gone; NULL: none. */
struct ncclIbQp* railnetIbQpLive(struct ncclIbNetCommBase* base, struct ncclIbQp* qp);
/* QPs not gone. */
int railnetIbQpLiveCount(const struct ncclIbNetCommBase* base);
/* Whether device d still carries a QP of the comm not gone; without failover (base->fo NULL:
 * nothing is ever gone) every device of the comm, even one the peer's QP count left without a
 * QP. */
int railnetIbQpDevInUse(const struct ncclIbNetCommBase* base, int d);
/* Takes QP q out of use: gone, nothing outstanding on it, moved to the error state (its
 * flushes are dropped); 0 when it was gone already (or q is out of range). */
int railnetIbQpSetGone(struct ncclIbNetCommBase* base, int q);
/* QP q is in use again (port recovery put a new QP in its place). */
static inline void railnetIbQpSetLive(struct ncclIbNetCommBase* base, int q) { base->qps[q].gone = 0; }

/* ---- send-queue credits: the work requests a QP has posted and not yet seen completed
 * (a signaled completion retires the unsignaled ones before it). Only these change them. */
/* Whether n more work requests fit in qp's send queue. */
static inline int railnetIbQpRoom(const struct ncclIbNetCommBase* base, const struct ncclIbQp* qp, int n) {
  return qp->sqPosted + n <= base->sqDepth;
}
static inline void railnetIbQpPosted(struct ncclIbQp* qp, int n) { qp->sqPosted += n; }
static inline void railnetIbQpRetired(struct ncclIbQp* qp, int n) { qp->sqPosted -= n; }
/* A QP gone (failover): nothing is outstanding on it any more. */
static inline void railnetIbQpDrained(struct ncclIbQp* qp) { qp->sqPosted = 0; }
/* A QP made anew in its place (port recovery): no credit and no unsignaled count carried over. */
static inline void railnetIbQpCreditsReset(struct ncclIbQp* qp) {
  qp->sqPosted = 0;
  qp->eagerUnsig = 0;
  qp->ctsUnsig = 0;
}

#ifdef __cplusplus
}
#endif
#endif
