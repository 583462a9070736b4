/*
 * IB connection setup (NCCL's ncclIbListen / ncclIbConnect / ncclIbAccept).
 *
 * listen: an ncclSocket on the OOB interface; the handle carries its address and magic.
 * connect and accept are non-blocking: each call advances a small state machine and returns
 * with a NULL comm until the comm is ready.
 *   connector: socket connect -> create CQ/QPs (INIT), register the fifo -> send metadata
 *              -> receive the acceptor's metadata, check it, QPs to RTR/RTS -> send "ready".
 *   acceptor:  socket accept -> receive the connector's metadata, check it -> create its QPs
 *              and take them to RTS -> send metadata -> receive "ready".
 * The resources and QPs are qp.c's; the connects in progress are kept in conn_stage.c's
 * registry, keyed by the handle. A peer whose metadata fails the checks is refused with a
 * WARN naming it; the listener keeps working.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "connect.h"
#include "comm.h"
#include "conn_stage.h"
#include "devices.h"
#include "eager/eager.h"
#include "qp.h"
#include "setup.h"
#include "routing.h"
#include "wire.h"

enum ibStageState {
  STAGE_START = 0,
  STAGE_CONNECT,     /* connector: socket connecting */
  STAGE_ACCEPT,      /* acceptor: socket accepting */
  STAGE_SEND_META,
  STAGE_RECV_META,
  STAGE_SEND_READY,  /* connector */
  STAGE_RECV_READY   /* acceptor */
};

/* the two ends' connection metadata, while a connection is set up (9 KiB: allocated once a
 * connection is there, never for a listener's slot that waits for one) */
struct ncclIbStageMeta {
  struct ncclIbConnectionMetadata local, remote;
};

/* Mapped, not from the heap: NCCL sets up a communicator's comms all at once, so the heap
 * would hold every comm's metadata at the same time, between the comms, and keep those pages
 * resident after they are freed (9 KiB per comm measured, bench/scale.sh). */
static ncclResult_t stageMetaAlloc(struct ncclIbStageMeta** out) {
  void* p = mmap(NULL, sizeof(**out), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    WARN("NET/IB : out of memory for a connection's metadata (%zu bytes): %s", sizeof(**out), strerror(errno));
    *out = NULL;
    return ncclSystemError;
  }
  *out = (struct ncclIbStageMeta*)p;
  return ncclSuccess;
}

static void stageMetaFree(struct ncclIbStageMeta* m) {
  if (m) munmap(m, sizeof(*m));
}

struct ncclIbCommStage {
  struct railnetConnStage link;        /* connector: in the registry, keyed by the handle; link.state: the step */
  struct ncclIbHandle handle;          /* connector: what the handle held */
  int offset;
  int ready;
  uint64_t stageNs;                    /* acceptor: when the step waiting on the peer began */
  struct ncclSocket sock;              /* acceptor: the connection until it is taken (then the comm's) */
  struct ncclIbNetCommBase* comm;      /* acceptor: NULL until a connection is taken */
  struct ncclIbStageMeta* m;
  char peer[SOCKET_NAME_MAXLEN];       /* acceptor: the peer's address, once taken */
};

/* Frees a stage, its metadata and its half-made comm (or, before the comm, its socket). */
static void stageFree(struct ncclIbCommStage* st) {
  if (st->comm) railnetIbCommFree(st->comm);
  else if (st->sock.fd >= 0) ncclSocketClose(&st->sock);
  stageMetaFree(st->m);
  free(st);
}

static void stageDrop(struct railnetConnStage* s) { stageFree((struct ncclIbCommStage*)s); }

static struct railnetConnStages connectStages = RAILNET_CONN_STAGES_INIT("NET/IB", stageDrop);

void railnetIbDropConnectStages(void) { railnetConnStageDropAll(&connectStages); }

#define RAILNET_IB_ACCEPT_PENDING 8 /* connections an IB listener sets up at once */

struct ncclIbListenComm {
  int dev;
  struct ncclSocket sock;
  /* the connections being set up, at most RAILNET_IB_ACCEPT_PENDING at once: a silent stranger
   * (or a peer host that died mid-setup) holds one slot until its step's bound, not the listener */
  struct ncclIbCommStage* stages[RAILNET_IB_ACCEPT_PENDING];
};

/* ------------------------------------------------------------------ listen */

