/*
 * The life of a Socket comm (net_socket_comm.c).
 */
#ifndef RAILNET_NET_SOCKET_COMM_H
#define RAILNET_NET_SOCKET_COMM_H
#include "core.h"
#include "net_socket_types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A comm of nSocks data sockets and nThreads helper threads, its sockets not open yet. */
ncclResult_t railnetSocketCommAlloc(socketComm** out, int nSocks, int nThreads, int isSend);
/* RAILNET_SOCKET_CTRL_PAYLOAD: the largest message whose payload may follow its record on the
 * control socket when the comm has data sockets (0: never, NCCL's layout). */
size_t railnetSocketCtrlPayloadMax(void);
/* What a listener with data sockets offers as both ends' chunk size
 * (RAILNET_SOCKET_HANDLE_TASK_SIZE): the larger of RAILNET_SOCKET_MIN_TASKSIZE and
 * NCCL_SOCKET_MIN_TASKSIZE; 0 (nothing offered) when RAILNET_SOCKET_MIN_TASKSIZE is 0. */
uint32_t railnetSocketTaskSizeOffer(void);
/* RAILNET_SOCKET_BALANCE: a listener with data sockets offers RAILNET_SOCKET_HANDLE_SOCK_SET,
 * a connector given the offer uses it (1), or neither (0). */
int railnetSocketBalance(void);
/* Once every socket is connected: the peer's name, the TCP timeouts, the helper threads. */
ncclResult_t railnetSocketCommStartThreads(socketComm* c);
/* Stops and joins the helper threads, closes the sockets, frees the comm (NULL: nothing). */
void railnetSocketCommFree(socketComm* c);

#ifdef __cplusplus
}
#endif
#endif
