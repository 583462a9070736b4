/*
 * Eager small messages (eager.h).
 */
#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "eager.h"
#include "debug.h"
#include "devices.h"
#include "failover.h"
#include "ibvwrap.h"
#include "liveness.h"
#include "matching.h"
#include "param.h"
#include "post.h"
#include "prof.h"
#include "qp.h"
#include "reg.h"
#include "socket.h"

enum { P_EAGER_SIZE };
static const railnetParam eagerParams[] = {
    [P_EAGER_SIZE] = RAILNET_PARAM_INT_DEF("RAILNET_IB_EAGER_SIZE", RAILNET_IB_EAGER_DEFAULT, 0, RAILNET_IB_EAGER_MAX,
                                           "IB: messages of at most this many bytes are RDMA-written into a ring "
                                           "of the receiver without waiting for its clear-to-send entry (the "
                                           "smaller size of both ends; host send buffers only; the receiver copies "
                                           "into GPU buffers with the NIC; a comm's first multi-receive ends them "
                                           "on that comm; not with port failover). Default 4096 (measured: "
                                           "bench/ib.sh --lat-sweep); 0: off, the clear-to-send protocol for "
                                           "every message"),
};
RAILNET_PARAM_TABLE("net_ib/eager", eagerParams);

int railnetIbEagerSize(void) { return (int)railnetParamInt(&eagerParams[P_EAGER_SIZE]); }

/* Ring slot s (of RAILNET_IB_EAGER_SLOTS, e->stride bytes each: a railnetIbEagerHdr, then the
 * message's bytes) and the receiver's credit words after the last one. */
#define SLOT(e, s) ((e)->buf + (size_t)(s) * (e)->stride)
#define HDR_BYTES sizeof(struct railnetIbEagerHdr)
#define CREDIT_WORD(e) ((volatile uint64_t*)SLOT(e, RAILNET_IB_EAGER_SLOTS))

/* The ring (receiver) or bounce slots (sender) for messages of at most size bytes (the agreed
 * size: both ends lay the slots out alike, the header and size bytes rounded up to 64), pages
 * of its own (munmap gives them back at close, no heap holes), registered on every device of
 * base. */
static ncclResult_t eagerAlloc(struct ncclIbNetCommBase* base, int access, uint32_t size, struct railnetIbEager** out) {
  struct railnetIbEager* e = NULL;
  NCCLCHECK(RAILNET_CALLOC(&e, 1, "IB eager state"));
  e->size = size;
  e->stride = (uint32_t)((size + HDR_BYTES + 63u) & ~(size_t)63u);
  e->bytes = ((size_t)RAILNET_IB_EAGER_SLOTS * e->stride + 64 + 4095) & ~(size_t)4095;
  void* p = mmap(NULL, e->bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    WARN("NET/IB : out of memory for an eager ring (%zu bytes): %s", e->bytes, strerror(errno));
    free(e);
    return ncclSystemError;
  }
  e->buf = (uint8_t*)p;
  for (int d = 0; d < base->vProps.ndevs; d++) {
    ncclResult_t r = wrap_ibv_reg_mr(&e->mrs[d], base->devs[d].pd, e->buf, e->bytes, access);
    if (r != ncclSuccess) {
      railnetIbEagerFree(e);
      return r;
    }
  }
  *out = e;
  return ncclSuccess;
}

void railnetIbEagerFree(struct railnetIbEager* e) {
  if (e == NULL) return;
  for (int d = 0; d < NCCL_IB_MAX_DEVS_PER_NIC; d++)
    if (e->mrs[d]) wrap_ibv_dereg_mr(e->mrs[d]);
  if (e->buf) munmap(e->buf, e->bytes);
  free(e->pend);
  free(e);
}

void railnetIbEagerSendMeta(struct ncclIbSendComm* comm, struct ncclIbConnectionMetadata* meta) {
  int size = railnetIbEagerSize();
  if (size <= 0) return;
  meta->devs[0].flags |= RAILNET_IB_FLAG_EAGER_TAGS;
  meta->eagerSize = (uint32_t)size;
  meta->eagerAddr = (uint64_t)(uintptr_t)&comm->eagerReleased;
}

ncclResult_t railnetIbEagerSendConnect(struct ncclIbSendComm* comm, const struct ncclIbConnectionMetadata* rem,
                                       const char* peer) {
  struct ncclIbNetCommBase* base = &comm->base;
  if (railnetIbEagerSize() <= 0) return ncclSuccess;
  if (!(rem->devs[0].flags & RAILNET_IB_FLAG_EAGER_TAGS)) {
    INFO(NCCL_NET, "NET/IB : send comm to %s: no eager messages (the receiver did not agree: see its log)", peer);
    return ncclSuccess;
  }
  NCCLCHECK(eagerAlloc(base, IBV_ACCESS_LOCAL_WRITE, rem->eagerSize, &comm->eager));
  comm->eager->remAddr = rem->eagerAddr;
  for (int d = 0; d < rem->ndevs; d++) comm->eager->remRkeys[d] = rem->devs[d].eagerRkey;
  comm->eagerReleased = 0;
  comm->eagerMode = 0;
  comm->eagerModeFrom = 0;
  INFO(NCCL_NET, "NET/IB : send comm to %s: messages up to %u bytes go eagerly; larger ones ask for their "
       "clear-to-send when it is not there", peer, comm->eager->size);
  return ncclSuccess;
}