ncclResult_t ncclIbListen(void* ctx, int dev, void* opaqueHandle, void** listenComm) {
  (void)ctx;
  if (opaqueHandle == NULL || listenComm == NULL) return ncclInvalidArgument;
  if (dev < 0 || dev >= ncclNMergedIbDevs) {
    WARN("NET/IB : listen on device %d, there are %d", dev, ncclNMergedIbDevs < 0 ? 0 : ncclNMergedIbDevs);
    return ncclInvalidUsage;
  }
  /* NCCL's handles are byte arrays of any alignment: the handle is built here and copied */
  struct ncclIbHandle handle;
  memset(&handle, 0, sizeof(handle));
  memset(opaqueHandle, 0, NCCL_NET_HANDLE_MAXSIZE);
  struct ncclIbListenComm* lc;
  NCCLCHECK(RAILNET_CALLOC(&lc, 1, "an IB listen comm"));
  lc->dev = dev;
  lc->sock.fd = -1;
  ncclResult_t res = railnetConnListen(&lc->sock, &ncclIbIfAddr, ncclSocketTypeNetIb, &handle.connectAddr);
  if (res != ncclSuccess) {
    free(lc);
    return res;
  }
  handle.handleMagic = RAILNET_IB_HANDLE_MAGIC;
  handle.socketMagic = railnetSocketMagic();
  railnetIbListenGids(dev, handle.listenGids);
  memcpy(opaqueHandle, &handle, sizeof(handle));
  *listenComm = lc;
  return ncclSuccess;
}

ncclResult_t ncclIbConnect(void* ctx, int dev, void* opaqueHandle, void** sendComm, ncclNetDeviceHandle_t** sendDevComm) {
  if (opaqueHandle == NULL || sendComm == NULL) return ncclInvalidArgument;
  *sendComm = NULL;
  if (sendDevComm) *sendDevComm = NULL;
  if (dev < 0 || dev >= ncclNMergedIbDevs) {
    WARN("NET/IB : connect on device %d, there are %d", dev, ncclNMergedIbDevs < 0 ? 0 : ncclNMergedIbDevs);
    return ncclInvalidUsage;
  }
  struct ncclIbCommStage* st = (struct ncclIbCommStage*)railnetConnStageFind(&connectStages, opaqueHandle);
  ncclResult_t res = ncclSuccess;
  char peer[SOCKET_NAME_MAXLEN];
  if (st == NULL) {
    /* NCCL's handles are byte arrays: read a copy, never the fields in place */
    struct ncclIbHandle hc;
    memcpy(&hc, opaqueHandle, sizeof(hc));
    NCCLCHECK(railnetIbCheckHandle(&hc));
    dev = railnetIbSubnetRoute(dev, hc.listenGids, RAILNET_IB_HANDLE_GIDS,
                               ncclSocketToString(&hc.connectAddr, peer, 1));
    NCCLCHECK(RAILNET_CALLOC(&st, 1, "an IB connect state"));
    st->sock.fd = -1; /* the connector's socket is its comm's */
    memcpy(&st->handle, &hc, sizeof(st->handle));
    res = stageMetaAlloc(&st->m);
    if (res == ncclSuccess) res = railnetIbCommAlloc(1, &st->comm);
    if (res != ncclSuccess) {
      stageMetaFree(st->m);
      free(st);
      return res;
    }
    st->comm->vDev = dev;
    railnetConnStageAdd(&connectStages, &st->link, opaqueHandle, sizeof(st->handle));
    NCCLCHECKGOTO(ncclSocketInit(&st->comm->sock, &st->handle.connectAddr, st->handle.socketMagic,
                                 ncclSocketTypeNetIb, NULL, 1), res, fail);
    NCCLCHECKGOTO(ncclSocketConnect(&st->comm->sock), res, fail);
    st->link.state = STAGE_CONNECT;
  }
  struct ncclIbSendComm* comm = (struct ncclIbSendComm*)st->comm;
  struct ncclIbNetCommBase* base = &comm->base;
  int closed = 0;
  if (st->link.state == STAGE_CONNECT) {
    int ready = 0;
    NCCLCHECKGOTO(ncclSocketReady(&base->sock, &ready), res, fail);
    if (!ready) return ncclSuccess;
    railnetSocketSetPeerTimeout(base->sock.fd); /* a receiver host that vanishes ends the wait */
    NCCLCHECKGOTO(railnetIbSendCommSetup(ctx, comm, &st->m->local), res, fail);
    st->link.state = STAGE_SEND_META;
    st->offset = 0;
  }
  if (st->link.state == STAGE_SEND_META) {
    NCCLCHECKGOTO(ncclSocketProgress(NCCL_SOCKET_SEND, &base->sock, &st->m->local, sizeof(st->m->local), &st->offset,
                                     &closed), res, fail);
    if (closed) goto peerClosed;
    if (st->offset < (int)sizeof(st->m->local)) return ncclSuccess;
    st->link.state = STAGE_RECV_META;
    st->offset = 0;
  }
  if (st->link.state == STAGE_RECV_META) {
    NCCLCHECKGOTO(ncclSocketProgress(NCCL_SOCKET_RECV, &base->sock, &st->m->remote, sizeof(st->m->remote), &st->offset,
                                     &closed), res, fail);
    if (closed) goto peerClosed;
    if (st->offset < (int)sizeof(st->m->remote)) return ncclSuccess;
    railnetIbPeerStr(base, peer);
    NCCLCHECKGOTO(railnetIbCheckMetadata(&st->m->remote, peer, base->nqps), res, fail);
    railnetIbCheckRailLocal(&base->vProps, &st->m->remote, peer);
    NCCLCHECKGOTO(railnetIbSendCommConnect(comm, &st->m->local, &st->m->remote, peer), res, fail);
    st->link.state = STAGE_SEND_READY;
    st->offset = 0;
    st->ready = 1;
  }
  if (st->link.state == STAGE_SEND_READY) {
    NCCLCHECKGOTO(ncclSocketProgress(NCCL_SOCKET_SEND, &base->sock, &st->ready, sizeof(st->ready), &st->offset,
                                     &closed), res, fail);
    if (closed) goto peerClosed;
    if (st->offset < (int)sizeof(st->ready)) return ncclSuccess;
  }
  base->ready = 1;
  INFO(NCCL_NET, "NET/IB: connected %s to %s (%s) with %d QP%s%s", ncclIbMergedDevs[base->vDev].devName,
       railnetIbPeerStr(base, peer), base->remDevName, base->nqps, base->nqps > 1 ? "s" : "",
       base->splitDataOnQps ? ", data split across QPs" : "");
  *sendComm = comm;
  railnetConnStageRemove(&connectStages, &st->link);
  stageMetaFree(st->m);
  free(st);
  return ncclSuccess;
peerClosed:
  WARN("NET/IB : peer %s closed the connection during connection setup (state %d)", railnetIbPeerStr(base, peer),
       st->link.state);
  res = ncclRemoteError;
fail:
  railnetConnStageRemove(&connectStages, &st->link);
  stageFree(st);
  return res;
}

