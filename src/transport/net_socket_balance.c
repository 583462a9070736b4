/*
 * Where a send comm puts each message's chunks (net_socket_balance.h). When both ends are
 * railnet with RAILNET_SOCKET_BALANCE on, each message on the data sockets names its sockets
 * in its record (RAILNET_SOCKET_REC_SOCK_SET), and the receiver takes the chunks from there:
 * one with fewer chunks than sockets goes to those that would deliver it soonest, and one
 * with a chunk for every socket leaves out those that are behind when the others would
 * deliver it in half the time. A slow or
 * congested connection (a path through a busy link) so gets few of those, where NCCL's
 * round-robin makes every message wait for it in turn. The estimate per socket: the bytes it still has to deliver, over the rate at which
 * its peer acknowledges them. Only the caller's thread (isend) runs this; the helper threads
 * add to `moved`.
 */
#include <sys/ioctl.h>
#include <linux/sockios.h>
#include "net_socket_balance.h"
#include "net_socket_helper.h"
#include "net_socket_types.h"

#define RATE_MIN_NS 1000000ull /* a rate's interval: at least 1 ms */
#define RATE_STALE_NS 100000000ull
#define REFRESH_PER_CHOICE 4 /* sockets whose kernel state one choice reads (an ioctl each) */
#define PROBE_EVERY_CHUNKS 16 /* a slow socket is probed again after 16 times a chunk's time at its rate */

/* Reads what socket s's peer acknowledged (the bytes handed to the kernel less those in it
 * not acknowledged yet, SIOCOUTQ) and updates the rate at which it acknowledges: measured over
 * intervals of at least 1 ms during which the socket was never idle (some of the bytes it had
 * handed to the kernel at the start are still not acknowledged at the end) and some bytes
 * were acknowledged. An idle socket says nothing about its path, and an interval that may
 * hold an idle gap (between two bursts) would make a fast path look slow. 0 until measured.
 * A probe (railnetSocketProbeRate) delivered by now was delivered at least at its size over
 * the time since it was given: a rate more than twice the measured one replaces it (a path
 * that got better; a probe on a fast path is delivered before it could be measured). Stale (the rate kept, flagged) when, more than 100 ms after the last
 * measurement, the socket had delivered by the end of an interval all it was given before
 * it. */
