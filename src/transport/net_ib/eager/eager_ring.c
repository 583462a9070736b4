/*
 * Eager small messages (eager.h): the pieces below both eager.c and its close (eager_close.c)
 * and failover (eager_fo.c) code: the sender's ring writes, the receiver's credit writes and
 * NIC copies, the QPs they take.
 */
#include <stddef.h>
#include <stdio.h>
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
#include "../reg.h"

struct ncclIbQp* railnetIbEagerQp(struct ncclIbNetCommBase* base, uint64_t pos) {
  return railnetIbChunkQp(base, pos, 0); /* without failover: railnetIbMsgQp's */
}

int railnetIbEagerCopyDev(struct ncclIbNetCommBase* base, uint64_t pos) {
  struct ncclIbQp* qp = railnetIbEagerQp(base, pos);
  return qp ? qp->devIndex : 0;
}

ncclResult_t railnetIbEagerRepost(struct ncclIbRecvComm* comm, int q) {
  struct ncclIbNetCommBase* base = &comm->base;
  if (railnetIbQpGone(base, q)) return ncclSuccess;
  return railnetIbPostRecvs(base, base->qps[q].qp, 1);
}

/* Sender (eager_int.h): learns the receiver's ring from its credit words. */
int railnetIbEagerRingKnown(struct ncclIbSendComm* comm) {
  struct railnetIbEagerSend* e = comm->eager;
  if (e->c.remAddr) return 1;
  /* no credit write yet (the mode set at connect): the grant write before it may not have landed */
  if (comm->eagerCredit.mode == 1) return 0;
  __atomic_thread_fence(__ATOMIC_ACQUIRE); /* the grant's words are read after the mode word */
  uint64_t ring = comm->eagerCredit.ringAddr;
  if (ring == 0) return 0;
  for (int d = 0; d < NCCL_IB_MAX_DEVS_PER_NIC; d++) e->remRkeys[d] = comm->eagerCredit.ringRkeys[d];
  e->c.remAddr = ring;
  return 1;
}

/* An eager message, a request-to-send or the close (eager_int.h). Unsignaled writes leave the
 * send queue with a later signaled one. */
ncclResult_t railnetIbEagerRingWrite(struct ncclIbNetCommBase* base, struct railnetIbEagerSend* e, struct ncclIbQp* qp,
                                     uint64_t pos, struct ibv_sge* sge, uint32_t imm, uint64_t wrId) {
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.sg_list = sge;
  wr.num_sge = sge ? 1 : 0;
  wr.imm_data = htobe32(imm);
  wr.wr.rdma.remote_addr = e->c.remAddr + (pos % RAILNET_IB_EAGER_SLOTS) * e->c.stride;
  wr.wr.rdma.rkey = e->remRkeys[qp->remDevIndex];
  /* the first message goes into the receiver's first-message box; so do the writes of no bytes
   * (marks, the close) while no ring is known */
  if (railnetIbImmEagerIsFirst(imm) || e->c.remAddr == 0) {
    wr.wr.rdma.remote_addr = e->firstAddr;
    wr.wr.rdma.rkey = e->firstRkeys[qp->remDevIndex];
  }
  if (sge && base->useInline && sge->length <= base->maxInline) wr.send_flags = IBV_SEND_INLINE;
  wr.wr_id = railnetIbWrIdEager(0, 0);
  if (wrId || qp->eagerUnsig + 1 >= RAILNET_IB_EAGER_SIGNAL) {
    wr.send_flags |= IBV_SEND_SIGNALED;
    wr.wr_id = railnetIbWrIdEager(wrId, (unsigned)qp->eagerUnsig + 1);
  }
  NCCLCHECK(wrap_ibv_post_send(qp->qp, &wr, &bad));
  base->work.wrs++;
  railnetIbQpPosted(qp, 1);
  if (wr.send_flags & IBV_SEND_SIGNALED) qp->eagerUnsig = 0;
  else qp->eagerUnsig++;
  return ncclSuccess;
}

/* The ring's address and rkeys into the sender's credit words (wire.h railnetIbEagerCredit): an
 * unsignaled write on qp, just before a credit write on it, whose completion ends it. */
static ncclResult_t grantWrite(struct ncclIbRecvComm* comm, struct ncclIbQp* qp, volatile struct railnetIbEagerCredit* word) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbEagerRecv* e = comm->eager;
  for (int d = 0; d < base->vProps.ndevs; d++) word->ringRkeys[d] = e->c.pool.mrs[d]->rkey;
  word->ringAddr = (uint64_t)(uintptr_t)e->c.buf;
  size_t off = offsetof(struct railnetIbEagerCredit, ringRkeys);
  struct ibv_sge sge = {(uintptr_t)word + off, (uint32_t)(sizeof(*word) - off), base->ctrl.mrs[qp->devIndex]->lkey};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = e->c.remAddr + off;
  wr.wr.rdma.rkey = base->remDevs[qp->remDevIndex].fifoRkey;
  wr.wr_id = railnetIbWrIdEager(0, 0);
  NCCLCHECK(wrap_ibv_post_send(qp->qp, &wr, &bad));
  base->work.wrs++;
  e->grantTold = 1;
  return ncclSuccess;
}

/* Tells the sender the positions delivered in order, once half the ring is free again;
 * signaled (the completion also ends the unsignaled clear-to-send writes before it). On QP 0
 * (under failover: until it is gone): writes on one QP land in order, so the count the sender
 * sees never goes back. */
