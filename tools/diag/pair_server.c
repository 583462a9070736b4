/* railnet-diag --serve [--port P] [--timeout S]: answers the pair protocol for at most S
 * seconds, then exits. Probes are echoed by the listener; one client at a time gets a
 * session, in which this side reports its interfaces and RDMA entries, probes the client's
 * addresses when asked (TCP_RUN) and brings up its end of each RDMA path. Nothing a peer
 * sends is executed: every message is a fixed record checked by the decoder. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "pair.h"

typedef struct {
  pairListener listener;
  pthread_mutex_t lock;
  int active, served;
  pthread_t thread;
  int fd;
  railnetPairHello hello;
  char peer[64];
} pairServer;

/* One message of the session; 1 when the session is over, -1 on an error. */
static int sessionStep(pairServer* sv, pairState* st, uint64_t deadline) {
  railnetPairMsg m;
  char why[128] = "";
  int e = railnetPairRecv(sv->fd, &m, deadline, why);
  if (e) {
    pairLog("session with %s ended: %s", sv->peer, e == EPROTO ? why : strerror(e));
    return -1;
  }
  int done = 0;
  switch (m.type) {
    case RAILNET_PAIR_IFACES:
      st->nRemote = (int)m.count;
      if (m.count) memcpy(st->remote, m.u.ifaces, m.count * sizeof(*m.u.ifaces));
      e = railnetPairSend(sv->fd, RAILNET_PAIR_IFACES, st->local, (uint32_t)st->nLocal, deadline);
      break;
    case RAILNET_PAIR_TCP_RUN:
      pairProbeTcp(st, st->peer.probePort, (int)st->peer.timeoutMs, NULL);
      e = railnetPairSend(sv->fd, RAILNET_PAIR_TCP_RESULTS, st->out, (uint32_t)st->nOut, deadline);
      break;
    case RAILNET_PAIR_RDMA_PORTS:
      st->nRr = (int)m.count;
      if (m.count) memcpy(st->rr, m.u.rdma, m.count * sizeof(*m.u.rdma));
      e = railnetPairSend(sv->fd, RAILNET_PAIR_RDMA_PORTS, st->lr, (uint32_t)st->nLr, deadline);
      break;
    case RAILNET_PAIR_RDMA_QP:
    case RAILNET_PAIR_RDMA_RUN:
      e = pairRdmaServe(st, sv->fd, &m, deadline);
      break;
    case RAILNET_PAIR_BW_START:
      e = pairBwServe(sv->fd, m.u.bwStart, deadline);
      break;
    case RAILNET_PAIR_BYE:
      done = 1;
      break;
    default: {
      railnetPairError err = {EPROTO, ""};
      snprintf(err.text, sizeof(err.text), "%s is not expected from a client", railnetPairTypeName(m.type));
      pairLog("session with %s: %s", sv->peer, err.text);
      railnetPairSend(sv->fd, RAILNET_PAIR_ERROR, &err, 1, deadline);
      e = EPROTO;
    }
  }
  railnetPairFree(&m);
  if (e && !done) {
    pairLog("session with %s ended: %s", sv->peer, strerror(e));
    return -1;
  }
  return done;
}

static void* sessionThread(void* arg) {
  pairServer* sv = (pairServer*)arg;
  uint64_t deadline = sv->listener.deadlineNs;
  pairState* st = (pairState*)calloc(1, sizeof(*st));
  int rc = -1;
  if (st) {
    pairStateInit(st, sv->listener.port);
    st->peer = sv->hello;
    snprintf(st->peerName, sizeof(st->peerName), "%s", sv->peer);
    pairLog("session with %s (%s, railnet-diag %s)", sv->peer, sv->hello.host, sv->hello.version);
    if (railnetPairSend(sv->fd, RAILNET_PAIR_HELLO, &st->self, 1, deadline) == 0) {
      while ((rc = sessionStep(sv, st, deadline)) == 0) {
      }
    }
  }
  pairRdmaServeEnd();
  close(sv->fd);
  if (rc == 1) pairLog("session with %s done: %d TCP probes answered, %d sent", sv->peer,
                       sv->listener.probesAnswered, st ? st->nOut : 0);
  free(st);
  pthread_mutex_lock(&sv->lock);
  sv->served = rc == 1 ? 1 : sv->served;
  sv->listener.stop = 1;
  pthread_mutex_unlock(&sv->lock);
  return NULL;
}

static int onHello(int fd, const railnetPairHello* hello, const char* peer, void* arg) {
  pairServer* sv = (pairServer*)arg;
  pthread_mutex_lock(&sv->lock);
  int busy = sv->active;
  if (!busy) {
    sv->active = 1;
    sv->fd = fd;
    sv->hello = *hello;
    snprintf(sv->peer, sizeof(sv->peer), "%s", peer);
    if (pthread_create(&sv->thread, NULL, sessionThread, sv) != 0) sv->active = 0, busy = 1;
  }
  pthread_mutex_unlock(&sv->lock);
  return busy ? -1 : 0;
}

int pairServe(const pairOptions* o) {
  static pairServer sv;
  memset(&sv, 0, sizeof(sv));
  pthread_mutex_init(&sv.lock, NULL);
  int e = pairListen(&sv.listener, (uint16_t)o->port, 0);
  if (e) {
    fprintf(stderr, "railnet-diag --serve: cannot listen on TCP port %d: %s%s\n", o->port, strerror(e),
            e == EADDRINUSE ? " (another --serve? pick one with --port)" : "");
    return 1;
  }
  sv.listener.deadlineNs = railnetClockNs() + (uint64_t)o->timeout * 1000000000ull;
  sv.listener.onHello = onHello;
  sv.listener.arg = &sv;
  pairLog("--serve: answering the pair protocol on TCP port %u for at most %d s", sv.listener.port, o->timeout);
  pairServeLoop(&sv.listener);
  pthread_mutex_lock(&sv.lock);
  int active = sv.active;
  pthread_mutex_unlock(&sv.lock);
  if (active) pthread_join(sv.thread, NULL); /* its I/O ends by the same deadline */
  pairListenStop(&sv.listener);
  if (!sv.served) {
    pairLog("--serve: %s within %d s; exiting", active ? "the session did not finish" : "no peer came", o->timeout);
    return 1;
  }
  return 0;
}
