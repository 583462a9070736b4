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
#include "devices.h"
#include "ibvwrap.h"
#include "matching.h"
#include "qp.h"
#include "reg.h"
#include "wire.h"
#include "prof.h"

#define IB_WRITE_CHUNK_ALIGNMENT 128
#define DIVUP(x, y) (((x) + (y)-1) / (y))

/* A free request (*index: its number, what a flush's wr_id carries); the requests come in
 * chunks of NET_IB_REQ_CHUNK, allocated when the ones before are all in flight. */
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

/* Request number id (a flush's wr_id), NULL when there is none. */
static struct ncclIbRequest* requestAt(struct ncclIbNetCommBase* base, uint64_t id) {
  if (id >= (uint64_t)base->maxReqs || base->reqChunks[id / NET_IB_REQ_CHUNK] == NULL) return NULL;
  return &base->reqChunks[id / NET_IB_REQ_CHUNK][id % NET_IB_REQ_CHUNK];
}

static int nqpsPerRequest(struct ncclIbNetCommBase* base) { return base->splitDataOnQps ? base->nqps : 1; }

/* The i-th QP of message id: both sides compute the same. */
static struct ncclIbQp* qpForRequest(struct ncclIbNetCommBase* base, uint64_t id, int i) {
  int per = nqpsPerRequest(base);
  return &base->qps[(id * (uint64_t)per + (uint64_t)i) % (uint64_t)base->nqps];
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
  for (int i = 0; i < base->vProps.ndevs; i++)
    NCCLCHECK(ncclIbStatsCheckFatalCount(&ncclIbDevs[base->devs[i].ibDevN].stats, func));
  return ncclSuccess;
}

/* ------------------------------------------------------------------ send */