ncclResult_t railnetIbEagerTell(struct ncclIbRecvComm* comm, int force) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbEagerRecv* e = comm->eager;
  /* no ring yet: nothing to tell (the mode is "every irecv"), but a close (a multi-receive on a
   * comm with the first-message box: its message may be on its way) */
  if (e->c.buf == NULL && !(e->firstOn && e->c.closing)) return ncclSuccess;
  if (!force && e->released - e->told < RAILNET_IB_EAGER_SLOTS / 2 && e->modeTold == e->mode) return ncclSuccess;
  /* failover: on the QP of the last ones while it is there (a write on another QP could
   * land before one still on its way), else on the one standing in for it */
  struct ncclIbQp* qp = railnetIbQpLive(base, &base->qps[e->tellQp]);
  if (qp == NULL) return ncclSuccess; /* no QP left: the failover code failed the comm */
  e->tellQp = (int)(qp - base->qps);
  volatile struct railnetIbEagerCredit* word = e->credit;
  if ((force || !e->grantTold) && e->c.buf != NULL) NCCLCHECK(grantWrite(comm, qp, word));
  word->released = e->released;
  word->mode = e->mode; /* lazy: the sender's mode and where its period began (each word lands whole) */
  word->modeFrom = e->everyFrom;
  struct ibv_sge sge = {(uintptr_t)word, offsetof(struct railnetIbEagerCredit, ringRkeys),
                        base->ctrl.mrs[qp->devIndex]->lkey};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = e->c.remAddr;
  wr.wr.rdma.rkey = base->remDevs[qp->remDevIndex].fifoRkey;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr_id = railnetIbWrIdEager(0, 0);
  NCCLCHECK(wrap_ibv_post_send(qp->qp, &wr, &bad));
  base->work.wrs++;
  qp->ctsUnsig = 0;
  e->told = e->released;
  e->modeTold = e->mode;
  return ncclSuccess;
}

/* Position id reached its buffer: the sender is told once half the ring is free again. */
ncclResult_t railnetIbEagerRelease(struct ncclIbRecvComm* comm, uint64_t id) {
  struct railnetIbEagerRecv* e = comm->eager;
  if (id < e->released || id - e->released >= 64) {
    WARN("NET/IB : eager comm delivered fifo position %llu outside its window [%llu, +64)", (unsigned long long)id,
         (unsigned long long)e->released);
    return ncclInternalError;
  }
  e->doneMask |= 1ull << (id - e->released);
  while (e->doneMask & 1) {
    e->doneMask >>= 1;
    e->released++;
  }
  return railnetIbEagerTell(comm, 0);
}

/* The NIC writes n bytes of ring slot s (the message at position pos) into buf, a buffer of
 * receive r registered as mh (GPU memory, which the CPU cannot write), through device d's QP
 * connected to itself (made at the first copy when no GPUDirect flush made it). r counts it on
 * d; the receive is done, and the slot free, when the write completed (railnetIbEagerCopied);
 * an iflush after it reads through the same QP. */
ncclResult_t railnetIbEagerNicCopy(struct ncclIbRecvComm* comm, struct ncclIbRequest* r, int s, void* buf,
                            const struct ncclIbMrHandle* mh, size_t n, int d, uint64_t pos) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct ncclIbCommDev* cd = &base->devs[d];
  struct railnetIbEagerRecv* e = comm->eager;
  if (cd->flushQp == NULL) NCCLCHECK(railnetIbQpSelf(base, d, base->qpTc, base->qpSl, &cd->flushQp));
  uint32_t lkey = 0;
  uint8_t* msg = railnetIbEagerMsgAt(comm, s, pos, d, &lkey); /* a ring slot or the first-message box */
  struct ibv_sge sge = {(uintptr_t)msg + HDR_BYTES, (uint32_t)n, lkey};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = (uint64_t)(uintptr_t)buf;
  wr.wr.rdma.rkey = mh->mrs[d]->rkey;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr_id = railnetIbWrIdEagerCopy(s);
  NCCLCHECK(wrap_ibv_post_send(cd->flushQp, &wr, &bad));
  base->work.wrs++;
  e->nicCopies++;
  e->copyReq[s] = r;
  e->copyPos[s] = pos;
  e->copyBuf[s] = buf; /* failover: made again on another device if this one fails (eager_fo.c) */
  e->copyMh[s] = mh;
  e->copyLen[s] = n;
  r->events[d]++;
  return ncclSuccess;
}

/* Here, the lowest of the eager files, as every eager file and the transport ask them. */
int railnetIbEagerSendOpen(const struct railnetIbEagerSend* e) { return e != NULL && !e->c.closed; }
int railnetIbEagerRecvOpen(const struct railnetIbEagerRecv* e) { return e != NULL && !e->c.closed; }
int railnetIbEagerClosing(const struct railnetIbEagerRecv* e) { return e != NULL && e->c.closing; }

/* "; eager: ..." for the comm's close INFO (connect.c): how many messages went or came eagerly,
 * whether the comm took a buffer from the pool, how often the pool refused one. */
void railnetIbEagerReport(const struct ncclIbNetCommBase* base, char* out, size_t len) {
  const struct railnetIbEager* c = NULL;
  uint64_t n = 0;
  if (base->isSend && ((const struct ncclIbSendComm*)base)->eager) {
    c = &((const struct ncclIbSendComm*)base)->eager->c;
    n = ((const struct ncclIbSendComm*)base)->eager->sent;
  } else if (!base->isSend && ((const struct ncclIbRecvComm*)base)->eager) {
    c = &((const struct ncclIbRecvComm*)base)->eager->c;
    n = ((const struct ncclIbRecvComm*)base)->eager->eagerIn;
  }
  if (c == NULL) {
    snprintf(out, len, "; eager: off");
    return;
  }
  snprintf(out, len, "; eager: %llu message(s) eagerly, %s, %llu take(s) refused at RAILNET_IB_EAGER_POOL",
           (unsigned long long)n, c->buf ? "a buffer from the pool" : "no buffer taken", (unsigned long long)c->refused);
}
