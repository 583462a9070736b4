/*
 * IB data path (NCCL's net_ib/p2p.cc): isend, irecv, iflush, test.
 *
 * The receiver announces each receive by RDMA-writing clear-to-send entries (address, rkey
 * per device, size, tag, fifo position + 1) into slot fifoHead % RAILNET_IB_FIFO_SLOTS of the
 * sender's fifo, after posting one receive work request per QP the message will use. The
 * sender's isend waits for that slot, matches its tag (a multi-receive has up to 8 entries;
 * the writes go out when every one of them has its isend), and RDMA-writes the data; the
 * last write of each QP carries an immediate: the size for a single receive; for a
 * multi-receive an extra write puts the sizes into the receiver's records. Messages above
 * NCCL_IB_AR_THRESHOLD on adaptive-routing devices are plain writes followed by a 0-byte
 * write with immediate. With NCCL_IB_SPLIT_DATA_ON_QPS=1 every message is cut across all
 * QPs (128-byte aligned chunks); otherwise message k uses QP k % nqps.
 */
#include <endian.h>
#include <stdio.h>
#include <string.h>
#include "p2p.h"
#include "comm.h"
#include "completion.h"
#include "devices.h"
#include "eager/eager.h"
#include "resilience/failover.h"
#include "liveness.h"
#include "ibvwrap.h"
#include "matching.h"
#include "post.h"
#include "progress.h"
#include "qp.h"
#include "reg.h"
#include "wire.h"
#include "prof.h"
#include "slots.h"
#include "records.h"


/* A free request (*index: its number, what a flush's wr_id carries); the requests come in
 * chunks of NET_IB_REQ_CHUNK, the first in the comm, the next allocated when the ones before
 * are all in flight. */
static ncclResult_t getRequest(struct ncclIbNetCommBase* base, struct ncclIbRequest** out, int* index) {
  *out = NULL;
  for (int c = 0; c < base->maxReqs / NET_IB_REQ_CHUNK; c++) {
    if (base->reqChunks[c] == NULL) NCCLCHECK(RAILNET_CALLOC(&base->reqChunks[c], NET_IB_REQ_CHUNK, "IB requests"));
    for (int i = 0; i < NET_IB_REQ_CHUNK; i++) {
      struct ncclIbRequest* r = &base->reqChunks[c][i];
      if (r->type != NCCL_NET_IB_REQ_UNUSED) continue;
      memset(r, 0, sizeof(*r));
      r->base = base;
      *out = r;
      if (index) *index = c * NET_IB_REQ_CHUNK + i;
      return ncclSuccess;
    }
  }
  WARN("NET/IB : unable to allocate requests: %d in flight on one comm", base->maxReqs);
  return ncclInternalError;
}

static ncclResult_t checkComm(struct ncclIbNetCommBase* base, const char* func) {
  if (base == NULL) return ncclInvalidArgument;
  if (!base->ready) {
    WARN("NET/IB: %s() called on a comm that is not connected", func);
    return ncclInternalError;
  }
  if (base->failed) {
    char peer[SOCKET_NAME_MAXLEN];
    WARN("NET/IB: %s() on a comm with %s that already saw an error completion", func, railnetIbPeerStr(base, peer));
    return ncclRemoteError;
  }
  NCCLCHECK(railnetIbDevicesCheck(base, func));
  if (base->fo) NCCLCHECK(railnetIbFoProgress(base));
  return railnetIbPeerCheck(base, func);
}

/* ------------------------------------------------------------------ send */

static ncclResult_t multiSend(struct ncclIbSendComm* comm, int slot) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct ncclIbRequest** reqs = comm->sendReqs[slot];
  volatile struct ncclIbSendFifo* slots = comm->fifo[slot];
  int nreqs = comm->ctsCount;
  const struct ncclIbSendFifo* rem = comm->cts;
  rem = railnetIbSlotKeepCts(base, slot, rem, nreqs); /* failover: a replay writes to the same entries */
  /* the slot may be written again for position fifoHead + RAILNET_IB_FIFO_SLOTS */
  for (int r = 0; r < nreqs; r++) slots[r].idx = 0;
  comm->ctsCount = 0;
  /* each isend of a multi-receive counted its completions on the QPs of its time; a failover
   * since may have moved them: count them again on the QPs the writes go to now */
  for (int j = 0; j < nreqs; j++)
    if (reqs[j]) memset(reqs[j]->events, 0, sizeof(reqs[j]->events));
  for (int i = 0; i < railnetIbChunksPerMsg(base); i++) {
    struct ncclIbQp* qp = railnetIbChunkQp(base, reqs[0]->id, i);
    if (qp == NULL) {
      railnetIbCommFail(base);
      return ncclRemoteError;
    }
    for (int j = 0; j < nreqs; j++)
      if (reqs[j]) reqs[j]->events[qp->devIndex]++;
    railnetIbSlotChunkPosted(base, slot, i, (int)(qp - base->qps));
    NCCLCHECK(railnetIbPostChunk(comm, slot, i, qp, rem));
  }
  return ncclSuccess;
}

