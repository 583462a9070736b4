/*
 * The Socket transport's data sockets (net_socket_helper.h). A socket's queue is moved by
 * whichever thread owns it at the moment: the caller's thread (NCCL's proxy thread, in
 * isend/irecv/test) tries first, so a chunk the socket takes at once costs no hand-off; a
 * helper thread takes over what would block and waits for the socket in poll(). One owner
 * at a time (an atomic flag per socket) keeps each socket's byte stream in posting order.
 * Several queued chunks of one socket move in one sendmsg/recvmsg.
 */
#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/sockios.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include "net_socket_helper.h"
#include "net_socket_types.h"
#include "net_prof.h"

/* Chunks of one socket gathered into one system call. */
#define IOV_BATCH 16

static void taskFinish(socketComm* c, socketTask* t, ncclResult_t res) {
  t->result = res;
  railnetProfStop(c->prof, &t->eh);
  __atomic_store_n(&t->done, 1, __ATOMIC_RELEASE);
}

/* The queue's tasks not done fail with res: a failed socket keeps failing. */
static void queueFail(socketComm* c, taskQueue* q, ncclResult_t res) {
  uint32_t tail = __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE);
  for (uint32_t i = q->doneHead; i != tail; i++) taskFinish(c, &q->tasks[i % TASK_QUEUE_LEN], res);
  __atomic_store_n(&q->head, tail, __ATOMIC_RELEASE);
  __atomic_store_n(&q->doneHead, tail, __ATOMIC_RELEASE);
}

/* Tasks whose bytes all moved, and whose zero-copy sends the kernel released, are done, in order. */
static int queueRetire(socketComm* c, taskQueue* q) {
  int n = 0;
  while (q->doneHead != q->head) {
    socketTask* t = &q->tasks[q->doneHead % TASK_QUEUE_LEN];
    if (t->zc && (int32_t)(q->zcDone - t->zcLast) <= 0) break; /* id zcLast not completed yet */
    taskFinish(c, t, ncclSuccess);
    __atomic_store_n(&q->doneHead, q->doneHead + 1, __ATOMIC_RELEASE);
    n++;
  }
  return n;
}

/* A range of completion ids the kernel released (railnetSocketZcReap's callback). They
 * usually come in order; one that comes early waits in the window's bitmap until the ids
 * before it are released too. */
static void zcCompleted(void* arg, uint32_t first, uint32_t last, int copied) {
  taskQueue* q = (taskQueue*)arg;
  if (copied) q->zcCopied |= 1;
  for (uint32_t id = first;; id++) {
    uint32_t ahead = id - q->zcDone;
    if (ahead < ZC_WINDOW) q->zcEarly[(id % ZC_WINDOW) / 64] |= 1ull << (id % 64);
    if (id == last) break;
  }
  for (;;) {
    uint64_t* word = &q->zcEarly[(q->zcDone % ZC_WINDOW) / 64];
    uint64_t bit = 1ull << (q->zcDone % 64);
    if (!(*word & bit)) break;
    *word &= ~bit;
    q->zcDone++;
  }
}

/* Reads the socket's zero-copy completions; in automatic mode, stops zero-copy on a socket
 * whose sends the kernel copies anyway (loopback, a veth pair inside one host). */
static void queueReap(socketComm* c, int s, taskQueue* q, int always) {
  if (q->zcDone == q->zcNext && !always) return;
  railnetSocketZcReap(&c->socks[s], zcCompleted, q);
  if (q->zcCopied == 1) {
    q->zcCopied = 2;
    if (c->zcMode == 2) q->zc = 0;
    if (!__atomic_exchange_n(&c->zcCopiedSaid, 1, __ATOMIC_RELAXED))
      INFO(NCCL_NET, "NET/Socket : the kernel copied the MSG_ZEROCOPY sends of data socket %d to %s (a local path such "
         "as loopback or veth)%s", s, c->peer,
         c->zcMode == 2 ? ": zero-copy off for this socket (RAILNET_SOCKET_ZEROCOPY=1 keeps it)" : "");
  }
}

