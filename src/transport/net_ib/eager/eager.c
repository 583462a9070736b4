/*
 * Eager small messages (eager.h).
 */
#include <endian.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "eager.h"
#include "eager_int.h"
#include "debug.h"
#include "../devices.h"
#include "../resilience/failover.h"
#include "ibvwrap.h"
#include "../liveness.h"
#include "../matching.h"
#include "param.h"
#include "../post.h"
#include "../prof.h"
#include "../qp.h"
#include "../reg.h"
#include "socket.h"
#include "../slots.h"

enum { P_EAGER_SIZE };
static const railnetParam eagerParams[] = {
    [P_EAGER_SIZE] = RAILNET_PARAM_INT_DEF("RAILNET_IB_EAGER_SIZE", RAILNET_IB_EAGER_DEFAULT, 0, RAILNET_IB_EAGER_MAX,
                                           "IB: messages of at most this many bytes are RDMA-written into a ring "
                                           "of the receiver without waiting for its clear-to-send entry (the "
                                           "smaller size of both ends; host send buffers only; the receiver copies "
                                           "into GPU buffers with the NIC; a comm's first multi-receive ends them "
                                           "on that comm). Default 4096 (measured: "
                                           "bench/ib.sh --lat-sweep); 0: off, the clear-to-send protocol for "
                                           "every message"),
};
RAILNET_PARAM_TABLE("net_ib/eager", eagerParams);

int railnetIbEagerSize(void) { return (int)railnetParamInt(&eagerParams[P_EAGER_SIZE]); }

/* The layout of a side's buffer for messages of at most size bytes (the agreed size: both ends
 * lay the slots out alike, the header and size bytes rounded up to 64). The buffer itself comes
 * later (eagerTake). */
static void eagerLayout(struct railnetIbEager* c, uint32_t size) {
  c->size = size;
  c->stride = (uint32_t)((size + HDR_BYTES + 63u) & ~(size_t)63u);
  c->bytes = (size_t)RAILNET_IB_EAGER_SLOTS * c->stride;
}

/* Takes this side's buffer from the pool, once: *got 0 when the pool is at its bound (said
 * once per comm at INFO, counted). */
static ncclResult_t eagerTake(struct ncclIbNetCommBase* base, struct railnetIbEager* c, int* got) {
  *got = c->buf != NULL;
  if (*got) return ncclSuccess;
  NCCLCHECK(railnetIbEagerPoolTake(base, c->bytes, !base->isSend, &c->pool, got));
  if (*got) {
    c->buf = c->pool.buf;
    return ncclSuccess;
  }
  if (c->refused++ == 0) {
    char peer[SOCKET_NAME_MAXLEN];
    INFO(NCCL_NET, "NET/IB : %s comm with %s: the eager pool is at its bound (RAILNET_IB_EAGER_POOL=%d buffers in use "
         "on these devices): its small messages keep the clear-to-send protocol; raise RAILNET_IB_EAGER_POOL for "
         "eager messages on more comms", base->isSend ? "send" : "receive", railnetIbPeerStr(base, peer),
         railnetIbEagerPoolMax());
  }
  return ncclSuccess;
}

static void eagerRelease(struct railnetIbEager* c) {
  railnetIbEagerPoolGive(&c->pool); /* (after the comm's QPs, which may still read or write it) */
  c->buf = NULL;
}

void railnetIbEagerSendFree(struct railnetIbEagerSend* e) {
  if (e == NULL) return;
  eagerRelease(&e->c);
  free(e);
}

void railnetIbEagerRecvFree(struct railnetIbEagerRecv* e) {
  if (e == NULL) return;
  eagerRelease(&e->c);
  free(e->pend);
  free(e);
}

void railnetIbEagerSendMeta(struct ncclIbSendComm* comm, struct ncclIbConnectionMetadata* meta) {
  int size = railnetIbEagerSize();
  if (size <= 0) return;
  meta->devs[0].flags |= RAILNET_IB_FLAG_EAGER_POOL | RAILNET_IB_FLAG_EAGER_FO;
  meta->eagerSize = (uint32_t)size;
  meta->eagerAddr = (uint64_t)(uintptr_t)&comm->eagerCredit;
  meta->eagerFirst = RAILNET_IB_EAGER_FIRST_BYTES; /* it writes a first-message box (wire.h) */
}

