/*
 * Completion records of a failover comm (records.h): the sender learns which chunks reached
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
#include "records.h"
#include "debug.h"
#include "ibvwrap.h"
#include "qp.h"
#include "resiliency.h"
#include "wrid.h"

/* Receiver: rec, written by the sender; sender: rec, what a read brought back, and src, what
 * slot s's chunks write (its message's fifo position + 1), registered up to mrs. The peer's
 * records: remAddr (0: it has none) and its rkeys. */
struct railnetIbRecords {
  uint64_t rec[RAILNET_IB_FIFO_SLOTS][RAILNET_IB_FO_MAX_CHUNKS];
  uint64_t src[RAILNET_IB_FIFO_SLOTS];
  struct ibv_mr* mrs[NCCL_IB_MAX_DEVS_PER_NIC];
  uint64_t remAddr;
  uint32_t remRkeys[NCCL_IB_MAX_DEVS_PER_NIC];
};

ncclResult_t railnetIbRecordsRecvSetup(struct ncclIbNetCommBase* base, struct ncclIbConnectionMetadata* meta) {
  if (base->fo == NULL || !railnetIbParamFailoverRecords()) return ncclSuccess;
  NCCLCHECK(RAILNET_CALLOC(&base->recs, 1, "IB failover completion records"));
  struct railnetIbRecords* r = base->recs;
  for (int d = 0; d < base->vProps.ndevs; d++) {
    NCCLCHECK(wrap_ibv_reg_mr(&r->mrs[d], base->devs[d].pd, r->rec, sizeof(r->rec),
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ));
    meta->foRecRkeys[d] = r->mrs[d]->rkey;
  }
  meta->foRecAddr = (uint64_t)(uintptr_t)r->rec;
  meta->devs[0].flags |= RAILNET_IB_FLAG_FO_RECORDS;
  return ncclSuccess;
}

ncclResult_t railnetIbRecordsSendSetup(struct ncclIbNetCommBase* base, const struct ncclIbConnectionMetadata* rem) {
  if (base->fo == NULL || !(rem->devs[0].flags & RAILNET_IB_FLAG_FO_RECORDS)) return ncclSuccess;
  NCCLCHECK(RAILNET_CALLOC(&base->recs, 1, "IB failover completion records"));
  struct railnetIbRecords* r = base->recs;
  for (int d = 0; d < base->vProps.ndevs; d++)
    NCCLCHECK(wrap_ibv_reg_mr(&r->mrs[d], base->devs[d].pd, r, offsetof(struct railnetIbRecords, mrs),
                              IBV_ACCESS_LOCAL_WRITE));
  r->remAddr = rem->foRecAddr;
  for (int d = 0; d < rem->ndevs && d < NCCL_IB_MAX_DEVS_PER_NIC; d++) r->remRkeys[d] = rem->foRecRkeys[d];
  return ncclSuccess;
}

void railnetIbRecordsFree(struct ncclIbNetCommBase* base) {
  struct railnetIbRecords* r = base->recs;
  if (r == NULL) return;
  for (int d = 0; d < NCCL_IB_MAX_DEVS_PER_NIC; d++)
    if (r->mrs[d]) wrap_ibv_dereg_mr(r->mrs[d]);
  free(r);
  base->recs = NULL;
}

int railnetIbRecordsOn(const struct ncclIbNetCommBase* base) {
  return base->isSend && base->recs != NULL && base->recs->remAddr != 0;
}

void railnetIbRecordWr(struct ncclIbNetCommBase* base, int s, int i, uint64_t id, struct ncclIbQp* qp,
                       struct ibv_send_wr* wr, struct ibv_sge* sge) {
  struct railnetIbRecords* r = base->recs;
  r->src[s] = id + 1;
  sge->addr = (uintptr_t)&r->src[s];
  sge->length = sizeof(uint64_t);
  sge->lkey = r->mrs[qp->devIndex]->lkey;
  memset(wr, 0, sizeof(*wr));
  wr->sg_list = sge;
  wr->num_sge = 1;
  wr->wr.rdma.remote_addr = r->remAddr + ((uint64_t)s * RAILNET_IB_FO_MAX_CHUNKS + (uint64_t)i) * sizeof(uint64_t);
  wr->wr.rdma.rkey = r->remRkeys[qp->remDevIndex];
}

int railnetIbRecordsRead(struct ncclIbNetCommBase* base, uint32_t round, ncclResult_t* res) {
  struct railnetIbRecords* r = base->recs;
  *res = ncclSuccess;
  for (int q = 0; q < base->nqps; q++) {
    struct ncclIbQp* qp = &base->qps[q];
    if (railnetIbQpGone(base, q) || !railnetIbQpRoom(base, qp, 1)) continue;
    struct ibv_sge sge;
    sge.addr = (uintptr_t)r->rec;
    sge.length = sizeof(r->rec);
    sge.lkey = r->mrs[qp->devIndex]->lkey;
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = r->remAddr;
    wr.wr.rdma.rkey = r->remRkeys[qp->remDevIndex];
    wr.wr_id = railnetIbWrIdFoRead(round);
    *res = wrap_ibv_post_send(qp->qp, &wr, &bad);
    if (*res != ncclSuccess) return -1;
    railnetIbQpPosted(qp, 1);
    base->work.wrs++;
    return q;
  }
  return -1;
}

uint64_t railnetIbRecordsMissing(const struct ncclIbNetCommBase* base, int s, uint64_t id) {
  uint64_t missing = 0;
  for (int i = 0; i < RAILNET_IB_FO_MAX_CHUNKS; i++)
    if (base->recs->rec[s][i] != id + 1) missing |= 1ull << i;
  return missing;
}