/* One system call's worth of the queue's head tasks; returns bytes moved, -1 on failure. */
static long queueOnce(socketComm* c, int s, taskQueue* q, uint32_t tail, int* full) {
  int op = c->isSend ? NCCL_SOCKET_SEND : NCCL_SOCKET_RECV;
  struct iovec iov[IOV_BATCH];
  int n = 0;
  size_t want = 0;
  for (uint32_t i = q->head; i != tail && n < IOV_BATCH && want < RAILNET_SOCKET_SYSCALL_BYTES; i++) {
    socketTask* t = &q->tasks[i % TASK_QUEUE_LEN];
    if (!t->evStarted) {
      t->evStarted = 1;
      railnetProfSockStart(c->prof, &t->eh, t->phandle, c->socks[s].fd, op, t->size);
    }
    size_t len = t->size - t->offset;
    if (len > RAILNET_SOCKET_SYSCALL_BYTES - want) len = RAILNET_SOCKET_SYSCALL_BYTES - want;
    iov[n].iov_base = t->data + t->offset;
    iov[n].iov_len = len;
    want += len;
    n++;
  }
  /* zero-copy only while the ids in flight fit the completion window */
  struct railnetSocketIo io = {.zerocopy = q->zc && want >= c->zcMin && q->zcNext - q->zcDone < ZC_WINDOW - IOV_BATCH};
  int askedZc = io.zerocopy;
  ncclResult_t r = railnetSocketProgressV(op, &c->socks[s], iov, n, &io);
  if (askedZc && !io.zerocopy && q->zc) {
    q->zc = 0;
    if (c->zcMode == 1)
      WARN("NET/Socket : the kernel refused MSG_ZEROCOPY on data socket %d to %s (ENOBUFS: the pinned pages are over "
           "RLIMIT_MEMLOCK); sending by copy. Raise 'ulimit -l' or set RAILNET_SOCKET_ZEROCOPY=0", s, c->peer);
    else
      INFO(NCCL_NET, "NET/Socket : MSG_ZEROCOPY refused on data socket %d to %s (ENOBUFS: pinned pages over "
           "RLIMIT_MEMLOCK): zero-copy off for this socket", s, c->peer);
  }
  q->zcNext += (uint32_t)io.zcSends;
  if (c->balance && c->isSend) __atomic_fetch_add(&q->moved, (uint64_t)io.moved, __ATOMIC_RELAXED); /* balance */
  size_t left = io.moved;
  while (left > 0) {
    socketTask* t = &q->tasks[q->head % TASK_QUEUE_LEN];
    size_t take = t->size - t->offset < left ? t->size - t->offset : left;
    t->offset += take;
    left -= take;
    if (io.zcSends > 0) {
      t->zc = 1;
      t->zcLast = q->zcNext - 1; /* the last send of this call: released last */
    }
    if (t->offset < t->size) break;
    __atomic_store_n(&q->head, q->head + 1, __ATOMIC_RELEASE);
  }
  if (r != ncclSuccess || io.closed) {
    if (q->head != tail) {
      socketTask* t = &q->tasks[q->head % TASK_QUEUE_LEN];
      WARN("NET/Socket : data socket %d to peer %s %s after %zu of %zu bytes of a chunk: the peer process died or "
           "the network failed",
           s, c->peer, io.closed ? "was closed" : "failed", t->offset, t->size);
    }
    queueFail(c, q, ncclRemoteError);
    return -1;
  }
  *full = io.moved < want;
  return (long)io.moved;
}

int railnetSocketQueueProgress(socketComm* c, int s) {
  taskQueue* q = &c->queues[s];
  if (__atomic_load_n(&q->doneHead, __ATOMIC_ACQUIRE) == __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE)) return 0;
  if (__atomic_exchange_n(&q->owner, 1, __ATOMIC_ACQUIRE)) return -1;
  int moved = 0;
  for (;;) {
    queueReap(c, s, q, 0);
    if (queueRetire(c, q) > 0) moved = 1;
    uint32_t tail = __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE);
    if (q->head == tail) break;
    int full = 0;
    long n = queueOnce(c, s, q, tail, &full);
    if (n != 0) moved = 1;
    if (n < 0) break;
    if (queueRetire(c, q) > 0) moved = 1;
    if (n == 0 || full) break;
  }
  __atomic_store_n(&q->owner, 0, __ATOMIC_RELEASE);
  return moved;
}

/* Nothing to move or to wait for. */
static int queueEmpty(socketComm* c, int s) {
  taskQueue* q = &c->queues[s];
  return __atomic_load_n(&q->doneHead, __ATOMIC_SEQ_CST) == __atomic_load_n(&q->tail, __ATOMIC_SEQ_CST);
}

static void railnetSocketHelperWake(socketComm* c, int s, int stuck);

size_t railnetSocketTaskSize(const socketComm* c, size_t size, uint32_t flags, int k) {
  size_t task = (size + (size_t)k - 1) / (size_t)k;
  size_t min = (flags & RAILNET_SOCKET_REC_TASK_SIZE) ? c->statedTask : c->minTask;
  return task < min ? min : task;
}