ncclResult_t railnetIbEagerSendConnect(struct ncclIbSendComm* comm, const struct ncclIbConnectionMetadata* rem,
                                       const char* peer) {
  struct ncclIbNetCommBase* base = &comm->base;
  if (railnetIbEagerSize() <= 0) return ncclSuccess;
  if (!(rem->devs[0].flags & RAILNET_IB_FLAG_EAGER_POOL)) {
    INFO(NCCL_NET, "NET/IB : send comm to %s: no eager messages (the receiver did not agree: see its log)", peer);
    return ncclSuccess;
  }
  struct railnetIbEagerSend* se = NULL;
  NCCLCHECK(RAILNET_CALLOC(&se, 1, "IB eager state"));
  eagerLayout(&se->c, rem->eagerSize);
  comm->eager = se;
  se->c.fo = base->fo != NULL;
  railnetIbFoSetClient(base, &railnetIbEagerFoClient);
  se->closeQp = -1;
  memset((void*)&comm->eagerCredit, 0, sizeof(comm->eagerCredit));
  comm->eagerCredit.mode = 1; /* every irecv from position 0 writes its clear-to-send, until a ring */
  if (rem->eagerFirst >= RAILNET_IB_EAGER_FIRST_BYTES && rem->eagerAddr != 0) { /* the receiver's box (wire.h) */
    se->firstAddr = rem->eagerAddr;
    for (int i = 0; i < rem->ndevs && i < NCCL_IB_MAX_DEVS_PER_NIC; i++) se->firstRkeys[i] = rem->devs[i].fifoRkey;
    se->firstStage = base->ctrl.buf + sizeof(int) * RAILNET_IB_FIFO_SLOTS * NCCL_NET_IB_MAX_RECVS; /* (setup.c) */
  }
  char first[96] = "waits for its clear-to-send";
  if (se->firstAddr)
    snprintf(first, sizeof(first), "goes into the receiver's first-message box when it is at most %d bytes",
             RAILNET_IB_EAGER_FIRST_BYTES - (int)HDR_BYTES);
  INFO(NCCL_NET, "NET/IB : send comm to %s: messages up to %u bytes go eagerly; larger ones ask for their "
       "clear-to-send when it is not there; the first small one %s (the receiver then takes a ring from its eager "
       "pool)%s", peer, se->c.size, first,
       base->fo ? "; with port failover (each eager write signaled, written again when lost with a port)" : "");
  return ncclSuccess;
}

/* Why the receiver cannot take eager messages on this comm (NULL: it can). */
static const char* eagerRefusal(struct ncclIbRecvComm* comm, int flags) {
  struct ncclIbNetCommBase* base = &comm->base;
  if (base->fo && !(flags & RAILNET_IB_FLAG_EAGER_FO))
    return "port failover is on and the sender's railnet is older (its eager messages cannot fail over); run the "
           "same railnet at both ends";
  /* matched by ID, the data writes name their position; eager messages and requests-to-send
   * are still taken in the order of their QP, which railnet's receive queues keep
   * (NCCL_IB_OOO_RQ is not available: caps.c). Split over QPs, an eager message marks its
   * position on the other QPs (RAILNET_IB_EAGER_MARK). */
  return NULL; /* GPU receive buffers are written by the NIC (nicCopy) */
}

ncclResult_t railnetIbEagerRecvSetup(struct ncclIbRecvComm* comm, const struct ncclIbConnectionMetadata* rem,
                                     struct ncclIbConnectionMetadata* meta, const char* peer) {
  struct ncclIbNetCommBase* base = &comm->base;
  int mine = railnetIbEagerSize();
  if (mine <= 0) return ncclSuccess;
  int flags = rem->devs[0].flags;
  const char* no = (flags & RAILNET_IB_FLAG_EAGER_POOL) ? eagerRefusal(comm, flags)
                   : (flags & (RAILNET_IB_FLAG_EAGER | RAILNET_IB_FLAG_EAGER_TAGS))
                       ? "the sender's railnet is older (its eager rings are made at connect, or its messages carry "
                         "no tag); run the same railnet at both ends"
                       : "the sender has them off (RAILNET_IB_EAGER_SIZE=0 there, or a railnet without them)";
  if (no) {
    INFO(NCCL_NET, "NET/IB : receive comm with %s: no eager messages: %s", peer, no);
    return ncclSuccess;
  }
  uint32_t size = (uint32_t)mine < rem->eagerSize ? (uint32_t)mine : rem->eagerSize;
  struct railnetIbEagerRecv* e = NULL;
  NCCLCHECK(RAILNET_CALLOC(&e, 1, "IB eager state"));
  eagerLayout(&e->c, size);
  comm->eager = e;
  e->c.remAddr = rem->eagerAddr; /* the sender's credit words */
  e->c.fo = base->fo != NULL;
  /* they are written from the comm's control memory, after its clear-to-send entries (setup.c) */
  e->credit = (volatile struct railnetIbEagerCredit*)(comm->elems + RAILNET_IB_FIFO_SLOTS);
  e->firstOn = rem->eagerFirst >= RAILNET_IB_EAGER_FIRST_BYTES; /* the sender writes a first-message box */
  /* no ring yet: every irecv writes its clear-to-send (as if a sender had asked) until the
   * small messages in a row take one from the pool (railnetIbEagerDelivered) */
  e->asked = 1;
  e->mode = e->modeTold = 1;
  railnetIbFoSetClient(base, &railnetIbEagerFoClient);
  int forced = !comm->prepost;
  if (!comm->prepost) { /* receive WRs kept posted, completions in the order of each QP */
    comm->prepost = 1;
    for (int q = 0; q < base->nqps; q++) NCCLCHECK(railnetIbPostRecvs(base, base->qps[q].qp, RAILNET_IB_FIFO_SLOTS));
  }
  meta->devs[0].flags |= RAILNET_IB_FLAG_EAGER_POOL;
  meta->eagerSize = e->c.size;
  /* the ring comes in a credit write (wire.h railnetIbEagerCredit); the first-message box now */
  meta->eagerAddr = e->firstOn ? (uint64_t)(uintptr_t)comm->first : 0;
  meta->eagerFirst = e->firstOn ? RAILNET_IB_EAGER_FIRST_BYTES : 0;
  INFO(NCCL_NET, "NET/IB : receive comm with %s: messages up to %u bytes come eagerly into a ring of %d slots; no "
       "clear-to-send while the messages are small; the ring is taken from the eager pool at the irecv after the "
       "first small message (RAILNET_IB_EAGER_POOL)%s%s%s", peer, e->c.size, RAILNET_IB_EAGER_SLOTS,
       e->firstOn ? ", which may come eagerly into the comm's first-message box" : "",
       forced ? "; receive work requests pre-posted for them after all" : "",
       e->c.fo ? "; with port failover (positions in the immediates, repeats dropped)" : "");
  return ncclSuccess;
}