/* Why the receiver cannot take eager messages on this comm (NULL: it can). */
static const char* eagerRefusal(struct ncclIbRecvComm* comm) {
  struct ncclIbNetCommBase* base = &comm->base;
  if (base->fo) return "port failover is on";
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
  const char* no = (flags & RAILNET_IB_FLAG_EAGER_TAGS) ? eagerRefusal(comm)
                   : (flags & RAILNET_IB_FLAG_EAGER)
                       ? "the sender's railnet is older (its eager messages carry no tag); run the same railnet at "
                         "both ends"
                       : "the sender has them off (RAILNET_IB_EAGER_SIZE=0 there, or a railnet without them)";
  if (no) {
    INFO(NCCL_NET, "NET/IB : receive comm with %s: no eager messages: %s", peer, no);
    return ncclSuccess;
  }
  uint32_t size = (uint32_t)mine < rem->eagerSize ? (uint32_t)mine : rem->eagerSize;
  NCCLCHECK(eagerAlloc(base, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE, size, &comm->eager));
  struct railnetIbEager* e = comm->eager;
  e->remAddr = rem->eagerAddr; /* the sender's credit word */
  int forced = !comm->prepost;
  if (!comm->prepost) { /* receive WRs kept posted, completions in the order of each QP */
    comm->prepost = 1;
    for (int q = 0; q < base->nqps; q++) NCCLCHECK(railnetIbPostRecvs(base, base->qps[q].qp, RAILNET_IB_FIFO_SLOTS));
  }
  meta->devs[0].flags |= RAILNET_IB_FLAG_EAGER_TAGS;
  meta->eagerSize = e->size;
  meta->eagerAddr = (uint64_t)(uintptr_t)e->buf;
  for (int d = 0; d < base->vProps.ndevs; d++) meta->devs[d].eagerRkey = e->mrs[d]->rkey;
  INFO(NCCL_NET, "NET/IB : receive comm with %s: messages up to %u bytes come eagerly into a ring of %d slots; no "
       "clear-to-send while the messages are small%s", peer, e->size, RAILNET_IB_EAGER_SLOTS,
       forced ? "; receive work requests pre-posted for them after all" : "");
  return ncclSuccess;
}

int railnetIbEagerCanSend(struct ncclIbSendComm* comm, size_t size, int memType) {
  struct railnetIbEager* e = comm->eager;
  struct ncclIbNetCommBase* base = &comm->base;
  /* the CPU copies the bytes into the bounce slot: host memory only (GPU memory goes the
   * clear-to-send way, straight from the NIC) */
  if (!railnetIbEagerOpen(e) || size > e->size || comm->ctsCount != 0 || memType != NCCL_PTR_HOST) return 0;
  int slot = (int)(base->fifoHead % RAILNET_IB_FIFO_SLOTS);
  /* the receiver announced this position already: its buffer takes the bytes directly */
  if (comm->fifo[slot][0].idx == base->fifoHead + 1) return 0;
  struct ncclIbQp* qp = railnetIbMsgQp(base, base->fifoHead, 0);
  /* the ring full (the receiver has not taken them, or is gone: the signaled writes fail
   * then) or a send queue full (the message's, and split, its marks'): its completions are
   * to be polled */
  if (base->fifoHead >= comm->eagerReleased + RAILNET_IB_EAGER_SLOTS) return -1 - qp->devIndex;
  if (comm->eagerReleased > base->fifoHead) return RAILNET_IB_EAGER_BAD_CREDIT;
  for (int i = 0; i < railnetIbChunksPerMsg(base); i++) {
    struct ncclIbQp* q = railnetIbMsgQp(base, base->fifoHead, i);
    if (q->sqPosted + 1 > base->sqDepth) return -1 - q->devIndex;
  }
  return 1;
}

/* Writes sge (NULL: no bytes) with immediate imm into ring slot pos % RAILNET_IB_EAGER_SLOTS
 * of the receiver on qp: an eager message or a request-to-send. Unsignaled writes leave the
 * send queue with a later signaled one: one in RAILNET_IB_EAGER_SIGNAL is signaled. */
