/* railnet-diag --serve [--port P] [--timeout S]: answers the pair protocol for at most S
 * seconds, then exits. Probes are echoed by the listener; one client at a time gets a
 * session, in which this side reports its interfaces and RDMA entries, probes the client's
 * addresses when asked (TCP_RUN) and brings up its end of each RDMA path. Nothing a peer
 * sends is executed: every message is a fixed record checked by the decoder. What a client
 * cannot make this side do: probe an address that is not its own (a probe sends nothing
 * until the client's listener greeted with the token of the client's HELLO), wait longer
 * than this side's own bounds (the per-probe bound is PAIR_PROBE_MS whatever the HELLO says;
 * each message of a session must come within what the client's phase may take), hold a
 * session past its phases (each message comes in the check's order, the one-time ones once,
 * the per-path and per-transfer ones at most as many times as there can be paths: a repeated
 * or out-of-order message ends the session), or end --serve: only a session that went through
 * the TCP probes and ends with BYE does; one that fails, idles or says BYE before its checks
 * frees the slot. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include "pair.h"

struct pairServer {
  pairListener listener;
  pthread_mutex_t lock;
  pthread_cond_t ended; /* a session ended */
  int active, served;
  int persistent;       /* --cluster: a session's BYE does not stop the server */
  uint64_t jobToken;    /* --cluster: the job's token, which a HELLO must carry (0: --serve, none) */
  int fd;
  railnetPairHello hello;
  char peer[64];
};

/* How long the client may take before its next message, after the message `last`: its
 * own TCP probes of this host follow RDMA_PORTS; its RDMA writes and reads and --bw
 * transfers follow TCP_RUN and the RDMA/BW messages; anything else is answered at once. */
static uint64_t nextMessageMs(const pairState* st, int last) {
  if (last == RAILNET_PAIR_RDMA_PORTS) /* its probes of the service port, then of the ephemeral ones */
    return PAIR_REPLY_MS + (uint64_t)(pairTcpPathCount(st) + RAILNET_PAIR_EPHEMERAL) * PAIR_PROBE_MS;
  if (last == RAILNET_PAIR_TCP_RUN || last == RAILNET_PAIR_RDMA_QP || last == RAILNET_PAIR_RDMA_RUN ||
      last == RAILNET_PAIR_BW_START)
    return PAIR_REPLY_MS + 3 * PAIR_RDMA_MS + 2 * PAIR_BW_MS + 2000;
  return PAIR_REPLY_MS;
}

/* Where a session is in the check's order (pair_client.c: runChecks): the facts (IFACES,
 * then RDMA_PORTS), this side's probes (TCP_RUN), the RDMA paths (RDMA_QP, then its
 * RDMA_RUN), the --bw transfers (BW_START), BYE. */
enum { PHASE_HELLO, PHASE_IFACES, PHASE_RDMA_PORTS, PHASE_TCP, PHASE_RDMA, PHASE_BW };
typedef struct {
  int phase;
  int rdmaQps, rdmaRuns, bwStarts; /* how many came */
} sessionOrder;

/* NULL when message type t may come now (and counts it), else why not. */
static const char* sessionAdmit(sessionOrder* o, const pairState* st, int t) {
  int maxPaths = st->nLr * st->nRr; /* the RDMA paths there can be: one QP and one RUN each */
  switch (t) {
    case RAILNET_PAIR_IFACES:
      if (o->phase != PHASE_HELLO) return "a second IFACES";
      o->phase = PHASE_IFACES;
      return NULL;
    case RAILNET_PAIR_RDMA_PORTS:
      if (o->phase != PHASE_IFACES) return o->phase < PHASE_IFACES ? "RDMA_PORTS before IFACES" : "a second RDMA_PORTS";
      o->phase = PHASE_RDMA_PORTS;
      return NULL;
    case RAILNET_PAIR_TCP_RUN:
      if (o->phase != PHASE_RDMA_PORTS) return o->phase < PHASE_RDMA_PORTS ? "TCP_RUN before the facts" : "a second TCP_RUN";
      o->phase = PHASE_TCP;
      return NULL;
    case RAILNET_PAIR_RDMA_QP:
      if (o->phase != PHASE_TCP && o->phase != PHASE_RDMA) return "RDMA_QP out of the check's order";
      if (o->rdmaQps >= maxPaths) return "more RDMA paths than both sides' ports make"; /* a failed setup has no RUN */
      o->phase = PHASE_RDMA, o->rdmaQps++;
      return NULL;
    case RAILNET_PAIR_RDMA_RUN:
      if (o->phase != PHASE_RDMA || o->rdmaRuns >= o->rdmaQps) return "RDMA_RUN without its RDMA_QP";
      o->rdmaRuns++;
      return NULL;
    case RAILNET_PAIR_BW_START:
      if (o->phase < PHASE_TCP) return "BW_START before the probes";
      if (o->bwStarts >= 4 * PAIR_MAX_BW) return "more --bw transfers than a check makes"; /* 2 ways, each measured twice at most */
      o->phase = PHASE_BW, o->bwStarts++;
      return NULL;
    default:
      return NULL; /* BYE at any time; anything else is refused below */
  }
}