/* Sender: once the receiver's credit write named its ring, takes the bounce slots from the
 * pool (1: they are there). Refused at the pool's bound, it tries again RAILNET_IB_EAGER_RETRY_MAX
 * positions later; meanwhile its small messages ask for a clear-to-send as GPU memory does. */
static int sendTake(struct ncclIbSendComm* comm) {
  struct railnetIbEagerSend* e = comm->eager;
  struct ncclIbNetCommBase* base = &comm->base;
  if (!railnetIbEagerRingKnown(comm) || base->fifoHead < e->c.retryAt) return 0;
  int got = 0;
  if (eagerTake(base, &e->c, &got) != ncclSuccess || !got) { /* (a failed registration: WARN said so) */
    e->c.retryAt = base->fifoHead + RAILNET_IB_EAGER_RETRY_MAX;
    return 0;
  }
  return 1;
}

int railnetIbEagerCanSend(struct ncclIbSendComm* comm, size_t size, int memType) {
  struct railnetIbEagerSend* e = comm->eager;
  struct ncclIbNetCommBase* base = &comm->base;
  /* the CPU copies the bytes into the bounce slot: host memory only (GPU memory goes the
   * clear-to-send way, straight from the NIC) */
  if (!railnetIbEagerSendOpen(e) || size > e->c.size || comm->ctsCount != 0 || memType != NCCL_PTR_HOST) return 0;
  /* no ring, or no bounce slots: only the comm's first small message may go, into the
   * receiver's first-message box (railnetIbEagerSend knows it by the missing bounce slots) */
  int first = e->c.buf == NULL && !sendTake(comm);
  if (first && (e->firstAddr == 0 || e->firstPos != 0 || size > RAILNET_IB_EAGER_FIRST_BYTES - HDR_BYTES)) return 0;
  int slot = (int)(base->fifoHead % RAILNET_IB_FIFO_SLOTS);
  /* the receiver announced this position already: its buffer takes the bytes directly */
  if (comm->fifo[slot][0].idx == base->fifoHead + 1) return 0;
  struct ncclIbQp* qp = railnetIbEagerQp(base, base->fifoHead);
  if (qp == NULL) return 0; /* no QP left: the failover code failed the comm */
  /* the ring full (the receiver has not taken them, or is gone: the signaled writes fail
   * then) or a send queue full (the message's, and split, its marks'): its completions are
   * to be polled */
  uint64_t released = comm->eagerCredit.released;
  if (!first && base->fifoHead >= released + RAILNET_IB_EAGER_SLOTS) return -1 - qp->devIndex;
  if (released > base->fifoHead) return RAILNET_IB_EAGER_BAD_CREDIT;
  int s = (int)(base->fifoHead % RAILNET_IB_EAGER_SLOTS);
  /* failover: the last write into this ring slot (maybe one written again) has not completed */
  if (e->c.fo && (e->slotReq[s] || ((e->resend | e->resendOut) >> s & 1))) return -1 - base->qps[e->slotQp[s]].devIndex;
  if (e->c.fo) return !railnetIbQpRoom(base, qp, 1) ? -1 - qp->devIndex : 1; /* no marks */
  for (int i = 0; i < railnetIbChunksPerMsg(base); i++) {
    struct ncclIbQp* q = railnetIbMsgQp(base, base->fifoHead, i);
    if (!railnetIbQpRoom(base, q, 1)) return -1 - q->devIndex;
  }
  return 1;
}

