/*
 * IB comm resources (qp.c): the PD, CQ, GID and QPs of each device of a comm, the QPs'
 * INIT -> RTR -> RTS transitions, the fifo and sizes registrations, and the connection
 * metadata that describes them to the peer. connect.c drives these through its state
 * machines; nothing here touches the socket.
 */
#ifndef RAILNET_NET_IB_QP_H
#define RAILNET_NET_IB_QP_H
#include "comm.h"
#include "wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A zeroed send (isSend) or receive comm, page-aligned, its socket unset. */
ncclResult_t railnetIbCommAlloc(int isSend, struct ncclIbNetCommBase** out);
/* Destroys whatever of a comm was made (QPs, MRs, CQs, PD references, socket) and frees it. */
void railnetIbCommFree(struct ncclIbNetCommBase* base);
/* Connector, before sending its metadata: the devices of base->vDev, the QPs (INIT), the
 * fifo registrations; meta describes them (ctx: the comm config's traffic class). */
ncclResult_t railnetIbSendCommSetup(void* ctx, struct ncclIbSendComm* comm, struct ncclIbConnectionMetadata* meta);
/* Connector, once the acceptor's metadata (remote, checked) arrived: the QPs to RTS. */
ncclResult_t railnetIbSendCommConnect(struct ncclIbSendComm* comm, const struct ncclIbConnectionMetadata* local,
                                      const struct ncclIbConnectionMetadata* remote, const char* peer);
/* Acceptor, once the connector's metadata (rem, checked) arrived: devices of vDev, QPs to
 * RTS following the connector's choices, registrations, the GPUDirect flush QP; meta
 * describes them for the answer. */
ncclResult_t railnetIbRecvCommSetup(int vDev, struct ncclIbRecvComm* comm, const struct ncclIbConnectionMetadata* rem,
                                    struct ncclIbConnectionMetadata* meta, const char* peer);
/* Port recovery (failover.h): a data QP on device devIndex of a connected comm, in INIT; and
 * its INIT -> RTR -> RTS towards the peer's QP qpn on its device remDevIndex, with the traffic
 * class and service level the comm's QPs got. */
ncclResult_t railnetIbQpCreate(struct ncclIbNetCommBase* base, int devIndex, struct ibv_qp** out);
ncclResult_t railnetIbQpConnect(struct ncclIbNetCommBase* base, int devIndex, struct ibv_qp* qp, int remDevIndex,
                                uint32_t qpn);
/* ... with its own ACK timeout and retry count (port failover's path probes, probe.c). */
ncclResult_t railnetIbQpConnectTimed(struct ncclIbNetCommBase* base, int devIndex, struct ibv_qp* qp,
                                     int remDevIndex, uint32_t qpn, int timeout, int retryCnt);
/* "1.2.3.4<5>" of a comm's peer. */
const char* railnetIbPeerStr(struct ncclIbNetCommBase* base, char* buf);
/* How long a data QP retries before it gives up on an unanswered work request:
 * 4.096 us x 2^NCCL_IB_TIMEOUT x (NCCL_IB_RETRY_CNT + 1): 34 s at NCCL's defaults. */
uint64_t railnetIbRetryTimeNs(void);
int railnetIbParamQpsPerConn(void);
int railnetIbParamSplitDataOnQps(void);

#ifdef __cplusplus
}
#endif
#endif