static ncclResult_t ringWrite(struct ncclIbNetCommBase* base, struct railnetIbEager* e, struct ncclIbQp* qp,
                              uint64_t pos, struct ibv_sge* sge, uint32_t imm) {
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  wr.sg_list = sge;
  wr.num_sge = sge ? 1 : 0;
  wr.imm_data = htobe32(imm);
  wr.wr.rdma.remote_addr = e->remAddr + (pos % RAILNET_IB_EAGER_SLOTS) * e->stride;
  wr.wr.rdma.rkey = e->remRkeys[qp->remDevIndex];
  if (sge && base->useInline && sge->length <= base->maxInline) wr.send_flags = IBV_SEND_INLINE;
  wr.wr_id = RAILNET_IB_EAGER_WR;
  if (qp->eagerUnsig + 1 >= RAILNET_IB_EAGER_SIGNAL) {
    wr.send_flags |= IBV_SEND_SIGNALED;
    wr.wr_id |= (uint64_t)qp->eagerUnsig + 1;
  }
  NCCLCHECK(wrap_ibv_post_send(qp->qp, &wr, &bad));
  base->work.wrs++;
  qp->sqPosted++;
  if (wr.send_flags & IBV_SEND_SIGNALED) qp->eagerUnsig = 0;
  else qp->eagerUnsig++;
  return ncclSuccess;
}

ncclResult_t railnetIbEagerSend(struct ncclIbSendComm* comm, struct ncclIbRequest* req, void* data, size_t size,
                                int tag, void* phandle) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbEager* e = comm->eager;
  uint64_t pos = base->fifoHead;
  struct ncclIbQp* qp = railnetIbMsgQp(base, pos, 0);
  uint8_t* slot = SLOT(e, pos % RAILNET_IB_EAGER_SLOTS);
  struct railnetIbEagerHdr hdr = {(uint32_t)tag, (uint32_t)size};
  memcpy(slot, &hdr, sizeof(hdr));
  if (size) memcpy(slot + HDR_BYTES, data, size);
  struct ibv_sge sge = {(uintptr_t)slot, (uint32_t)(HDR_BYTES + size), e->mrs[qp->devIndex]->lkey};
  NCCLCHECK(ringWrite(base, e, qp, pos, &sge, RAILNET_IB_EAGER_IMM | (uint32_t)size));
  /* split over QPs, every QP takes one completion per position: the others get a mark */
  for (int i = 1; i < railnetIbChunksPerMsg(base); i++)
    NCCLCHECK(ringWrite(base, e, railnetIbMsgQp(base, pos, i), pos, NULL, RAILNET_IB_EAGER_IMM | RAILNET_IB_EAGER_MARK));
  req->type = NCCL_NET_IB_REQ_EAGER;
  req->id = pos;
  req->send.size = size;
  req->phandle = phandle;
  for (int i = 0; base->prof && i < railnetIbChunksPerMsg(base); i++) /* an event per write: message, marks */
    NCCLCHECK(railnetIbProfStart(base, req, phandle, (int)(railnetIbMsgQp(base, pos, i) - base->qps),
                                 IBV_WR_RDMA_WRITE_WITH_IMM, i == 0 ? size : 0));
  base->fifoHead++;
  return ncclSuccess;
}

ncclResult_t railnetIbEagerRts(struct ncclIbSendComm* comm, size_t size, int* pollDev) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbEager* e = comm->eager;
  uint64_t pos = base->fifoHead;
  *pollDev = -1;
  if (!railnetIbEagerOpen(e) || e->rtsSent == pos + 1) return ncclSuccess;
  /* the receiver's mode (modeUpdate): every irecv from position mode >> 1 on writes its
   * clear-to-send (bit 0 set), or the ones from eagerModeFrom up to it did: no request
   * where one comes anyway */
  uint64_t mode = comm->eagerMode & ~RAILNET_IB_EAGER_CLOSING, to = mode >> 1;
  if ((mode & 1) ? pos >= to : pos >= comm->eagerModeFrom && pos < to) return ncclSuccess;
  struct ncclIbQp* qp = railnetIbMsgQp(base, pos, 0);
  if (qp->sqPosted + 1 > base->sqDepth) { /* its completions free it */
    *pollDev = qp->devIndex;
    return ncclSuccess;
  }
  /* a small message asks only when its memory cannot go eagerly (railnetIbEagerCanSend) */
  uint32_t small = size <= e->size ? RAILNET_IB_EAGER_RTS_SMALL : 0;
  NCCLCHECK(ringWrite(base, e, qp, pos, NULL, RAILNET_IB_EAGER_IMM | RAILNET_IB_EAGER_RTS | small));
  e->rtsSent = pos + 1;
  e->rtsCount++;
  return ncclSuccess;
}

/* Tells the sender the positions delivered in order, once half the ring is free again;
 * signaled (the completion also ends the unsignaled clear-to-send writes before it). Always
 * on QP 0: writes on one QP land in order, so the count the sender sees never goes back. */