ncclResult_t railnetIbEagerSend(struct ncclIbSendComm* comm, struct ncclIbRequest* req, void* data, size_t size,
                                int tag, void* phandle) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbEagerSend* e = comm->eager;
  uint64_t pos = base->fifoHead;
  struct ncclIbQp* qp = railnetIbEagerQp(base, pos); /* (railnetIbEagerCanSend checked it is there) */
  int s = (int)(pos % RAILNET_IB_EAGER_SLOTS);
  /* no bounce slots: the comm's first message, into the receiver's first-message box
   * (railnetIbEagerCanSend), from the comm's control memory, which keeps it for a failover */
  int first = e->c.buf == NULL;
  uint8_t* slot = first ? e->firstStage : SLOT(e, s);
  struct railnetIbEagerHdr hdr = {(uint32_t)tag, (uint32_t)size};
  memcpy(slot, &hdr, sizeof(hdr));
  if (size) memcpy(slot + HDR_BYTES, data, size);
  uint32_t lkey = first ? base->ctrl.mrs[qp->devIndex]->lkey : e->c.pool.mrs[qp->devIndex]->lkey;
  struct ibv_sge sge = {(uintptr_t)slot, (uint32_t)(HDR_BYTES + size), lkey};
  if (first) e->firstPos = pos + 1;
  /* failover: signaled, the request done when it completed (eager_fo.c) */
  uint64_t wrId = e->c.fo ? railnetIbWrIdEagerFo(pos) : 0;
  uint32_t bits = (uint32_t)size | (first ? RAILNET_IB_EAGER_FIRST : 0);
  NCCLCHECK(railnetIbEagerRingWrite(base, e, qp, pos, &sge, railnetIbEagerImm(e, pos, bits), wrId));
  /* split over QPs, every QP takes one completion per position: the others get a mark (not
   * under failover: the immediates name the positions) */
  int writes = e->c.fo ? 1 : railnetIbChunksPerMsg(base);
  for (int i = 1; i < writes; i++)
    NCCLCHECK(railnetIbEagerRingWrite(base, e, railnetIbMsgQp(base, pos, i), pos, NULL,
                                      railnetIbImmEager(0, pos, RAILNET_IB_EAGER_MARK), 0));
  req->type = NCCL_NET_IB_REQ_EAGER;
  req->id = pos;
  req->send.size = size;
  req->phandle = phandle;
  if (e->c.fo) {
    req->events[qp->devIndex] = 1;
    e->slotPos[s] = pos + 1;
    e->slotReq[s] = req;
    e->slotQp[s] = (uint8_t)(qp - base->qps);
  }
  e->sent++;
  for (int i = 0; base->prof && i < writes; i++) /* an event per write: message, marks */
    NCCLCHECK(railnetIbProfStart(base, req, phandle, (int)((i ? railnetIbMsgQp(base, pos, i) : qp) - base->qps),
                                 IBV_WR_RDMA_WRITE_WITH_IMM, i == 0 ? size : 0));
  base->fifoHead++;
  return ncclSuccess;
}

ncclResult_t railnetIbEagerRts(struct ncclIbSendComm* comm, size_t size, int memType, int* pollDev) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbEagerSend* e = comm->eager;
  uint64_t pos = base->fifoHead;
  *pollDev = -1;
  if (!railnetIbEagerSendOpen(e) || e->rtsSent == pos + 1) return ncclSuccess;
  /* the receiver's mode (modeUpdate): every irecv from position mode >> 1 on writes its
   * clear-to-send (bit 0 set), or the ones from eagerCredit.modeFrom up to it did: no request
   * where one comes anyway */
  uint64_t mode = comm->eagerCredit.mode & ~RAILNET_IB_EAGER_CLOSING, to = mode >> 1;
  if ((mode & 1) ? pos >= to : pos >= comm->eagerCredit.modeFrom && pos < to) return ncclSuccess;
  if (!railnetIbEagerRingKnown(comm)) return ncclSuccess; /* (the mode came, its ring not yet: later) */
  struct ncclIbQp* qp = railnetIbEagerQp(base, pos);
  if (qp == NULL) return ncclSuccess; /* no QP left: the failover code failed the comm */
  if (!railnetIbQpRoom(base, qp, 1)) { /* its completions free it */
    *pollDev = qp->devIndex;
    return ncclSuccess;
  }
  /* a small message whose memory cannot go eagerly (railnetIbEagerCanSend), or that found
   * no bounce slots in the pool: the receiver tries less often; small host memory only found
   * the ring full */
  uint32_t small = size <= e->c.size && (memType != NCCL_PTR_HOST || e->c.buf == NULL) ? RAILNET_IB_EAGER_RTS_SMALL : 0;
  NCCLCHECK(railnetIbEagerRingWrite(base, e, qp, pos, NULL, railnetIbEagerImm(e, pos, RAILNET_IB_EAGER_RTS | small), 0));
  e->rtsSent = pos + 1;
  e->c.rtsCount++;
  return ncclSuccess;
}

