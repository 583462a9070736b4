/*
 * Where a send comm puts each message's chunks (net_socket_balance.c): RAILNET_SOCKET_BALANCE.
 */
#ifndef RAILNET_NET_SOCKET_BALANCE_H
#define RAILNET_NET_SOCKET_BALANCE_H
#include <stddef.h>
#include <stdint.h>
#include "net_socket_wire.h"
#include "net_socket_types.h"

#ifdef __cplusplus
extern "C" {
#endif

struct socketComm;

/* A send comm that names its messages' sockets (balance), for a payload of `size` bytes on the
 * data sockets whose record has `flags`: as many sockets as round-robin over all would take
 * (one chunk each), those whose slowest would deliver its chunk soonest (bytes still to
 * deliver, queued and in the kernel not acknowledged, over its measured rate), any of them,
 * not only neighbours; the next ones in turn unless those are a quarter sooner. A message
 * with a chunk on every socket leaves out those that are behind (a chunk or more not
 * delivered; at most a quarter of the sockets, or one when there are fewer than 8) when the
 * others, in larger chunks, would deliver it in half the time. The
 * chosen sockets' queued bytes grow by the chunks. */
ctrlSockSet railnetSocketChooseSet(struct socketComm* c, size_t size, uint32_t flags);

/* The rate a choice of `task`-byte chunks credits queue q with, `fastest` being the fastest
 * rate measured lately (bytes per ns; railnetSocketChooseSet passes the unmeasured sockets'
 * credit, at least 1, when no rate is fresh): its measured rate, but `fastest` when its rate
 * is stale (measured long ago; it kept up since, or idled) and slower, it has nothing left to
 * deliver, and it was measured or probed longer ago than 16 times a chunk's time at its rate.
 * That socket so gets a chunk (a probe: one at a time, as its backlog counts at its own rate
 * until delivered), at most once per 16 chunk-times, so probing a slow path costs the messages
 * that wait for it little. */
double railnetSocketProbeRate(const taskQueue* q, double fastest, size_t task, uint64_t now);

#ifdef __cplusplus
}
#endif
#endif