static ncclResult_t tellSender(struct ncclIbRecvComm* comm) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct ncclIbQp* qp = &base->qps[0];
  struct railnetIbEager* e = comm->eager;
  if (e->released - e->told < RAILNET_IB_EAGER_SLOTS / 2 && e->modeTold == e->mode) return ncclSuccess;
  volatile uint64_t* word = CREDIT_WORD(e);
  word[0] = e->released;
  word[1] = e->mode; /* lazy: the sender's eagerMode and eagerModeFrom (each word lands whole) */
  word[2] = e->everyFrom;
  struct ibv_sge sge = {(uintptr_t)word, 3 * sizeof(uint64_t), e->mrs[qp->devIndex]->lkey};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = e->remAddr;
  wr.wr.rdma.rkey = base->remDevs[qp->remDevIndex].fifoRkey;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr_id = RAILNET_IB_EAGER_WR;
  NCCLCHECK(wrap_ibv_post_send(qp->qp, &wr, &bad));
  base->work.wrs++;
  qp->ctsUnsig = 0;
  e->told = e->released;
  e->modeTold = e->mode;
  return ncclSuccess;
}

/* Lazy: whether every irecv from now on writes its clear-to-send (a sender asked, and small
 * messages do not come eagerly); when that changes the sender is told at once, with the
 * position it holds from (railnetIbEagerRts: no request-to-send where one comes anyway). */
static ncclResult_t modeUpdate(struct ncclIbRecvComm* comm) {
  struct railnetIbEager* e = comm->eager;
  uint64_t every = !e->small && e->asked;
  if (e->closing || every == (e->mode & 1)) return ncclSuccess; /* closing: the mode word says only that */
  /* an "every" period [everyFrom, its end) is what a later mode 0 still vouches for: the
   * irecvs before it (eager ones) wrote none */
  if (every) e->everyFrom = comm->base.fifoHead;
  e->mode = every | (comm->base.fifoHead << 1);
  return tellSender(comm);
}

/* Position id reached its buffer: the sender is told once half the ring is free again. */
static ncclResult_t released(struct ncclIbRecvComm* comm, uint64_t id) {
  struct railnetIbEager* e = comm->eager;
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
  return tellSender(comm);
}

ncclResult_t railnetIbEagerDelivered(struct ncclIbRecvComm* comm, uint64_t id, size_t size) {
  struct railnetIbEager* e = comm->eager;
  /* after the close the positions from the sender's close on take no ring slot */
  if (e == NULL || (e->closeAt && id >= e->closeAt - 1)) return ncclSuccess;
  /* lazy: a larger message has the next irecvs write their clear-to-send; after
   * RAILNET_IB_EAGER_RETRY small ones that came that way they try without again (the sender
   * may send them eagerly; one whose memory cannot go eagerly asks again) */
  if (size > e->size) {
    e->small = 0;
    e->smallRun = 0;
  } else if (!e->small && ++e->smallRun >= (e->retryAfter ? e->retryAfter : RAILNET_IB_EAGER_RETRY)) {
    e->small = 1;
  }
  NCCLCHECK(modeUpdate(comm));
  return released(comm, id);
}

/* The NIC writes n bytes of ring slot s (the message at position pos) into buf, a buffer of
 * receive r registered as mh (GPU memory, which the CPU cannot write), through device d's QP
 * connected to itself (made at the first copy when no GPUDirect flush made it). r counts it on
 * d; the receive is done, and the slot free, when the write completed (railnetIbEagerCopied);
 * an iflush after it reads through the same QP. */
static ncclResult_t nicCopy(struct ncclIbRecvComm* comm, struct ncclIbRequest* r, int s, void* buf,
                            const struct ncclIbMrHandle* mh, size_t n, int d, uint64_t pos) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct ncclIbCommDev* cd = &base->devs[d];
  struct railnetIbEager* e = comm->eager;
  if (cd->flushQp == NULL) NCCLCHECK(railnetIbQpSelf(base, d, base->qpTc, base->qpSl, &cd->flushQp));
  struct ibv_sge sge = {(uintptr_t)SLOT(e, s) + HDR_BYTES, (uint32_t)n, e->mrs[d]->lkey};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = (uint64_t)(uintptr_t)buf;
  wr.wr.rdma.rkey = mh->mrs[d]->rkey;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr_id = RAILNET_IB_EAGER_COPY | (uint64_t)s;
  NCCLCHECK(wrap_ibv_post_send(cd->flushQp, &wr, &bad));
  base->work.wrs++;
  e->nicCopies++;
  e->copyReq[s] = r;
  e->copyPos[s] = pos;
  r->events[d]++;
  return ncclSuccess;
}

