/*
 * The Socket data path (net_socket_p2p.h). Each message first sends a control record
 * (size, tag, and the payload itself when it is at most NCCL_SOCKET_INLINE bytes) on the
 * control socket; larger payloads are cut into tasks of at least NCCL_SOCKET_MIN_TASKSIZE
 * bytes spread round-robin over the data sockets, which the helper threads move (or sent on
 * the control socket when there are none). Both ends cut and assign in the same order, so
 * no per-chunk header is needed. test() drives the control socket.
 */
#include <limits.h>
#include <string.h>
#include "net_socket_p2p.h"
#include "net_socket_helper.h"
#include "net_socket_types.h"
#include "net_prof.h"

/* Moves r's tasks from this thread as far as their sockets take them now; a socket that
 * takes nothing (full, or nothing arrived yet) is handed to its helper thread, which waits
 * for it in poll(). A socket that moved part of a task stays with this thread: the helper's
 * wake-up would cost more than the next test() (a helper in the short sleep of a busy comm
 * looks at its queues every 10 ms, one in an idle comm's long sleep is woken, so nothing
 * waits on test() alone). Returns whether all of r's tasks are done. */
static int tasksProgress(socketComm* c, socketRequest* r) {
  int all = 1;
  for (int i = 0; i < r->nTasks; i++) {
    socketTask* t = &c->queues[r->taskSock[i]].tasks[r->taskIdx[i]];
    if (__atomic_load_n(&t->done, __ATOMIC_ACQUIRE)) continue;
    int moved = railnetSocketQueueProgress(c, r->taskSock[i]);
    if (moved >= 0 && !__atomic_load_n(&t->done, __ATOMIC_ACQUIRE)) railnetSocketHelperWake(c, r->taskSock[i], !moved);
    if (!__atomic_load_n(&t->done, __ATOMIC_ACQUIRE)) all = 0;
  }
  return all;
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
      ctrlRecord rec = {.size = size, .tag = tag, .pad = 0};
      memcpy(r->ctrl, &rec, sizeof(rec));
      int inl = size <= (size_t)c->inlineSize ? (int)size : 0;
      if (inl) memcpy(r->ctrl + sizeof(rec), data, inl);
      r->ctrlLen = (int)sizeof(rec) + inl;
    } else {
      r->ctrlLen = (int)sizeof(ctrlRecord); /* grows by the inline payload once the size is known */
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

/* Cuts the message after its inline part into tasks on the data sockets, moves what the
 * sockets take at once, and wakes the helper threads of the sockets left with work. */
static void scheduleTasks(socketComm* c, socketRequest* r, size_t start) {
  size_t left = r->size - start;
  size_t task = (left + c->nSocks - 1) / c->nSocks;
  if (task < c->minTask) task = c->minTask;
  for (size_t off = start; off < r->size; off += task) {
    int s = c->nextSock;
    c->nextSock = (c->nextSock + 1) % c->nSocks;
    taskQueue* q = &c->queues[s];
    int slot = q->tail % TASK_QUEUE_LEN;
    socketTask* t = &q->tasks[slot];
    t->data = r->data + off;
    t->size = r->size - off < task ? r->size - off : task;
    t->offset = 0;
    t->result = ncclSuccess;
    t->phandle = r->phandle;
    t->eh = NULL;
    t->evStarted = 0;
    __atomic_store_n(&t->done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&q->tail, q->tail + 1, __ATOMIC_SEQ_CST); /* see railnetSocketHelperWake */
    r->taskSock[r->nTasks] = s;
    r->taskIdx[r->nTasks] = slot;
    r->nTasks++;
  }
  __atomic_fetch_add(&c->posted, 1, __ATOMIC_RELAXED);
  tasksProgress(c, r);
}

static ncclResult_t commError(socketComm* c, ncclResult_t res) {
  c->failed = 1;
  return res;
}

/* The profiler event of the control socket's part of r: the payload bytes it carries (the
 * inline part, or all of it without data sockets; the record itself is framing). Started
 * once the size is known (a receive learns it from the record), stopped when that part is
 * done or failed. */
static void ctrlEventStart(socketComm* c, socketRequest* r) {
  if (r->ctrlEvent != 0) return;
  r->ctrlEvent = 1;
  size_t onCtrl = r->size <= (size_t)c->inlineSize || c->nSocks == 0 ? r->size : 0;
  railnetProfSockStart(c->prof, &r->eh, r->phandle, c->ctrl.fd, r->op, onCtrl);
}

static void ctrlEventStop(socketComm* c, socketRequest* r) {
  if (r->ctrlEvent != 1) return;
  r->ctrlEvent = 2;
  railnetProfStop(c->prof, &r->eh);
}

static ncclResult_t requestError(socketComm* c, socketRequest* r, ncclResult_t res) {
  ctrlEventStop(c, r);
  return commError(c, res);
}

/* Drives the control socket for the oldest requests, in posting order. */
static ncclResult_t ctrlProgress(socketComm* c) {
  for (;;) {
    socketRequest* r = c->bySeq[c->ctrlSeq % MAX_REQUESTS];
    if (r == NULL || r->seq != c->ctrlSeq || r->state != REQ_CTRL) return ncclSuccess;
    if (r->op == NCCL_SOCKET_SEND) ctrlEventStart(c, r);
    int closed = 0;
    ncclResult_t res = ncclSocketProgress(r->op, &c->ctrl, r->ctrl, r->ctrlLen, &r->ctrlOffset, &closed);
    if (res != ncclSuccess || closed) {
      WARN("NET/Socket : control connection to peer %s %s: the peer process died or closed its comm", c->peer,
           closed ? "was closed" : "failed");
      return requestError(c, r, ncclRemoteError);
    }
    if (!r->recordParsed && r->ctrlOffset == (int)sizeof(ctrlRecord)) {
      r->recordParsed = 1;
      ctrlRecord rec;
      memcpy(&rec, r->ctrl, sizeof(rec));
      if (rec.size > r->size) {
        WARN("NET/Socket : peer %s sent a message of %llu bytes but the receive buffer holds %zu bytes: a mismatch "
             "of sizes between ranks (check that all ranks run the same collective with the same NCCL_PROTO / "
             "NCCL_ALGO settings)",
             c->peer, (unsigned long long)rec.size, r->size);
        return requestError(c, r, ncclInvalidUsage);
      }
      if (rec.tag != r->tag) {
        WARN("NET/Socket : peer %s sent a message with tag %d, the posted receive expects tag %d", c->peer, rec.tag,
             r->tag);
        return requestError(c, r, ncclInvalidUsage);
      }
      r->size = rec.size;
      r->ctrlLen += rec.size <= (uint64_t)c->inlineSize ? (int)rec.size : 0;
      ctrlEventStart(c, r);
      continue; /* receive the inline payload, if any */
    }
    if (r->ctrlOffset < r->ctrlLen) return ncclSuccess;
    if (r->op == NCCL_SOCKET_RECV && r->ctrlLen > (int)sizeof(ctrlRecord))
      memcpy(r->data, r->ctrl + sizeof(ctrlRecord), r->ctrlLen - sizeof(ctrlRecord));
    size_t start = r->size <= (size_t)c->inlineSize ? r->size : 0;
    if (start < r->size && c->nSocks > 0) {
      scheduleTasks(c, r, start);
      ctrlEventStop(c, r);
      r->state = REQ_DATA;
      c->ctrlSeq++;
      continue;
    }
    /* no data sockets: the payload follows on the control socket, before the next record */
    while (r->ctrlDataOffset < r->size - start) {
      size_t want = r->size - start - r->ctrlDataOffset;
      if (want > (size_t)INT_MAX) want = (size_t)INT_MAX;
      int off = 0;
      res = ncclSocketProgress(r->op, &c->ctrl, r->data + start + r->ctrlDataOffset, (int)want, &off, &closed);
      r->ctrlDataOffset += (size_t)off;
      if (res != ncclSuccess || closed) {
        WARN("NET/Socket : connection to peer %s %s after %zu of %zu bytes: the peer process died or the network "
             "failed", c->peer, closed ? "was closed" : "failed", r->ctrlDataOffset, r->size);
        return requestError(c, r, ncclRemoteError);
      }
      if (off == 0) return ncclSuccess;
    }
    ctrlEventStop(c, r);
    r->state = REQ_DATA;
    c->ctrlSeq++;
  }
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
  NCCLCHECK(ctrlProgress(c));
  if (r->state != REQ_DATA) return ncclSuccess;
  if (!tasksProgress(c, r)) return ncclSuccess;
  for (int i = 0; i < r->nTasks; i++) {
    socketTask* t = &c->queues[r->taskSock[i]].tasks[r->taskIdx[i]];
    if (!__atomic_load_n(&t->done, __ATOMIC_ACQUIRE)) return ncclSuccess;
    if (t->result != ncclSuccess) return commError(c, t->result);
  }
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