static ncclResult_t multiSend(struct ncclIbSendComm* comm, int slot) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct ncclIbRequest** reqs = comm->sendReqs[slot];
  volatile struct ncclIbSendFifo* slots = comm->fifo[slot];
  int nreqs = comm->ctsCount;
  const struct ncclIbSendFifo* rem = comm->cts;
  /* the slot may be written again for position fifoHead + RAILNET_IB_FIFO_SLOTS */
  for (int r = 0; r < nreqs; r++) slots[r].idx = 0;
  comm->ctsCount = 0;

  int per = nqpsPerRequest(base);
  struct ibv_send_wr wrs[NCCL_NET_IB_MAX_RECVS + 1];
  struct ibv_sge sges[NCCL_NET_IB_MAX_RECVS + 1];
  size_t chunk[NCCL_NET_IB_MAX_RECVS], offset[NCCL_NET_IB_MAX_RECVS];
  for (int r = 0; r < nreqs; r++) {
    chunk[r] = DIVUP(DIVUP(reqs[r]->send.size, (size_t)per), IB_WRITE_CHUNK_ALIGNMENT) * IB_WRITE_CHUNK_ALIGNMENT;
    offset[r] = 0;
  }
  /* matched by id (matching.h): the immediate is the id, every message writes its sizes */
  int sizesRecord = nreqs > 1 || base->matchById;
  int separateImm = sizesRecord || (comm->ar && (int64_t)reqs[0]->send.size > ncclIbArThreshold);
  uint32_t imm = base->matchById ? (uint32_t)reqs[0]->id : (uint32_t)reqs[0]->send.size;
  for (int i = 0; i < per; i++) {
    struct ncclIbQp* qp = qpForRequest(base, reqs[0]->id, i);
    int d = qp->devIndex;
    memset(wrs, 0, sizeof(wrs));
    for (int r = 0; r < nreqs; r++) {
      size_t left = reqs[r]->send.size - offset[r];
      size_t len = left < chunk[r] ? left : chunk[r];
      sges[r].addr = (uintptr_t)reqs[r]->send.data + offset[r];
      sges[r].length = (uint32_t)len;
      sges[r].lkey = reqs[r]->send.lkeys[d];
      wrs[r].sg_list = &sges[r];
      wrs[r].num_sge = len ? 1 : 0;
      wrs[r].opcode = IBV_WR_RDMA_WRITE;
      wrs[r].wr.rdma.remote_addr = rem[r].addr + offset[r];
      wrs[r].wr.rdma.rkey = rem[r].rkeys[qp->remDevIndex];
      wrs[r].wr_id = (uint64_t)slot;
      wrs[r].next = &wrs[r + 1];
      offset[r] += len;
    }
    struct ibv_send_wr* last = &wrs[nreqs - 1];
    if (separateImm) {
      last = &wrs[nreqs];
      if (sizesRecord) {
        sges[nreqs].addr = (uintptr_t)comm->sizes[slot];
        sges[nreqs].length = (uint32_t)(nreqs * sizeof(int));
        sges[nreqs].lkey = base->devs[d].localMr->lkey;
        last->sg_list = &sges[nreqs];
        last->num_sge = 1;
        last->wr.rdma.remote_addr = comm->remSizesAddr + (uint64_t)slot * NCCL_NET_IB_MAX_RECVS * sizeof(int);
        last->wr.rdma.rkey = comm->remSizesRkeys[qp->remDevIndex];
      } else {
        last->wr.rdma.remote_addr = rem[0].addr;
        last->wr.rdma.rkey = rem[0].rkeys[qp->remDevIndex];
      }
    }
    last->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    last->imm_data = htobe32(imm);
    last->send_flags = IBV_SEND_SIGNALED;
    last->wr_id = (uint64_t)slot;
    last->next = NULL;
    struct ibv_send_wr* bad = NULL;
    NCCLCHECK(wrap_ibv_post_send(qp->qp, wrs, &bad));
    qp->sqPosted += comm->slotWrs[slot];
    for (int r = 0; base->prof && r < nreqs; r++)
      NCCLCHECK(railnetIbProfStart(base, reqs[r], reqs[r]->phandle, (int)(qp - base->qps), wrs[r].opcode,
                                   sges[r].length));
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
  *wrs = nreqs + (nreqs > 1 || base->matchById || (comm->ar && (int64_t)size0 > ncclIbArThreshold));
  for (int i = 0; i < nqpsPerRequest(base); i++)
    if (qpForRequest(base, base->fifoHead, i)->sqPosted + *wrs > base->sqDepth) return 0;
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
  int slot = (int)(base->fifoHead % RAILNET_IB_FIFO_SLOTS);
  if (comm->ctsCount == 0) {
    int n = 0;
    NCCLCHECK(railnetIbFifoTake(comm->fifo[slot], base->fifoHead, &base->sock.addr, comm->cts, &n));
    if (n == 0) return ncclSuccess; /* the receiver has not posted it yet */
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
  if (comm->sendReqsCnt[slot] + 1 == nreqs && !slotFits(comm, nreqs, size, &wrs)) return ncclSuccess;
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
  for (int i = 0; i < nqpsPerRequest(base); i++) req->events[qpForRequest(base, req->id, i)->devIndex]++;
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

static ncclResult_t postFifo(struct ncclIbRecvComm* comm, struct ncclIbRequest* req, int slot) {
  struct ncclIbNetCommBase* base = &comm->base;
  int nCts = base->nqps < base->vProps.ndevs ? base->nqps : base->vProps.ndevs;
  struct ncclIbQp* qp = &base->qps[req->id % (uint64_t)nCts]; /* QP d lives on device d */
  struct ibv_sge sge;
  sge.addr = (uintptr_t)comm->elems[slot];
  sge.length = (uint32_t)(req->nreqs * sizeof(struct ncclIbSendFifo));
  sge.lkey = base->devs[qp->devIndex].localMr->lkey;
  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof(wr));
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = comm->remFifoAddr + (uint64_t)slot * NCCL_NET_IB_MAX_RECVS * sizeof(struct ncclIbSendFifo);
  wr.wr.rdma.rkey = base->remDevs[qp->remDevIndex].fifoRkey;
  if (base->useInline && sge.length <= base->maxInline) wr.send_flags = IBV_SEND_INLINE;
  /* unsignaled writes stay in the send queue until a later signaled one completes: signal
   * one in RAILNET_IB_FIFO_SLOTS per QP */
  if (slot == qp->devIndex) wr.send_flags |= IBV_SEND_SIGNALED;
  wr.wr_id = (uint64_t)slot;
  struct ibv_send_wr* bad = NULL;
  return wrap_ibv_post_send(qp->qp, &wr, &bad);
}

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
  int slot = (int)(base->fifoHead % RAILNET_IB_FIFO_SLOTS);
  if (comm->recvReqs[slot] != NULL) return ncclSuccess; /* that position's request is not done yet */
  struct ncclIbRequest* req;
  NCCLCHECK(getRequest(base, &req, NULL));
  req->type = NCCL_NET_IB_REQ_RECV;
  req->id = base->fifoHead;
  req->nreqs = n;
  req->recv.sizes = comm->sizes[slot];
  memset(comm->sizes[slot], 0, sizeof(comm->sizes[slot]));
  struct ibv_recv_wr wr;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = (uint64_t)slot;
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < nqpsPerRequest(base); i++) {
    struct ncclIbQp* qp = qpForRequest(base, req->id, i);
    struct ibv_recv_wr* bad = NULL;
    if (!comm->prepost) NCCLCHECKGOTO(wrap_ibv_post_recv(qp->qp, &wr, &bad), res, fail);
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
  NCCLCHECKGOTO(postFifo(comm, req, slot), res, fail);
  comm->recvReqs[slot] = req;
  base->fifoHead++;
  *request = req;
  return ncclSuccess;
fail:
  /* receives already posted cannot be taken back: the comm is unusable now */
  base->failed = 1;
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
    struct ncclIbCommDev* cd = &base->devs[d];
    struct ibv_sge sge = {(uintptr_t)comm->flushBuf, 1, cd->flushMr->lkey};
    struct ibv_send_wr wr;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = (uint64_t)reqIndex;
    wr.wr.rdma.remote_addr = (uint64_t)(uintptr_t)data[last];
    wr.wr.rdma.rkey = mh->mrs[d]->rkey;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    struct ibv_send_wr* bad = NULL;
    ncclResult_t res = wrap_ibv_post_send(cd->flushQp, &wr, &bad);
    if (res != ncclSuccess) {
      base->failed = d > 0;
      req->type = NCCL_NET_IB_REQ_UNUSED;
      return res;
    }
    req->events[d]++;
  }
  *request = req;
  return ncclSuccess;
}

