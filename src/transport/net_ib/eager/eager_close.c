/*
 * Eager small messages (eager.h): the close, when the receiver posts a multi-receive; the
 * irecvs queued meanwhile and the messages that came beyond the irecvs.
 */
#include <string.h>
#include "eager.h"
#include "eager_int.h"
#include "debug.h"
#include "../devices.h"
#include "../resilience/failover.h"
#include "../matching.h"
#include "../post.h"
#include "../qp.h"
#include "../reg.h"
#include "socket.h"
#include "../slots.h"

/* The sender's close on QP q: its position id (the next on that QP; it takes none). */
ncclResult_t railnetIbEagerCloseArrived(struct ncclIbRecvComm* comm, int q, uint64_t id) {
  struct railnetIbEagerRecv* e = comm->eager;
  if (e->c.fo && e->closeAt) return railnetIbEagerRepost(comm, q); /* failover: written again (eager.h) */
  int late = 0; /* an eager message at or beyond the close's position came first (another QP) */
  for (int s = 0; s < RAILNET_IB_EAGER_SLOTS; s++) late |= e->arrived[s] > id;
  if (!e->c.closing || e->closeAt || late || (id > e->released + RAILNET_IB_EAGER_SLOTS && id > comm->base.fifoHead)) {
    char peer[SOCKET_NAME_MAXLEN];
    WARN("NET/IB : eager close from %s at fifo position %llu, not asked for, beyond the ring (%llu delivered) or "
         "behind an eager message: the peer is not this railnet version or is broken", ncclSocketToString(&comm->base.sock.addr, peer, 1),
         (unsigned long long)id, (unsigned long long)e->released);
    return ncclRemoteError;
  }
  e->closeAt = id + 1;
  NCCLCHECK(railnetIbEagerRepost(comm, q));
  return railnetIbEagerResolve(comm);
}

/* ------------------------------------------------------------------ the close */

ncclResult_t railnetIbEagerSendClose(struct ncclIbSendComm* comm, int* pollDev) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbEagerSend* e = comm->eager;
  *pollDev = -1;
  if (!railnetIbEagerSendOpen(e) || !(comm->eagerCredit.mode & RAILNET_IB_EAGER_CLOSING)) return ncclSuccess;
  /* (asked before its ring was seen: later; without a ring only on a comm with the first-message
   * box, whose receiver asks before it took one) */
  if (!railnetIbEagerRingKnown(comm) && e->firstAddr == 0) return ncclSuccess;
  struct ncclIbQp* qp = railnetIbEagerQp(base, base->fifoHead);
  if (qp == NULL) return ncclSuccess; /* no QP left: the failover code failed the comm */
  if (!railnetIbQpRoom(base, qp, 1)) { /* its completions free it */
    *pollDev = qp->devIndex;
    return ncclSuccess;
  }
  NCCLCHECK(railnetIbEagerRingWrite(base, e, qp, base->fifoHead, NULL,
                                    railnetIbEagerImm(e, base->fifoHead, RAILNET_IB_EAGER_CLOSE), 0));
  e->c.closed = 1;
  e->closeQp = (int)(qp - base->qps); /* failover: written again if lost with its QP */
  e->closePos = base->fifoHead;
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
ncclResult_t railnetIbEagerMatchHeld(struct ncclIbRecvComm* comm) {
  struct railnetIbEagerRecv* e = comm->eager;
  while (e->arrived[e->frontier % RAILNET_IB_EAGER_SLOTS] == e->frontier + 1) e->frontier++;
  for (uint64_t p = e->released > e->pendFrom ? e->released : e->pendFrom; p < e->frontier; p++) {
    int s = (int)(p % RAILNET_IB_EAGER_SLOTS);
    if (e->arrived[s] != p + 1) continue;
    struct railnetIbEagerHdr hdr;
    memcpy(&hdr, railnetIbEagerMsgAt(comm, s, p, -1, NULL), sizeof(hdr));
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
        NCCLCHECK(railnetIbEagerNicCopy(comm, r, s, w->data[i], w->mh[i], bytes, railnetIbEagerCopyDev(&comm->base, p), p));
        break;
      }
      if (bytes) memcpy(w->data[i], railnetIbEagerMsgAt(comm, s, p, -1, NULL) + HDR_BYTES, bytes);
      NCCLCHECK(railnetIbEagerRelease(comm, p));
      break;
    }
  }
  return ncclSuccess;
}

