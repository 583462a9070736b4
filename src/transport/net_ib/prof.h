/* NCCL profiler events of the IB transport (net_prof.h): one per work request a request
 * posts on a QP (each data write of an isend, eager writes and marks included; each receive
 * of an irecv, none when receive WRs are kept pre-posted, as with eager messages), stopped
 * when that QP's completion for the request arrives. Nothing is kept or called without a callback. */
#ifndef RAILNET_NET_IB_PROF_H
#define RAILNET_NET_IB_PROF_H
#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Starts the event of req's work request on QP q (of base->qps). */
ncclResult_t railnetIbProfStart(struct ncclIbNetCommBase* base, struct ncclIbRequest* req, void* phandle, int q,
                                int opcode, size_t length);
/* Stops req's events on the QP whose completion came (qpNum), or all of req's (qpNum -1). */
void railnetIbProfStop(struct ncclIbNetCommBase* base, struct ncclIbRequest* req, int64_t qpNum);
/* Stops whatever is still running and frees the comm's event list (its close). */
void railnetIbProfFree(struct ncclIbNetCommBase* base);

#ifdef __cplusplus
}
#endif
#endif
