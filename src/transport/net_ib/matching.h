/*
 * How a receiver matches completions to requests and when it posts its receive work
 * requests (NCCL 2.30's p2p.cc / common.cc):
 *   NCCL_IB_RECEIVER_SIDE_MATCHING_SCHEME: 0 (and -2, automatic) index-based, the
 *     completions of a comm's receives come in the order of its irecvs; 1 ID-based, each
 *     completion names its request. NCCL_IB_OOO_RQ=1 and NCCL_IB_RESILIENCY_PORT_FAILOVER=1
 *     force ID-based.
 *   NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS: 0 (and -2) a receive WR is posted per irecv; 1 the
 *     receive queues are kept full ahead of the irecvs. Failover and OOO RQ force 1.
 * The receiver decides and tells the sender (RAILNET_IB_FLAG_MATCH_BY_ID in its metadata):
 * ID-based, the immediate carries the request id and every message writes its sizes record;
 * index-based, the immediate carries the size of a single receive.
 */
#ifndef RAILNET_NET_IB_MATCHING_H
#define RAILNET_NET_IB_MATCHING_H
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { RAILNET_IB_MATCH_BY_INDEX = 0, RAILNET_IB_MATCH_BY_ID = 1 };

/* NCCL's choice from the variables (overrides included). */
int railnetIbRecvMatchingScheme(void);
int railnetIbPrepostRecvs(void);
/* At discovery: one INFO per override (and the resiliency report, resiliency.h). */
void railnetIbMatchingReport(void);

struct ncclIbRecvComm;
struct ncclIbSendComm;
struct ncclIbConnectionMetadata;
struct ibv_wc;
struct ncclIbRequest;
/* Receiver, QPs connected: its scheme (told to the sender in meta's flags) and, when
 * pre-posting, a full receive queue on every QP. */
ncclResult_t railnetIbRecvModeSetup(struct ncclIbRecvComm* comm, struct ncclIbConnectionMetadata* meta,
                                    const char* peer);
struct ibv_qp;
struct ncclIbNetCommBase;
/* Sender: the receiver's scheme from its metadata. */
void railnetIbSendModeSetup(struct ncclIbSendComm* comm, const struct ncclIbConnectionMetadata* remote);
/* The receive request a data completion (RECV_RDMA_WITH_IMM on device d) belongs to: by the
 * id in the immediate, by the QP's order (pre-posted), or by the WR's slot; a pre-posted WR
 * is replaced. WARN and an error when it names no receive in flight. *evDev: the device
 * whose count of the request the completion settles (d; with failover, the device the
 * chunk was meant for); *req NULL: a failover replay of a chunk that had arrived. */
ncclResult_t railnetIbRecvMatch(struct ncclIbRecvComm* comm, int d, const struct ibv_wc* wc,
                                struct ncclIbRequest** req, int* evDev);

#ifdef __cplusplus
}
#endif
#endif
