/*
 * How a receiver matches completions to requests and when it posts its receive work
 * requests (NCCL 2.30's p2p.cc / common.cc):
 *   NCCL_IB_RECEIVER_SIDE_MATCHING_SCHEME: 0 (and -2, automatic) index-based, the
 *     completions of a comm's receives come in the order of its irecvs; 1 ID-based, each
 *     completion names its request. NCCL_IB_OOO_RQ=1 and NCCL_IB_RESILIENCY_PORT_FAILOVER=1
 *     force ID-based.
 *   NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS: 0 (and -2) a receive WR is posted per irecv; 1 the
 *     receive queues are kept full ahead of the irecvs. Failover and OOO RQ force 1.
 * This railnet matches by index and posts on demand; a setting that asks for more is read
 * and reported once (matching.c).
 */
#ifndef RAILNET_NET_IB_MATCHING_H
#define RAILNET_NET_IB_MATCHING_H

#ifdef __cplusplus
extern "C" {
#endif

enum { RAILNET_IB_MATCH_BY_INDEX = 0, RAILNET_IB_MATCH_BY_ID = 1 };

/* NCCL's choice from the variables (overrides included). */
int railnetIbRecvMatchingScheme(void);
int railnetIbPrepostRecvs(void);
/* At discovery: one INFO when the choice is not what this railnet does (and the
 * resiliency report, resiliency.h). */
void railnetIbMatchingReport(void);

#ifdef __cplusplus
}
#endif
#endif