/* The work requests per QP the writes of the current slot take (multiSend's: a write per
 * buffer, and a separate write with immediate for a multi-receive, a comm matched by id or
 * an adaptive-routing message), and whether every QP they go to has room for them now. */
static int slotFits(struct ncclIbSendComm* comm, int nreqs, size_t lastSize, int* wrs) {
  struct ncclIbNetCommBase* base = &comm->base;
  size_t size0 = nreqs == 1 ? lastSize : 0;
  /* as multiSend decides: a sizes record (a multi-receive, or matching by id) or adaptive routing */
  *wrs = nreqs + (nreqs > 1 || base->matchById || (comm->ar && (int64_t)size0 > ncclIbArThreshold)) +
         railnetIbRecordsOn(base);
  for (int i = 0; i < railnetIbChunksPerMsg(base); i++) {
    struct ncclIbQp* qp = railnetIbChunkQp(base, base->fifoHead, i);
    if (qp == NULL || !railnetIbQpRoom(base, qp, *wrs)) return 0;
  }
  return 1;
}

ncclResult_t ncclIbIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                         void** request) {
  struct ncclIbSendComm* comm = (struct ncclIbSendComm*)sendComm;
  if (request == NULL) return ncclInvalidArgument;
  *request = NULL;
  NCCLCHECK(checkComm(&comm->base, "isend"));
  struct ncclIbNetCommBase* base = &comm->base;
  struct ncclIbMrHandle* mh = (struct ncclIbMrHandle*)mhandle;
  if (mh == NULL || mh->ndevs != base->vProps.ndevs) {
    WARN("NET/IB : isend of %zu bytes without a memory handle of this comm's %d device(s)", size, base->vProps.ndevs);
    return ncclInvalidArgument;
  }
  if (size > RAILNET_IB_MAX_MSG_BYTES) {
    WARN("NET/IB : isend of %zu bytes: more than the %llu bytes one message can carry (the properties' "
         "maxP2pBytes, which NCCL honours): split it into messages of at most that size", size,
         (unsigned long long)RAILNET_IB_MAX_MSG_BYTES);
    return ncclInvalidArgument;
  }
  if (railnetIbFoBusy(base)) return ncclSuccess; /* failing over: later */
  if (railnetIbEagerSendOpen(comm->eager)) { /* the receiver may have asked to close (eager.h) */
    int d = -1, n = 0;
    NCCLCHECK(railnetIbEagerSendClose(comm, &d));
    if (d >= 0) return railnetIbPollDev(base, d, &n); /* its send queue is full: later */
  }
  int eager = comm->eager ? railnetIbEagerCanSend(comm, size, mh->type) : 0;
  if (eager == RAILNET_IB_EAGER_BAD_CREDIT) {
    char peer[SOCKET_NAME_MAXLEN];
    WARN("NET/IB : %s reports more eager positions delivered (%llu) than were sent (%llu): not a railnet peer, or "
         "a broken one", railnetIbPeerStr(base, peer), (unsigned long long)comm->eagerCredit.released,
         (unsigned long long)base->fifoHead);
    railnetIbCommFail(base);
    return ncclRemoteError;
  }
  if (eager < 0) { /* the signaled eager writes' completions end the writes before them, or fail */
    int n = 0;
    NCCLCHECK(railnetIbPollDev(base, -1 - eager, &n));
    eager = railnetIbEagerCanSend(comm, size, mh->type);
  }
  if (eager > 0) { /* eager.h: no clear-to-send waited for */
    struct ncclIbRequest* req;
    NCCLCHECK(getRequest(base, &req, NULL));
    NCCLCHECK(railnetIbEagerSend(comm, req, data, size, tag, phandle));
    *request = req;
    return ncclSuccess;
  }
  int slot = (int)(base->fifoHead % RAILNET_IB_FIFO_SLOTS);
  if (comm->ctsCount == 0) {
    int n = 0;
    NCCLCHECK(railnetIbFifoTake(comm->fifo[slot], base->fifoHead, &base->sock.addr, comm->cts, &n));
    if (n == 0) { /* the receiver has not posted it yet, or (eager.h, lazy) posted it without one */
      int d = -1, n = 0;
      if (comm->eager) NCCLCHECK(railnetIbEagerRts(comm, size, mh->type, &d));
      if (d >= 0) NCCLCHECK(railnetIbPollDev(base, d, &n));
      if (d >= 0) NCCLCHECK(railnetIbEagerRts(comm, size, mh->type, &d));
      return ncclSuccess;
    }
    comm->ctsCount = n;
  }
  int nreqs = comm->ctsCount;
  int taken[NCCL_NET_IB_MAX_RECVS];
  for (int r = 0; r < NCCL_NET_IB_MAX_RECVS; r++) taken[r] = comm->sendReqs[slot][r] != NULL;
  int r = -1;
  NCCLCHECK(railnetIbFifoMatch(comm->cts, nreqs, taken, base->nRemDevs, size, tag, &base->sock.addr, &r));
  if (r < 0) return ncclSuccess; /* no entry with this tag: later */
  int wrs = 0;
  /* the last isend of a slot posts its writes: not before the send queues have room */
  if (comm->sendReqsCnt[slot] + 1 == nreqs && !slotFits(comm, nreqs, size, &wrs)) {
    /* with eager messages the send queue may hold writes whose requests are done: poll */
    for (int i = 0; comm->eager && i < railnetIbChunksPerMsg(base); i++) {
      int n = 0;
      NCCLCHECK(railnetIbPollDev(base, railnetIbMsgQp(base, base->fifoHead, i)->devIndex, &n));
    }
    return ncclSuccess;
  }
  comm->slotWrs[slot] = (uint8_t)wrs;
  struct ncclIbRequest* req;
  NCCLCHECK(getRequest(base, &req, NULL));
  req->type = NCCL_NET_IB_REQ_SEND;
  req->id = base->fifoHead;
  req->nreqs = nreqs;
  req->send.size = size;
  req->send.data = data;
  req->phandle = phandle;
  for (int d = 0; d < base->vProps.ndevs; d++) req->send.lkeys[d] = mh->mrs[d]->lkey;
  for (int i = 0; i < railnetIbChunksPerMsg(base); i++) {
    struct ncclIbQp* qp = railnetIbChunkQp(base, req->id, i);
    if (qp) req->events[qp->devIndex]++;
  }
  comm->sizes[slot][r] = (int)size;
  comm->sendReqs[slot][r] = req;
  comm->sendReqsCnt[slot]++;
  *request = req;
  if (comm->sendReqsCnt[slot] < nreqs) return ncclSuccess; /* a multi-receive: wait for the others */
  NCCLCHECK(multiSend(comm, slot));
  base->fifoHead++;
  return ncclSuccess;
}

