/*
 * The Socket transport's control stream (net_socket_ctrl.c).
 */
#ifndef RAILNET_NET_SOCKET_CTRL_H
#define RAILNET_NET_SOCKET_CTRL_H
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

struct socketComm;

/* Moves the control stream of comm c for its requests in posting order: records, inline
 * payloads, and whole payloads when there are no data sockets; a request whose part of the
 * stream is through is REQ_DATA, its larger payload posted as tasks to the data sockets (a
 * receive whose socket set does not fit is REQ_FAILED). A failure fails the comm (with a WARN
 * naming the peer) and is returned. */
ncclResult_t railnetSocketCtrlProgress(struct socketComm* c);
/* Whether the stream may wait for a later progress call without delaying data: a send comm
 * whose next waiting request is small (below NCCL_SOCKET_MIN_TASKSIZE: its bytes then leave
 * with those posted after it, in one system call). Larger messages and receives progress at
 * every call: their data sockets wait for the records. */
int railnetSocketCtrlCanWait(struct socketComm* c);

#ifdef __cplusplus
}
#endif
#endif
