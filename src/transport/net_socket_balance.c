/*
 * Where a send comm puts each message's chunks (net_socket_balance.h). When both ends are
 * railnet with RAILNET_SOCKET_BALANCE on, a message whose chunks take fewer data sockets than
 * the comm has goes to the consecutive sockets that would deliver it soonest, and its record
 * names the first of them (RAILNET_SOCKET_REC_FIRST_SOCK); the receiver takes the chunks from
 * there. A slow or congested connection (a path through a busy link) so gets few chunks, where
 * NCCL's round-robin makes every message wait for it in turn. The estimate per socket: the
 * bytes it still has to deliver, over the rate at which its peer acknowledges them. Only the
 * caller's thread (isend) runs this; the helper threads add to `moved`.
 */
#include <sys/ioctl.h>
#include <linux/sockios.h>
#include "net_socket_balance.h"
#include "net_socket_types.h"

#define RATE_MIN_NS 1000000ull /* a rate's interval: at least 1 ms */
#define RATE_STALE_NS 1000000000ull
#define REFRESH_PER_CHOICE 4 /* sockets whose kernel state one choice reads (an ioctl each) */

/* Reads what socket s's peer acknowledged (the bytes handed to the kernel less those in it
 * not acknowledged yet, SIOCOUTQ) and updates the rate at which it acknowledges: measured over
 * intervals of at least 1 ms during which the socket was never idle (some of the bytes it had
 * handed to the kernel at the start are still not acknowledged at the end) and some bytes
 * were acknowledged. An idle socket says nothing about its path, and an interval that may
 * hold an idle gap (between two bursts) would make a fast path look slow; one whose receiver
 * stopped reading for a while is not measured either (then every socket stalls, the fast ones
 * too). 0 until measured, and again once idle 1 s after the last measurement. */
static void queueRefresh(socketComm* c, int s, uint64_t now) {
  taskQueue* q = &c->queues[s];
  uint64_t moved = __atomic_load_n(&q->moved, __ATOMIC_RELAXED);
  int outq = 0;
  if (ioctl(c->socks[s].fd, SIOCOUTQ, &outq) != 0 || outq < 0) outq = 0;
  uint64_t acked = moved > (uint64_t)outq ? moved - (uint64_t)outq : 0;
  if (acked > q->acked) q->acked = acked; /* outq may count bytes moved after `moved` was read */
  if (now - q->seenNs < RATE_MIN_NS) return;
  if (q->acked > q->ackedSeen && q->acked < q->movedSeen) {
    double r = (double)(q->acked - q->ackedSeen) / (double)(now - q->seenNs);
    q->rate = q->rate > 0 ? (q->rate + r) / 2 : r;
    q->ratedNs = now;
  } else if (q->planned == q->acked && now - q->ratedNs > RATE_STALE_NS) {
    q->rate = 0; /* idle, measured long ago: measured again (a path gets better, a busy one was slow for once) */
  }
  q->ackedSeen = q->acked;
  q->movedSeen = moved;
  q->seenNs = now;
}

int railnetSocketChooseFirst(socketComm* c, size_t size, size_t task) {
  int n = c->nSocks, k = (int)((size + task - 1) / task), best = c->chooseFrom;
  if (k < n) {
    uint64_t now = railnetClockNs();
    for (int i = 0; i < REFRESH_PER_CHOICE && i < n; i++) queueRefresh(c, (c->balanceNext + i) % n, now);
    c->balanceNext = (c->balanceNext + REFRESH_PER_CHOICE) % n;
    double rate[MAX_SOCKETS], done[MAX_SOCKETS], fastest = 0;
    for (int s = 0; s < n; s++) {
      rate[s] = c->queues[s].rate;
      if (rate[s] > fastest) fastest = rate[s];
    }
    /* not measured: it never stayed busy 1 ms, so it delivers faster than any that did (and
     * at least 1 byte per ns); when none was measured, bytes alone decide */
    double unmeasured = fastest * 2 > 1 ? fastest * 2 : 1;
    /* when each socket would have delivered one chunk more: its bytes still to deliver
     * (queued, and in the kernel not acknowledged as last read) and the chunk, over its rate */
    for (int s = 0; s < n; s++)
      done[s] = ((double)(c->queues[s].planned - c->queues[s].acked) + (double)task) / (rate[s] > 0 ? rate[s] : unmeasured);
    /* a window's score is its slowest socket's; the round-robin window keeps the message
     * unless the soonest one is a quarter sooner */
    double rr = 0, soonest = 0;
    int at = best;
    for (int i = 0; i < n; i++) {
      int s = (c->chooseFrom + i) % n;
      double score = 0;
      for (int j = 0; j < k; j++) score = done[(s + j) % n] > score ? done[(s + j) % n] : score;
      if (i == 0) rr = soonest = score;
      else if (score < soonest) soonest = score, at = s;
    }
    if (soonest < rr * 0.75) best = at;
  }
  for (int j = 0; j < k; j++) c->queues[(best + j) % n].planned += size - j * task < task ? size - j * task : task;
  c->chooseFrom = (best + k) % n;
  return best;
}