/* ------------------------------------------------------------------ accept */

/* Drop connection i being accepted (bad peer); the listener keeps listening. */
static void acceptDrop(struct ncclIbListenComm* lc, int i) {
  stageFree(lc->stages[i]);
  lc->stages[i] = NULL;
}

/* A step of the accept that waits on the peer begins. */
static void acceptStep(struct ncclIbCommStage* st, int state) {
  st->link.state = state;
  st->offset = 0;
  st->stageNs = railnetClockNs();
}

/* Connection i has moved `got` of `want` bytes of `what` in the current step: wait for more,
 * or, once that step has waited RAILNET_SOCKET_ACCEPT_TIMEOUT_MSEC, drop it (a stranger that
 * went silent, a peer host that died mid-setup) and keep listening. Each step gets the whole
 * bound, so this side's own slowness never counts against the peer. */
static void acceptWait(struct ncclIbListenComm* lc, int i, const char* peer, const char* what, int got, size_t want) {
  int64_t ms = railnetSocketAcceptTimeoutMs();
  if (railnetClockNs() - lc->stages[i]->stageNs <= (uint64_t)ms * 1000000ull) return;
  WARN("NET/IB : %s: %d of %zu bytes of %s after %lld ms (RAILNET_SOCKET_ACCEPT_TIMEOUT_MSEC); dropped the "
       "connection, still listening", peer, got, want, what, (long long)ms);
  acceptDrop(lc, i);
}

/* The state of the next connection to accept, in STAGE_ACCEPT, in slot i: a socket only (the
 * comm and the metadata come with a connection, so that an idle listener costs little). */
static ncclResult_t acceptStageNew(struct ncclIbListenComm* lc, int i) {
  struct ncclIbCommStage* st;
  NCCLCHECK(RAILNET_CALLOC(&st, 1, "an IB accept state"));
  st->sock.fd = -1;
  st->sock.acceptFd = -1;
  st->link.state = STAGE_ACCEPT;
  lc->stages[i] = st;
  return ncclSuccess;
}

