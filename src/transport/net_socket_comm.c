/*
 * The life of a Socket comm (net_socket_comm.h): its buffers, the TCP timeouts of its
 * sockets, its helper threads, its teardown.
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include "net_socket_comm.h"
#include "net_socket_helper.h"
#include "net_socket_types.h"
#include "param.h"
#include "net_prof.h"

enum { P_INLINE, P_MIN_TASK, P_ZEROCOPY, P_ZEROCOPY_MIN, P_CTRL_PAYLOAD, P_TASK_SIZE, P_BALANCE };
static const railnetParam netSocketCommParams[] = {
    [P_INLINE] = RAILNET_PARAM_INT_DEF("NCCL_SOCKET_INLINE", 128, 0, 1 << 20,
                                       "Messages up to this size travel inside the control record"),
    [P_MIN_TASK] = RAILNET_PARAM_INT_DEF("NCCL_SOCKET_MIN_TASKSIZE", 1 << 16, 1, INT32_MAX,
                                         "Smallest chunk a large message is cut into for the data sockets"),
    [P_ZEROCOPY] = RAILNET_PARAM_INT_DEF("RAILNET_SOCKET_ZEROCOPY", 2, 0, 2,
                                         "Send large chunks on the data sockets with MSG_ZEROCOPY (no copy into the "
                                         "kernel; a request is done once the kernel released its pages): 0 off, 1 on, "
                                         "2 on until the kernel reports it copied anyway (loopback, veth)"),
    [P_ZEROCOPY_MIN] = RAILNET_PARAM_INT_DEF("RAILNET_SOCKET_ZEROCOPY_MIN", 1 << 16, 1, 1 << 19,
                                             "Smallest send (bytes in one sendmsg, which moves at most 512 KiB) that "
                                             "uses MSG_ZEROCOPY"),
    [P_CTRL_PAYLOAD] = RAILNET_PARAM_INT_DEF("RAILNET_SOCKET_CTRL_PAYLOAD", 1 << 16, 0, 1 << 20,
                                             "With data sockets: a message larger than the inline size (NCCL_SOCKET_INLINE) "
                                             "and at most this many bytes sends its payload with its record on the control socket "
                                             "(one system call for a burst of them, no helper hand-off) while that "
                                             "socket keeps up (full or lagging: the next 64 take the data sockets), "
                                             "when both ends are railnet with it on; 0 keeps NCCL's layout (every "
                                             "such payload on a data socket)"),
    [P_TASK_SIZE] = RAILNET_PARAM_INT_DEF("RAILNET_SOCKET_MIN_TASKSIZE", 1 << 18, 0, INT32_MAX,
                                          "With data sockets, when both ends are railnet: the receiver's handle states "
                                          "the smallest chunk, the larger of this and its NCCL_SOCKET_MIN_TASKSIZE, and "
                                          "both ends cut by it (fewer, larger system calls per message than NCCL's 64 "
                                          "KiB with many sockets); 0 keeps NCCL's rule (each end its own "
                                          "NCCL_SOCKET_MIN_TASKSIZE)"),
    [P_BALANCE] = RAILNET_PARAM_INT_DEF("RAILNET_SOCKET_BALANCE", 1, 0, 1,
                                        "With data sockets, when both ends are railnet with it on: each message's "
                                        "chunks go to the data sockets that would deliver it soonest (bytes still to "
                                        "deliver over the rate their peer acknowledges; a slow or congested "
                                        "connection gets fewer chunks, or none), named in its record; 0 keeps NCCL's "
                                        "round-robin"),
};
RAILNET_PARAM_TABLE("net_socket/comm", netSocketCommParams);

size_t railnetSocketCtrlPayloadMax(void) {
  return (size_t)railnetParamInt(&netSocketCommParams[P_CTRL_PAYLOAD]);
}

uint32_t railnetSocketTaskSizeOffer(void) {
  int64_t own = railnetParamInt(&netSocketCommParams[P_TASK_SIZE]);
  int64_t nccl = railnetParamInt(&netSocketCommParams[P_MIN_TASK]);
  return own == 0 ? 0 : (uint32_t)(own > nccl ? own : nccl);
}

int railnetSocketBalance(void) {
  return (int)railnetParamInt(&netSocketCommParams[P_BALANCE]);
}


/* SO_ZEROCOPY on the data sockets of a send comm (a kernel without it: copies, said once). */
static void enableZerocopy(socketComm* c) {
  static int said;
  int one = 1;
  for (int i = 0; i < c->nSocks; i++) {
    if (setsockopt(c->socks[i].fd, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof(one)) == 0) {
      c->queues[i].zc = 1;
    } else if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED)) {
      if (c->zcMode == 1)
        WARN("NET/Socket : setsockopt(SO_ZEROCOPY) failed: %s; RAILNET_SOCKET_ZEROCOPY=1 has no effect on this kernel "
             "(Linux 4.14 or later has it)", strerror(errno));
      else
        INFO(NCCL_NET, "NET/Socket : no SO_ZEROCOPY on this kernel (%s): sends copy", strerror(errno));
    }
  }
}

