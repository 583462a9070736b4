/*
 * The Socket transport's helper threads (net_socket_helper.h): each serves a range of a
 * comm's data sockets, running the head task of each socket's queue until it is done.
 */
#include <limits.h>
#include <poll.h>
#include "net_socket_helper.h"
#include "net_socket_types.h"
#include "net_prof.h"

/* Moves what the socket takes now; returns 1 if anything moved. */
static int taskProgress(socketComm* c, int s, socketTask* t) {
  int op = c->isSend ? NCCL_SOCKET_SEND : NCCL_SOCKET_RECV;
  size_t before = t->offset;
  if (!t->evStarted) {
    t->evStarted = 1;
    railnetProfSockStart(c->prof, &t->eh, t->phandle, c->socks[s].fd, op, t->size);
  }
  while (t->offset < t->size) {
    size_t want = t->size - t->offset;
    if (want > (size_t)INT_MAX) want = (size_t)INT_MAX;
    int off = 0, closed = 0;
    ncclResult_t r = ncclSocketProgress(op, &c->socks[s], t->data + t->offset, (int)want, &off, &closed);
    t->offset += (size_t)off;
    if (r != ncclSuccess || closed) {
      WARN("NET/Socket : data socket %d to peer %s %s after %zu of %zu bytes of a chunk: the peer process died or "
           "the network failed",
           s, c->peer, closed ? "was closed" : "failed", t->offset, t->size);
      t->result = ncclRemoteError;
      railnetProfStop(c->prof, &t->eh);
      __atomic_store_n(&t->done, 1, __ATOMIC_RELEASE);
      return 1;
    }
    if (off == 0) break;
  }
  if (t->offset == t->size) {
    railnetProfStop(c->prof, &t->eh);
    __atomic_store_n(&t->done, 1, __ATOMIC_RELEASE);
  }
  return t->offset != before;
}

void* railnetSocketHelperMain(void* arg) {
  helperThread* h = (helperThread*)arg;
  socketComm* c = h->comm;
  struct pollfd pfds[MAX_SOCKETS];
  for (;;) {
    int active = 0, moved = 0;
    for (int k = 0; k < h->count; k++) {
      int s = h->first + k;
      taskQueue* q = &c->queues[s];
      int head = q->head, tail = __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE);
      if (head == tail) continue;
      socketTask* t = &q->tasks[head % TASK_QUEUE_LEN];
      moved |= taskProgress(c, s, t);
      if (__atomic_load_n(&t->done, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&q->head, head + 1, __ATOMIC_RELEASE);
        moved = 1;
        if (t->result != ncclSuccess) {
          /* a failed socket keeps failing: drain its queue with the same error */
          while (__atomic_load_n(&q->head, __ATOMIC_ACQUIRE) != __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE)) {
            socketTask* n = &q->tasks[q->head % TASK_QUEUE_LEN];
            n->result = ncclRemoteError;
            __atomic_store_n(&n->done, 1, __ATOMIC_RELEASE);
            __atomic_store_n(&q->head, q->head + 1, __ATOMIC_RELEASE);
          }
        }
      } else {
        pfds[active].fd = c->socks[s].fd;
        pfds[active].events = c->isSend ? POLLOUT : POLLIN;
        active++;
      }
    }
    if (moved) continue;
    if (active > 0) {
      poll(pfds, active, 10);
      if (__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) return NULL;
      continue;
    }
    pthread_mutex_lock(&c->lock);
    int idle = 1;
    for (int k = 0; k < h->count && idle; k++) {
      taskQueue* q = &c->queues[h->first + k];
      if (q->head != __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE)) idle = 0;
    }
    if (idle && !c->stop) pthread_cond_wait(&c->cond, &c->lock);
    int stop = c->stop;
    pthread_mutex_unlock(&c->lock);
    if (stop) return NULL;
  }
}