/* One message of the session; 1 when the session is over, -1 on an error. *last: the type
 * of the message before (in), of this one (out). */
static int sessionStep(pairServer* sv, pairState* st, sessionOrder* order, uint64_t sessionDl, int* last) {
  railnetPairMsg m;
  char why[128] = "";
  uint64_t deadline = railnetClockNs() + nextMessageMs(st, *last) * 1000000ull;
  if (deadline > sessionDl) deadline = sessionDl;
  int e = railnetPairRecv(sv->fd, &m, deadline, why);
  if (e) {
    pairLog("session with %s ended: %s", sv->peer,
            e == EPROTO ? why : e == ETIMEDOUT ? "no message within the bound of its phase" : strerror(e));
    return -1;
  }
  *last = m.type;
  int done = 0;
  const char* refused = sessionAdmit(order, st, m.type);
  switch (refused ? -1 : m.type) {
    case RAILNET_PAIR_IFACES:
      st->nRemote = (int)m.count;
      if (m.count) memcpy(st->remote, m.u.ifaces, m.count * sizeof(*m.u.ifaces));
      e = railnetPairSend(sv->fd, RAILNET_PAIR_IFACES, st->local, (uint32_t)st->nLocal, deadline);
      break;
    case RAILNET_PAIR_TCP_RUN:
      st->endNs = sessionDl; /* no probe past the session's end (--serve --timeout), nor the client's budget */
      if (m.count == 1 && railnetClockNs() + m.u.tcpRun->budgetMs * 1000000ull < st->endNs)
        st->endNs = railnetClockNs() + m.u.tcpRun->budgetMs * 1000000ull;
      pairProbeTcp(st, st->peer.probePort, PAIR_PROBE_MS, NULL); /* this side's bound, not the HELLO's */
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
      if (refused) snprintf(err.text, sizeof(err.text), "%s: the session ends", refused);
      else snprintf(err.text, sizeof(err.text), "%s is not expected from a client", railnetPairTypeName(m.type));
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
  /* --serve: its --timeout; --cluster: none but the per-phase bounds (an hour at most) */
  uint64_t deadline = sv->listener.deadlineNs ? sv->listener.deadlineNs : railnetClockNs() + 3600000000000ull;
  pairState* st = (pairState*)calloc(1, sizeof(*st));
  int rc = -1;
  if (st) {
    pairStateInit(st, &sv->listener);
    st->self.jobToken = sv->jobToken; /* the client checks that its partner is of its job */
    if (sv->jobToken == 0) pairStateScope(st, sv->fd); /* anyone may be the client: probe only its own addresses */
    st->peer = sv->hello;
    snprintf(st->peerName, sizeof(st->peerName), "%s", sv->peer);
    pairLog("session with %s (%s, railnet-diag %s)", sv->peer, sv->hello.host, sv->hello.version);
    int last = RAILNET_PAIR_HELLO;
    sessionOrder order = {PHASE_HELLO, 0, 0, 0};
    if (railnetPairSend(sv->fd, RAILNET_PAIR_HELLO, &st->self, 1, deadline) == 0) {
      while ((rc = sessionStep(sv, st, &order, deadline, &last)) == 0) {
      }
    }
    if (rc == 1 && order.phase < PHASE_TCP) {
      pairLog("session with %s said BYE before its checks: %s", sv->peer,
              sv->persistent ? "its slot is free" : "--serve goes on");
      rc = 0;
    }
  }
  pairRdmaServeEnd();
  close(sv->fd);
  if (rc == 1) pairLog("session with %s done: %d TCP probes answered, %d sent", sv->peer,
                       sv->listener.probesAnswered, st ? st->nOut : 0);
  free(st);
  pthread_mutex_lock(&sv->lock);
  if (rc == 1 && !sv->persistent) { /* done: --serve ends; a failed session leaves it serving the next client */
    sv->served = 1;
    sv->listener.stop = 1;
  }
  sv->active = 0;
  pthread_cond_broadcast(&sv->ended);
  pthread_mutex_unlock(&sv->lock);
  return NULL;
}

static int onHello(int fd, const railnetPairHello* hello, const char* peer, void* arg) {
  pairServer* sv = (pairServer*)arg;
  if (hello->jobToken != sv->jobToken) {
    pairLog("HELLO from %s (%s) refused: %s", peer, hello->host,
            sv->persistent ? "not this job's token (--cluster serves only the ranks of its job)"
            : sv->jobToken ? "not this --serve's --token (give the --pair the same --token)"
                           : "it carries a token, and this --serve has none (start it with the same --token)");
    return -2;
  }
  pthread_mutex_lock(&sv->lock);
  /* --cluster: the partner of the round before may still be saying goodbye (its client
   * moved on after BYE); its session ends within PAIR_BYE_MS */
  struct timespec until;
  clock_gettime(CLOCK_REALTIME, &until);
  until.tv_sec += PAIR_BYE_MS / 1000 + 1;
  while (sv->persistent && sv->active && pthread_cond_timedwait(&sv->ended, &sv->lock, &until) == 0) {
  }
  int busy = sv->active;
  if (!busy) {
    sv->active = 1;
    sv->fd = fd;
    sv->hello = *hello;
    snprintf(sv->peer, sizeof(sv->peer), "%s", peer);
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &attr, sessionThread, sv) != 0) sv->active = 0, busy = 1;
    pthread_attr_destroy(&attr);
  }
  pthread_mutex_unlock(&sv->lock);
  return busy ? -1 : 0;
}

