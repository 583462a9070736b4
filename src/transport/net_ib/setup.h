/*
 * IB comm setup (setup.c): the PD, CQ, GID and QPs of each device of a comm, the fifo and
 * sizes registrations, the GPUDirect flush QP, and the connection metadata that describes
 * them to the peer. connect.c drives these through its state machines; nothing here touches
 * the socket. Above the QPs (qp.h) and the data path's pieces (eager, matching, failover).
 */
#ifndef RAILNET_NET_IB_SETUP_H
#define RAILNET_NET_IB_SETUP_H
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
/* NCCL_IB_QPS_PER_CONNECTION, NCCL_IB_SPLIT_DATA_ON_QPS */
int railnetIbParamQpsPerConn(void);
int railnetIbParamSplitDataOnQps(void);
/* NCCL_IB_TC and NCCL_IB_SL as set (-1: not set) */
int railnetIbParamTc(void);
int railnetIbParamSl(void);
/* The PD, a CQ of cqe entries and the GID (chosen as for every comm) of each device of vDevice
 * vDev, into base->devs (railnetIbCommFree gives them back); the comms' setup and the RMA
 * contexts (rma/rma_ctx.c) make their devices with it. */
ncclResult_t railnetIbCommDevsInit(struct ncclIbNetCommBase* base, int vDev, int cqe);

#ifdef __cplusplus
}
#endif
#endif