/* Once the sender's close is here with every message before it: irecvs posted without a
 * clear-to-send write theirs, and the queued irecvs, in order, take positions for the buffers
 * the held messages did not fill (none: no position), as far as fifo slots are free. */
ncclResult_t railnetIbEagerResolve(struct ncclIbRecvComm* comm) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbEagerRecv* e = comm->eager;
  if (e->closeAt == 0) return ncclSuccess;
  if (!e->c.closed) {
    uint64_t y = e->closeAt - 1, f = e->pendFrom;
    if (y > f && e->frontier < y) return ncclSuccess; /* messages before the close still coming */
    for (uint64_t p = y; p < f; p++) { /* irecvs posted without a clear-to-send: theirs now */
      struct ncclIbRequest* r = comm->recvReqs[p % RAILNET_IB_FIFO_SLOTS];
      if (r == NULL || r->type != NCCL_NET_IB_REQ_RECV || r->id != p || r->recv.lateNs == 0) continue;
      r->recv.lateNs = 0;
      NCCLCHECK(railnetIbPostCts(comm, r, (int)(p % RAILNET_IB_FIFO_SLOTS), 0));
    }
    base->fifoHead = y > f ? y : f;
    e->c.closed = 1;
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
    railnetIbSlotRecvExpect(base, slot, railnetIbChunksPerMsg(base));
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

int railnetIbEagerQueues(struct railnetIbEagerRecv* e, int n) {
  if (e == NULL) return 0;
  if (!e->c.closing) {
    if (e->c.closed) return 0; /* closed at once, before its ring: nothing is ever queued */
    if (n > 1 && e->c.buf == NULL && !e->firstOn) {
      /* no ring yet and no first-message box: no message came or comes eagerly (the sender
       * waits for one), so the close needs no exchange: the comm takes none from now on, the
       * irecv goes as any other */
      e->c.closed = 1;
      return 0;
    }
    return n > 1;
  }
  if (!e->c.closed || e->pendCount > 0) return 1;
  for (int s = 0; s < RAILNET_IB_EAGER_SLOTS; s++) /* messages from before the close still held */
    if (e->arrived[s]) return 1;
  return 0;
}

ncclResult_t railnetIbEagerQueue(struct ncclIbRecvComm* comm, struct ncclIbRequest* req, int n, void** data,
                                 size_t* sizes, int* tags, void** mhandles, int* taken) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbEagerRecv* e = comm->eager;
  *taken = 0;
  if (!e->c.closing) {
    if (e->pend == NULL) NCCLCHECK(RAILNET_CALLOC(&e->pend, RAILNET_IB_FIFO_SLOTS, "IB eager irecv queue"));
    e->c.closing = 1;
    e->pendFrom = base->fifoHead;
    e->frontier = base->fifoHead;
    e->mode |= RAILNET_IB_EAGER_CLOSING;
    NCCLCHECK(railnetIbEagerTell(comm, 0));
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
  NCCLCHECK(railnetIbEagerMatchHeld(comm));
  return railnetIbEagerResolve(comm);
}

ncclResult_t railnetIbEagerProgress(struct ncclIbRecvComm* comm) {
  struct railnetIbEagerRecv* e = comm->eager;
  if (e == NULL || !e->c.closing || e->pendCount == 0) return ncclSuccess;
  NCCLCHECK(railnetIbEagerMatchHeld(comm));
  return railnetIbEagerResolve(comm);
}