pairServer* pairServerStart(void) {
  pairServer* sv = (pairServer*)calloc(1, sizeof(*sv));
  if (sv == NULL) return NULL;
  int e = pairListen(&sv->listener, 0, 1);
  if (e) {
    free(sv);
    errno = e;
    return NULL;
  }
  pthread_mutex_init(&sv->lock, NULL);
  pthread_cond_init(&sv->ended, NULL);
  sv->persistent = 1;
  sv->listener.onHello = onHello;
  sv->listener.arg = sv;
  if ((e = pairServeInThread(&sv->listener)) != 0) {
    pairListenStop(&sv->listener);
    free(sv);
    errno = e;
    return NULL;
  }
  return sv;
}

const pairListener* pairServerListener(const pairServer* sv) { return &sv->listener; }

void pairServerStop(pairServer* sv) {
  if (sv == NULL) return;
  pairListenStop(&sv->listener);
  pthread_mutex_lock(&sv->lock);
  while (sv->active) pthread_cond_wait(&sv->ended, &sv->lock);
  pthread_mutex_unlock(&sv->lock);
  free(sv);
}

int pairServe(const pairOptions* o) {
  static pairServer sv;
  memset(&sv, 0, sizeof(sv));
  pthread_mutex_init(&sv.lock, NULL);
  pthread_cond_init(&sv.ended, NULL);
  int e = pairListen(&sv.listener, (uint16_t)o->port, 0);
  if (e) {
    fprintf(stderr, "railnet-diag --serve: cannot listen on TCP port %d: %s%s\n", o->port, strerror(e),
            e == EADDRINUSE ? " (another --serve? pick one with --port)" : "");
    return 1;
  }
  sv.listener.deadlineNs = railnetClockNs() + (uint64_t)o->timeout * 1000000000ull;
  sv.listener.onHello = onHello;
  sv.listener.arg = &sv;
  sv.jobToken = o->token;
  pairLog("--serve: answering the pair protocol on TCP port %u for at most %d s; %s", sv.listener.port, o->timeout,
          o->token ? "only a --pair with the same --token, whose every address it probes"
                   : "any client, whose own addresses only it probes (--token T: every address)");
  pairServeLoop(&sv.listener);
  pairListenStop(&sv.listener); /* no new session after this */
  pthread_mutex_lock(&sv.lock);
  int active = sv.active;
  while (sv.active) pthread_cond_wait(&sv.ended, &sv.lock); /* its I/O ends by the same deadline */
  pthread_mutex_unlock(&sv.lock);
  if (!sv.served) {
    pairLog("--serve: %s within %d s; exiting", active ? "the session did not finish" : "no peer came", o->timeout);
    return 1;
  }
  return 0;
}

void pairServerSetJobToken(pairServer* sv, uint64_t token) { sv->jobToken = token; }
uint64_t pairServerJobToken(const pairServer* sv) { return sv->jobToken; }
