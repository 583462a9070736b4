/*
 * Where a send comm puts each message's chunks (net_socket_balance.h). When both ends are
 * railnet with RAILNET_SOCKET_BALANCE on, a message on the data sockets goes to the sockets
 * that would deliver it soonest, and its record names them (RAILNET_SOCKET_REC_SOCK_SET); the
 * receiver takes the chunks from there. A slow or congested connection (a path through a busy
 * link) so gets few chunks, or none, where NCCL's round-robin makes every message wait for it
 * in turn. The estimate per socket: the bytes it still has to deliver, over the rate at which
 * its peer acknowledges them. Only the caller's thread (isend) runs this; the helper threads
 * add to `moved`.
 */
#include <stddef.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <linux/tcp.h>
#include <linux/sockios.h>
#include "net_socket_balance.h"
#include "net_socket_helper.h"
#include "net_socket_types.h"

#define RATE_MIN_NS 1000000ull /* a rate's interval: at least 1 ms */
#define RATE_STALE_NS 100000000ull
#define REFRESH_PER_CHOICE 4 /* sockets whose kernel state one choice reads (an ioctl each) */

/* The time (µs) the kernel spent limited by the peer's receive window on socket fd: it grows
 * while the receiving process does not read (0 from a kernel without it, before 4.10; the
 * kernel counts it in jiffies). */
static uint64_t rwndLimitedUs(int fd) {
  struct tcp_info info;
  socklen_t len = sizeof(info);
  memset(&info, 0, sizeof(info));
  if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0 ||
      len < offsetof(struct tcp_info, tcpi_rwnd_limited) + sizeof(info.tcpi_rwnd_limited))
    return 0;
  return info.tcpi_rwnd_limited;
}

/* Reads what socket s's peer acknowledged (the bytes handed to the kernel less those in it
 * not acknowledged yet, SIOCOUTQ) and updates the rate at which it acknowledges: measured over
 * intervals of at least 1 ms during which the socket was never idle (some of the bytes it had
 * handed to the kernel at the start are still not acknowledged at the end) and some bytes
 * were acknowledged. An idle socket says nothing about its path, and an interval that may
 * hold an idle gap (between two bursts) would make a fast path look slow; one in which the
 * peer's receive window held the socket back (its process did not read: while it waits for a
 * slow socket's chunk, every socket stalls, the fast ones too) is not measured either. 0 until measured, and again when, 100 ms or more after the last measurement, the
 * socket had delivered by the end of an interval all it was given before it. */
static void queueRefresh(socketComm* c, int s, uint64_t now) {
  taskQueue* q = &c->queues[s];
  uint64_t moved = __atomic_load_n(&q->moved, __ATOMIC_RELAXED);
  int outq = 0;
  if (ioctl(c->socks[s].fd, SIOCOUTQ, &outq) != 0 || outq < 0) outq = 0;
  uint64_t acked = moved > (uint64_t)outq ? moved - (uint64_t)outq : 0;
  if (acked > q->acked) q->acked = acked; /* outq may count bytes moved after `moved` was read */
  if (now - q->seenNs < RATE_MIN_NS) return;
  uint64_t rwnd = rwndLimitedUs(c->socks[s].fd);
  int peerLimited = rwnd != q->rwndSeen;
  q->rwndSeen = rwnd;
  if (!peerLimited && q->acked > q->ackedSeen && q->acked < q->movedSeen) {
    double r = (double)(q->acked - q->ackedSeen) / (double)(now - q->seenNs);
    q->rate = q->rate > 0 && !q->stale ? (q->rate + r) / 2 : r;
    q->stale = 0;
    q->ratedNs = now;
  } else if (q->acked >= q->plannedSeen && now - q->ratedNs > RATE_STALE_NS) {
    /* it delivered all it was given before the interval (it kept up, or idled) and was
     * measured long ago: measured again (a path got better, or was slow for once); one still
     * behind (its queue, or a retransmission timeout) keeps its rate */
    q->stale = q->rate > 0;
  }
  q->ackedSeen = q->acked;
  q->movedSeen = moved;
  q->plannedSeen = q->planned;
  q->seenNs = now;
}

static int chunksOf(size_t size, size_t task) {
  return (int)((size + task - 1) / task);
}

/* When socket s would have delivered one chunk more of `task` bytes: its bytes still to
 * deliver (queued, and in the kernel not acknowledged as last read) and the chunk, over its
 * rate. */