/* ------------------------------------------------------------------ test */

static const char* portStateName(enum ibv_port_state st) {
  switch (st) {
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return "in an unknown state";
  }
}

static const char* wcStatusHint(enum ibv_wc_status s) {
  switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
      return "the peer did not acknowledge within NCCL_IB_TIMEOUT x NCCL_IB_RETRY_CNT: the link or the peer is "
             "down, or the peer process died. Check the port state (ibstat / ibv_devinfo), the cabling and the peer's "
             "log; on a congested or lossy fabric raise NCCL_IB_TIMEOUT";
    case IBV_WC_REM_ACCESS_ERR:
      return "the peer refused the RDMA access: its buffer is not (or no longer) covered by its registration, or "
             "the rkey it announced is stale (a memory registration mismatch, or a buffer deregistered while in use)";
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_LOC_ACCESS_ERR:
      return "the local buffer is not covered by the memory handle passed with it (regMr of another buffer, or "
             "deregistered while in use)";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "the receiver had no receive posted (receiver not ready) for longer than the RNR retries allow: the "
             "peer stopped posting receives or its process is hung";
    case IBV_WC_LOC_QP_OP_ERR:
      return "the local NIC could not execute the work request: on RoCE the port's link went down (soft-RoCE "
             "fails every posted request at once then); check the port state (ibv_devinfo, ip link) and the cable. "
             "Otherwise the queue pair was misconfigured";
    case IBV_WC_WR_FLUSH_ERR:
      return "the queue pair had already failed: this request was flushed; the first error above is the cause";
    case IBV_WC_REM_INV_REQ_ERR:
    case IBV_WC_REM_OP_ERR:
      return "the peer's NIC rejected the request (its queue pair is in error or was destroyed: peer closed or died)";
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_REM_ABORT_ERR:
      return "a message did not fit the posted buffer or was aborted: the two sides disagree on sizes";
    default:
      return NULL;
  }
}

