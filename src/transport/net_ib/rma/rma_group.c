/*
 * The ring of an RMA group (rma_group.h).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include "rma_group.h"
#include "conn_stage.h"
#include "debug.h"

ncclResult_t railnetRmaGroupListen(const union ncclSocketAddress* ifAddr, void* handle, struct railnetRmaListen** out) {
  if (ifAddr == NULL || handle == NULL || out == NULL) return ncclInvalidArgument;
  struct railnetRmaHandle h;
  memset(&h, 0, sizeof(h));
  memset(handle, 0, sizeof(h));
  struct railnetRmaListen* l;
  NCCLCHECK(RAILNET_CALLOC(&l, 1, "an RMA listener"));
  l->sock.fd = -1;
  ncclResult_t r = railnetConnListen(&l->sock, ifAddr, ncclSocketTypeNetIb, &h.addr);
  if (r != ncclSuccess) {
    free(l);
    return r;
  }
  if (getrandom(&l->token, sizeof(l->token), 0) != (ssize_t)sizeof(l->token))
    l->token = railnetClockNs() ^ ((uint64_t)getpid() << 40);
  h.magic = RAILNET_RMA_HANDLE_MAGIC;
  h.socketMagic = l->sock.magic;
  h.token = l->token;
  memcpy(handle, &h, sizeof(h)); /* NCCL's handles are byte arrays of any alignment */
  *out = l;
  return ncclSuccess;
}

void railnetRmaGroupListenClose(struct railnetRmaListen* l) {
  if (l == NULL) return;
  ncclSocketClose(&l->sock);
  free(l);
}

/* The ring's connections being made: the connect to the next rank and its hello, the accepted
 * candidate for the previous rank and its hello. */
struct ringForming {
  struct railnetRmaHello out, in;
  int outOffset, inOffset;
  int nextReady, prevAccepting, prevReady;
};

static void dropCandidate(struct railnetRmaGroup* g, struct ringForming* f, const char* why) {
  INFO(NCCL_NET, "NET/IB RMA : rank %d dropped a connection to its listener: %s", g->rank, why);
  ncclSocketClose(&g->prev);
  g->prev.fd = -1;
  f->prevAccepting = 0, f->inOffset = 0;
}

/* One pass over the accepting side: a connection, its handshake, its hello; 1 when the
 * previous rank's hello is in. */
static ncclResult_t acceptStep(struct railnetRmaGroup* g, struct railnetRmaListen* l, struct ringForming* f) {
  int closed = 0, ready = 0;
  if (!f->prevAccepting) {
    NCCLCHECK(ncclSocketInit(&g->prev, NULL, l->sock.magic, ncclSocketTypeNetIb, NULL, 1));
    f->prevAccepting = 1;
  }
  if (!f->prevReady) {
    NCCLCHECK(ncclSocketAccept(&g->prev, &l->sock));
    if (ncclSocketReady(&g->prev, &ready) != ncclSuccess) {
      dropCandidate(g, f, "its handshake failed");
      return ncclSuccess;
    }
    if (!ready) return ncclSuccess;
    int64_t ms = 0;
    if (railnetSocketAcceptExpired(&g->prev, &ms)) { /* a connector that never says hello holds no slot */
      dropCandidate(g, f, "no hello within RAILNET_SOCKET_ACCEPT_TIMEOUT_MSEC");
      return ncclSuccess;
    }
    if (ncclSocketProgress(NCCL_SOCKET_RECV, &g->prev, &f->in, sizeof(f->in), &f->inOffset, &closed) != ncclSuccess ||
        closed) {
      dropCandidate(g, f, "it closed before its hello");
      return ncclSuccess;
    }
    if (f->inOffset < (int)sizeof(f->in)) return ncclSuccess;
    int want = (g->rank + g->nranks - 1) % g->nranks;
    if (f->in.magic != RAILNET_RMA_HANDLE_MAGIC || f->in.token != l->token) {
      dropCandidate(g, f, "not a rank of this group (its hello does not carry this listener's token)");
      return ncclSuccess;
    }
    if (f->in.rank != want || f->in.nranks != g->nranks) {
      char why[128];
      snprintf(why, sizeof(why), "it says rank %d of %d, the ring wants rank %d of %d", f->in.rank, f->in.nranks, want,
               g->nranks);
      dropCandidate(g, f, why);
      return ncclSuccess;
    }
    railnetSocketSetPeerTimeout(g->prev.fd);
    f->prevReady = 1;
  }
  return ncclSuccess;
}