static void queueRefresh(socketComm* c, int s, uint64_t now) {
  taskQueue* q = &c->queues[s];
  uint64_t moved = __atomic_load_n(&q->moved, __ATOMIC_RELAXED);
  int outq = 0;
  if (ioctl(c->socks[s].fd, SIOCOUTQ, &outq) != 0 || outq < 0) outq = 0;
  uint64_t acked = moved > (uint64_t)outq ? moved - (uint64_t)outq : 0;
  if (acked > q->acked) q->acked = acked; /* outq may count bytes moved after `moved` was read */
  if (q->probeEnd != 0 && q->acked >= q->probeEnd) {
    double lower = (double)q->probeBytes / (double)(now - q->probedNs + 1);
    if (lower > 2 * q->rate) q->rate = lower, q->stale = 0, q->ratedNs = now;
    q->probeEnd = 0;
  }
  if (now - q->seenNs < RATE_MIN_NS) return;
  if (q->acked > q->ackedSeen && q->acked < q->movedSeen) {
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

double railnetSocketProbeRate(const taskQueue* q, double fastest, size_t task, uint64_t now) {
  if (!q->stale || q->rate >= fastest || q->planned > q->acked) return q->rate;
  uint64_t last = q->probedNs > q->ratedNs ? q->probedNs : q->ratedNs;
  if ((double)(now - last) <= PROBE_EVERY_CHUNKS * (double)task / q->rate) return q->rate;
  return fastest;
}

/* When socket s would have delivered one chunk more of `task` bytes: its bytes still to
 * deliver (queued, and in the kernel not acknowledged as last read) and the chunk, over its
 * rate. */
static double doneBy(const socketComm* c, int s, const double* rate, size_t task) {
  const taskQueue* q = &c->queues[s];
  return ((double)(q->planned - q->acked) + (double)task) / rate[s];
}

/* A message with a chunk on every socket: the sockets at the end of `order` (latest first),
 * at most a quarter of them (one when there are fewer than 8), are left out, the others taking larger chunks,
 * when each of them is behind (a chunk or more of its own not delivered yet: a queue that
 * grew, not a rate alone, which can be noise; many behind at once is the receiver, not their
 * paths) and the sockets left would deliver the message in half the time `all` that every
 * socket would take. Returns the set, or 0 to keep every socket. */
static ctrlSockSet leaveOutSlow(const socketComm* c, size_t size, uint32_t flags, const double* rate,
                                const int* order, size_t task0, double all) {
  int n = c->nSocks, best = n, fewest = n - (n / 4 > 1 ? n / 4 : 1);
  double bestT = all * 0.5;
  for (int k = n - 1; k >= fewest; k--) {
    const taskQueue* q = &c->queues[order[k]];
    if (q->planned - q->acked < task0) break;
    size_t task = railnetSocketTaskSize(c, size, flags, k);
    if ((size + task - 1) / task != (size_t)k) break; /* the receiver's cut must give k chunks */
    double t = 0;
    for (int i = 0; i < k; i++) {
      double d = doneBy(c, order[i], rate, task);
      t = d > t ? d : t;
    }
    if (t < bestT) bestT = t, best = k;
  }
  if (best == n) return 0;
  ctrlSockSet set = 0;
  for (int i = 0; i < best; i++) set |= 1ull << order[i];
  return set;
}

ctrlSockSet railnetSocketChooseSet(socketComm* c, size_t size, uint32_t flags) {
  int n = c->nSocks;
  size_t task0 = railnetSocketTaskSize(c, size, flags, n);
  int k0 = (int)((size + task0 - 1) / task0);
  uint64_t now = railnetClockNs();
  /* a message with a chunk for every socket (large: its chunks take far longer than an ioctl
   * per socket) reads them all, as whether a socket is behind decides if it is left out */
  int refresh = k0 == n ? n : REFRESH_PER_CHOICE < n ? REFRESH_PER_CHOICE : n;
  for (int i = 0; i < refresh; i++) queueRefresh(c, (c->balanceNext + i) % n, now);
  c->balanceNext = (c->balanceNext + refresh) % n;
  double rate[MAX_SOCKETS], fastest = 0;
  for (int s = 0; s < n; s++) {
    rate[s] = c->queues[s].rate;
    if (!c->queues[s].stale && rate[s] > fastest) fastest = rate[s];
  }
  /* not measured: it never stayed busy 1 ms, so it delivers faster than any that did (and at
   * least 1 byte per ns; when none was measured, bytes alone decide) */
  double unmeasured = fastest * 2 > 1 ? fastest * 2 : 1;
  ctrlSockSet probes = 0; /* credited more than their own rate: a chunk there is a probe */
  for (int s = 0; s < n; s++) {
    if (rate[s] <= 0) {
      rate[s] = unmeasured;
      continue;
    }
    rate[s] = railnetSocketProbeRate(&c->queues[s], fastest > 0 ? fastest : unmeasured, task0, now);
    if (rate[s] != c->queues[s].rate) probes |= 1ull << s;
  }
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
  /* the k0 sockets soonest; the round-robin choice keeps the message unless they are a
   * quarter sooner */
  double soonest = 0;
  for (int i = 0; i < k0; i++) soonest = key[i] > soonest ? key[i] : soonest;
  ctrlSockSet fewer = k0 == n && n > 1 ? leaveOutSlow(c, size, flags, rate, order, task0, soonest) : 0;
  if (fewer != 0) {
    set = fewer;
  } else if (soonest < rr * 0.75) {
    set = 0;
    for (int i = 0; i < k0; i++) set |= 1ull << order[i];
  } else {
    c->chooseFrom = (c->chooseFrom + k0) % n;
  }
  size_t task = railnetSocketTaskSize(c, size, flags, __builtin_popcountll(set)), off = 0;
  for (ctrlSockSet left = set; left != 0; left &= left - 1, off += task) {
    taskQueue* q = &c->queues[__builtin_ctzll(left)];
    size_t bytes = size - off < task ? size - off : task;
    q->planned += bytes;
    if (probes & (left & -left)) q->probedNs = now, q->probeBytes = bytes, q->probeEnd = q->planned;
  }
  return set;
}