/* Lazy: whether every irecv from now on writes its clear-to-send (a sender asked, and small
 * messages do not come eagerly); when that changes the sender is told at once, with the
 * position it holds from (railnetIbEagerRts: no request-to-send where one comes anyway). */
static ncclResult_t modeUpdate(struct ncclIbRecvComm* comm) {
  struct railnetIbEagerRecv* e = comm->eager;
  uint64_t every = !e->small && e->asked;
  if (e->c.closing || every == (e->mode & 1)) return ncclSuccess; /* closing: the mode word says only that */
  /* an "every" period [everyFrom, its end) is what a later mode 0 still vouches for: the
   * irecvs before it (eager ones) wrote none */
  if (every) e->everyFrom = comm->base.fifoHead;
  e->mode = every | (comm->base.fifoHead << 1);
  return railnetIbEagerTell(comm, 0);
}

/* Receiver: the comm's first small message came (through a clear-to-send), or small messages
 * came that way long enough after larger ones: the next ones may come eagerly, into a ring
 * taken from the pool at the first (its first credit write names it). At the pool's bound
 * they keep coming through a clear-to-send, and the next try waits twice as many. */
static ncclResult_t recvTake(struct ncclIbRecvComm* comm) {
  struct railnetIbEagerRecv* e = comm->eager;
  int got = 0;
  /* (memory or a registration failed: WARN said so; as a refusal, the comm goes on without) */
  if (!e->c.closed && !e->c.closing && eagerTake(&comm->base, &e->c, &got) != ncclSuccess) got = 0;
  e->smallRun = 0;
  if (got) {
    e->small = 1;
    return ncclSuccess;
  }
  int after = e->retryAfter ? e->retryAfter : RAILNET_IB_EAGER_RETRY;
  e->retryAfter = after * 2 < RAILNET_IB_EAGER_RETRY_MAX ? after * 2 : RAILNET_IB_EAGER_RETRY_MAX;
  return ncclSuccess;
}

ncclResult_t railnetIbEagerDelivered(struct ncclIbRecvComm* comm, uint64_t id, size_t size) {
  struct railnetIbEagerRecv* e = comm->eager;
  /* after the close the positions from the sender's close on take no ring slot */
  if (e == NULL || (e->closeAt && id >= e->closeAt - 1)) return ncclSuccess;
  /* lazy: a larger message has the next irecvs write their clear-to-send; after
   * RAILNET_IB_EAGER_RETRY small ones that came that way they try without again (the sender
   * may send them eagerly; one whose memory cannot go eagerly asks again) */
  if (size > e->c.size) {
    e->small = 0;
    e->smallRun = 0;
  } else if (!e->small && ((e->c.buf == NULL && e->c.refused == 0) ||
                            ++e->smallRun >= (e->retryAfter ? e->retryAfter : RAILNET_IB_EAGER_RETRY))) {
    /* the first small message takes the ring (at the next irecv: not on this message's way),
     * the next ones go eagerly */
    if (e->c.buf == NULL) e->takeDue = 1;
    else NCCLCHECK(recvTake(comm));
  }
  NCCLCHECK(railnetIbEagerRelease(comm, id)); /* first: a credit write for the mode carries it */
  return modeUpdate(comm);
}

/* The message in ring slot s is for receive r: its header agrees with the immediate's size and
 * carries the irecv's tag. An eager message has no clear-to-send to match its tag against, so
 * an isend whose tag differs from the irecv at its fifo position would land in the wrong
 * buffer: the comm fails instead (ncclInvalidUsage), with a WARN naming both tags. */
static ncclResult_t checkHeader(struct ncclIbRecvComm* comm, struct ncclIbRequest* r, int s, uint32_t size) {
  struct railnetIbEagerHdr hdr;
  memcpy(&hdr, railnetIbEagerMsgAt(comm, s, r->id, -1, NULL), sizeof(hdr));
  uint32_t want = comm->elems[r->id % RAILNET_IB_FIFO_SLOTS][0].tag;
  char peer[SOCKET_NAME_MAXLEN];
  if (hdr.size != size) {
    WARN("NET/IB : eager message from %s at fifo position %llu says %u bytes in its header and %u in its immediate: "
         "the peer is broken or not this railnet", ncclSocketToString(&comm->base.sock.addr, peer, 1),
         (unsigned long long)r->id, hdr.size, size);
    railnetIbCommFail(&comm->base);
    return ncclRemoteError;
  }
  if (hdr.tag == want) return ncclSuccess;
  WARN("NET/IB : eager message from %s with tag %d came at fifo position %llu, whose irecv has tag %d. Eager messages "
       "(RAILNET_IB_EAGER_SIZE) go to the irecvs in the order they were posted, so the isends must come in the same "
       "order of tags (NCCL's own use has one tag per comm); set RAILNET_IB_EAGER_SIZE=0 for this pattern",
       ncclSocketToString(&comm->base.sock.addr, peer, 1), (int)hdr.tag, (unsigned long long)r->id, (int)want);
  railnetIbCommFail(&comm->base);
  return ncclInvalidUsage;
}