static double doneBy(const socketComm* c, int s, const double* rate, size_t task) {
  const taskQueue* q = &c->queues[s];
  return ((double)(q->planned - q->acked) + (double)task) / rate[s];
}

/* The choice among kMin .. k0 sockets, those soonest for one chunk of the round-robin size
 * first (order[]): the k whose slowest delivers its chunk soonest. Returns that time, and k. */
static double soonestSet(const socketComm* c, size_t size, uint32_t flags, int kMin, int k0, const double* rate,
                         const int* order, int* bestK) {
  double soonest = -1;
  for (int k = k0; k >= kMin; k--) {
    size_t task = railnetSocketTaskSize(c, size, flags, k);
    if (chunksOf(size, task) != k) continue; /* k sockets would not each get a chunk */
    double score = 0;
    for (int i = 0; i < k; i++) {
      double t = doneBy(c, order[i], rate, task);
      if (t > score) score = t;
    }
    if (soonest < 0 || score < soonest) soonest = score, *bestK = k;
  }
  return soonest;
}

ctrlSockSet railnetSocketChooseSet(socketComm* c, size_t size, uint32_t flags) {
  int n = c->nSocks;
  size_t task0 = railnetSocketTaskSize(c, size, flags, n);
  int k0 = chunksOf(size, task0);
  uint64_t now = railnetClockNs();
  for (int i = 0; i < REFRESH_PER_CHOICE && i < n; i++) queueRefresh(c, (c->balanceNext + i) % n, now);
  c->balanceNext = (c->balanceNext + REFRESH_PER_CHOICE) % n;
  double rate[MAX_SOCKETS], fastest = 0;
  for (int s = 0; s < n; s++) {
    rate[s] = c->queues[s].rate;
    if (!c->queues[s].stale && rate[s] > fastest) fastest = rate[s];
  }
  /* not measured: it never stayed busy 1 ms, so it delivers faster than any that did (and at
   * least 1 byte per ns; when none was measured, bytes alone decide); measured long ago
   * (stale): at least as fast as the fastest now, so that it gets its share again, and is
   * measured again */
  double unmeasured = fastest * 2 > 1 ? fastest * 2 : 1;
  for (int s = 0; s < n; s++) {
    if (rate[s] <= 0) rate[s] = unmeasured;
    else if (c->queues[s].stale && rate[s] < fastest) rate[s] = fastest;
  }
  /* fewer sockets than round-robin would take (larger chunks) only to leave out slow ones,
   * at less than half the fastest rate: a socket that is only behind catches up */
  int slow = 0;
  double top = 0;
  for (int s = 0; s < n; s++) top = rate[s] > top ? rate[s] : top;
  for (int s = 0; s < n; s++) slow += rate[s] < top / 2;
  int kMin = n - slow < k0 ? n - slow : k0;
  /* the round-robin choice: k0 sockets in turn */
  ctrlSockSet set = 0;
  double rr = 0;
  for (int j = 0; j < k0; j++) {
    int s = (c->chooseFrom + j) % n;
    set |= 1ull << s;
    double t = doneBy(c, s, rate, task0);
    if (t > rr) rr = t;
  }
  /* the sockets by when they would deliver one such chunk (insertion sort: n <= 64) */
  int order[MAX_SOCKETS];
  double key[MAX_SOCKETS];
  for (int s = 0; s < n; s++) {
    double t = doneBy(c, s, rate, task0);
    int i = s;
    for (; i > 0 && key[i - 1] > t; i--) key[i] = key[i - 1], order[i] = order[i - 1];
    key[i] = t, order[i] = s;
  }
  int k = k0;
  double soonest = soonestSet(c, size, flags, kMin > 1 ? kMin : 1, k0, rate, order, &k);
  /* the round-robin choice keeps the message unless another is a quarter sooner */
  if (soonest >= 0 && soonest < rr * 0.75) {
    set = 0;
    for (int i = 0; i < k; i++) set |= 1ull << order[i];
  } else {
    c->chooseFrom = (c->chooseFrom + k0) % n;
    k = k0;
  }
  size_t task = railnetSocketTaskSize(c, size, flags, k), off = 0;
  for (ctrlSockSet left = set; left != 0; left &= left - 1, off += task)
    c->queues[__builtin_ctzll(left)].planned += size - off < task ? size - off : task;
  return set;
}
