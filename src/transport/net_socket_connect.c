/*
 * Socket connection setup (net_socket_connect.h). The handle carries the listener's
 * address and magic, the comm's socket and thread counts, and what the receiving comm
 * offers (net_socket_wire.h): payloads on the control socket, one chunk size for both
 * ends. Connect and accept are
 * non-blocking: the connector connects the data sockets, then the control socket, each
 * announcing its index after the handshake; the acceptor places each socket by its index.
 * The connects in progress live in conn_stage.c's registry, keyed by the handle.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include "net_socket_connect.h"
#include "conn_stage.h"
#include "net_socket.h"
#include "net_socket_comm.h"
#include "net_socket_devices.h"
#include "net_socket_types.h"
#include "net_socket_wire.h"

#define SOCKET_ACCEPT_PENDING 8 /* connections a listener reads the socket index of at once */

typedef struct {
  struct ncclSocket sock;
  int dev, nSocks, nThreads;
  uint32_t flags;      /* what the handle offered (RAILNET_SOCKET_HANDLE_*) */
  uint32_t taskSize;   /* the chunk size it stated (RAILNET_SOCKET_HANDLE_TASK_SIZE) */
  /* accept in progress: the comm being assembled, and the connections that have not said
   * which of its sockets they are yet, up to SOCKET_ACCEPT_PENDING at once (a silent stranger
   * holds one of them until its bound, not the listener) */
  socketComm* comm;
  struct pendingConn {
    struct ncclSocket sock;
    int active;
    int32_t idx;
    int idxOffset;
  } pending[SOCKET_ACCEPT_PENDING];
  int nAccepted;
} socketListenComm;

/* A connect in progress, found again by the handle NCCL passes on every call. */
typedef struct connectState {
  struct railnetConnStage link; /* link.state: which socket is being connected, 0..nSocks (nSocks = control) */
  socketComm* comm;
  int idxOffset;
  int connecting;
} connectState;

static void connectStateDrop(struct railnetConnStage* s) {
  connectState* st = (connectState*)s;
  railnetSocketCommFree(st->comm);
  free(st);
}

/* Connect states live here, not in the handle, so a garbage handle can never be taken for one. */
static struct railnetConnStages connectStates = RAILNET_CONN_STAGES_INIT("NET/Socket", connectStateDrop);

static void connectStateRemove(connectState* s) {
  railnetConnStageRemove(&connectStates, &s->link);
  free(s);
}

ncclResult_t ncclNetSocketListen(void* ctx, int dev, void* opaqueHandle, void** listenComm) {
  (void)ctx;
  if (opaqueHandle == NULL || listenComm == NULL) return ncclInvalidArgument;
  NCCLCHECK(railnetSocketCheckDev(dev, "listen"));
  socketHandle hcopy; /* NCCL's handle may be unaligned: fill a copy, then store it */
  socketHandle* handle = &hcopy;
  memset(handle, 0, sizeof(*handle));
  memset(opaqueHandle, 0, NCCL_NET_HANDLE_MAXSIZE);
  socketListenComm* lc;
  NCCLCHECK(RAILNET_CALLOC(&lc, 1, "a socket listen comm"));
  ncclResult_t res = railnetConnListen(&lc->sock, railnetSocketDevAddr(dev), ncclSocketTypeNetSocket, &handle->addr);
  if (res != ncclSuccess) {
    free(lc);
    return res;
  }
  railnetSocketThreadsAndSockets(dev, &lc->nThreads, &lc->nSocks);
  lc->dev = dev;
  handle->handleMagic = RAILNET_SOCKET_HANDLE_MAGIC;
  handle->socketMagic = railnetSocketMagic();
  handle->nSocks = lc->nSocks;
  handle->nThreads = lc->nThreads;
  lc->flags = lc->nSocks > 0 && railnetSocketCtrlPayloadMax() > 0 ? RAILNET_SOCKET_HANDLE_CTRL_PAYLOAD : 0;
  lc->taskSize = lc->nSocks > 0 ? railnetSocketTaskSizeOffer() : 0;
  if (lc->taskSize > 0) lc->flags |= RAILNET_SOCKET_HANDLE_TASK_SIZE;
  /* (only with a stated chunk size: with each end's own NCCL_SOCKET_MIN_TASKSIZE, a set could
   * make as many chunks of other sizes at the two ends) */
  if (lc->nSocks > 1 && lc->taskSize > 0 && railnetSocketBalance()) lc->flags |= RAILNET_SOCKET_HANDLE_SOCK_SET;
  handle->flags = lc->flags;
  handle->taskSize = lc->taskSize;
  memcpy(opaqueHandle, handle, sizeof(*handle));
  *listenComm = lc;
  return ncclSuccess;
}