/* Copies a message of size bytes from ring slot s into receive r (what fits: a larger size
 * fails the size check at test()): the CPU into host memory, the NIC into GPU memory. */
static ncclResult_t deliver(struct ncclIbRecvComm* comm, struct ncclIbRequest* r, int s, uint32_t size, int d) {
  struct railnetIbEagerRecv* e = comm->eager;
  NCCLCHECK(checkHeader(comm, r, s, size));
  size_t n = size <= r->recv.posted[0] ? size : 0;
  r->recv.sizes[0] = (int)size;
  /* the first-message box's message has the ring taken for the next ones, at the next irecv
   * (refused: they keep the clear-to-send, as after a first small message through one) */
  if (e->c.buf == NULL && e->firstAt == r->id + 1) e->takeDue = 1;
  if (e->c.buf != NULL) {
    e->small = 1; /* lazy: small messages come eagerly: no clear-to-send for the next irecvs */
    e->asked = 0;
    e->retryAfter = 0; /* this sender's memory goes eagerly */
  }
  e->eagerIn++;
  NCCLCHECK(modeUpdate(comm));
  /* the irecv counted a completion per QP its chunks would take (split over QPs: every QP);
   * the message is all here, the marks of the other QPs settle nothing */
  memset(r->events, 0, sizeof(r->events));
  railnetIbSlotRecvExpect(&comm->base, (int)(r->id % RAILNET_IB_FIFO_SLOTS), 0); /* nothing to replay */
  if (n && r->recv.mh->type != NCCL_PTR_HOST) return railnetIbEagerNicCopy(comm, r, s, r->recv.buf, r->recv.mh, n, d, r->id);
  if (n) memcpy(r->recv.buf, railnetIbEagerMsgAt(comm, s, r->id, -1, NULL) + HDR_BYTES, n);
  return railnetIbEagerRelease(comm, r->id);
}

ncclResult_t railnetIbEagerCopied(struct ncclIbRecvComm* comm, int d, const struct ibv_wc* wc) {
  struct railnetIbEagerRecv* e = comm->eager;
  int s = railnetIbWrIdEagerCopySlot(wc->wr_id, RAILNET_IB_EAGER_SLOTS);
  struct ncclIbRequest* r = e ? e->copyReq[s] : NULL;
  if (r == NULL || r->type != NCCL_NET_IB_REQ_RECV || r->events[d] <= 0) {
    WARN("NET/IB : eager copy completion (wr_id 0x%llx) without a receive waiting for it", (unsigned long long)wc->wr_id);
    return ncclInternalError;
  }
  r->events[d]--;
  e->copyReq[s] = NULL;
  e->copyRedone &= ~(1u << s); /* the slot's next copy may be made again once too */
  return railnetIbEagerRelease(comm, e->copyPos[s]);
}

ncclResult_t railnetIbEagerRecvPosted(struct ncclIbRecvComm* comm, struct ncclIbRequest* req, void* data,
                                      size_t posted, const struct ncclIbMrHandle* mh, int* cts) {
  struct railnetIbEagerRecv* e = comm->eager;
  if (e->takeDue) { /* the first small message was delivered: the ring now, lazy from this irecv on */
    e->takeDue = 0;
    NCCLCHECK(recvTake(comm));
    NCCLCHECK(modeUpdate(comm));
  }
  req->recv.buf = data;
  req->recv.mh = mh;
  int s = (int)(req->id % RAILNET_IB_EAGER_SLOTS);
  if (e->arrived[s] == req->id + 1) {
    e->arrived[s] = 0;
    *cts = 0;
    return deliver(comm, req, s, e->arrivedSize[s], railnetIbEagerCopyDev(&comm->base, req->id));
  }
  /* none while small messages come eagerly; else one for an irecv larger than the eager size,
   * and one for every irecv once the sender asked with a request-to-send (it needs them,
   * whatever the irecv's size: GPU memory) */
  *cts = !e->small && (posted > e->c.size || e->asked);
  if (e->rts[s] == req->id + 1) {
    e->rts[s] = 0;
    *cts = 1;
  }
  if (!*cts) req->recv.lateNs = 1; /* no clock read here: the deadline is set at the first look */
  return ncclSuccess;
}

