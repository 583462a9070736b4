/*
 * The IB transport's asynchronous events: one thread per HCA reads ibv_get_async_event and
 * logs each event as NCCL does; a fatal one (device, CQ, QP) bumps the fatal counter of
 * every device on that context, so that their comms fail (ncclIbStatsCheckFatalCount).
 */
#ifndef RAILNET_NET_IB_ASYNC_H
#define RAILNET_NET_IB_ASYNC_H
#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Starts the event thread of an HCA (name: for the log). A thread that cannot start is a
 * WARN: the device works, its events are not seen. */
void railnetIbAsyncStart(struct ibv_context* ctx, const char* name);
/* Stops and joins every event thread (each notices within 100 ms). */
void railnetIbAsyncStopAll(void);

#ifdef __cplusplus
}
#endif
#endif
