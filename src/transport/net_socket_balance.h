/*
 * Where a send comm puts each message's chunks (net_socket_balance.c): RAILNET_SOCKET_BALANCE.
 */
#ifndef RAILNET_NET_SOCKET_BALANCE_H
#define RAILNET_NET_SOCKET_BALANCE_H
#include <stddef.h>
#include <stdint.h>
#include "net_socket_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

struct socketComm;

/* A send comm that names its messages' sockets (balance), for a payload of `size` bytes on the
 * data sockets whose record has `flags`: the set of sockets, one chunk each, whose slowest
 * would deliver its chunk soonest (bytes still to deliver, queued and in the kernel not
 * acknowledged, over its measured rate), of any size that gives each a chunk (a slow socket
 * may get none, and the others larger chunks); the next sockets in turn (as many as
 * round-robin over all would take) unless another set is a quarter sooner. The chosen
 * sockets' queued bytes grow by the chunks. */
ctrlSockSet railnetSocketChooseSet(struct socketComm* c, size_t size, uint32_t flags);

#ifdef __cplusplus
}
#endif
#endif
