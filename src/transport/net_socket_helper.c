/*
 * The Socket transport's data sockets (net_socket_helper.h). A socket's queue is moved by
 * whichever thread owns it at the moment: the caller's thread (NCCL's proxy thread, in
 * isend/irecv/test) tries first, so a chunk the socket takes at once costs no hand-off; a
 * helper thread takes over what would block and waits for the socket in poll(). One owner
 * at a time (an atomic flag per socket) keeps each socket's byte stream in posting order.
 * Several queued chunks of one socket move in one sendmsg/recvmsg.
 */
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include "net_socket_helper.h"
#include "net_socket_types.h"
#include "net_prof.h"

/* Chunks of one socket gathered into one system call. */
#define IOV_BATCH 16
/* Bytes asked of one system call (a chunk may be larger than sendmsg/recvmsg take at once). */
#define SYSCALL_BYTES ((size_t)1 << 30)

static void taskFinish(socketComm* c, socketTask* t, ncclResult_t res) {
  t->result = res;
  railnetProfStop(c->prof, &t->eh);
  __atomic_store_n(&t->done, 1, __ATOMIC_RELEASE);
}

/* The queue's tasks from its head on fail with res: a failed socket keeps failing. */
static void queueFail(socketComm* c, taskQueue* q, ncclResult_t res) {
  int tail = __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE);
  for (int i = q->head; i != tail; i++) taskFinish(c, &q->tasks[i % TASK_QUEUE_LEN], res);
  __atomic_store_n(&q->head, tail, __ATOMIC_RELEASE);
}

/* One system call's worth of the queue's head tasks; returns bytes moved, -1 on failure. */
static long queueOnce(socketComm* c, int s, taskQueue* q, int tail, int* full) {
  int op = c->isSend ? NCCL_SOCKET_SEND : NCCL_SOCKET_RECV;
  struct iovec iov[IOV_BATCH];
  int n = 0;
  size_t want = 0;
  for (int i = q->head; i != tail && n < IOV_BATCH && want < SYSCALL_BYTES; i++) {
    socketTask* t = &q->tasks[i % TASK_QUEUE_LEN];
    if (!t->evStarted) {
      t->evStarted = 1;
      railnetProfSockStart(c->prof, &t->eh, t->phandle, c->socks[s].fd, op, t->size);
    }
    size_t len = t->size - t->offset;
    if (len > SYSCALL_BYTES - want) len = SYSCALL_BYTES - want;
    iov[n].iov_base = t->data + t->offset;
    iov[n].iov_len = len;
    want += len;
    n++;
  }
  size_t moved = 0;
  int closed = 0;
  ncclResult_t r = railnetSocketProgressV(op, &c->socks[s], iov, n, &moved, &closed);
  size_t left = moved;
  int head = q->head;
  while (left > 0) {
    socketTask* t = &q->tasks[head % TASK_QUEUE_LEN];
    size_t take = t->size - t->offset < left ? t->size - t->offset : left;
    t->offset += take;
    left -= take;
    if (t->offset < t->size) break;
    taskFinish(c, t, ncclSuccess);
    head++;
  }
  __atomic_store_n(&q->head, head, __ATOMIC_RELEASE);
  if (r != ncclSuccess || closed) {
    if (head != tail) {
      socketTask* t = &q->tasks[head % TASK_QUEUE_LEN];
      WARN("NET/Socket : data socket %d to peer %s %s after %zu of %zu bytes of a chunk: the peer process died or "
           "the network failed",
           s, c->peer, closed ? "was closed" : "failed", t->offset, t->size);
    }
    queueFail(c, q, ncclRemoteError);
    return -1;
  }
  *full = moved < want;
  return (long)moved;
}