void railnetSocketTasksPost(socketComm* c, socketRequest* r, uint64_t* touched) {
  size_t size = r->size;
  ctrlRecord rec; /* the chunk size, and the socket set if the record has one */
  memcpy(&rec, r->ctrl, sizeof(rec));
  ctrlSockSet set = 0;
  if (rec.flags & RAILNET_SOCKET_REC_SOCK_SET) memcpy(&set, r->ctrl + sizeof(rec), sizeof(set));
  size_t task = railnetSocketTaskSize(c, size, rec.flags, set ? __builtin_popcountll(set) : c->nSocks);
  int s = set ? __builtin_ctzll(set) : c->nextSock;
  for (size_t off = 0; off < size; off += task) {
    taskQueue* q = &c->queues[s];
    int slot = (int)(q->tail % TASK_QUEUE_LEN);
    socketTask* t = &q->tasks[slot];
    t->data = r->data + off;
    t->size = size - off < task ? size - off : task;
    t->offset = 0;
    t->result = ncclSuccess;
    t->zc = 0;
    t->reqSeq = r->seq;
    t->phandle = r->phandle;
    t->eh = NULL;
    t->evStarted = 0;
    __atomic_store_n(&t->done, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&q->tail, q->tail + 1, __ATOMIC_SEQ_CST); /* see railnetSocketHelperWake */
    r->taskSock[r->nTasks] = s;
    r->taskIdx[r->nTasks] = slot;
    r->nTasks++;
    *touched |= 1ull << s;
    if (set) {
      set &= set - 1; /* (the receiver checked that the chunks are as many as the bits) */
      if (set) s = __builtin_ctzll(set);
    } else {
      s = (s + 1) % c->nSocks;
    }
  }
  if (!(rec.flags & RAILNET_SOCKET_REC_SOCK_SET)) c->nextSock = s;
  __atomic_fetch_add(&c->posted, 1, __ATOMIC_RELAXED);
}

void railnetSocketKick(socketComm* c, int s) {
  int moved = railnetSocketQueueProgress(c, s);
  if (moved >= 0 && !queueEmpty(c, s)) railnetSocketHelperWake(c, s, !moved);
}

void railnetSocketTasksKick(socketComm* c, uint64_t touched) {
  for (int s = 0; touched != 0; s++, touched >>= 1)
    if (touched & 1) railnetSocketKick(c, s);
}

static void futexWait(uint32_t* word, uint32_t seen, long ns) {
  struct timespec ts = {.tv_sec = ns / 1000000000L, .tv_nsec = ns % 1000000000L};
  syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, seen, &ts, NULL, 0);
}

