/*
 * Completion records of a failover comm (failover.h): the sender learns which chunks reached
 * the receiver without the receiver's CPU, as NCCL 2.30 does with its probe reads.
 *
 * The last work request of every chunk is a write with immediate of 8 bytes into the
 * receiver's record (slot, chunk): the message's fifo position + 1. On one QP writes execute
 * in order and a write with immediate that executed has produced the receiver's completion,
 * so a record that holds the position says the whole chunk arrived and will be counted; one
 * that does not says the chunk's last write has not executed yet. The sender stopped the
 * gone QP (error state) when it declared it gone and reads no earlier than 100 ms after
 * that (failover.c), so nothing of it is still on its way; a late original that lands anyway
 * is dropped by the receiver (matching.c). (A single-packet write with immediate places its
 * payload only once it took a receive: pre-posted receives make a receiver-not-ready rare.)
 * A sender failing over reads all records (16 KiB) with one RDMA READ on a QP not gone: the
 * receiver's NIC answers, whether or not its process calls the comm.
 */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "failover.h"
#include "debug.h"
#include "ibvwrap.h"
#include "qp.h"

static ncclResult_t alloc(struct railnetIbFailover* fo) {
  NCCLCHECK(RAILNET_CALLOC(&fo->recs, 1, "IB failover completion records"));
  return ncclSuccess;
}

ncclResult_t railnetIbFoRecordsRecvSetup(struct ncclIbNetCommBase* base, struct ncclIbConnectionMetadata* meta) {
  struct railnetIbFailover* fo = base->fo;
  if (fo == NULL || !railnetIbParamFailoverRecords()) return ncclSuccess;
  NCCLCHECK(alloc(fo));
  for (int d = 0; d < base->vProps.ndevs; d++) {
    NCCLCHECK(wrap_ibv_reg_mr(&fo->recs->mrs[d], base->devs[d].pd, fo->recs->rec, sizeof(fo->recs->rec),
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ));
    meta->foRecRkeys[d] = fo->recs->mrs[d]->rkey;
  }
  meta->foRecAddr = (uint64_t)(uintptr_t)fo->recs->rec;
  meta->devs[0].flags |= RAILNET_IB_FLAG_FO_RECORDS;
  return ncclSuccess;
}

ncclResult_t railnetIbFoRecordsSendSetup(struct ncclIbNetCommBase* base, const struct ncclIbConnectionMetadata* rem) {
  struct railnetIbFailover* fo = base->fo;
  if (fo == NULL || !(rem->devs[0].flags & RAILNET_IB_FLAG_FO_RECORDS)) return ncclSuccess;
  NCCLCHECK(alloc(fo));
  for (int d = 0; d < base->vProps.ndevs; d++)
    NCCLCHECK(wrap_ibv_reg_mr(&fo->recs->mrs[d], base->devs[d].pd, fo->recs,
                              offsetof(struct railnetIbFoRecords, mrs), IBV_ACCESS_LOCAL_WRITE));
  fo->recRemAddr = rem->foRecAddr;
  for (int d = 0; d < rem->ndevs && d < NCCL_IB_MAX_DEVS_PER_NIC; d++) fo->recRemRkeys[d] = rem->foRecRkeys[d];
  return ncclSuccess;
}

void railnetIbFoRecordsFree(struct railnetIbFailover* fo) {
  if (fo->recs == NULL) return;
  for (int d = 0; d < NCCL_IB_MAX_DEVS_PER_NIC; d++)
    if (fo->recs->mrs[d]) wrap_ibv_dereg_mr(fo->recs->mrs[d]);
  free(fo->recs);
  fo->recs = NULL;
}

int railnetIbFoRecordsOn(struct ncclIbNetCommBase* base) {
  return base->fo != NULL && base->isSend && base->fo->recRemAddr != 0;
}

void railnetIbFoRecordWr(struct ncclIbNetCommBase* base, int s, int i, uint64_t id, struct ncclIbQp* qp,
                         struct ibv_send_wr* wr, struct ibv_sge* sge) {
  struct railnetIbFailover* fo = base->fo;
  fo->recs->src[s] = id + 1;
  sge->addr = (uintptr_t)&fo->recs->src[s];
  sge->length = sizeof(uint64_t);
  sge->lkey = fo->recs->mrs[qp->devIndex]->lkey;
  memset(wr, 0, sizeof(*wr));
  wr->sg_list = sge;
  wr->num_sge = 1;
  wr->wr.rdma.remote_addr = fo->recRemAddr + ((uint64_t)s * RAILNET_IB_FO_MAX_CHUNKS + (uint64_t)i) * sizeof(uint64_t);
  wr->wr.rdma.rkey = fo->recRemRkeys[qp->remDevIndex];
}

ncclResult_t railnetIbFoRecordsRead(struct ncclIbNetCommBase* base) {
  struct railnetIbFailover* fo = base->fo;
  for (int q = 0; q < base->nqps; q++) {
    struct ncclIbQp* qp = &base->qps[q];
    if (railnetIbQpGone(base, q) || !railnetIbQpRoom(base, qp, 1)) continue;
    struct ibv_sge sge;
    sge.addr = (uintptr_t)fo->recs->rec;
    sge.length = sizeof(fo->recs->rec);
    sge.lkey = fo->recs->mrs[qp->devIndex]->lkey;
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = fo->recRemAddr;
    wr.wr.rdma.rkey = fo->recRemRkeys[qp->remDevIndex];
    wr.wr_id = railnetIbWrIdFoRead(++fo->readRound);
    NCCLCHECK(wrap_ibv_post_send(qp->qp, &wr, &bad));
    railnetIbQpPosted(qp, 1);
    fo->readsOut++;
    base->work.wrs++;
    fo->readState = RAILNET_IB_FO_READ_POSTED;
    fo->readQp = q;
    return ncclSuccess;
  }
  return ncclSuccess;
}

uint64_t railnetIbFoRecordsMissing(struct ncclIbNetCommBase* base, int s, uint64_t id) {
  uint64_t missing = 0;
  for (int i = 0; i < RAILNET_IB_FO_MAX_CHUNKS; i++)
    if (base->fo->recs->rec[s][i] != id + 1) missing |= 1ull << i;
  return missing;
}