/* The message in ring slot s is for receive r: its header agrees with the immediate's size and
 * carries the irecv's tag. An eager message has no clear-to-send to match its tag against, so
 * an isend whose tag differs from the irecv at its fifo position would land in the wrong
 * buffer: the comm fails instead (ncclInvalidUsage), with a WARN naming both tags. */
static ncclResult_t checkHeader(struct ncclIbRecvComm* comm, struct ncclIbRequest* r, int s, uint32_t size) {
  struct railnetIbEagerHdr hdr;
  memcpy(&hdr, SLOT(comm->eager, s), sizeof(hdr));
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
  NCCLCHECK(checkHeader(comm, r, s, size));
  size_t n = size <= r->recv.posted[0] ? size : 0;
  r->recv.sizes[0] = (int)size;
  comm->eager->small = 1; /* lazy: small messages come eagerly: no clear-to-send for the next irecvs */
  comm->eager->asked = 0;
  comm->eager->retryAfter = 0; /* this sender's memory goes eagerly */
  NCCLCHECK(modeUpdate(comm));
  /* the irecv counted a completion per QP its chunks would take (split over QPs: every QP);
   * the message is all here, the marks of the other QPs settle nothing */
  memset(r->events, 0, sizeof(r->events));
  if (n && r->recv.mh->type != NCCL_PTR_HOST) return nicCopy(comm, r, s, r->recv.buf, r->recv.mh, n, d, r->id);
  if (n) memcpy(r->recv.buf, SLOT(comm->eager, s) + HDR_BYTES, n);
  return released(comm, r->id);
}

ncclResult_t railnetIbEagerCopied(struct ncclIbRecvComm* comm, int d, const struct ibv_wc* wc) {
  struct railnetIbEager* e = comm->eager;
  int s = (int)(wc->wr_id % RAILNET_IB_EAGER_SLOTS);
  struct ncclIbRequest* r = e ? e->copyReq[s] : NULL;
  if (r == NULL || r->type != NCCL_NET_IB_REQ_RECV || r->events[d] <= 0) {
    WARN("NET/IB : eager copy completion (wr_id 0x%llx) without a receive waiting for it", (unsigned long long)wc->wr_id);
    return ncclInternalError;
  }
  r->events[d]--;
  e->copyReq[s] = NULL;
  return released(comm, e->copyPos[s]);
}

