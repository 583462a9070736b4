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

#define RATE_STALE_NS 1000000000ull
#define REFRESH_PER_CHOICE 4 /* sockets whose kernel state one choice reads (an ioctl each) */

/* Reads what socket s's peer acknowledged (the bytes handed to the kernel less those in it
 * not acknowledged yet, SIOCOUTQ) and updates the rate at which it acknowledges: measured over
 * intervals of at least 1 ms that begin and end with such bytes in the kernel and see some
 * acknowledged (an idle socket says nothing about its path, nor one whose chunks wait for a
 * thread, nor one whose receiver stopped reading for a while: then every socket stalls, the
 * fast ones too); 0 until measured, and again once idle 1 s after the last measurement. */
static void queueRefresh(socketComm* c, int s, uint64_t now) {
  taskQueue* q = &c->queues[s];
  uint64_t moved = __atomic_load_n(&q->moved, __ATOMIC_RELAXED);
  int outq = 0;
  if (ioctl(c->socks[s].fd, SIOCOUTQ, &outq) != 0 || outq < 0) outq = 0;
  uint64_t acked = moved > (uint64_t)outq ? moved - (uint64_t)outq : 0;
  if (acked > q->acked) q->acked = acked; /* outq may count bytes moved after `moved` was read */
  if (now - q->seenNs < 1000000) return;
  if (q->seenBusy && outq > 0 && q->acked > q->ackedSeen) {
    double r = (double)(q->acked - q->ackedSeen) / (double)(now - q->seenNs);
    q->rate = q->rate > 0 ? (q->rate + r) / 2 : r;
    q->ratedNs = now;
  } else if (q->planned == q->acked && now - q->ratedNs > RATE_STALE_NS) {
    q->rate = 0; /* idle, measured long ago: measured again (a path gets better, a busy one was slow for once) */
  }
  q->ackedSeen = q->acked;
  q->seenNs = now;
  q->seenBusy = outq > 0;
}

int railnetSocketChooseFirst(socketComm* c, size_t size, size_t task) {
  int n = c->nSocks, k = (int)((size + task - 1) / task), best = c->chooseFrom;
  if (k < n) {
    uint64_t now = railnetClockNs();
    for (int i = 0; i < REFRESH_PER_CHOICE && i < n; i++) queueRefresh(c, (c->balanceNext + i) % n, now);
    c->balanceNext = (c->balanceNext + REFRESH_PER_CHOICE) % n;
    /* bytes still to deliver: queued, and in the kernel not acknowledged (as last read) */
    double backlog[MAX_SOCKETS], rate[MAX_SOCKETS], fastest = 0;
    for (int s = 0; s < n; s++) {
      backlog[s] = (double)(c->queues[s].planned - c->queues[s].acked);
      rate[s] = c->queues[s].rate;
      if (rate[s] > fastest) fastest = rate[s];
    }
    /* not measured: it never stayed busy 1 ms, so it delivers faster than any that did (and
     * at least 1 byte per ns); when none was measured, bytes alone decide */
    double unmeasured = fastest * 2 > 1 ? fastest * 2 : 1;
    for (int s = 0; s < n; s++) rate[s] = rate[s] > 0 ? rate[s] : unmeasured;
    /* a window's score: when its slowest socket would have delivered its chunk; the round-
     * robin window keeps the message unless another is a quarter sooner */
    double bestScore = 0;
    for (int i = 0; i < n; i++) {
      int s = (c->chooseFrom + i) % n;
      double score = 0;
      for (int j = 0; j < k; j++) {
        int t = (s + j) % n;
        double ns = (backlog[t] + (double)task) / rate[t];
        if (ns > score) score = ns;
      }
      if (i == 0 || score < bestScore * 0.75) best = s, bestScore = score;
    }
  }
  for (int j = 0; j < k; j++) c->queues[(best + j) % n].planned += size - j * task < task ? size - j * task : task;
  c->chooseFrom = (best + k) % n;
  return best;
}