ncclResult_t railnetIbEagerCheckLate(struct ncclIbRecvComm* comm, struct ncclIbRequest* req) {
  /* test() counted this call in railnetIbDevicesCheck: the clock only when that was due */
  if (req->recv.lateNs == 0 || comm->base.clockCalls % RAILNET_IB_CLOCK_CALLS != 0) return ncclSuccess;
  uint64_t now = railnetClockNs();
  if (req->recv.lateNs == 1) req->recv.lateNs = now + RAILNET_IB_EAGER_LATE_MS * 1000000ull;
  if (now < req->recv.lateNs) return ncclSuccess;
  req->recv.lateNs = 0;
  char peer[SOCKET_NAME_MAXLEN];
  INFO(NCCL_NET, "NET/IB : receive of fifo position %llu from %s: no eager message in %d ms; announcing it with a "
       "clear-to-send entry", (unsigned long long)req->id, ncclSocketToString(&comm->base.sock.addr, peer, 1),
       RAILNET_IB_EAGER_LATE_MS);
  return railnetIbPostCts(comm, req, (int)(req->id % RAILNET_IB_FIFO_SLOTS), 0);
}

/* A request-to-send for position id on QP q (its data come next on that QP): the clear-to-send
 * goes now when its irecv is there without one, else when the irecv comes. small: for a
 * message of at most the eager size, whose memory cannot go eagerly. */
static ncclResult_t rtsArrived(struct ncclIbRecvComm* comm, int q, uint64_t id, int small) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbEagerRecv* e = comm->eager;
  /* the sender passed no position without its clear-to-send (an irecv posted here) or a
   * ring slot: beyond both, the peer is broken */
  if (id > e->released + RAILNET_IB_EAGER_SLOTS && id > base->fifoHead) {
    char peer[SOCKET_NAME_MAXLEN];
    WARN("NET/IB : request-to-send from %s for fifo position %llu, more than %d beyond %llu: the peer is not this "
         "railnet version or is broken; run the same railnet at both ends, or set RAILNET_IB_EAGER_SIZE=0",
         ncclSocketToString(&base->sock.addr, peer, 1), (unsigned long long)id, RAILNET_IB_EAGER_SLOTS,
         (unsigned long long)e->released);
    return ncclRemoteError;
  }
  NCCLCHECK(railnetIbEagerRepost(comm, q)); /* the position's data still come on it */
  e->c.rtsCount++;
  e->small = 0; /* this sender needs clear-to-send entries (a larger message, or GPU memory) */
  e->smallRun = 0;
  if (small && e->rtsLast != id + 1) { /* its memory cannot go eagerly: try less often (eager.h) */
    int after = e->retryAfter ? e->retryAfter : RAILNET_IB_EAGER_RETRY;
    e->retryAfter = after * 2 < RAILNET_IB_EAGER_RETRY_MAX ? after * 2 : RAILNET_IB_EAGER_RETRY_MAX;
  }
  e->rtsLast = id + 1;
  e->asked = 1;
  NCCLCHECK(modeUpdate(comm));
  struct ncclIbRequest* r = comm->recvReqs[id % RAILNET_IB_FIFO_SLOTS];
  if (r != NULL && r->type == NCCL_NET_IB_REQ_RECV && r->id == id) {
    if (r->recv.lateNs == 0) return ncclSuccess; /* its clear-to-send went already */
    r->recv.lateNs = 0;
    return railnetIbPostCts(comm, r, (int)(id % RAILNET_IB_FIFO_SLOTS), 0);
  }
  e->rts[id % RAILNET_IB_EAGER_SLOTS] = id + 1;
  return ncclSuccess;
}

/* Under failover (eager.h) the position comes in the immediate and the split checks do not
 * hold (what was meant for a QP may come on another). */