/* A handle is read from another process (or from anything the caller got): check it all.
 * The handle is NCCL_NET_HANDLE_MAXSIZE bytes at any alignment. */
ncclResult_t railnetSocketCheckHandle(const void* handle) {
  char a[SOCKET_NAME_MAXLEN];
  socketHandle copy;
  memcpy(&copy, handle, sizeof(copy));
  const socketHandle* h = &copy;
  NCCLCHECK(railnetConnCheckMagic("NET/Socket", "Socket", h->handleMagic, RAILNET_SOCKET_HANDLE_MAGIC));
  if (!railnetSocketAddrUsable(&h->addr, a) || h->nSocks < 0 || h->nSocks > MAX_SOCKETS || h->nThreads < 0 ||
      h->nThreads > MAX_THREADS || (h->nThreads == 0 && h->nSocks != 0) ||
      (h->nThreads > 0 && h->nSocks % h->nThreads != 0)) {
    WARN("NET/Socket : connect handle is invalid (address %s, %d sockets, %d threads)", a, h->nSocks, h->nThreads);
    return ncclInvalidArgument;
  }
  if ((h->flags & RAILNET_SOCKET_HANDLE_TASK_SIZE) && (h->taskSize == 0 || h->taskSize > INT32_MAX)) {
    WARN("NET/Socket : connect handle from %s states a chunk size of %u bytes (1 .. %d): the handle is corrupt or "
         "not from this railnet version; run the same railnet version on every rank", a, h->taskSize, INT32_MAX);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/*
 * Non-blocking: each call advances the connection of socket `stage` (data sockets
 * first, then the control socket); each socket announces its index after the
 * handshake. *sendComm stays NULL until all are up.
 */
ncclResult_t ncclNetSocketConnect(void* ctx, int dev, void* opaqueHandle, void** sendComm,
                                  ncclNetDeviceHandle_t** sendDevComm) {
  (void)ctx;
  if (opaqueHandle == NULL || sendComm == NULL) return ncclInvalidArgument;
  NCCLCHECK(railnetSocketCheckDev(dev, "connect"));
  if (sendDevComm) *sendDevComm = NULL;
  *sendComm = NULL;
  socketHandle hcopy; /* NCCL's handle may be unaligned: read it by value */
  memcpy(&hcopy, opaqueHandle, sizeof(hcopy));
  socketHandle* h = &hcopy;
  connectState* st = (connectState*)railnetConnStageFind(&connectStates, opaqueHandle);
  ncclResult_t res = ncclSuccess;
  if (st == NULL) {
    NCCLCHECK(railnetSocketCheckHandle(opaqueHandle));
    NCCLCHECK(RAILNET_CALLOC(&st, 1, "a socket connect state"));
    res = railnetSocketCommAlloc(&st->comm, h->nSocks, h->nThreads, 1);
    if (res != ncclSuccess) {
      free(st);
      return res;
    }
    railnetConnStageAdd(&connectStates, &st->link, opaqueHandle, sizeof(socketHandle));
    if (h->flags & RAILNET_SOCKET_HANDLE_CTRL_PAYLOAD) st->comm->ctrlMax = railnetSocketCtrlPayloadMax();
    if (h->flags & RAILNET_SOCKET_HANDLE_TASK_SIZE) st->comm->minTask = st->comm->statedTask = h->taskSize;
    st->comm->balance = (h->flags & RAILNET_SOCKET_HANDLE_SOCK_SET) && (h->flags & RAILNET_SOCKET_HANDLE_TASK_SIZE) &&
                        h->nSocks > 1 && railnetSocketBalance();
  }
  socketComm* c = st->comm;
  while (st->link.state <= c->nSocks) {
    struct ncclSocket* s = st->link.state == c->nSocks ? &c->ctrl : &c->socks[st->link.state];
    if (!st->connecting) {
      NCCLCHECKGOTO(ncclSocketInit(s, &h->addr, h->socketMagic, ncclSocketTypeNetSocket, NULL, 1), res, fail);
      NCCLCHECKGOTO(ncclSocketConnect(s), res, fail);
      st->connecting = 1;
      st->idxOffset = 0;
    }
    int ready = 0;
    NCCLCHECKGOTO(ncclSocketReady(s, &ready), res, fail);
    if (!ready) return ncclSuccess;
    int32_t idx = st->link.state;
    int closed = 0;
    NCCLCHECKGOTO(ncclSocketProgress(NCCL_SOCKET_SEND, s, &idx, sizeof(idx), &st->idxOffset, &closed), res, fail);
    if (closed) {
      WARN("NET/Socket : listener closed the connection while connecting socket %d", st->link.state);
      res = ncclRemoteError;
      goto fail;
    }
    if (st->idxOffset < (int)sizeof(idx)) return ncclSuccess;
    st->link.state++;
    st->connecting = 0;
  }
  NCCLCHECKGOTO(railnetSocketCommStartThreads(c), res, fail);
  *sendComm = c;
  connectStateRemove(st);
  return ncclSuccess;
fail:
  railnetSocketCommFree(c);
  connectStateRemove(st);
  return res;
}

/* A peer that dies while its comm is half connected closes the sockets already placed:
 * fail the accept then, rather than wait for sockets that will never come. */
static ncclResult_t acceptCheckPlaced(socketComm* c) {
  for (int i = 0; i <= c->nSocks; i++) {
    struct ncclSocket* s = i == c->nSocks ? &c->ctrl : &c->socks[i];
    if (s->fd < 0) continue;
    if (railnetSocketPeerGone(s, NULL)) {
      char a[SOCKET_NAME_MAXLEN];
      WARN("NET/Socket : peer %s closed its connection while the comm was being set up (%s socket %d of %d "
           "arrived): the peer process died or gave up; accept fails",
           ncclSocketToString(&s->addr, a, 1), i == c->nSocks ? "control" : "data", i, c->nSocks + 1);
      return ncclRemoteError;
    }
  }
  return ncclSuccess;
}

/* Whether pending connection p waits for a connection to come (none taken from the listener). */
static int pendingWaits(const struct pendingConn* p) {
  return p->active && (p->sock.state == ncclSocketStateNone || p->sock.state == ncclSocketStateAccepting);
}

static void pendingDrop(struct pendingConn* p) {
  ncclSocketClose(&p->sock);
  p->active = 0;
}

/* One step of pending connection p: its handshake, then its socket index, placed in comm c
 * when it has come. *moved: a connection was taken from the listener, placed or dropped. */
static ncclResult_t pendingProgress(socketListenComm* lc, struct pendingConn* p, int* moved) {
  socketComm* c = lc->comm;
  int waited = pendingWaits(p);
  NCCLCHECK(ncclSocketAccept(&p->sock, &lc->sock));
  if (waited && !pendingWaits(p)) *moved = 1;
  int ready = 0;
  NCCLCHECK(ncclSocketReady(&p->sock, &ready));
  if (!ready) return ncclSuccess;
  int closed = 0;
  ncclResult_t r = ncclSocketProgress(NCCL_SOCKET_RECV, &p->sock, &p->idx, sizeof(p->idx), &p->idxOffset, &closed);
  char a[SOCKET_NAME_MAXLEN];
  int64_t ms = 0;
  if (r != ncclSuccess || closed) {
    INFO(NCCL_NET, "NET/Socket : connection from %s closed before it said which socket it is; dropped it",
         ncclSocketToString(&p->sock.addr, a, 1));
  } else if (p->idxOffset < (int)sizeof(p->idx)) {
    if (!railnetSocketAcceptExpired(&p->sock, &ms)) return ncclSuccess;
    WARN("NET/Socket : connection from %s did not say which socket it is within %lld ms of connecting "
         "(RAILNET_SOCKET_ACCEPT_TIMEOUT_MSEC); dropped it, still listening",
         ncclSocketToString(&p->sock.addr, a, 1), (long long)ms);
  } else {
    int idx = p->idx;
    struct ncclSocket* slot = idx == c->nSocks ? &c->ctrl : (idx >= 0 && idx < c->nSocks ? &c->socks[idx] : NULL);
    if (slot != NULL && slot->fd < 0) {
      *slot = p->sock;
      slot->acceptFd = -1;
      p->active = 0;
      lc->nAccepted++;
      *moved = 1;
      return ncclSuccess;
    }
    WARN("NET/Socket : connection from %s announced socket index %d, expected an unused one of 0..%d; dropped it",
         ncclSocketToString(&p->sock.addr, a, 1), idx, c->nSocks);
  }
  pendingDrop(p);
  *moved = 1;
  return ncclSuccess;
}

ncclResult_t ncclNetSocketAccept(void* listenComm, void** recvComm, ncclNetDeviceHandle_t** recvDevComm) {
  socketListenComm* lc = (socketListenComm*)listenComm;
  if (lc == NULL || recvComm == NULL) return ncclInvalidArgument;
  if (recvDevComm) *recvDevComm = NULL;
  *recvComm = NULL;
  if (lc->comm == NULL) {
    NCCLCHECK(railnetSocketCommAlloc(&lc->comm, lc->nSocks, lc->nThreads, 0));
    lc->comm->ctrlMax = (lc->flags & RAILNET_SOCKET_HANDLE_CTRL_PAYLOAD) ? 1 : 0;
    if (lc->flags & RAILNET_SOCKET_HANDLE_TASK_SIZE) lc->comm->statedTask = lc->taskSize;
    lc->comm->balance = (lc->flags & RAILNET_SOCKET_HANDLE_SOCK_SET) != 0;
  }
  socketComm* c = lc->comm;
  /* a connection taken, placed or dropped lets the next queued one in within this call */
  for (int round = 0; lc->nAccepted < c->nSocks + 1 && round <= SOCKET_ACCEPT_PENDING + c->nSocks; round++) {
    int freeSlot = -1, waiting = 0, moved = 0;
    for (int k = 0; k < SOCKET_ACCEPT_PENDING; k++) {
      if (!lc->pending[k].active && freeSlot < 0) freeSlot = k;
      waiting |= pendingWaits(&lc->pending[k]);
    }
    if (!waiting && freeSlot >= 0) {
      struct pendingConn* p = &lc->pending[freeSlot];
      memset(p, 0, sizeof(*p));
      p->sock.fd = -1;
      p->sock.acceptFd = -1;
      p->active = 1;
    }
    for (int k = 0; k < SOCKET_ACCEPT_PENDING && lc->nAccepted < c->nSocks + 1; k++)
      if (lc->pending[k].active) NCCLCHECK(pendingProgress(lc, &lc->pending[k], &moved));
    if (!moved) break;
  }
  if (lc->nAccepted < c->nSocks + 1) {
    ncclResult_t r = acceptCheckPlaced(c);
    if (r != ncclSuccess) { /* start afresh if the caller tries again */
      railnetSocketCommFree(c);
      lc->comm = NULL;
      lc->nAccepted = 0;
    }
    return r;
  }
  NCCLCHECK(railnetSocketCommStartThreads(c));
  *recvComm = c;
  lc->comm = NULL;
  lc->nAccepted = 0;
  return ncclSuccess;
}

ncclResult_t ncclNetSocketCloseListen(void* listenComm) {
  socketListenComm* lc = (socketListenComm*)listenComm;
  if (lc == NULL) return ncclSuccess;
  for (int k = 0; k < SOCKET_ACCEPT_PENDING; k++)
    if (lc->pending[k].active && lc->pending[k].sock.fd >= 0) ncclSocketClose(&lc->pending[k].sock);
  railnetSocketCommFree(lc->comm);
  ncclSocketClose(&lc->sock);
  free(lc);
  return ncclSuccess;
}