/* ------------------------------------------------------------------ receive */

ncclResult_t ncclIbIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                         void** phandles, void** request) {
  struct ncclIbRecvComm* comm = (struct ncclIbRecvComm*)recvComm;
  if (request == NULL) return ncclInvalidArgument;
  *request = NULL;
  NCCLCHECK(checkComm(&comm->base, "irecv"));
  struct ncclIbNetCommBase* base = &comm->base;
  if (n < 1 || n > NCCL_NET_IB_MAX_RECVS) {
    WARN("NET/IB : irecv of %d buffers; maxRecvs is %d", n, NCCL_NET_IB_MAX_RECVS);
    return ncclInvalidArgument;
  }
  for (int i = 0; i < n; i++) {
    struct ncclIbMrHandle* mh = (struct ncclIbMrHandle*)mhandles[i];
    if (mh == NULL || mh->ndevs != base->vProps.ndevs) {
      WARN("NET/IB : irecv buffer %d (%zu bytes) without a memory handle of this comm's %d device(s)", i, sizes[i],
           base->vProps.ndevs);
      return ncclInvalidArgument;
    }
  }
  if (railnetIbEagerQueues(comm->eager, n)) { /* a multi-receive closes eager messages (eager.h) */
    if (!railnetIbEagerQueueRoom(comm)) return ncclSuccess; /* NCCL's limit in flight: later */
    struct ncclIbRequest* req;
    int taken = 0;
    NCCLCHECK(getRequest(base, &req, NULL));
    req->type = NCCL_NET_IB_REQ_RECV;
    for (int i = 0; i < n; i++) req->recv.posted[i] = sizes[i];
    ncclResult_t res = railnetIbEagerQueue(comm, req, n, data, sizes, tags, mhandles, &taken);
    if (res != ncclSuccess) railnetIbCommFail(base);
    if (res != ncclSuccess || !taken) req->type = NCCL_NET_IB_REQ_UNUSED;
    if (res == ncclSuccess && taken) *request = req;
    return res;
  }
  int slot = (int)(base->fifoHead % RAILNET_IB_FIFO_SLOTS);
  if (comm->recvReqs[slot] != NULL) return ncclSuccess; /* that position's request is not done yet */
  struct ncclIbRequest* req;
  NCCLCHECK(getRequest(base, &req, NULL));
  req->type = NCCL_NET_IB_REQ_RECV;
  ncclResult_t res = ncclSuccess;
  req->id = base->fifoHead;
  req->nreqs = n;
  req->recv.sizes = comm->sizes[slot];
  memset(comm->sizes[slot], 0, sizeof(comm->sizes[slot]));
  struct ibv_recv_wr wr;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = railnetIbWrIdRecvSlot(slot);
  for (int i = 0; i < railnetIbChunksPerMsg(base); i++) {
    struct ncclIbQp* qp = railnetIbMsgQp(base, req->id, i); /* failover: events counted where meant */
    struct ibv_recv_wr* bad = NULL;
    if (!comm->prepost) {
      NCCLCHECKGOTO(wrap_ibv_post_recv(qp->qp, &wr, &bad), res, fail);
      base->work.wrs++;
    }
    req->events[qp->devIndex]++;
    for (int r = 0; base->prof && phandles && !comm->prepost && r < n; r++)
      NCCLCHECKGOTO(railnetIbProfStart(base, req, phandles[r], (int)(qp - base->qps), IBV_WC_RECV, 0), res, fail);
  }
  struct ncclIbSendFifo* elems = comm->elems[slot];
  for (int i = 0; i < n; i++) {
    struct ncclIbMrHandle* mh = (struct ncclIbMrHandle*)mhandles[i];
    memset(&elems[i], 0, sizeof(elems[i]));
    elems[i].addr = (uint64_t)(uintptr_t)data[i];
    for (int d = 0; d < base->vProps.ndevs; d++) elems[i].rkeys[d] = mh->mrs[d]->rkey;
    elems[i].nreqs = (uint32_t)n;
    elems[i].size = sizes[i];
    req->recv.posted[i] = sizes[i];
    elems[i].tag = (uint32_t)tags[i];
    elems[i].idx = base->fifoHead + 1;
  }
  railnetIbSlotRecvExpect(base, slot, railnetIbChunksPerMsg(base));
  int cts = 1;
  if (railnetIbEagerRecvOpen(comm->eager)) NCCLCHECKGOTO(railnetIbEagerRecvPosted(comm, req, data[0], sizes[0], (struct ncclIbMrHandle*)mhandles[0], &cts), res, fail);
  if (cts) NCCLCHECKGOTO(railnetIbPostCts(comm, req, slot, 0), res, fail);
  comm->recvReqs[slot] = req;
  base->fifoHead++;
  *request = req;
  return ncclSuccess;
fail:
  /* receives already posted cannot be taken back: the comm is unusable now */
  railnetIbCommFail(base);
  req->type = NCCL_NET_IB_REQ_UNUSED;
  return res;
}