/* One pass over the connecting side: the connect, then the hello. */
static ncclResult_t connectStep(struct railnetRmaGroup* g, struct ringForming* f) {
  int ready = 0, closed = 0;
  if (f->nextReady) return ncclSuccess;
  NCCLCHECK(ncclSocketReady(&g->next, &ready));
  if (!ready) return ncclSuccess;
  NCCLCHECK(ncclSocketProgress(NCCL_SOCKET_SEND, &g->next, &f->out, sizeof(f->out), &f->outOffset, &closed));
  if (closed) {
    WARN("NET/IB RMA : rank %d: rank %d closed the ring's connection during its setup; check that rank's log",
         g->rank, (g->rank + 1) % g->nranks);
    return ncclRemoteError;
  }
  if (f->outOffset == (int)sizeof(f->out)) {
    railnetSocketSetPeerTimeout(g->next.fd);
    f->nextReady = 1;
  }
  return ncclSuccess;
}

static ncclResult_t formRing(struct railnetRmaGroup* g, struct railnetRmaHandle* next, struct railnetRmaListen* l) {
  struct ringForming f;
  memset(&f, 0, sizeof(f));
  f.out.magic = RAILNET_RMA_HANDLE_MAGIC;
  f.out.token = next->token;
  f.out.rank = g->rank, f.out.nranks = g->nranks;
  NCCLCHECK(ncclSocketInit(&g->next, &next->addr, next->socketMagic, ncclSocketTypeNetIb, NULL, 1));
  NCCLCHECK(ncclSocketConnect(&g->next)); /* retried by the socket layer within its connect budget */
  uint64_t start = railnetClockNs();
  uint64_t boundNs = (uint64_t)(railnetSocketConnectBudgetSec() * 1e9);
  while (!f.nextReady || !f.prevReady) {
    NCCLCHECK(connectStep(g, &f));
    NCCLCHECK(acceptStep(g, l, &f));
    if (f.nextReady && f.prevReady) break;
    if (railnetClockNs() - start > boundNs) {
      WARN("NET/IB RMA : rank %d of %d: the group did not form within %.0f s: %s; check that every rank calls "
           "connect with the same handles and that the ranks reach each other on the interface of NCCL_SOCKET_IFNAME "
           "(the connect budget is NCCL_SOCKET_RETRY_CNT x NCCL_SOCKET_RETRY_SLEEP_MSEC)",
           g->rank, g->nranks, boundNs / 1e9,
           !f.nextReady ? "rank (rank + 1) did not accept the connection" : "rank (rank - 1) did not connect");
      return ncclRemoteError;
    }
    usleep(100);
  }
  return ncclSuccess;
}

ncclResult_t railnetRmaGroupConnect(void* handles[], int nranks, int rank, struct railnetRmaListen* l,
                                    struct railnetRmaGroup** out) {
  if (handles == NULL || out == NULL || l == NULL || nranks < 1 || rank < 0 || rank >= nranks) {
    WARN("NET/IB RMA : connect of rank %d in a group of %d ranks: invalid arguments", rank, nranks);
    return ncclInvalidArgument;
  }
  struct railnetRmaHandle next;
  memcpy(&next, handles[(rank + 1) % nranks], sizeof(next));
  if (next.magic != RAILNET_RMA_HANDLE_MAGIC) {
    WARN("NET/IB RMA : connect: the handle of rank %d is not one of railnet's RMA listen (magic 0x%llx)",
         (rank + 1) % nranks, (unsigned long long)next.magic);
    return ncclInvalidArgument;
  }
  struct railnetRmaGroup* g;
  NCCLCHECK(RAILNET_CALLOC(&g, 1, "an RMA group"));
  g->rank = rank, g->nranks = nranks;
  g->next.fd = g->prev.fd = -1;
  g->lost = -1;
  if (nranks > 1) {
    ncclResult_t r = formRing(g, &next, l);
    if (r != ncclSuccess) {
      railnetRmaGroupClose(g);
      return r;
    }
  }
  *out = g;
  return ncclSuccess;
}

/* Moves what socket s takes now of buf[*done, bytes) (op: NCCL_SOCKET_SEND or _RECV); a closed
 * connection is rank `neighbour` leaving. */
static ncclResult_t ringMove(struct railnetRmaGroup* g, int op, struct ncclSocket* s, char* buf, size_t bytes,
                             size_t* done, int neighbour) {
  if (*done >= bytes) return ncclSuccess;
  int n = bytes - *done > (1u << 30) ? 1 << 30 : (int)(bytes - *done), off = 0, closed = 0;
  NCCLCHECK(ncclSocketProgress(op, s, buf + *done, n, &off, &closed));
  *done += (size_t)off;
  if (closed) {
    WARN("NET/IB RMA : rank %d: rank %d left the group (its connection closed); the group cannot go on: "
         "check that rank's log", g->rank, neighbour);
    return ncclRemoteError;
  }
  return ncclSuccess;
}

