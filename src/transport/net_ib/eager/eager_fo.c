/*
 * Eager small messages under port failover (eager.h): positions in the immediates, eager
 * writes signaled and written again when lost with a port, repeats dropped.
 */
#include <string.h>
#include "eager.h"
#include "eager_int.h"
#include "debug.h"
#include "../devices.h"
#include "../resilience/failover.h"
#include "ibvwrap.h"
#include "../matching.h"
#include "../post.h"
#include "../qp.h"
#include "socket.h"

/* ------------------------------------------------------------------ receiver */

uint64_t railnetIbEagerFoPos(const struct railnetIbEagerRecv* e, uint32_t imm) {
  uint32_t low = railnetIbImmEagerPosLow(imm);
  uint32_t ahead = (low - (uint32_t)e->released) & RAILNET_IB_EAGER_FO_MASK;
  /* positions written again lie behind the count delivered, new ones a ring (or the irecvs
   * posted) ahead of it: both far nearer than half the range */
  if (ahead < (RAILNET_IB_EAGER_FO_MASK + 1) / 2) return e->released + ahead;
  return e->released - (RAILNET_IB_EAGER_FO_MASK + 1 - ahead);
}

int railnetIbEagerFoRepeat(const struct railnetIbEagerRecv* e, uint64_t id) {
  int s = (int)(id % RAILNET_IB_EAGER_SLOTS);
  if (id < e->released) return 1;                                    /* delivered */
  if (id - e->released < 64 && (e->doneMask >> (id - e->released) & 1)) return 1; /* delivered, out of order */
  if (e->arrived[s] == id + 1) return 1;                             /* held for its irecv */
  return e->copyReq[s] != NULL && e->copyPos[s] == id;               /* its NIC copy is under way */
}

ncclResult_t railnetIbEagerFoRetell(struct ncclIbRecvComm* comm) { return railnetIbEagerTell(comm, 1); }

ncclResult_t railnetIbEagerFoCopyFailed(struct ncclIbRecvComm* comm, int d, const struct ibv_wc* wc) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbEagerRecv* e = comm->eager;
  int s = railnetIbWrIdEagerCopySlot(wc->wr_id, RAILNET_IB_EAGER_SLOTS), to = -1;
  struct ncclIbRequest* r = e ? e->copyReq[s] : NULL;
  for (int k = 0; k < base->vProps.ndevs && to < 0; k++)
    if (k != d && railnetIbQpDevInUse(base, k)) to = k;
  char peer[SOCKET_NAME_MAXLEN];
  /* only a path gone (not a registration refused), once per copy: no copy bounces for ever */
  int pathGone = wc->status != IBV_WC_REM_ACCESS_ERR && wc->status != IBV_WC_LOC_PROT_ERR &&
                 wc->status != IBV_WC_LOC_ACCESS_ERR && wc->status != IBV_WC_LOC_LEN_ERR;
  if (!pathGone || (e && (e->copyRedone >> s & 1))) to = -1;
  if (r == NULL || r->events[d] <= 0 || to < 0) {
    WARN("NET/IB : the NIC copy of an eager message from %s into a GPU receive buffer failed on device %d "
         "(status %s(%d))%s; the comm fails", railnetIbPeerStr(base, peer), d, wrap_ibv_wc_status_str(wc->status),
         wc->status, r == NULL ? " without a receive waiting for it" : " and no other device of the comm is left");
    railnetIbCommFail(base);
    return ncclRemoteError;
  }
  r->events[d]--;
  e->copyReq[s] = NULL;
  e->copyRedos++;
  e->copyRedone |= 1u << s;
  INFO(NCCL_NET, "NET/IB : port failover: the NIC copy of the eager message at fifo position %llu from %s failed on "
       "device %d (its port went); made again on device %d", (unsigned long long)e->copyPos[s],
       railnetIbPeerStr(base, peer), d, to);
  return railnetIbEagerNicCopy(comm, r, s, e->copyBuf[s], e->copyMh[s], e->copyLen[s], to, e->copyPos[s]);
}

/* ------------------------------------------------------------------ sender */