ncclResult_t ncclIbIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  struct ncclIbRecvComm* comm = (struct ncclIbRecvComm*)recvComm;
  if (request == NULL) return ncclInvalidArgument;
  *request = NULL;
  NCCLCHECK(checkComm(&comm->base, "iflush"));
  int last = -1;
  for (int i = 0; i < n; i++)
    if (sizes[i]) last = i;
  if (!comm->flushEnabled || last == -1) return ncclSuccess;
  struct ncclIbNetCommBase* base = &comm->base;
  struct ncclIbMrHandle* mh = (struct ncclIbMrHandle*)mhandles[last];
  if (mh == NULL || mh->ndevs != base->vProps.ndevs) {
    WARN("NET/IB : iflush without a memory handle of this comm's %d device(s)", base->vProps.ndevs);
    return ncclInvalidArgument;
  }
  struct ncclIbRequest* req;
  int reqIndex = 0;
  NCCLCHECK(getRequest(base, &req, &reqIndex));
  req->type = NCCL_NET_IB_REQ_FLUSH;
  for (int d = 0; d < base->vProps.ndevs; d++) {
    if (!railnetIbQpDevInUse(base, d)) continue; /* failed over: its port is gone */
    struct ncclIbCommDev* cd = &base->devs[d];
    struct ibv_sge sge = {(uintptr_t)comm->flushBuf, 1, cd->flushMr->lkey};
    struct ibv_send_wr wr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = railnetIbWrIdFlush(reqIndex);
    wr.wr.rdma.remote_addr = (uint64_t)(uintptr_t)data[last];
    wr.wr.rdma.rkey = mh->mrs[d]->rkey;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    struct ibv_send_wr* bad = NULL;
    ncclResult_t res = wrap_ibv_post_send(cd->flushQp, &wr, &bad);
    if (res != ncclSuccess) {
      if (d > 0) railnetIbCommFail(base);
      req->type = NCCL_NET_IB_REQ_UNUSED;
      return res;
    }
    req->events[d]++;
    base->work.wrs++;
  }
  *request = req;
  return ncclSuccess;
}