ncclResult_t railnetSocketCommAlloc(socketComm** out, int nSocks, int nThreads, int isSend) {
  socketComm* c;
  NCCLCHECK(RAILNET_CALLOC(&c, 1, "a socket comm"));
  c->nSocks = nSocks;
  c->nThreads = nThreads;
  c->isSend = isSend;
  c->prof = railnetProfGet(RAILNET_PROF_SOCKET);
  c->inlineSize = (int)railnetParamInt(&netSocketCommParams[P_INLINE]);
  c->minTask = (size_t)railnetParamInt(&netSocketCommParams[P_MIN_TASK]);
  c->zcMode = (int)railnetParamInt(&netSocketCommParams[P_ZEROCOPY]);
  c->zcMin = (size_t)railnetParamInt(&netSocketCommParams[P_ZEROCOPY_MIN]);
  c->ctrl.fd = -1;
  for (int i = 0; i < MAX_SOCKETS; i++) c->socks[i].fd = -1;
  /* a record and its inline payload, or its socket set */
  int stride = (int)sizeof(ctrlRecord) + (c->inlineSize > (int)sizeof(ctrlSockSet) ? c->inlineSize : (int)sizeof(ctrlSockSet));
  ncclResult_t res = RAILNET_CALLOC(&c->ctrlBufs, (size_t)stride * MAX_REQUESTS, "socket control records");
  if (res == ncclSuccess && !isSend) res = RAILNET_CALLOC(&c->stage, RAILNET_SOCKET_STAGE, "a socket control stage");
  if (res != ncclSuccess) {
    free(c->ctrlBufs);
    free(c);
    return res;
  }
  for (int i = 0; i < MAX_REQUESTS; i++) {
    c->requests[i].comm = c;
    c->requests[i].ctrl = c->ctrlBufs + (size_t)i * stride;
  }
  *out = c;
  return ncclSuccess;
}

ncclResult_t railnetSocketCommStartThreads(socketComm* c) {
  union ncclSocketAddress a;
  socklen_t len = sizeof(a);
  if (getpeername(c->ctrl.fd, &a.sa, &len) == 0) ncclSocketToString(&a, c->peer, 1);
  else snprintf(c->peer, sizeof(c->peer), "(unknown)");
  railnetSocketSetPeerTimeout(c->ctrl.fd);
  for (int i = 0; i < c->nSocks; i++) railnetSocketSetPeerTimeout(c->socks[i].fd);
  if (c->isSend && c->zcMode != 0) enableZerocopy(c);
  if (c->isSend && c->nSocks > 0 && c->ctrlMax > (size_t)c->inlineSize) {
    /* payloads on the control socket (some can be: larger than inline): a record never queues
     * behind many (net_socket_types.h, RAILNET_SOCKET_CTRL_SPILL) */
    int lowat = (int)c->ctrlMax;
    if (setsockopt(c->ctrl.fd, IPPROTO_TCP, TCP_NOTSENT_LOWAT, &lowat, sizeof(lowat)) != 0)
      INFO(NCCL_NET, "NET/Socket : setsockopt(TCP_NOTSENT_LOWAT=%d) failed on the control socket to %s: %s", lowat,
           c->peer, strerror(errno));
  }
  if (c->nThreads == 0) return ncclSuccess;
  int per = c->nSocks / c->nThreads;
  for (int t = 0; t < c->nThreads; t++) {
    c->threads[t].comm = c;
    c->threads[t].first = t; /* socket s is served by thread s % nThreads, as in NCCL */
    c->threads[t].stride = c->nThreads;
    c->threads[t].count = per;
    if (pthread_create(&c->threads[t].thread, NULL, railnetSocketHelperMain, &c->threads[t]) != 0) {
      WARN("NET/Socket : cannot start helper thread %d of %d: %s", t, c->nThreads, strerror(errno));
      return ncclSystemError;
    }
    c->threads[t].started = 1;
  }
  return ncclSuccess;
}

void railnetSocketCommFree(socketComm* c) {
  if (c == NULL) return;
  railnetSocketHelperStop(c);
  for (int t = 0; t < c->nThreads; t++)
    if (c->threads[t].started) pthread_join(c->threads[t].thread, NULL);
  if (c->ctrl.fd >= 0) ncclSocketClose(&c->ctrl);
  for (int i = 0; i < c->nSocks; i++)
    if (c->socks[i].fd >= 0) ncclSocketClose(&c->socks[i]);
  free(c->ctrlBufs);
  free(c->stage);
  free(c);
}
