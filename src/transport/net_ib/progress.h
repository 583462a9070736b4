/*
 * The IB data path's one progress step (progress.c): what test() does for a request that is
 * not done yet. p2p.c calls it; it calls each feature's step, then polls.
 */
#ifndef RAILNET_NET_IB_PROGRESS_H
#define RAILNET_NET_IB_PROGRESS_H
#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* For request r of base, in this order: the devices' ports (liveness), port failover, the
 * receiver's eager messages, then the CQs r waits on (every CQ with failover or while an
 * eager comm closes), each completion handed to its owner (completion.c). *polled: the
 * completions taken. */
ncclResult_t railnetIbProgress(struct ncclIbNetCommBase* base, struct ncclIbRequest* r, int* polled);

#ifdef __cplusplus
}
#endif
#endif