void railnetIbEagerFoSent(struct ncclIbSendComm* comm, int q, uint64_t wrId) {
  struct railnetIbEagerSend* e = comm->eager;
  uint64_t low = railnetIbWrIdEagerFoPos16(wrId);
  int s = (int)(low % RAILNET_IB_EAGER_SLOTS);
  if (e == NULL || e->slotPos[s] == 0 || !railnetIbWrIdEagerFoIs(wrId, e->slotPos[s] - 1)) return; /* (the slot moved on) */
  struct ncclIbRequest* r = e->slotReq[s];
  if (r != NULL) { /* it arrived: its isend is done */
    memset(r->events, 0, sizeof(r->events));
    e->slotReq[s] = NULL;
  }
  /* the last write into the slot is done only when it was that one (not a late completion of
   * an earlier write on a gone QP) */
  if (q == e->slotQp[s]) e->resendOut &= ~(1u << s);
}

ncclResult_t railnetIbEagerFoFailedOver(struct ncclIbSendComm* comm, int* n) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbEagerSend* e = comm->eager;
  *n = 0;
  if (e == NULL || !e->c.fo) return ncclSuccess;
  for (int s = 0; s < RAILNET_IB_EAGER_SLOTS; s++) {
    uint32_t bit = 1u << s;
    if ((e->slotReq[s] == NULL && !(e->resendOut & bit)) || !railnetIbQpGone(base, e->slotQp[s])) continue;
    e->resendOut &= ~bit; /* a write again lost too (its QP is gone and settled) */
    if (e->slotReq[s] == NULL) continue; /* acknowledged: it arrived */
    e->resend |= bit;
    (*n)++;
  }
  if (railnetIbQpGone(base, e->closeQp)) e->closeResend = 1;
  e->rtsSent = 0; /* a request-to-send lost with its QP goes again if still needed */
  return railnetIbEagerFoResend(comm);
}

ncclResult_t railnetIbEagerFoResend(struct ncclIbSendComm* comm) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbEagerSend* e = comm->eager;
  if (e == NULL || (e->resend == 0 && !e->closeResend)) return ncclSuccess;
  for (int s = 0; s < RAILNET_IB_EAGER_SLOTS; s++) {
    uint32_t bit = 1u << s;
    if (!(e->resend & bit)) continue;
    uint64_t pos = e->slotPos[s] - 1;
    struct ncclIbQp* qp = railnetIbEagerQp(base, pos);
    if (qp == NULL) {
      railnetIbCommFail(base); /* no QP left: the failover that took the last one said why */
      return ncclRemoteError;
    }
    if (!railnetIbQpRoom(base, qp, 1)) continue; /* at the next step */
    /* still holds it: the slot is written anew only once it was delivered (the first message's
     * copy is kept for good) */
    int first = e->firstPos == pos + 1;
    uint8_t* slot = first ? e->firstStage : SLOT(e, s);
    struct railnetIbEagerHdr hdr;
    memcpy(&hdr, slot, sizeof(hdr));
    uint32_t lkey = first ? base->ctrl.mrs[qp->devIndex]->lkey : e->c.pool.mrs[qp->devIndex]->lkey;
    struct ibv_sge sge = {(uintptr_t)slot, (uint32_t)(HDR_BYTES + hdr.size), lkey};
    uint32_t bits = hdr.size | (first ? RAILNET_IB_EAGER_FIRST : 0);
    NCCLCHECK(railnetIbEagerRingWrite(base, e, qp, pos, &sge, railnetIbEagerImm(e, pos, bits), railnetIbWrIdEagerFo(pos)));
    struct ncclIbRequest* r = e->slotReq[s];
    if (r) { /* its completion now comes on this device */
      memset(r->events, 0, sizeof(r->events));
      r->events[qp->devIndex] = 1;
    }
    e->slotQp[s] = (uint8_t)(qp - base->qps);
    e->resend &= ~bit;
    e->resendOut |= bit;
    e->resent++;
  }
  if (e->closeResend) {
    struct ncclIbQp* qp = railnetIbEagerQp(base, e->closePos);
    if (qp == NULL) {
      railnetIbCommFail(base); /* no QP left: the failover that took the last one said why */
      return ncclRemoteError;
    }
    if (!railnetIbQpRoom(base, qp, 1)) return ncclSuccess;
    NCCLCHECK(railnetIbEagerRingWrite(base, e, qp, e->closePos, NULL,
                                      railnetIbEagerImm(e, e->closePos, RAILNET_IB_EAGER_CLOSE), 0));
    e->closeQp = (int)(qp - base->qps);
    e->closeResend = 0;
  }
  return ncclSuccess;
}

const struct railnetIbFoClient railnetIbEagerFoClient = {railnetIbEagerFoFailedOver, railnetIbEagerFoResend,
                                                         railnetIbEagerFoRetell};
