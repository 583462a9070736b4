/*
 * Whether the peer of an IB comm is still there, and telling it when this side gives up.
 *
 * A peer process that exits or crashes closes the comm's TCP socket (the kernel does it),
 * while its QPs say nothing until a work request of this side runs out of retries: 34 s at
 * NCCL's default NCCL_IB_TIMEOUT 20 / NCCL_IB_RETRY_CNT 7, 137 s at 22, never on soft-RoCE
 * (retry count 7 retries for ever), and never at all for a receiver that only waits. So the
 * data path looks at the socket: at most every RAILNET_IB_PEER_LOOK_MS of polling that found
 * nothing, a non-blocking peek; end of stream or a reset, still seen after a grace of
 * RAILNET_IB_PEER_GRACE_MS (completions the peer saw acknowledged land by then), fails the
 * comm with a WARN that says so. A comm that fails for any reason shuts down its sending
 * side of the socket, so that its peer fails the same way instead of waiting.
 * The devices of the comm are watched here too (railnetIbDevicesCheck).
 */
#ifndef RAILNET_NET_IB_LIVENESS_H
#define RAILNET_NET_IB_LIVENESS_H
#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RAILNET_IB_PEER_LOOK_MS 5
/* The time-based looks read the clock once in this many data path calls that get that far
 * (a clock read can be a system call where the clock source has no vDSO: a VM's HPET, and
 * a small message's round trip is a few dozen test() calls) */
#define RAILNET_IB_CLOCK_CALLS 16
/* Whether this call reads the clock for the periodic looks (liveness.c, eager.c). */
static inline int railnetIbClockDue(struct ncclIbNetCommBase* base) {
  return ++base->clockCalls % RAILNET_IB_CLOCK_CALLS == 0;
}
#define RAILNET_IB_PEER_GRACE_MS 1000

/* Called by the data path when it found nothing to do (during: "isend", "test", ...):
 * ncclRemoteError (the comm failed, WARN said why) once the peer is gone for the grace. */
ncclResult_t railnetIbPeerCheck(struct ncclIbNetCommBase* base, const char* during);
/* The devices the comm uses: a fatal device event (NCCL_IB_RETURN_ASYNC_EVENTS), a fatal
 * event of one of its own QPs, a port that left ACTIVE (IBV_EVENT_PORT_ERR at once, else a
 * query once a second). With port failover the device goes at once; without, a port not
 * back within the QPs' retry time fails the comm. ncclSuccess while the comm can go on. */
ncclResult_t railnetIbDevicesCheck(struct ncclIbNetCommBase* base, const char* func);

#ifdef __cplusplus
}
#endif
#endif
