/*
 * The Socket data path (net_socket_p2p.h). Each message first sends a control record
 * (size, tag, and the payload itself when it is at most NCCL_SOCKET_INLINE bytes) on the
 * control socket (net_socket_ctrl.c); larger payloads are cut into tasks of at least
 * NCCL_SOCKET_MIN_TASKSIZE bytes spread round-robin over the data sockets, or over the
 * sockets the record names (net_socket_helper.c, net_socket_balance.c), or sent on the control socket when there are
 * none or (sendLayout) the record says so. Both ends cut and assign in the same order, so no
 * per-chunk header is needed. test() drives both.
 */
#include <limits.h>
#include <string.h>
#include "net_socket_p2p.h"
#include "net_socket_ctrl.h"
#include "net_socket_helper.h"
#include "net_socket_balance.h"
#include "net_socket_types.h"
#include "net_prof.h"

/* Moves r's tasks from this thread as far as their sockets take them now (what is left goes
 * to the sockets' helper threads: railnetSocketKick). Returns whether all are done, or one
 * of them failed. */
static int tasksProgress(socketComm* c, socketRequest* r) {
  int all = 1;
  for (int i = 0; i < r->nTasks; i++) {
    socketTask* t = &c->queues[r->taskSock[i]].tasks[r->taskIdx[i]];
    if (t->reqSeq != r->seq) continue; /* done long ago, its slot reused */
    if (__atomic_load_n(&t->done, __ATOMIC_ACQUIRE)) {
      if (t->result != ncclSuccess) return 1; /* failed: test() reports it now, not after the other chunks */
      continue;
    }
    railnetSocketKick(c, r->taskSock[i]);
    if (!__atomic_load_n(&t->done, __ATOMIC_ACQUIRE)) all = 0;
  }
  return all;
}

/* A send's payload larger than inline follows its record when there are no data sockets, or
 * (offered by the receiver) when it is small and the control socket keeps up: one sendmsg
 * for a burst; once that socket fell behind, the next ones take the data sockets. There the
 * record names the chunk size and the sockets as the receiver offered. Writes r's record (and
 * socket set). (Not inlined: the path of the small, inline messages stays as short as it was.) */
__attribute__((noinline)) static void sendLayout(socketComm* c, socketRequest* r) {
  ctrlRecord rec = {.size = r->size, .tag = r->tag, .flags = 0};
  if (c->nSocks == 0) {
    r->onCtrl = r->size > 0;
  } else if (r->size > 0 && r->size <= c->ctrlMax) { /* (inl is 0 for an empty message too) */
    r->onCtrl = c->ctrlSpill == 0;
    if (!r->onCtrl) c->ctrlSpill--;
    rec.flags = r->onCtrl ? RAILNET_SOCKET_REC_ON_CTRL : 0;
  }
  if (!r->onCtrl && r->size > 0) {
    if (c->statedTask > 0) rec.flags |= RAILNET_SOCKET_REC_TASK_SIZE;
    if (c->balance) {
      ctrlSockSet set = railnetSocketChooseSet(c, r->size, rec.flags);
      rec.flags |= RAILNET_SOCKET_REC_SOCK_SET;
      memcpy(r->ctrl + sizeof(rec), &set, sizeof(set));
      r->ctrlLen += (int)sizeof(set);
    }
  }
  memcpy(r->ctrl, &rec, sizeof(rec));
}

static ncclResult_t postRequest(socketComm* c, int op, void* data, size_t size, int tag, void* phandle,
                                void** request) {
  if (request == NULL) return ncclInvalidArgument;
  *request = NULL;
  if (c->failed) {
    WARN("NET/Socket : %s on a comm with peer %s that already failed", op == NCCL_SOCKET_SEND ? "isend" : "irecv",
         c->peer);
    return ncclRemoteError;
  }
  if (data == NULL && size > 0) {
    WARN("NET/Socket : %s of %zu bytes from a NULL buffer", op == NCCL_SOCKET_SEND ? "isend" : "irecv", size);
    return ncclInvalidArgument;
  }
  for (int i = 0; i < MAX_REQUESTS; i++) {
    socketRequest* r = &c->requests[i];
    if (r->state != REQ_FREE) continue;
    r->op = op;
    r->data = (char*)data;
    r->size = size;
    r->tag = tag;
    r->seq = c->nextSeq++;
    c->bySeq[r->seq % MAX_REQUESTS] = r;
    r->ctrlOffset = 0;
    r->recordParsed = op == NCCL_SOCKET_SEND;
    r->ctrlDataOffset = 0;
    r->nTasks = 0;
    r->phandle = phandle;
    r->eh = NULL;
    r->ctrlEvent = 0;
    if (op == NCCL_SOCKET_SEND) {
      int inl = size <= (size_t)c->inlineSize ? (int)size : 0;
      r->onCtrl = 0; /* (a receive learns it from the record) */
      r->ctrlLen = (int)sizeof(ctrlRecord) + inl;
      if (inl) {
        ctrlRecord rec = {.size = size, .tag = tag, .flags = 0};
        memcpy(r->ctrl, &rec, sizeof(rec));
        memcpy(r->ctrl + sizeof(rec), data, inl);
      } else {
        sendLayout(c, r);
      }
    } else {
      r->ctrlLen = (int)sizeof(ctrlRecord); /* grows by the inline payload or the socket set once the record is in */
      r->afterRecord = r->data;
    }
    r->state = REQ_CTRL;
    *request = r;
    return ncclSuccess;
  }
  return ncclSuccess; /* out of request slots: NULL request, NCCL retries later */
}