/* Connection i passed its handshake: its comm (which takes over the socket) and metadata. */
static ncclResult_t acceptTaken(struct ncclIbListenComm* lc, int i) {
  struct ncclIbCommStage* st = lc->stages[i];
  NCCLCHECK(stageMetaAlloc(&st->m));
  NCCLCHECK(railnetIbCommAlloc(0, &st->comm));
  st->comm->vDev = lc->dev;
  st->comm->sock = st->sock;
  st->sock.fd = -1;
  railnetIbPeerStr(st->comm, st->peer);
  return ncclSuccess;
}

/* Whether slot i waits for a connection to come (none taken from the listener yet). */
static int acceptWaitsForOne(const struct ncclIbListenComm* lc, int i) {
  const struct ncclIbCommStage* st = lc->stages[i];
  return st != NULL && st->link.state == STAGE_ACCEPT &&
         (st->sock.state == ncclSocketStateNone || st->sock.state == ncclSocketStateAccepting);
}

/* One step of connection i's setup, as far as it goes without waiting. *moved: a connection
 * was taken from the listener or dropped (the caller looks for the next one); *recvComm: the
 * comm, when its setup is done. */
static ncclResult_t acceptProgress(struct ncclIbListenComm* lc, int i, int* moved, void** recvComm) {
  struct ncclIbCommStage* st = lc->stages[i];
  int closed = 0;
  ncclResult_t r;
  if (st->link.state == STAGE_ACCEPT) {
    int waited = acceptWaitsForOne(lc, i);
    NCCLCHECK(ncclSocketAccept(&st->sock, &lc->sock));
    if (waited && !acceptWaitsForOne(lc, i)) *moved = 1;
    int ready = 0;
    if (ncclSocketReady(&st->sock, &ready) != ncclSuccess) {
      INFO(NCCL_NET, "NET/IB : a connection to the listener failed its handshake; dropped it");
      acceptDrop(lc, i);
      *moved = 1;
      return ncclSuccess;
    }
    if (!ready) return ncclSuccess;
    railnetSocketSetPeerTimeout(st->sock.fd); /* a sender host that vanishes fails the comm */
    if ((r = acceptTaken(lc, i)) != ncclSuccess) {
      acceptDrop(lc, i);
      return r;
    }
    acceptStep(st, STAGE_RECV_META);
  }
  struct ncclIbRecvComm* comm = (struct ncclIbRecvComm*)st->comm;
  struct ncclIbNetCommBase* base = &comm->base;
  const char* peer = st->peer;
  if (st->link.state == STAGE_RECV_META) {
    r = ncclSocketProgress(NCCL_SOCKET_RECV, &base->sock, &st->m->remote, sizeof(st->m->remote), &st->offset, &closed);
    if (r != ncclSuccess || closed) {
      WARN("NET/IB : peer %s closed the connection after %d of %zu bytes of connection metadata; refused it", peer,
           st->offset, sizeof(st->m->remote));
      goto drop;
    }
    if (st->offset < (int)sizeof(st->m->remote)) {
      acceptWait(lc, i, peer, "its connection metadata came", st->offset, sizeof(st->m->remote));
      return ncclSuccess;
    }
    if (railnetIbCheckMetadata(&st->m->remote, peer, 0) != ncclSuccess) {
      WARN("NET/IB : refused the connection from %s; still listening", peer);
      goto drop;
    }
    r = railnetIbRecvCommSetup(railnetIbSubnetRouteMeta(lc->dev, &st->m->remote, peer), comm, &st->m->remote,
                               &st->m->local, peer);
    if (r == ncclRemoteError) { /* what the peer asks does not fit this side (the WARN above): not fatal */
      WARN("NET/IB : refused the connection from %s; still listening", peer);
      goto drop;
    }
    if (r != ncclSuccess) {
      acceptDrop(lc, i);
      return r;
    }
    railnetIbCheckRailLocal(&base->vProps, &st->m->remote, peer);
    acceptStep(st, STAGE_SEND_META);
  }
  if (st->link.state == STAGE_SEND_META) {
    r = ncclSocketProgress(NCCL_SOCKET_SEND, &base->sock, &st->m->local, sizeof(st->m->local), &st->offset, &closed);
    if (r != ncclSuccess || closed) {
      WARN("NET/IB : peer %s closed the connection during connection setup; refused it", peer);
      goto drop;
    }
    if (st->offset < (int)sizeof(st->m->local)) {
      acceptWait(lc, i, peer, "this side's connection metadata taken (it stopped reading)", st->offset,
                 sizeof(st->m->local));
      return ncclSuccess;
    }
    acceptStep(st, STAGE_RECV_READY);
  }
  if (st->link.state == STAGE_RECV_READY) {
    r = ncclSocketProgress(NCCL_SOCKET_RECV, &base->sock, &st->ready, sizeof(st->ready), &st->offset, &closed);
    if (r != ncclSuccess || closed) {
      WARN("NET/IB : peer %s closed the connection before it was ready; refused it", peer);
      goto drop;
    }
    if (st->offset < (int)sizeof(st->ready)) {
      acceptWait(lc, i, peer, "its ready flag came", st->offset, sizeof(st->ready));
      return ncclSuccess;
    }
    if (st->ready != 1) {
      WARN("NET/IB : peer %s sent %d instead of its ready flag; refused it", peer, st->ready);
      goto drop;
    }
  }
  base->ready = 1;
  INFO(NCCL_NET, "NET/IB: accepted %s (%s) on %s with %d QP%s%s", peer, base->remDevName,
       ncclIbMergedDevs[base->vDev].devName, base->nqps, base->nqps > 1 ? "s" : "",
       comm->flushEnabled ? ", GPUDirect flush" : "");
  *recvComm = comm;
  stageMetaFree(st->m);
  free(st);
  lc->stages[i] = NULL;
  return ncclSuccess;
drop:
  acceptDrop(lc, i);
  *moved = 1;
  return ncclSuccess;
}

