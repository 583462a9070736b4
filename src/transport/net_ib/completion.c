/*
 * Completions of the IB data path (completion.h): what each one means for its request, and
 * the WARN with the cause and the fix when one failed.
 */
#include <endian.h>
#include <stdio.h>
#include <string.h>
#include "completion.h"
#include "devices.h"
#include "eager/eager.h"
#include "resilience/failover.h"
#include "ibvwrap.h"
#include "matching.h"
#include "prof.h"
#include "qp.h"
#include "socket.h"
#include "wrid.h"
#include "slots.h"

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
  enum railnetIbSendWr kind = railnetIbSendWrKind(wc->wr_id);
  if (flushQp && railnetIbWrIdIsEagerCopy(wc->wr_id))
    snprintf(what, sizeof(what), "NIC copy of an eager message into a GPU receive buffer");
  else if (flushQp)
    snprintf(what, sizeof(what), "GPUDirect flush read");
  else if (base->isSend && kind == RAILNET_IB_SWR_FO_READ)
    snprintf(what, sizeof(what), "RDMA read of the receiver's port failover completion records");
  else if (base->isSend && (kind == RAILNET_IB_SWR_FO_PROBE || kind == RAILNET_IB_SWR_FO_ALIVE))
    snprintf(what, sizeof(what), "port failover %s write", kind == RAILNET_IB_SWR_FO_PROBE ? "path probe" : "alive");
  else if (base->isSend && kind == RAILNET_IB_SWR_EAGER)
    snprintf(what, sizeof(what), "eager message write");
  else if (base->isSend) {
    int slot, chunk;
    unsigned ends;
    (void)railnetIbWrIdDataDecode(wc->wr_id, &slot, &chunk, &ends);
    snprintf(what, sizeof(what), "data RDMA write of fifo slot %d (chunk %d)", slot, chunk);
  } else if (wc->wr_id == RAILNET_IB_WRID_PREPOSTED)
    snprintf(what, sizeof(what), "pre-posted receive");
  else if (railnetIbSendWrKind(wc->wr_id) == RAILNET_IB_SWR_EAGER)
    snprintf(what, sizeof(what), "eager credit write");
  else
    snprintf(what, sizeof(what), "receive or clear-to-send write of fifo slot %d", railnetIbWrIdCtsSlot(wc->wr_id));
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
  railnetIbCommFail(base);
  return ncclRemoteError;
}

/* Request number id (a flush's wr_id), NULL when there is none. */
static struct ncclIbRequest* requestAt(struct ncclIbNetCommBase* base, uint64_t id) {
  if (id >= (uint64_t)base->maxReqs || base->reqChunks[id / NET_IB_REQ_CHUNK] == NULL) return NULL;
  return &base->reqChunks[id / NET_IB_REQ_CHUNK][id % NET_IB_REQ_CHUNK];
}

/* A send-side completion (wrid.h says what its wr_id carries). */
static ncclResult_t sendWc(struct ncclIbSendComm* comm, int d, const struct ibv_wc* wc) {
  struct ncclIbNetCommBase* base = &comm->base;
  int slot, chunk;
  unsigned folded; /* the eager writes a data write's completion ended */
  int plain = railnetIbWrIdDataDecode(wc->wr_id, &slot, &chunk, &folded);
  int q = railnetIbQpIndex(base, d, wc->qp_num);
  if (railnetIbSendWrKind(wc->wr_id) == RAILNET_IB_SWR_EAGER) { /* a signaled eager write: it and the unsignaled ones before it */
    if (q >= 0 && !railnetIbQpGone(base, q)) railnetIbQpRetired(&base->qps[q], (int)railnetIbWrIdEagerEnds(wc->wr_id));
    if (railnetIbWrIdIsEagerFo(wc->wr_id)) railnetIbEagerFoSent(comm, q, wc->wr_id); /* its isend is done */
    return ncclSuccess;
  }
  if (railnetIbFoSendOwnWc(base, q, wc)) return ncclSuccess; /* a probe, records read or alive write */
  if (!railnetIbSlotChunkCompleted(base, q, slot, chunk)) return ncclSuccess; /* settled by the failover */
  struct ncclIbRequest* first = slot < RAILNET_IB_FIFO_SLOTS && plain ? comm->sendReqs[slot][0] : NULL;
  if (first == NULL || first->type != NCCL_NET_IB_REQ_SEND) {
    WARN("NET/IB : send comm got a completion for slot %llu without a send request (opcode %d, qp %u)",
         (unsigned long long)wc->wr_id, wc->opcode, wc->qp_num);
    return ncclInternalError;
  }
  if (q >= 0) railnetIbQpRetired(&base->qps[q], comm->slotWrs[slot] + (int)folded); /* the slot's writes on that QP are done */
  for (int j = 0; j < first->nreqs; j++) {
    struct ncclIbRequest* r = comm->sendReqs[slot][j];
    if (r == NULL || r->events[d] <= 0) {
      WARN("NET/IB : send request %d of slot %d has no completion pending on device %d", j, slot, d);
      return ncclInternalError;
    }
    r->events[d]--;
    if (base->prof) railnetIbProfStop(base, r, wc->qp_num);
  }
  return ncclSuccess;
}