ncclResult_t railnetIbEagerRecvPosted(struct ncclIbRecvComm* comm, struct ncclIbRequest* req, void* data,
                                      size_t posted, const struct ncclIbMrHandle* mh, int* cts) {
  struct railnetIbEager* e = comm->eager;
  req->recv.buf = data;
  req->recv.mh = mh;
  int s = (int)(req->id % RAILNET_IB_EAGER_SLOTS);
  if (e->arrived[s] == req->id + 1) {
    struct ncclIbQp* qp = railnetIbMsgQp(&comm->base, req->id, 0);
    e->arrived[s] = 0;
    *cts = 0;
    return deliver(comm, req, s, e->arrivedSize[s], qp->devIndex);
  }
  /* none while small messages come eagerly; else one for an irecv larger than the eager size,
   * and one for every irecv once the sender asked with a request-to-send (it needs them,
   * whatever the irecv's size: GPU memory) */
  *cts = !e->small && (posted > e->size || e->asked);
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
  struct railnetIbEager* e = comm->eager;
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
  NCCLCHECK(railnetIbPostRecvs(base, base->qps[q].qp, 1)); /* the position's data still come on it */
  e->rtsCount++;
  e->small = 0; /* this sender needs clear-to-send entries (a larger message, or GPU memory) */
  e->smallRun = 0;
  if (small) { /* its memory cannot go eagerly: try less often (eager.h) */
    int after = e->retryAfter ? e->retryAfter : RAILNET_IB_EAGER_RETRY;
    e->retryAfter = after * 2 < RAILNET_IB_EAGER_RETRY_MAX ? after * 2 : RAILNET_IB_EAGER_RETRY_MAX;
  }
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

static ncclResult_t matchHeld(struct ncclIbRecvComm* comm);
static ncclResult_t resolve(struct ncclIbRecvComm* comm);

/* The sender's close on QP q: its position id (the next on that QP; it takes none). */
static ncclResult_t closeArrived(struct ncclIbRecvComm* comm, int q, uint64_t id) {
  struct railnetIbEager* e = comm->eager;
  int late = 0; /* an eager message at or beyond the close's position came first (another QP) */
  for (int s = 0; s < RAILNET_IB_EAGER_SLOTS; s++) late |= e->arrived[s] > id;
  if (!e->closing || e->closeAt || late || (id > e->released + RAILNET_IB_EAGER_SLOTS && id > comm->base.fifoHead)) {
    char peer[SOCKET_NAME_MAXLEN];
    WARN("NET/IB : eager close from %s at fifo position %llu, not asked for, beyond the ring (%llu delivered) or "
         "behind an eager message: the peer is not this railnet version or is broken", ncclSocketToString(&comm->base.sock.addr, peer, 1),
         (unsigned long long)id, (unsigned long long)e->released);
    return ncclRemoteError;
  }
  e->closeAt = id + 1;
  NCCLCHECK(railnetIbPostRecvs(&comm->base, comm->base.qps[q].qp, 1));
  return resolve(comm);
}

ncclResult_t railnetIbEagerArrived(struct ncclIbRecvComm* comm, int d, const struct ibv_wc* wc) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbEager* e = comm->eager;
  char peer[SOCKET_NAME_MAXLEN];
  int q = railnetIbQpIndex(base, d, wc->qp_num);
  uint32_t imm = be32toh(wc->imm_data);
  uint64_t id = q >= 0 ? comm->qpNextId[q] : 0;
  uint64_t step = base->splitDataOnQps ? 1 : (uint64_t)base->nqps; /* positions per completion of a QP */
  /* split over QPs: requests-to-send and the close come on QP 0 (before the data's first
   * chunk), marks on the others */
  int mark = (imm & RAILNET_IB_EAGER_MARK) != 0, ctl = (imm & (RAILNET_IB_EAGER_RTS | RAILNET_IB_EAGER_CLOSE)) != 0;
  if (base->splitDataOnQps && q >= 0 && (mark ? q == 0 : ctl && q != 0)) {
    WARN("NET/IB : eager write from %s (immediate 0x%x) on QP %d, which does not take it when messages are split "
         "over QPs: the peer is not this railnet version or is broken", ncclSocketToString(&base->sock.addr, peer, 1),
         imm, q);
    return ncclRemoteError;
  }
  if (q >= 0 && (imm & RAILNET_IB_EAGER_RTS)) return rtsArrived(comm, q, id, (imm & RAILNET_IB_EAGER_RTS_SMALL) != 0);
  if (q >= 0 && (imm & RAILNET_IB_EAGER_CLOSE)) return closeArrived(comm, q, id);
  if (q >= 0 && base->splitDataOnQps && (imm & RAILNET_IB_EAGER_MARK)) { /* its message came on QP 0 */
    comm->qpNextId[q] += step;
    return railnetIbPostRecvs(base, base->qps[q].qp, 1);
  }
  uint32_t size = imm & ~RAILNET_IB_EAGER_IMM;
  if (q < 0 || (q != 0 && base->splitDataOnQps) || (e->closeAt && id >= e->closeAt - 1) || size > e->size || id >= e->released + RAILNET_IB_EAGER_SLOTS ||
      e->arrived[id % RAILNET_IB_EAGER_SLOTS] != 0) {
    WARN("NET/IB : eager message from %s (qp %u, %u bytes, fifo position %llu) that this comm cannot take: at most "
         "%u bytes, %d positions beyond %llu, one per ring slot. The peer is not this railnet version or is broken: "
         "run the same railnet at both ends, or set RAILNET_IB_EAGER_SIZE=0",
         ncclSocketToString(&base->sock.addr, peer, 1), wc->qp_num, size, (unsigned long long)id, e->size,
         RAILNET_IB_EAGER_SLOTS, (unsigned long long)e->released);
    return ncclRemoteError;
  }
  struct ncclIbQp* qp = &base->qps[q];
  comm->qpNextId[q] += step;
  NCCLCHECK(railnetIbPostRecvs(base, qp->qp, 1));
  int s = (int)(id % RAILNET_IB_EAGER_SLOTS);
  struct ncclIbRequest* r = comm->recvReqs[id % RAILNET_IB_FIFO_SLOTS];
  if (r != NULL && r->type == NCCL_NET_IB_REQ_RECV && r->id == id && r->events[d] > 0) {
    if (base->prof) railnetIbProfStop(base, r, wc->qp_num);
    return deliver(comm, r, s, size, d);
  }
  e->arrived[s] = id + 1; /* waits in the ring for its irecv */
  e->arrivedSize[s] = size;
  if (!e->closing) return ncclSuccess; /* closing: its irecv may be queued */
  NCCLCHECK(matchHeld(comm));
  return resolve(comm);
}

/* ------------------------------------------------------------------ the close */