/* ------------------------------------------------------------------ test */

static int requestDone(const struct ncclIbRequest* r) {
  for (int d = 0; d < NCCL_IB_MAX_DEVS_PER_NIC; d++)
    if (r->events[d]) return 0;
  return 1;
}

ncclResult_t ncclIbTest(void* request, int* done, int* sizes) {
  struct ncclIbRequest* r = (struct ncclIbRequest*)request;
  if (r == NULL || done == NULL) return ncclInvalidArgument;
  *done = 0;
  struct ncclIbNetCommBase* base = r->base;
  if (r->type == NCCL_NET_IB_REQ_UNUSED) {
    WARN("NET/IB : test() of a request that is not in flight (completed, failed or never posted)");
    return ncclInvalidUsage;
  }
  if (r->type == NCCL_NET_IB_REQ_EAGER) { /* done when posted; a failed earlier write shows here */
    int n = 0;
    NCCLCHECK(railnetIbPollDev(base, railnetIbMsgQp(base, r->id, 0)->devIndex, &n));
  }
  for (;;) {
    if (requestDone(r)) {
      int slot = (int)(r->id % RAILNET_IB_FIFO_SLOTS);
      if (r->type == NCCL_NET_IB_REQ_RECV) {
        const int* got = r->recv.sizes;
        int nbuf = r->nreqs;
        if (r->recv.nbuf) { /* some buffers were filled before the close (eager.h): in their order */
          for (int j = 0; j < r->nreqs; j++) r->recv.own[r->recv.map[j]] = r->recv.sizes[j];
          got = r->recv.own;
          nbuf = r->recv.nbuf;
        }
        struct ncclIbRecvComm* rcomm = (struct ncclIbRecvComm*)base;
        if (r->nreqs) rcomm->recvReqs[slot] = NULL; /* (none: it took no position) */
        ncclResult_t ok = railnetIbCheckRecvSizes(r->recv.posted, got, nbuf, &base->sock.addr);
        if (ok != ncclSuccess) {
          r->type = NCCL_NET_IB_REQ_UNUSED;
          railnetIbCommFail(base);
          return ok;
        }
        *done = 1;
        if (sizes)
          for (int i = 0; i < nbuf; i++) sizes[i] = got[i];
      } else if (r->type == NCCL_NET_IB_REQ_SEND) {
        *done = 1;
        if (sizes) sizes[0] = (int)r->send.size;
        struct ncclIbSendComm* sc = (struct ncclIbSendComm*)base;
        if (--sc->sendReqsCnt[slot] == 0) memset(sc->sendReqs[slot], 0, sizeof(sc->sendReqs[slot]));
      } else if (r->type == NCCL_NET_IB_REQ_EAGER) {
        if (sizes) sizes[0] = (int)r->send.size;
      }
      *done = 1;
      if (r->type != NCCL_NET_IB_REQ_FLUSH) base->work.msgs++;
      if (base->prof) railnetIbProfStop(base, r, -1);
      r->type = NCCL_NET_IB_REQ_UNUSED;
      return ncclSuccess;
    }
    if (base->failed) {
      char peer[SOCKET_NAME_MAXLEN];
      WARN("NET/IB : request on the comm with %s failed: the comm saw an error completion (above)",
           railnetIbPeerStr(base, peer));
      return ncclRemoteError;
    }
    int polled = 0;
    NCCLCHECK(railnetIbProgress(base, r, &polled));
    if (polled == 0) return railnetIbPeerCheck(base, "test");
  }
}
