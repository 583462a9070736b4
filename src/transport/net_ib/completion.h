/*
 * Completions of the IB data path (completion.c): a completion's effect on its request
 * (data writes and receives, clear-to-send writes, flush reads), an error completion's
 * WARN with its cause and fix, or port failover taking it (resilience/failover.h).
 */
#ifndef RAILNET_NET_IB_COMPLETION_H
#define RAILNET_NET_IB_COMPLETION_H
#include <infiniband/verbs.h>
#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A completion from the CQ of device d of base. */
ncclResult_t railnetIbProcessWc(struct ncclIbNetCommBase* base, int d, const struct ibv_wc* wc);
/* Polls up to 4 completions of device d's CQ and processes them; *n: how many. */
ncclResult_t railnetIbPollDev(struct ncclIbNetCommBase* base, int d, int* n);

#ifdef __cplusplus
}
#endif
#endif