static ncclResult_t reportWcError(struct ncclIbNetCommBase* base, int d, const struct ibv_wc* wc) {
  struct ncclIbDev* dev = &ncclIbDevs[base->devs[d].ibDevN];
  char peer[SOCKET_NAME_MAXLEN], lg[INET6_ADDRSTRLEN] = "", rg[INET6_ADDRSTRLEN] = "";
  ibvGetGidStr(&base->devs[d].gid, lg, sizeof(lg));
  /* ibv_wc.opcode is undefined on an error completion: say which work request failed from
   * what this comm posts on that QP and what wr_id carries */
  char what[96];
  int flushQp = base->devs[d].flushQp && base->devs[d].flushQp->qp_num == wc->qp_num; /* QPNs: per device */
  int rd = 0;
  for (int q = 0; q < base->nqps; q++)
    if (base->qps[q].devIndex == d && base->qps[q].qp && base->qps[q].qp->qp_num == wc->qp_num)
      rd = base->qps[q].remDevIndex;
  if (flushQp)
    snprintf(rg, sizeof(rg), "%s", lg); /* connected to itself */
  else
    ibvGetGidStr(&base->remDevs[rd].gid, rg, sizeof(rg));
  if (flushQp)
    snprintf(what, sizeof(what), "GPUDirect flush read");
  else if (base->isSend)
    snprintf(what, sizeof(what), "data RDMA write of fifo slot %llu", (unsigned long long)wc->wr_id);
  else
    snprintf(what, sizeof(what), "receive or clear-to-send write of fifo slot %llu", (unsigned long long)wc->wr_id);
  WARN("NET/IB : Got completion from peer %s with status=%s(%d) vendor_err=%u for the %s on qp_num=%u of %s:%d "
       "(%s comm, localGid %s remoteGid %s)",
       railnetIbPeerStr(base, peer), wrap_ibv_wc_status_str(wc->status), wc->status, wc->vendor_err, what,
       wc->qp_num, dev->devName, dev->portNum, base->isSend ? "send" : "receive", lg, rg);
  const char* hint = wcStatusHint(wc->status);
  /* a port that is not active now is the likeliest cause, whatever the status */
  struct ibv_port_attr pa;
  memset(&pa, 0, sizeof(pa));
  if (wrap_ibv_query_port(dev->context, dev->portNum, &pa) == ncclSuccess && pa.state != IBV_PORT_ACTIVE)
    WARN("NET/IB : HINT: port %s:%d is %s now (its link went down): check the cable, the switch port and `ip link` "
         "/ ibv_devinfo on this host; NCCL cannot use this NIC until the port is ACTIVE again",
         dev->devName, dev->portNum, portStateName(pa.state));
  if (hint) WARN("NET/IB : HINT: %s", hint);
  base->failed = 1;
  return ncclRemoteError;
}