ncclResult_t railnetIbEagerSendClose(struct ncclIbSendComm* comm, int* pollDev) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbEager* e = comm->eager;
  *pollDev = -1;
  if (!railnetIbEagerOpen(e) || !(comm->eagerMode & RAILNET_IB_EAGER_CLOSING)) return ncclSuccess;
  struct ncclIbQp* qp = railnetIbMsgQp(base, base->fifoHead, 0);
  if (qp->sqPosted + 1 > base->sqDepth) { /* its completions free it */
    *pollDev = qp->devIndex;
    return ncclSuccess;
  }
  NCCLCHECK(ringWrite(base, e, qp, base->fifoHead, NULL, RAILNET_IB_EAGER_IMM | RAILNET_IB_EAGER_CLOSE));
  e->closed = 1;
  char peer[SOCKET_NAME_MAXLEN];
  INFO(NCCL_NET, "NET/IB : send comm to %s: the receiver posted a multi-receive: no eager messages from fifo position "
       "%llu on", railnetIbPeerStr(base, peer), (unsigned long long)base->fifoHead);
  return ncclSuccess;
}

/* The messages that came beyond the irecvs (arrived[], their irecv not posted) go into the
 * queued irecvs' buffers of their tag: in the order of their positions, each into the oldest
 * buffer still empty (the CPU copies into host memory, the NIC into GPU memory). Only up to
 * the first position not here yet (frontier; with several QPs a later one may come first), so
 * that messages of one tag fill its buffers in their order. */
static ncclResult_t matchHeld(struct ncclIbRecvComm* comm) {
  struct railnetIbEager* e = comm->eager;
  while (e->arrived[e->frontier % RAILNET_IB_EAGER_SLOTS] == e->frontier + 1) e->frontier++;
  for (uint64_t p = e->released > e->pendFrom ? e->released : e->pendFrom; p < e->frontier; p++) {
    int s = (int)(p % RAILNET_IB_EAGER_SLOTS);
    if (e->arrived[s] != p + 1) continue;
    struct railnetIbEagerHdr hdr;
    memcpy(&hdr, SLOT(e, s), sizeof(hdr));
    if (hdr.size != e->arrivedSize[s]) {
      char peer[SOCKET_NAME_MAXLEN];
      WARN("NET/IB : eager message from %s at fifo position %llu says %u bytes in its header and %u in its "
           "immediate: the peer is broken or not this railnet", railnetIbPeerStr(&comm->base, peer),
           (unsigned long long)p, hdr.size, e->arrivedSize[s]);
      railnetIbCommFail(&comm->base);
      return ncclRemoteError;
    }
    for (int q = 0; q < e->pendCount; q++) {
      struct railnetIbEagerPending* w = &e->pend[(e->pendHead + q) % RAILNET_IB_FIFO_SLOTS];
      int i = 0;
      while (i < w->n && ((w->filled >> i & 1) || w->tags[i] != (int)hdr.tag)) i++;
      if (i == w->n) continue;
      struct ncclIbRequest* r = w->req;
      uint32_t size = e->arrivedSize[s];
      size_t bytes = size <= w->sizes[i] ? size : 0; /* larger: the size check at test() says so */
      e->arrived[s] = 0;
      w->filled |= (uint8_t)(1u << i);
      r->recv.own[i] = (int)size;
      r->events[0]--;
      if (bytes && w->mh[i]->type != NCCL_PTR_HOST) {
        NCCLCHECK(nicCopy(comm, r, s, w->data[i], w->mh[i], bytes, railnetIbMsgQp(&comm->base, p, 0)->devIndex, p));
        break;
      }
      if (bytes) memcpy(w->data[i], SLOT(e, s) + HDR_BYTES, bytes);
      NCCLCHECK(released(comm, p));
      break;
    }
  }
  return ncclSuccess;
}

/* Once the sender's close is here with every message before it: irecvs posted without a
 * clear-to-send write theirs, and the queued irecvs, in order, take positions for the buffers
 * the held messages did not fill (none: no position), as far as fifo slots are free. */