static ncclResult_t recvWc(struct ncclIbRecvComm* comm, int d, const struct ibv_wc* wc) {
  struct ncclIbNetCommBase* base = &comm->base;
  switch (wc->opcode) {
    case IBV_WC_RDMA_WRITE: /* a signaled clear-to-send write, or an eager message's NIC copy */
      if (railnetIbWrIdIsEagerCopy(wc->wr_id)) return railnetIbEagerCopied(comm, d, wc);
      if (railnetIbWrIdIsCtsRewrite(wc->wr_id)) railnetIbSlotCtsRewrite(base, -1);
      return ncclSuccess;
    case IBV_WC_RDMA_READ: { /* flush */
      struct ncclIbRequest* r = requestAt(base, wc->wr_id);
      if (r == NULL || r->type != NCCL_NET_IB_REQ_FLUSH || r->events[d] <= 0) {
        WARN("NET/IB : flush completion without a flush request (wr_id %llu)", (unsigned long long)wc->wr_id);
        return ncclInternalError;
      }
      r->events[d]--;
      return ncclSuccess;
    }
    case IBV_WC_RECV_RDMA_WITH_IMM: {
      if (comm->eager && railnetIbImmIsEager(be32toh(wc->imm_data))) return railnetIbEagerArrived(comm, d, wc);
      struct ncclIbRequest* r = NULL;
      int evDev = d;
      NCCLCHECK(railnetIbRecvMatch(comm, d, wc, &r, &evDev));
      if (r == NULL) return ncclSuccess; /* a chunk that had arrived already (failover) */
      if (r->nreqs == 1 && !base->matchById) r->recv.sizes[0] = (int)be32toh(wc->imm_data);
      r->events[evDev]--;
      if (base->prof) railnetIbProfStop(base, r, wc->qp_num);
      if (comm->eager == NULL) return ncclSuccess;
      for (int e = 0; e < NCCL_IB_MAX_DEVS_PER_NIC; e++) /* split over QPs: once, at its last chunk */
        if (r->events[e]) return ncclSuccess;
      return railnetIbEagerDelivered(comm, r->id, (size_t)r->recv.sizes[0]);
    }
    default:
      WARN("NET/IB : receive comm got an unexpected completion opcode %d (qp %u)", wc->opcode, wc->qp_num);
      return ncclInternalError;
  }
}

ncclResult_t railnetIbProcessWc(struct ncclIbNetCommBase* base, int d, const struct ibv_wc* wc) {
  if (wc->status != IBV_WC_SUCCESS) {
    struct ibv_qp* fq = base->devs[d].flushQp;
    if (base->fo && !base->isSend && fq && fq->qp_num == wc->qp_num && railnetIbWrIdIsEagerCopy(wc->wr_id))
      return railnetIbEagerFoCopyFailed((struct ncclIbRecvComm*)base, d, wc); /* made again on a device left */
    if (base->fo && !base->isSend && fq && fq->qp_num == wc->qp_num) {
      /* a flush read on a device whose port went: as NCCL, that device's share of the flush
       * is over (what arrived there arrived; the rest is replayed on the devices left) */
      struct ncclIbRequest* r = requestAt(base, wc->wr_id);
      if (r && r->type == NCCL_NET_IB_REQ_FLUSH) r->events[d] = 0;
      if (!railnetIbQpDevInUse(base, d)) return ncclSuccess;
    }
    if (base->fo && railnetIbFoTakeError(base, d, railnetIbQpIndex(base, d, wc->qp_num), wc)) return ncclSuccess;
    return reportWcError(base, d, wc);
  }
  if (base->isSend) return sendWc((struct ncclIbSendComm*)base, d, wc);
  return recvWc((struct ncclIbRecvComm*)base, d, wc);
}

ncclResult_t railnetIbPollDev(struct ncclIbNetCommBase* base, int d, int* n) {
  struct ibv_wc wcs[4];
  *n = 0;
  NCCLCHECK(wrap_ibv_poll_cq(base->devs[d].cq, 4, wcs, n));
  base->work.cqes += (uint64_t)*n;
  for (int w = 0; w < *n; w++) NCCLCHECK(railnetIbProcessWc(base, d, &wcs[w]));
  return ncclSuccess;
}