static ncclResult_t processWc(struct ncclIbNetCommBase* base, int d, const struct ibv_wc* wc) {
  if (wc->status != IBV_WC_SUCCESS) return reportWcError(base, d, wc);
  uint64_t id = wc->wr_id;
  if (base->isSend) {
    struct ncclIbSendComm* comm = (struct ncclIbSendComm*)base;
    struct ncclIbRequest* first = id < RAILNET_IB_FIFO_SLOTS ? comm->sendReqs[id][0] : NULL;
    if (first == NULL || first->type != NCCL_NET_IB_REQ_SEND) {
      WARN("NET/IB : send comm got a completion for slot %llu without a send request (opcode %d, qp %u)",
           (unsigned long long)id, wc->opcode, wc->qp_num);
      return ncclInternalError;
    }
    for (int q = 0; q < base->nqps; q++) /* the slot's writes on that QP are done */
      if (base->qps[q].devIndex == d && base->qps[q].qp->qp_num == wc->qp_num) base->qps[q].sqPosted -= comm->slotWrs[id];
    for (int j = 0; j < first->nreqs; j++) {
      struct ncclIbRequest* r = comm->sendReqs[id][j];
      if (r == NULL || r->events[d] <= 0) {
        WARN("NET/IB : send request %d of slot %llu has no completion pending on device %d", j,
             (unsigned long long)id, d);
        return ncclInternalError;
      }
      r->events[d]--;
      if (base->prof) railnetIbProfStop(base, r, wc->qp_num);
    }
    return ncclSuccess;
  }
  struct ncclIbRecvComm* comm = (struct ncclIbRecvComm*)base;
  switch (wc->opcode) {
    case IBV_WC_RDMA_WRITE: /* a signaled clear-to-send write */
      return ncclSuccess;
    case IBV_WC_RDMA_READ: { /* flush */
      struct ncclIbRequest* r = requestAt(base, id);
      if (r == NULL || r->type != NCCL_NET_IB_REQ_FLUSH || r->events[d] <= 0) {
        WARN("NET/IB : flush completion without a flush request (wr_id %llu)", (unsigned long long)id);
        return ncclInternalError;
      }
      r->events[d]--;
      return ncclSuccess;
    }
    case IBV_WC_RECV_RDMA_WITH_IMM: {
      struct ncclIbRequest* r = NULL;
      NCCLCHECK(railnetIbRecvMatch(comm, d, wc, &r));
      if (r->nreqs == 1 && !base->matchById) r->recv.sizes[0] = (int)be32toh(wc->imm_data);
      r->events[d]--;
      if (base->prof) railnetIbProfStop(base, r, wc->qp_num);
      return ncclSuccess;
    }
    default:
      WARN("NET/IB : receive comm got an unexpected completion opcode %d (qp %u)", wc->opcode, wc->qp_num);
      return ncclInternalError;
  }
}

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
  for (;;) {
    if (requestDone(r)) {
      int slot = (int)(r->id % RAILNET_IB_FIFO_SLOTS);
      if (r->type == NCCL_NET_IB_REQ_RECV) {
        ncclResult_t ok = railnetIbCheckRecvSizes(r->recv.posted, r->recv.sizes, r->nreqs, &base->sock.addr);
        if (ok != ncclSuccess) {
          ((struct ncclIbRecvComm*)base)->recvReqs[slot] = NULL;
          r->type = NCCL_NET_IB_REQ_UNUSED;
          base->failed = 1;
          return ok;
        }
        *done = 1;
        if (sizes)
          for (int i = 0; i < r->nreqs; i++) sizes[i] = r->recv.sizes[i];
        ((struct ncclIbRecvComm*)base)->recvReqs[slot] = NULL;
      } else if (r->type == NCCL_NET_IB_REQ_SEND) {
        *done = 1;
        if (sizes) sizes[0] = (int)r->send.size;
        struct ncclIbSendComm* sc = (struct ncclIbSendComm*)base;
        if (--sc->sendReqsCnt[slot] == 0) memset(sc->sendReqs[slot], 0, sizeof(sc->sendReqs[slot]));
      }
      *done = 1;
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
    for (int d = 0; d < base->vProps.ndevs; d++)
      NCCLCHECK(ncclIbStatsCheckFatalCount(&ncclIbDevs[base->devs[d].ibDevN].stats, "test"));
    int polled = 0;
    for (int d = 0; d < base->vProps.ndevs; d++) {
      if (r->events[d] == 0) continue;
      struct ibv_wc wcs[4];
      int n = 0;
      NCCLCHECK(wrap_ibv_poll_cq(base->devs[d].cq, 4, wcs, &n));
      polled += n;
      for (int w = 0; w < n; w++) NCCLCHECK(processWc(base, d, &wcs[w]));
    }
    if (polled == 0) return ncclSuccess;
  }
}