static ncclResult_t resolve(struct ncclIbRecvComm* comm) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbEager* e = comm->eager;
  if (e->closeAt == 0) return ncclSuccess;
  if (!e->closed) {
    uint64_t y = e->closeAt - 1, f = e->pendFrom;
    if (y > f && e->frontier < y) return ncclSuccess; /* messages before the close still coming */
    for (uint64_t p = y; p < f; p++) { /* irecvs posted without a clear-to-send: theirs now */
      struct ncclIbRequest* r = comm->recvReqs[p % RAILNET_IB_FIFO_SLOTS];
      if (r == NULL || r->type != NCCL_NET_IB_REQ_RECV || r->id != p || r->recv.lateNs == 0) continue;
      r->recv.lateNs = 0;
      NCCLCHECK(railnetIbPostCts(comm, r, (int)(p % RAILNET_IB_FIFO_SLOTS), 0));
    }
    base->fifoHead = y > f ? y : f;
    e->closed = 1;
    char peer[SOCKET_NAME_MAXLEN];
    INFO(NCCL_NET, "NET/IB : receive comm with %s: eager messages ended at fifo position %llu (%llu came beyond the "
         "irecvs); the clear-to-send protocol from here", railnetIbPeerStr(base, peer), (unsigned long long)y,
         (unsigned long long)(y > f ? y - f : 0));
  }
  while (e->pendCount > 0) {
    struct railnetIbEagerPending* w = &e->pend[e->pendHead];
    struct ncclIbRequest* r = w->req;
    int k = 0, slot = (int)(base->fifoHead % RAILNET_IB_FIFO_SLOTS);
    for (int i = 0; i < w->n; i++)
      if (!(w->filled >> i & 1)) r->recv.map[k++] = (uint8_t)i;
    if (k > 0 && comm->recvReqs[slot] != NULL) return ncclSuccess; /* at a later test() */
    e->pendHead = (e->pendHead + 1) % RAILNET_IB_FIFO_SLOTS;
    e->pendCount--;
    if (k == 0) continue; /* every buffer filled: done when its copies are */
    r->id = base->fifoHead;
    r->nreqs = k;
    r->recv.sizes = comm->sizes[slot];
    memset(comm->sizes[slot], 0, sizeof(comm->sizes[slot]));
    r->events[0] -= k;
    for (int c = 0; c < railnetIbChunksPerMsg(base); c++) r->events[railnetIbMsgQp(base, r->id, c)->devIndex]++;
    for (int j = 0; j < k; j++) {
      int i = r->recv.map[j];
      struct ncclIbSendFifo* el = &comm->elems[slot][j];
      memset(el, 0, sizeof(*el));
      el->addr = (uint64_t)(uintptr_t)w->data[i];
      for (int d = 0; d < base->vProps.ndevs; d++) el->rkeys[d] = w->mh[i]->mrs[d]->rkey;
      el->nreqs = (uint32_t)k;
      el->size = w->sizes[i];
      el->tag = (uint32_t)w->tags[i];
      el->idx = base->fifoHead + 1;
    }
    comm->recvReqs[slot] = r;
    base->fifoHead++;
    NCCLCHECK(railnetIbPostCts(comm, r, slot, 0));
  }
  return ncclSuccess;
}

int railnetIbEagerQueueRoom(const struct ncclIbRecvComm* comm) {
  int used = comm->eager->pendCount; /* queued irecvs and irecvs at a position: NCCL's limit together */
  for (int s = 0; s < RAILNET_IB_FIFO_SLOTS; s++) used += comm->recvReqs[s] != NULL;
  return used < RAILNET_IB_FIFO_SLOTS;
}

int railnetIbEagerQueues(const struct railnetIbEager* e, int n) {
  if (e == NULL) return 0;
  if (!e->closing) return n > 1;
  if (!e->closed || e->pendCount > 0) return 1;
  for (int s = 0; s < RAILNET_IB_EAGER_SLOTS; s++) /* messages from before the close still held */
    if (e->arrived[s]) return 1;
  return 0;
}

ncclResult_t railnetIbEagerQueue(struct ncclIbRecvComm* comm, struct ncclIbRequest* req, int n, void** data,
                                 size_t* sizes, int* tags, void** mhandles, int* taken) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbEager* e = comm->eager;
  *taken = 0;
  if (!e->closing) {
    if (e->pend == NULL) NCCLCHECK(RAILNET_CALLOC(&e->pend, RAILNET_IB_FIFO_SLOTS, "IB eager irecv queue"));
    e->closing = 1;
    e->pendFrom = base->fifoHead;
    e->frontier = base->fifoHead;
    e->mode |= RAILNET_IB_EAGER_CLOSING;
    NCCLCHECK(tellSender(comm));
    char peer[SOCKET_NAME_MAXLEN];
    INFO(NCCL_NET, "NET/IB : receive comm with %s: a multi-receive: asking the sender to end its eager messages",
         railnetIbPeerStr(base, peer));
  }
  struct railnetIbEagerPending* w = &e->pend[(e->pendHead + e->pendCount) % RAILNET_IB_FIFO_SLOTS];
  memset(w, 0, sizeof(*w));
  w->req = req;
  w->n = n;
  for (int i = 0; i < n; i++) {
    w->data[i] = data[i];
    w->sizes[i] = sizes[i];
    w->tags[i] = tags[i];
    w->mh[i] = (const struct ncclIbMrHandle*)mhandles[i];
  }
  e->pendCount++;
  req->recv.nbuf = n;
  req->events[0] = n; /* a buffer filled here, or all of them taking a position, settles them */
  *taken = 1;
  NCCLCHECK(matchHeld(comm));
  return resolve(comm);
}

ncclResult_t railnetIbEagerProgress(struct ncclIbRecvComm* comm) {
  struct railnetIbEager* e = comm->eager;
  if (e == NULL || !e->closing || e->pendCount == 0) return ncclSuccess;
  NCCLCHECK(matchHeld(comm));
  return resolve(comm);
}