/* Sends sbuf to the next rank while receiving rbuf from the previous one, both `bytes`. */
static ncclResult_t shiftRing(struct railnetRmaGroup* g, const void* sbuf, void* rbuf, size_t bytes) {
  size_t sent = 0, got = 0;
  int next = (g->rank + 1) % g->nranks, prev = (g->rank + g->nranks - 1) % g->nranks;
  uint64_t idleNs = (uint64_t)railnetSocketPeerTimeoutMs() * 1000000ull, last = railnetClockNs();
  while (sent < bytes || got < bytes) {
    size_t before = sent + got;
    NCCLCHECK(ringMove(g, NCCL_SOCKET_SEND, &g->next, (char*)sbuf, bytes, &sent, next));
    NCCLCHECK(ringMove(g, NCCL_SOCKET_RECV, &g->prev, (char*)rbuf, bytes, &got, prev));
    uint64_t now = railnetClockNs();
    if (sent + got != before) last = now;
    else if (now - last > idleNs) {
      WARN("NET/IB RMA : rank %d: no progress of the group's exchange for %lld ms (RAILNET_SOCKET_TIMEOUT_MSEC): "
           "rank %d or %d stopped answering", g->rank, (long long)railnetSocketPeerTimeoutMs(), prev, next);
      return ncclRemoteError;
    } else usleep(50);
  }
  return ncclSuccess;
}

ncclResult_t railnetRmaGroupAllGather(struct railnetRmaGroup* g, const void* mine, void* all, size_t bytes) {
  if (g == NULL || (bytes && (mine == NULL || all == NULL))) return ncclInvalidArgument;
  char* a = (char*)all;
  if ((const char*)mine != a + (size_t)g->rank * bytes) memmove(a + (size_t)g->rank * bytes, mine, bytes);
  /* step s: pass on the block of rank - s, take the one of rank - s - 1 */
  if (g->broken) {
    WARN("NET/IB RMA : rank %d: the group broke earlier (at rank %d): no exchange any more", g->rank, g->lost);
    return ncclRemoteError;
  }
  for (int s = 0; s < g->nranks - 1; s++) {
    int sendFrom = (g->rank - s + g->nranks) % g->nranks, recvFrom = (g->rank - s - 1 + g->nranks) % g->nranks;
    ncclResult_t r = shiftRing(g, a + (size_t)sendFrom * bytes, a + (size_t)recvFrom * bytes, bytes);
    if (r != ncclSuccess) { /* the others must not wait for this rank's part, nor read a half of it later */
      railnetRmaGroupAbort(g, -1);
      return r;
    }
  }
  return ncclSuccess;
}

ncclResult_t railnetRmaGroupBarrier(struct railnetRmaGroup* g) {
  if (g == NULL) return ncclInvalidArgument;
  if (g->nranks == 1) return ncclSuccess;
  char mine = 1, * all = NULL;
  NCCLCHECK(RAILNET_CALLOC(&all, (size_t)g->nranks, "an RMA barrier"));
  ncclResult_t r = railnetRmaGroupAllGather(g, &mine, all, 1);
  free(all);
  return r;
}

void railnetRmaGroupAbort(struct railnetRmaGroup* g, int lost) {
  if (g == NULL || g->nranks == 1 || g->broken) return;
  g->broken = 1;
  g->lost = lost >= 0 ? lost : g->rank; /* unknown: this rank broke it */
  railnetSocketShutdownSend(&g->prev); /* both neighbours read the end: the break goes around */
  railnetSocketShutdownSend(&g->next);
}

int railnetRmaGroupBroken(struct railnetRmaGroup* g, int* lost) {
  if (g == NULL || g->nranks == 1) return 0;
  if (!g->broken) {
    int prevGone = railnetSocketPeerGone(&g->prev, NULL), nextGone = railnetSocketPeerGone(&g->next, NULL);
    if (!prevGone && !nextGone) return 0;
    railnetRmaGroupAbort(g, prevGone ? (g->rank + g->nranks - 1) % g->nranks : (g->rank + 1) % g->nranks);
  }
  if (lost) *lost = g->lost;
  return 1;
}

void railnetRmaGroupClose(struct railnetRmaGroup* g) {
  if (g == NULL) return;
  if (g->next.fd >= 0) ncclSocketClose(&g->next);
  if (g->prev.fd >= 0) ncclSocketClose(&g->prev);
  free(g);
}