ncclResult_t ncclNetSocketIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                                void** request) {
  (void)mhandle;
  socketComm* c = (socketComm*)sendComm;
  if (c == NULL || !c->isSend) {
    WARN("NET/Socket : isend on a comm that is not a send comm");
    return ncclInvalidArgument;
  }
  return postRequest(c, NCCL_SOCKET_SEND, data, size, tag, phandle, request);
}

ncclResult_t ncclNetSocketIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                                void** phandles, void** request) {
  (void)mhandles;
  socketComm* c = (socketComm*)recvComm;
  if (c == NULL || c->isSend) {
    WARN("NET/Socket : irecv on a comm that is not a receive comm");
    return ncclInvalidArgument;
  }
  if (n != 1 || data == NULL || sizes == NULL) {
    WARN("NET/Socket : irecv with %d buffers; the Socket transport receives one at a time (maxRecvs 1)", n);
    return ncclInvalidArgument;
  }
  return postRequest(c, NCCL_SOCKET_RECV, data[0], sizes[0], tags ? tags[0] : 0, phandles ? phandles[0] : NULL,
                     request);
}

static ncclResult_t commError(socketComm* c, ncclResult_t res) {
  c->failed = 1;
  return res;
}

/* Whether r's tasks are all done (or one failed), without moving any. */
static int tasksThrough(socketComm* c, socketRequest* r) {
  for (int i = 0; i < r->nTasks; i++) {
    socketTask* t = &c->queues[r->taskSock[i]].tasks[r->taskIdx[i]];
    if (t->reqSeq == r->seq && !__atomic_load_n(&t->done, __ATOMIC_ACQUIRE)) return 0;
  }
  return 1;
}

ncclResult_t ncclNetSocketTest(void* request, int* done, int* size) {
  socketRequest* r = (socketRequest*)request;
  if (r == NULL || done == NULL || r->state == REQ_FREE) {
    WARN("NET/Socket : test called with a %s request", r == NULL ? "NULL" : "completed or unknown");
    return ncclInvalidArgument;
  }
  socketComm* c = r->comm;
  *done = 0;
  if (c->failed) return ncclRemoteError;
  /* a send already through needs no progress of the others while they are small: those posted
   * since then wait for the test of one that is not, and leave together (one system call for
   * a burst of small messages instead of one each) */
  if (r->state != REQ_DATA || (r->nTasks > 0 && !tasksThrough(c, r)) || !railnetSocketCtrlCanWait(c)) {
    NCCLCHECK(railnetSocketCtrlProgress(c));
    if (r->state != REQ_DATA) return ncclSuccess;
    if (r->nTasks > 0 && !tasksProgress(c, r)) return ncclSuccess;
  }
  int all = 1;
  for (int i = 0; i < r->nTasks; i++) {
    socketTask* t = &c->queues[r->taskSock[i]].tasks[r->taskIdx[i]];
    if (t->reqSeq != r->seq) continue;
    if (!__atomic_load_n(&t->done, __ATOMIC_ACQUIRE)) all = 0;
    else if (t->result != ncclSuccess) return commError(c, t->result);
  }
  if (!all) return ncclSuccess;
  *done = 1;
  if (size) *size = r->size > (size_t)INT_MAX ? INT_MAX : (int)r->size;
  r->state = REQ_FREE;
  return ncclSuccess;
}

ncclResult_t ncclNetSocketIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request) {
  (void)recvComm;
  (void)n;
  (void)data;
  (void)sizes;
  (void)mhandles;
  /* host memory is coherent once recv() returned: nothing to flush */
  if (request) *request = NULL;
  return ncclSuccess;
}
