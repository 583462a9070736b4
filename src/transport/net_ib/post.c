/*
 * The IB data path's work requests (post.h).
 */
#include <endian.h>
#include <string.h>
#include "post.h"
#include "devices.h"
#include "eager/eager.h"
#include "resilience/failover.h"
#include "ibvwrap.h"
#include "prof.h"
#include "qp.h"
#include "wrid.h"
#include "slots.h"
#include "records.h"

#define IB_WRITE_CHUNK_ALIGNMENT 128
#define DIVUP(x, y) (((x) + (y)-1) / (y))

int railnetIbChunksPerMsg(struct ncclIbNetCommBase* base) { return base->splitDataOnQps ? base->nqps : 1; }

struct ncclIbQp* railnetIbMsgQp(struct ncclIbNetCommBase* base, uint64_t id, int i) {
  int per = railnetIbChunksPerMsg(base);
  return &base->qps[(id * (uint64_t)per + (uint64_t)i) % (uint64_t)base->nqps];
}

struct ncclIbQp* railnetIbChunkQp(struct ncclIbNetCommBase* base, uint64_t id, int i) {
  return railnetIbQpLive(base, railnetIbMsgQp(base, id, i));
}

ncclResult_t railnetIbPostChunk(struct ncclIbSendComm* comm, int slot, int i, struct ncclIbQp* qp,
                                const struct ncclIbSendFifo* rem) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct ncclIbRequest** reqs = comm->sendReqs[slot];
  int nreqs = reqs[0]->nreqs;
  int per = railnetIbChunksPerMsg(base);
  int d = qp->devIndex;
  struct ibv_send_wr wrs[NCCL_NET_IB_MAX_RECVS + 2];
  struct ibv_sge sges[NCCL_NET_IB_MAX_RECVS + 2];
  memset(wrs, 0, sizeof(wrs));
  for (int r = 0; r < nreqs; r++) {
    size_t size = reqs[r]->send.size;
    size_t chunk = DIVUP(DIVUP(size, (size_t)per), IB_WRITE_CHUNK_ALIGNMENT) * IB_WRITE_CHUNK_ALIGNMENT;
    size_t offset = (size_t)i * chunk < size ? (size_t)i * chunk : size;
    size_t len = size - offset < chunk ? size - offset : chunk;
    sges[r].addr = (uintptr_t)reqs[r]->send.data + offset;
    sges[r].length = (uint32_t)len;
    sges[r].lkey = reqs[r]->send.lkeys[d];
    wrs[r].sg_list = &sges[r];
    wrs[r].num_sge = len ? 1 : 0;
    wrs[r].opcode = IBV_WR_RDMA_WRITE;
    wrs[r].wr.rdma.remote_addr = rem[r].addr + offset;
    wrs[r].wr.rdma.rkey = rem[r].rkeys[qp->remDevIndex];
    wrs[r].wr_id = railnetIbWrIdData(slot, i, 0);
    wrs[r].next = &wrs[r + 1];
  }
  /* matched by id (matching.h): the immediate is the id, every message writes its sizes */
  int sizesRecord = nreqs > 1 || base->matchById;
  int separateImm = sizesRecord || (comm->ar && (int64_t)reqs[0]->send.size > ncclIbArThreshold);
  uint32_t imm = base->fo          ? railnetIbImmFo(reqs[0]->id, i)
                 : base->matchById ? railnetIbImmById(reqs[0]->id, comm->eager != NULL)
                                   : (uint32_t)reqs[0]->send.size;
  struct ibv_send_wr* last = &wrs[nreqs - 1];
  int nwrs = separateImm ? nreqs + 1 : nreqs;
  if (separateImm) {
    last = &wrs[nreqs];
    last->wr_id = railnetIbWrIdData(slot, i, 0);
    if (sizesRecord) {
      sges[nreqs].addr = (uintptr_t)comm->sizes[slot];
      sges[nreqs].length = (uint32_t)(nreqs * sizeof(int));
      sges[nreqs].lkey = base->ctrl.mrs[d]->lkey;
      last->sg_list = &sges[nreqs];
      last->num_sge = 1;
      last->wr.rdma.remote_addr = comm->remSizesAddr + (uint64_t)slot * NCCL_NET_IB_MAX_RECVS * sizeof(int);
      last->wr.rdma.rkey = comm->remSizesRkeys[qp->remDevIndex];
    } else {
      last->wr.rdma.remote_addr = rem[0].addr;
      last->wr.rdma.rkey = rem[0].rkeys[qp->remDevIndex];
    }
  }
  if (railnetIbRecordsOn(base)) { /* records.h: the chunk's completion record comes last */
    last->next = &wrs[nwrs];
    last = &wrs[nwrs];
    railnetIbRecordWr(base, slot, i, reqs[0]->id, qp, last, &sges[nwrs]);
    nwrs++;
  }
  last->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  last->imm_data = htobe32(imm);
  last->send_flags = IBV_SEND_SIGNALED;
  /* its completion also ends the unsignaled eager writes before it on this QP (eager.h): their
   * number rides in its wr_id, per QP (split over QPs, each chunk's QP has its own) */
  last->wr_id = railnetIbWrIdData(slot, i, (unsigned)qp->eagerUnsig);
  last->next = NULL;
  struct ibv_send_wr* bad = NULL;
  NCCLCHECK(wrap_ibv_post_send(qp->qp, wrs, &bad));
  base->work.wrs += (uint64_t)nwrs;
  railnetIbQpPosted(qp, comm->slotWrs[slot]);
  qp->eagerUnsig = 0;
  for (int r = 0; base->prof && r < nreqs; r++)
    NCCLCHECK(railnetIbProfStart(base, reqs[r], reqs[r]->phandle, (int)(qp - base->qps), wrs[r].opcode,
                                 sges[r].length));
  return ncclSuccess;
}