int railnetSocketQueueProgress(socketComm* c, int s) {
  taskQueue* q = &c->queues[s];
  if (__atomic_load_n(&q->head, __ATOMIC_ACQUIRE) == __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE)) return 0;
  if (__atomic_exchange_n(&q->owner, 1, __ATOMIC_ACQUIRE)) return -1;
  int moved = 0;
  for (;;) {
    int tail = __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE);
    if (q->head == tail) break;
    int full = 0;
    long n = queueOnce(c, s, q, tail, &full);
    if (n != 0) moved = 1;
    if (n <= 0 || full) break;
  }
  __atomic_store_n(&q->owner, 0, __ATOMIC_RELEASE);
  return moved;
}

static int queueEmpty(socketComm* c, int s) {
  taskQueue* q = &c->queues[s];
  return __atomic_load_n(&q->head, __ATOMIC_SEQ_CST) == __atomic_load_n(&q->tail, __ATOMIC_SEQ_CST);
}

static void futexWait(uint32_t* word, uint32_t seen, long ns) {
  struct timespec ts = {.tv_sec = ns / 1000000000L, .tv_nsec = ns % 1000000000L};
  syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
}

void railnetSocketHelperWake(socketComm* c, int s, int stuck) {
  if (c->nThreads == 0) return;
  helperThread* h = &c->threads[s % c->nThreads];
  /* the poster stored the queue's tail (sequentially consistent) before this load; the
   * helper stores "sleeping" before its last look at the tails: one of the two sees the other */
  int sleeping = __atomic_load_n(&h->sleeping, __ATOMIC_SEQ_CST);
  if (sleeping == 0 || (!stuck && sleeping == 1)) return;
  __atomic_fetch_add(&h->wakeSeq, 1, __ATOMIC_RELEASE);
  syscall(SYS_futex, &h->wakeSeq, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

void railnetSocketHelperStop(socketComm* c) {
  __atomic_store_n(&c->stop, 1, __ATOMIC_RELEASE);
  for (int t = 0; t < c->nThreads; t++) {
    __atomic_fetch_add(&c->threads[t].wakeSeq, 1, __ATOMIC_RELEASE);
    syscall(SYS_futex, &c->threads[t].wakeSeq, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  }
}

/* Sleeps until woken (a socket of h's took nothing from the caller's thread, or the comm
 * stops). While the comm posts tasks it looks at its queues every 10 ms anyway (tasks the
 * caller's thread left half done move even if test() is not called again); an idle comm's
 * helper sleeps a second at a time and is woken by the first task posted after. */
static void helperSleep(helperThread* h) {
  socketComm* c = h->comm;
  unsigned posted = __atomic_load_n(&c->posted, __ATOMIC_RELAXED);
  int busy = posted != h->seenPosted;
  h->seenPosted = posted;
  uint32_t seen = __atomic_load_n(&h->wakeSeq, __ATOMIC_ACQUIRE);
  __atomic_store_n(&h->sleeping, busy ? 1 : 2, __ATOMIC_SEQ_CST);
  int idle = !__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE);
  for (int k = 0; k < h->count && idle; k++) idle = queueEmpty(c, h->first + k * h->stride);
  if (idle) futexWait(&h->wakeSeq, seen, busy ? 10000000L : 1000000000L);
  __atomic_store_n(&h->sleeping, 0, __ATOMIC_RELAXED);
}

void* railnetSocketHelperMain(void* arg) {
  helperThread* h = (helperThread*)arg;
  socketComm* c = h->comm;
  struct pollfd pfds[MAX_SOCKETS];
  while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
    int active = 0, moved = 0, busy = 0;
    for (int k = 0; k < h->count; k++) {
      int s = h->first + k * h->stride;
      int r = railnetSocketQueueProgress(c, s);
      if (r > 0) moved = 1;
      if (r < 0) busy = 1;
      if (r == 0 && !queueEmpty(c, s)) {
        pfds[active].fd = c->socks[s].fd;
        pfds[active].events = c->isSend ? POLLOUT : POLLIN;
        active++;
      }
    }
    if (moved) continue;
    if (busy) {
      sched_yield(); /* the caller's thread moves one of our sockets right now */
      continue;
    }
    if (active > 0) {
      poll(pfds, active, 10);
      continue;
    }
    helperSleep(h);
  }
  return NULL;
}
