/*
 * Completion records of a failover comm (records.c): the receiver keeps, per fifo slot and
 * chunk, the fifo position + 1 of the last chunk whose final write reached it; the sender's
 * chunks end with that write, and a sender failing over reads them all with one RDMA READ
 * (failover.c drives the read; this module owns the buffers, their registrations and the
 * peer's address). Set up only on a failover comm (base->fo) that agreed on them
 * (RAILNET_IB_FAILOVER_RECORDS, RAILNET_IB_FLAG_FO_RECORDS).
 */
#ifndef RAILNET_NET_IB_RECORDS_H
#define RAILNET_NET_IB_RECORDS_H
#include <infiniband/verbs.h>
#include <stdint.h>
#include "comm.h"
#include "wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Receiver of a failover comm: registers its records on each device and names them in meta
 * (RAILNET_IB_FLAG_FO_RECORDS). Sender: takes the receiver's records from its metadata (none
 * from an older peer) and registers its own read buffer. */
ncclResult_t railnetIbRecordsRecvSetup(struct ncclIbNetCommBase* base, struct ncclIbConnectionMetadata* meta);
ncclResult_t railnetIbRecordsSendSetup(struct ncclIbNetCommBase* base, const struct ncclIbConnectionMetadata* rem);
void railnetIbRecordsFree(struct ncclIbNetCommBase* base);
/* Sender: whether its chunks end with a record write (the receiver has records). */
int railnetIbRecordsOn(const struct ncclIbNetCommBase* base);
/* Sender: fills wr/sge with chunk i of slot s's record write (fifo position id + 1) on qp;
 * the caller makes it the write with immediate, the last of the chunk. */
void railnetIbRecordWr(struct ncclIbNetCommBase* base, int s, int i, uint64_t id, struct ncclIbQp* qp,
                       struct ibv_send_wr* wr, struct ibv_sge* sge);
/* Sender: posts the read of every record (wr_id of read round `round`) on the first QP not
 * gone with room: its index, or -1 when none has room now or the post failed (*res). */
int railnetIbRecordsRead(struct ncclIbNetCommBase* base, uint32_t round, ncclResult_t* res);
/* Sender, after a read: the chunks of the message at fifo position id (slot s) whose record
 * does not say they arrived. */
uint64_t railnetIbRecordsMissing(const struct ncclIbNetCommBase* base, int s, uint64_t id);

#ifdef __cplusplus
}
#endif
#endif