ncclResult_t railnetIbEagerArrived(struct ncclIbRecvComm* comm, int d, const struct ibv_wc* wc) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbEagerRecv* e = comm->eager;
  char peer[SOCKET_NAME_MAXLEN];
  int q = railnetIbQpIndex(base, d, wc->qp_num);
  if (e->c.fo && q < 0) q = railnetIbFoAdoptByNum(base, d, wc->qp_num); /* the sender uses a recovered QP */
  if (e->c.fo && q < 0) return ncclSuccess; /* a QP replaced by port recovery: its last completions */
  uint32_t imm = be32toh(wc->imm_data);
  uint64_t id = q < 0 ? 0 : e->c.fo ? railnetIbEagerFoPos(e, imm) : comm->qpNextId[q];
  uint64_t step = base->splitDataOnQps ? 1 : (uint64_t)base->nqps; /* positions per completion of a QP */
  /* split over QPs: requests-to-send and the close come on QP 0 (before the data's first
   * chunk), marks on the others; the first-message box's message (RTS and MARK) as a message */
  int first = railnetIbImmEagerIsFirst(imm);
  int mark = !first && (imm & RAILNET_IB_EAGER_MARK) != 0;
  int ctl = !first && (imm & (RAILNET_IB_EAGER_RTS | RAILNET_IB_EAGER_CLOSE)) != 0;
  int split = base->splitDataOnQps && !e->c.fo;
  if ((split && q >= 0 && (mark ? q == 0 : ctl && q != 0)) || (e->c.fo && mark)) {
    WARN("NET/IB : eager write from %s (immediate 0x%x) on QP %d, which does not take it when messages are split "
         "over QPs or the comm fails over: the peer is not this railnet version or is broken",
         ncclSocketToString(&base->sock.addr, peer, 1), imm, q);
    return ncclRemoteError;
  }
  /* no ring named: nothing comes eagerly but the first message (with its marks) and the close
   * (a multi-receive before the ring), and only on a comm with the first-message box */
  if ((e->c.buf == NULL && !(e->firstOn && (first || mark || (imm & RAILNET_IB_EAGER_CLOSE)))) || (first && !e->firstOn)) {
    WARN("NET/IB : eager write from %s (immediate 0x%x) on a comm that named no eager ring%s to it: the peer is not "
         "this railnet version or is broken; run the same railnet at both ends, or set RAILNET_IB_EAGER_SIZE=0",
         ncclSocketToString(&base->sock.addr, peer, 1), imm, first ? " nor first-message box" : "");
    return ncclRemoteError;
  }
  if (q >= 0 && ctl && (imm & RAILNET_IB_EAGER_RTS)) return rtsArrived(comm, q, id, (imm & RAILNET_IB_EAGER_RTS_SMALL) != 0);
  if (q >= 0 && ctl && (imm & RAILNET_IB_EAGER_CLOSE)) return railnetIbEagerCloseArrived(comm, q, id);
  if (q >= 0 && split && mark) { /* its message came on QP 0 */
    comm->qpNextId[q] += step;
    return railnetIbPostRecvs(base, base->qps[q].qp, 1);
  }
  uint32_t size = railnetIbImmEagerSize(e->c.fo, imm);
  if (q >= 0 && e->c.fo && railnetIbEagerFoRepeat(e, id)) { /* the sender wrote it again: delivered or held */
    e->repeats++;
    return railnetIbEagerRepost(comm, q);
  }
  /* the first message: once per comm, in the box; it passed no position without its irecv's
   * clear-to-send (at most RAILNET_IB_FIFO_SLOTS of them beyond the count delivered) */
  uint32_t most = first ? RAILNET_IB_EAGER_FIRST_BYTES - (uint32_t)HDR_BYTES : e->c.size;
  uint64_t ahead = first ? RAILNET_IB_FIFO_SLOTS + 1 : RAILNET_IB_EAGER_SLOTS;
  if (q < 0 || (q != 0 && split) || (e->closeAt && id >= e->closeAt - 1) || size > most || id < e->released ||
      id >= e->released + ahead || e->arrived[id % RAILNET_IB_EAGER_SLOTS] != 0 || (first && e->firstAt != 0)) {
    WARN("NET/IB : eager message from %s (qp %u, %u bytes, fifo position %llu%s) that this comm cannot take: at most "
         "%u bytes, %llu positions beyond %llu, one per ring slot, one first message. The peer is not this railnet "
         "version or is broken: run the same railnet at both ends, or set RAILNET_IB_EAGER_SIZE=0",
         ncclSocketToString(&base->sock.addr, peer, 1), wc->qp_num, size, (unsigned long long)id,
         first ? ", the first message" : "", most, (unsigned long long)ahead, (unsigned long long)e->released);
    return ncclRemoteError;
  }
  if (first) e->firstAt = id + 1; /* it is in the box, not in ring slot id % RAILNET_IB_EAGER_SLOTS */
  comm->qpNextId[q] += step;
  NCCLCHECK(railnetIbEagerRepost(comm, q));
  int s = (int)(id % RAILNET_IB_EAGER_SLOTS);
  struct ncclIbRequest* r = comm->recvReqs[id % RAILNET_IB_FIFO_SLOTS];
  /* its irecv is there and waits (under failover it counted its completion on the device
   * meant, which may not be the one it came on) */
  int waits = r != NULL && r->type == NCCL_NET_IB_REQ_RECV && r->id == id && r->events[d] > 0;
  for (int k = 0; e->c.fo && !waits && r != NULL && r->type == NCCL_NET_IB_REQ_RECV && r->id == id && k < NCCL_IB_MAX_DEVS_PER_NIC; k++)
    waits = r->events[k] > 0;
  if (waits) {
    if (base->prof) railnetIbProfStop(base, r, wc->qp_num);
    return deliver(comm, r, s, size, d);
  }
  e->arrived[s] = id + 1; /* waits in the ring for its irecv */
  e->arrivedSize[s] = size;
  if (!e->c.closing) return ncclSuccess; /* closing: its irecv may be queued */
  NCCLCHECK(railnetIbEagerMatchHeld(comm));
  return railnetIbEagerResolve(comm);
}