ncclResult_t railnetIbPostCts(struct ncclIbRecvComm* comm, struct ncclIbRequest* req, int slot, int rewrite) {
  struct ncclIbNetCommBase* base = &comm->base;
  int nCts = base->nqps < base->vProps.ndevs ? base->nqps : base->vProps.ndevs;
  /* by slot, not by position: the entries of one slot then always go on one QP, in order
   * (positions p and p + RAILNET_IB_FIFO_SLOTS share a slot); QP d lives on device d */
  struct ncclIbQp* meant = &base->qps[slot % nCts];
  struct ncclIbQp* qp = railnetIbQpLive(base, meant);
  if (qp == NULL) return ncclRemoteError; /* no QP left: the failover code said why */
  struct ibv_sge sge;
  sge.addr = (uintptr_t)comm->elems[slot];
  sge.length = (uint32_t)(req->nreqs * sizeof(struct ncclIbSendFifo));
  sge.lkey = base->ctrl.mrs[qp->devIndex]->lkey;
  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof(wr));
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = comm->remFifoAddr + (uint64_t)slot * NCCL_NET_IB_MAX_RECVS * sizeof(struct ncclIbSendFifo);
  wr.wr.rdma.rkey = base->remDevs[qp->remDevIndex].fifoRkey;
  if (base->useInline && sge.length <= base->maxInline) wr.send_flags = IBV_SEND_INLINE;
  /* unsignaled writes stay in the send queue until a later signaled one completes: signal
   * at least one in RAILNET_IB_FIFO_SLOTS / 2 per QP, counted (an eager comm skips the
   * clear-to-send of small irecvs, maybe a slot's that would be signaled), and every one on a
   * QP standing in for a gone one, which takes the writes of more than one */
  if (slot == qp->devIndex || qp != meant || rewrite) wr.send_flags |= IBV_SEND_SIGNALED;
  if (++qp->ctsUnsig >= RAILNET_IB_FIFO_SLOTS / 2) wr.send_flags |= IBV_SEND_SIGNALED;
  if (wr.send_flags & IBV_SEND_SIGNALED) qp->ctsUnsig = 0;
  wr.wr_id = railnetIbWrIdCts(slot, rewrite);
  struct ibv_send_wr* bad = NULL;
  NCCLCHECK(wrap_ibv_post_send(qp->qp, &wr, &bad));
  base->work.wrs++;
  if (rewrite) railnetIbSlotCtsRewrite(base, 1);
  return ncclSuccess;
}

static ncclResult_t postOneRecv(struct ncclIbNetCommBase* base, struct ibv_qp* qp) {
  struct ibv_recv_wr wr, *bad = NULL;
  base->work.wrs++;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = railnetIbWrIdPreposted();
  return wrap_ibv_post_recv(qp, &wr, &bad);
}

ncclResult_t railnetIbPostRecvs(struct ncclIbNetCommBase* base, struct ibv_qp* qp, int n) {
  for (int i = 0; i < n; i++) NCCLCHECK(postOneRecv(base, qp));
  return ncclSuccess;
}