ncclResult_t ncclIbAccept(void* listenComm, void** recvComm, ncclNetDeviceHandle_t** recvDevComm) {
  struct ncclIbListenComm* lc = (struct ncclIbListenComm*)listenComm;
  if (lc == NULL || recvComm == NULL) return ncclInvalidArgument;
  *recvComm = NULL;
  if (recvDevComm) *recvDevComm = NULL;
  /* every connection in setup moves on; one slot waits for the next connection while a slot is
   * free, and a connection taken or dropped lets the next queued one in within this call */
  for (int round = 0; round <= RAILNET_IB_ACCEPT_PENDING; round++) {
    int freeSlot = -1, waiting = 0, moved = 0;
    for (int i = 0; i < RAILNET_IB_ACCEPT_PENDING; i++) {
      if (lc->stages[i] == NULL && freeSlot < 0) freeSlot = i;
      waiting |= acceptWaitsForOne(lc, i);
    }
    if (!waiting && freeSlot >= 0) NCCLCHECK(acceptStageNew(lc, freeSlot));
    for (int i = 0; i < RAILNET_IB_ACCEPT_PENDING; i++) {
      if (lc->stages[i] == NULL) continue;
      NCCLCHECK(acceptProgress(lc, i, &moved, recvComm));
      if (*recvComm) return ncclSuccess;
    }
    if (!moved) break;
  }
  return ncclSuccess;
}

/* ------------------------------------------------------------------ close */

/* What a comm's messages cost (bench/ib.sh reads it: work per message). */
static void workReport(struct ncclIbNetCommBase* base) {
  if (base == NULL || base->work.msgs == 0) return;
  char peer[SOCKET_NAME_MAXLEN], eager[160];
  double m = (double)base->work.msgs;
  railnetIbEagerReport(base, eager, sizeof(eager));
  INFO(NCCL_NET, "NET/IB : %s comm with %s closed: %llu messages, %llu work requests posted, %llu completions polled "
       "(%.2f and %.2f per message)%s", base->isSend ? "send" : "receive", railnetIbPeerStr(base, peer),
       (unsigned long long)base->work.msgs, (unsigned long long)base->work.wrs, (unsigned long long)base->work.cqes,
       (double)base->work.wrs / m, (double)base->work.cqes / m, eager);
}

ncclResult_t ncclIbCloseSend(void* sendComm) {
  workReport((struct ncclIbNetCommBase*)sendComm);
  railnetIbCommFree((struct ncclIbNetCommBase*)sendComm);
  return ncclSuccess;
}

ncclResult_t ncclIbCloseRecv(void* recvComm) {
  workReport((struct ncclIbNetCommBase*)recvComm);
  railnetIbCommFree((struct ncclIbNetCommBase*)recvComm);
  return ncclSuccess;
}

ncclResult_t ncclIbCloseListen(void* listenComm) {
  struct ncclIbListenComm* lc = (struct ncclIbListenComm*)listenComm;
  if (lc == NULL) return ncclSuccess;
  for (int i = 0; i < RAILNET_IB_ACCEPT_PENDING; i++)
    if (lc->stages[i]) acceptDrop(lc, i);
  ncclSocketClose(&lc->sock);
  free(lc);
  return ncclSuccess;
}
