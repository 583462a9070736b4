/*
 * Where a send comm puts each message's chunks (net_socket_balance.c): RAILNET_SOCKET_BALANCE.
 */
#ifndef RAILNET_NET_SOCKET_BALANCE_H
#define RAILNET_NET_SOCKET_BALANCE_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct socketComm;

/* A send comm that names first sockets (firstSock), for a payload of `size` bytes in chunks of
 * `task`: the first of the consecutive sockets its chunks take whose slowest would deliver
 * its chunk soonest (bytes still to deliver, queued and in the kernel not acknowledged, over
 * its measured rate), the round-robin window (after the last choice's) unless another is a
 * quarter sooner; with as many chunks as sockets, the round-robin one. The chosen sockets'
 * queued bytes grow by the chunks. */
int railnetSocketChooseFirst(struct socketComm* c, size_t size, size_t task);

#ifdef __cplusplus
}
#endif
#endif