static void railnetSocketHelperWake(socketComm* c, int s, int stuck) {
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

/* Socket s's queue waits only for zero-copy completions: a connection that failed (or hung
 * up) fails the queue; a connection whose every byte the peer has acknowledged (SIOCOUTQ 0,
 * read while this thread owns the socket, so no send can slip in between) holds no page of
 * ours any more, so completions still missing are taken as done (said once per comm): a lost
 * notification never hangs a request. */
static void zcWaitCheck(socketComm* c, int s, short revents) {
  taskQueue* q = &c->queues[s];
  if (__atomic_exchange_n(&q->owner, 1, __ATOMIC_ACQUIRE)) return;
  queueReap(c, s, q, (revents & POLLERR) != 0); /* late notifications too: a stale POLLERR would spin poll() */
  queueRetire(c, q);
  uint32_t tail = __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE);
  int waiting = q->doneHead != tail && q->head == tail;
  int err = 0, outq = -1;
  socklen_t len = sizeof(err);
  if (waiting && (revents & (POLLERR | POLLHUP))) getsockopt(c->socks[s].fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (waiting && (err != 0 || (revents & POLLHUP))) {
    WARN("NET/Socket : data socket %d to peer %s %s while its zero-copy sends waited for the kernel: the peer "
         "process died or the network failed", s, c->peer, err != 0 ? strerror(err) : "hung up");
    queueFail(c, q, ncclRemoteError);
  } else if (waiting && q->zcDone != q->zcNext && ioctl(c->socks[s].fd, SIOCOUTQ, &outq) == 0 && outq == 0) {
    queueReap(c, s, q, 0); /* what the last acknowledgement released */
    if (q->zcDone != q->zcNext) {
      if (!__atomic_exchange_n(&c->zcLostSaid, 1, __ATOMIC_RELAXED))
        WARN("NET/Socket : data socket %d to peer %s: the peer acknowledged every byte but the kernel reported only "
             "%u of %u zero-copy completions; taking the rest as done (set RAILNET_SOCKET_ZEROCOPY=0 if this "
             "repeats)", s, c->peer, q->zcDone, q->zcNext);
      q->zcDone = q->zcNext;
      memset(q->zcEarly, 0, sizeof(q->zcEarly));
    }
    queueRetire(c, q);
  }
  __atomic_store_n(&q->owner, 0, __ATOMIC_RELEASE);
}

/* A receiving helper thread is woken by poll() once the bytes its queued tasks still wait
 * for are there (up to RAILNET_SOCKET_SYSCALL_BYTES), not by every segment that arrives: each
 * wake-up costs the sender's CPU an inter-processor wake-up over veth and loopback, and the
 * caller's thread takes what arrives in between anyway. Set while this thread owns the queue
 * (the tasks' offsets are the owner's); if the caller's thread takes some of those bytes
 * afterwards, or owns the queue now (the last value stays), the wait ends at poll()'s 10 ms
 * at worst, and the next pass sets it again. Errors and a closed connection wake poll()
 * whatever the mark; the kernel (Linux 4.18 and later) keeps it within half the receive
 * buffer, so a fixed NCCL_SOCKET_RCVBUF cannot make it unreachable. A kernel that refuses it
 * (said once) leaves the socket at the default of 1. */
static void queueLowat(socketComm* c, int s, taskQueue* q) {
  if (q->lowat < 0 || __atomic_exchange_n(&q->owner, 1, __ATOMIC_ACQUIRE)) return;
  size_t want = 0;
  uint32_t tail = __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE);
  for (uint32_t i = q->head; i != tail && want < RAILNET_SOCKET_SYSCALL_BYTES; i++) {
    socketTask* t = &q->tasks[i % TASK_QUEUE_LEN];
    want += t->size - t->offset;
  }
  __atomic_store_n(&q->owner, 0, __ATOMIC_RELEASE);
  int lowat = (int)(want > RAILNET_SOCKET_SYSCALL_BYTES ? RAILNET_SOCKET_SYSCALL_BYTES : want > 0 ? want : 1);
  if (lowat == q->lowat) return;
  q->lowat = lowat;
  if (setsockopt(c->socks[s].fd, SOL_SOCKET, SO_RCVLOWAT, &lowat, sizeof(lowat)) != 0) {
    static int said;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
      INFO(NCCL_NET, "NET/Socket : setsockopt(SO_RCVLOWAT=%d) failed on data socket %d from %s: %s; helper threads "
           "wake at every segment", lowat, s, c->peer, strerror(errno));
    q->lowat = -1;
  }
}

void* railnetSocketHelperMain(void* arg) {
  helperThread* h = (helperThread*)arg;
  socketComm* c = h->comm;
  struct pollfd pfds[MAX_SOCKETS];
  int polled[MAX_SOCKETS];
  while (!__atomic_load_n(&c->stop, __ATOMIC_ACQUIRE)) {
    int active = 0, moved = 0, busy = 0;
    for (int k = 0; k < h->count; k++) {
      int s = h->first + k * h->stride;
      int r = railnetSocketQueueProgress(c, s);
      if (r > 0) moved = 1;
      if (r < 0) busy = 1;
      if (r == 0 && !queueEmpty(c, s)) {
        taskQueue* q = &c->queues[s];
        int toMove = __atomic_load_n(&q->head, __ATOMIC_ACQUIRE) != __atomic_load_n(&q->tail, __ATOMIC_ACQUIRE);
        pfds[active].fd = c->socks[s].fd;
        /* only zero-copy completions to wait for: they come as POLLERR, which poll always reports */
        pfds[active].events = !toMove ? 0 : c->isSend ? POLLOUT : POLLIN;
        if (toMove && !c->isSend) queueLowat(c, s, q);
        pfds[active].revents = 0;
        polled[active++] = s;
      }
    }
    if (moved) continue;
    if (busy) {
      sched_yield(); /* the caller's thread moves one of our sockets right now */
      continue;
    }
    if (active > 0) {
      poll(pfds, active, 10);
      for (int i = 0; i < active; i++)
        if (pfds[i].events == 0 || (pfds[i].revents & POLLERR)) zcWaitCheck(c, polled[i], pfds[i].revents);
      continue;
    }
    helperSleep(h);
  }
  return NULL;
}
