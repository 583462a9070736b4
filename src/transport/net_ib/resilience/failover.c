/*
 * Port failover's exchange between the two sides of a comm (failover.h): the messages over
 * the comm's ncclSocket, the receiver's answer, the sender's replays.
 */
#include <string.h>
#include "failover.h"
#include "../records.h"
#include "../slots.h"
#include "debug.h"
#include "../devices.h"
#include "../post.h"
#include "../qp.h"
#include "socket.h"

#define LOOK_INTERVAL_NS 1000000ull         /* at most one look at the socket a millisecond */
/* A QP moved to the error state has its last packets landed and its completions (flushes
 * included, which soft-RoCE makes asynchronously) delivered within this time: the sender
 * reads the records, and the receiver reports what is missing, no sooner after it. */
#define SETTLE_NS 100000000ull

/* Bounds from the configured timeouts (docs/ib-resiliency.md, Bounds): a rewritten clear-to-send
 * lands, or its QP fails, within the QPs' retry time; the receiver answers a query once its
 * own gone QPs were taken in and its rewrites landed. Never below 10 s (a loaded host). */
static uint64_t rewriteBoundNs(void) {
  uint64_t b = 2 * railnetIbRetryTimeNs() + 5000000000ull;
  return b < 10000000000ull ? 10000000000ull : b;
}
static uint64_t answerBoundNs(struct railnetIbFailover* fo) {
  return 2 * rewriteBoundNs() + (uint64_t)fo->probeDelayMs * 1000000ull;
}

/* The QPs a message names gone are gone here too; returns how many were not before. */
static int takeDead(struct ncclIbNetCommBase* base, const struct railnetIbFoMsg* m) {
  int n = 0;
  if (m->type > RAILNET_IB_FO_STATE) return 0; /* recovery messages name QPs coming back */
  for (int q = 0; q < base->nqps; q++) {
    if (!(m->deadQps[q / 64] & (1ull << (q % 64)))) continue;
    if (!railnetIbQpGone(base, q)) n++;
    railnetIbFoMarkQp(base, q);
    if (!base->isSend) base->fo->told[q] = 1; /* the sender knows */
  }
  return n;
}

/* A failure the peer saw: counted here too; the comm fails when nothing is left. */
static ncclResult_t peerFailure(struct ncclIbNetCommBase* base, int newDead) {
  struct railnetIbFailover* fo = base->fo;
  if (newDead == 0) return ncclSuccess;
  fo->failures++;
  char peer[SOCKET_NAME_MAXLEN];
  if (railnetIbQpLiveCount(base) == 0 || fo->failures > fo->maxAttempts) {
    WARN("NET/IB : port failover of the %s comm with %s is not possible: %s", base->isSend ? "send" : "receive",
         railnetIbPeerStr(base, peer), railnetIbQpLiveCount(base) == 0 ? "no QP of the comm is left" :
         "it failed over NCCL_IB_RESILIENCY_PORT_FAILOVER_MAX_ATTEMPTS times already (raise it to survive more)");
    return railnetIbFoFail(base);
  }
  INFO(NCCL_NET, "NET/IB : port failover: %s reports %d QP(s) of the %s comm gone; %d left",
       railnetIbPeerStr(base, peer), newDead, base->isSend ? "send" : "receive", railnetIbQpLiveCount(base));
  return ncclSuccess;
}

/* ------------------------------------------------------------------ receiver */

/* Takes in every completion there is (the gone QPs' last arrivals and flushes among them). */
static ncclResult_t drain(struct ncclIbNetCommBase* base) {
  for (int d = 0; d < base->vProps.ndevs; d++) {
    int n = 0, rounds = 0;
    do NCCLCHECK(base->fo->poll(base, d, &n));
    while (n > 0 && ++rounds < 100000);
  }
  return ncclSuccess;
}

static ncclResult_t answerQuery(struct ncclIbRecvComm* comm, const struct railnetIbFoMsg* query) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  char peer[SOCKET_NAME_MAXLEN];
  NCCLCHECK(peerFailure(base, takeDead(base, query)));
  /* a receive is reported missing only once its gone QPs' last completions are in: an
   * original completing after the answer would race its replay into a reused buffer */
  do {
    NCCLCHECK(drain(base));
    if (base->failed) return ncclRemoteError;
  } while (railnetClockNs() < fo->lastDeadNs + SETTLE_NS);
  /* what the sender has not taken from its fifo may have been lost with a gone QP; a
   * rewrite lost too (another device went meanwhile) is written again on the QPs left */
  int rewrites = 0;
  uint64_t bound = rewriteBoundNs(), deadline = railnetClockNs() + bound;
  do {
    fo->ctsRewriteLost = 0;
    for (int s = 0; s < RAILNET_IB_FIFO_SLOTS; s++) {
      struct ncclIbRequest* r = comm->recvReqs[s];
      if (r == NULL || r->id < query->fifoHead) continue;
      if (railnetIbPostCts(comm, r, s, 1) != ncclSuccess) return railnetIbFoFail(base);
      rewrites++;
    }
    while (railnetIbSlotCtsRewrites(base) > 0) {
      NCCLCHECK(drain(base));
      if (base->failed) return ncclRemoteError;
      if (railnetClockNs() > deadline) {
        WARN("NET/IB : port failover: %d clear-to-send entries rewritten to %s did not land within %.0f s (twice the "
             "QPs' retry time + 5 s): the comm's other devices failed too; the comm fails",
             railnetIbSlotCtsRewrites(base), railnetIbPeerStr(base, peer), bound / 1e9);
        return railnetIbFoFail(base);
      }
    }
  } while (fo->ctsRewriteLost && railnetIbQpLiveCount(base) > 0);
  /* the last credit write of an eager comm may have been lost with a gone QP */
  if (fo->client && fo->client->retell) NCCLCHECK(fo->client->retell(comm));
  struct railnetIbFoMsg state;
  memset(&state, 0, sizeof(state));
  state.type = RAILNET_IB_FO_STATE;
  state.fifoHead = query->nEntries ? query->entries[0].id : 0; /* the query's round, echoed */
  int missing = 0;
  for (int s = 0; s < RAILNET_IB_FIFO_SLOTS; s++) {
    struct ncclIbRequest* r = comm->recvReqs[s];
    if (r == NULL) continue;
    state.entries[state.nEntries].id = r->id;
    state.entries[state.nEntries].missing = railnetIbSlotRecvMissing(base, s);
    missing += railnetIbSlotRecvMissing(base, s) != 0;
    state.nEntries++;
  }
  NCCLCHECK(railnetIbFoSend(base, &state, "failover state"));
  INFO(NCCL_NET, "NET/IB : port failover of the receive comm with %s: answered its query (%u receive(s) in flight, "
       "%d of them missing data; %d clear-to-send entries rewritten on the %d QP(s) left)",
       railnetIbPeerStr(base, peer), state.nEntries, missing, rewrites, railnetIbQpLiveCount(base));
  return ncclSuccess;
}

static ncclResult_t recvProgress(struct ncclIbRecvComm* comm) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  int untold = 0;
  for (int q = 0; q < base->nqps; q++) untold += railnetIbQpGone(base, q) && !fo->told[q];
  if (untold) { /* a failure seen here: the sender is told at once */
    struct railnetIbFoMsg m;
    memset(&m, 0, sizeof(m));
    m.type = RAILNET_IB_FO_NOTIFY;
    NCCLCHECK(railnetIbFoSend(base, &m, "failover notice"));
    for (int q = 0; q < base->nqps; q++) fo->told[q] |= railnetIbQpGone(base, q);
  }
  uint64_t now = railnetClockNs();
  if (now < fo->nextLookNs) return ncclSuccess;
  fo->nextLookNs = now + LOOK_INTERVAL_NS;
  for (;;) {
    int got = 0;
    NCCLCHECK(railnetIbFoLook(base, &got));
    if (!got) return ncclSuccess;
    if (fo->in.type == RAILNET_IB_FO_RECOVER_REQ || fo->in.type == RAILNET_IB_FO_RECOVER_DONE) {
      struct railnetIbFoMsg m = fo->in;
      NCCLCHECK(railnetIbRecoveryRecv(comm, &m));
      continue;
    }
    if (fo->in.type == RAILNET_IB_FO_PROBE_REQ) {
      struct railnetIbFoMsg m = fo->in;
      NCCLCHECK(railnetIbProbeRecv(comm, &m));
      continue;
    }
    if (fo->in.type != RAILNET_IB_FO_QUERY) {
      char peer[SOCKET_NAME_MAXLEN];
      WARN("NET/IB : peer %s sent failover message type %u to a receive comm: the peer is broken", railnetIbPeerStr(base, peer),
           fo->in.type);
      return railnetIbFoFail(base);
    }
    struct railnetIbFoMsg query = fo->in;
    NCCLCHECK(answerQuery(comm, &query));
  }
}

/* ------------------------------------------------------------------ sender */

static ncclResult_t applyState(struct ncclIbSendComm* comm, const struct railnetIbFoMsg* st);

/* The read of every record on a QP not gone with room (none has room now: at the next step). */
static ncclResult_t postRead(struct ncclIbNetCommBase* base, struct railnetIbFailover* fo) {
  ncclResult_t res;
  int q = railnetIbRecordsRead(base, fo->readRound + 1, &res);
  NCCLCHECK(res);
  if (q < 0) return ncclSuccess;
  fo->readRound++;
  fo->readsOut++;
  fo->readState = RAILNET_IB_FO_READ_POSTED;
  fo->readQp = q;
  return ncclSuccess;
}

/* While a query waits: the read of the receiver's completion records (records.c) settles it
 * without the receiver's CPU; a read lost with its QP is made again on another. */
static ncclResult_t readStep(struct ncclIbSendComm* comm) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  if (fo->readState == RAILNET_IB_FO_READ_POSTED && railnetIbQpGone(base, fo->readQp)) fo->readState = RAILNET_IB_FO_READ_NONE;
  if (fo->readState == RAILNET_IB_FO_READ_NONE && fo->readsOut == 0 && railnetClockNs() >= fo->readNs)
    NCCLCHECK(postRead(base, fo));
  if (fo->readState == RAILNET_IB_FO_READ_POSTED) {
    int n = 0;
    NCCLCHECK(fo->poll(base, base->qps[fo->readQp].devIndex, &n));
  }
  if (fo->readState != RAILNET_IB_FO_READ_DONE || base->failed) return ncclSuccess;
  fo->readState = RAILNET_IB_FO_READ_NONE;
  NCCLCHECK(applyState(comm, NULL));
  fo->state = RAILNET_IB_FO_IDLE; /* the receiver's answer, when it comes, changes nothing */
  return ncclSuccess;
}

/* The chunks of the gone QPs: replayed where the receiver lacks them, done where it has them;
 * what the receiver has comes from its answer st, or (st NULL) from its completion records. */
static ncclResult_t applyState(struct ncclIbSendComm* comm, const struct railnetIbFoMsg* st) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  int replayed = 0, arrived = 0;
  for (int s = 0; s < RAILNET_IB_FIFO_SLOTS; s++) {
    struct ncclIbRequest* first = comm->sendReqs[s][0];
    if (railnetIbSlotPending(base, s) == 0 || first == NULL) continue;
    uint64_t missing = 0;
    for (uint32_t e = 0; st && e < st->nEntries; e++)
      if (st->entries[e].id == first->id) missing = st->entries[e].missing;
    if (st == NULL) missing = railnetIbRecordsMissing(base, s, first->id);
    for (int i = 0; i < RAILNET_IB_FO_MAX_CHUNKS; i++) {
      uint64_t bit = 1ull << i;
      int q = railnetIbSlotChunkQp(base, s, i);
      if (!(railnetIbSlotPending(base, s) & bit) || !railnetIbQpGone(base, q)) continue;
      struct ncclIbQp* nq = (missing & bit) ? railnetIbQpLive(base, &base->qps[q]) : NULL;
      if ((missing & bit) && nq == NULL) return railnetIbFoFail(base);
      for (int j = 0; j < first->nreqs; j++) {
        struct ncclIbRequest* r = comm->sendReqs[s][j];
        if (r == NULL) continue;
        r->events[base->qps[q].devIndex]--;
        if (nq) r->events[nq->devIndex]++;
      }
      if (nq) {
        railnetIbSlotWriteAgain(base, s, i, (int)(nq - base->qps));
        replayed++;
      } else {
        railnetIbSlotSettled(base, s, i);
        arrived++;
      }
    }
  }
  int eager = 0; /* eager messages without a completion on a gone QP: written again (its client) */
  if (fo->client && fo->client->failedOver) NCCLCHECK(fo->client->failedOver(comm, &eager));
  char peer[SOCKET_NAME_MAXLEN];
  INFO(NCCL_NET, "NET/IB : port failover of the send comm with %s done: %d chunk(s) replayed on the %d QP(s) left, "
       "%d had arrived, %d eager message(s) written again (%s; learned from %s)", railnetIbPeerStr(base, peer),
       replayed, railnetIbQpLiveCount(base), arrived, eager, fo->why[0] ? fo->why : "a failure the peer saw",
       st ? "the receiver's answer" : "its completion records, read over a QP left");
  return ncclSuccess;
}

/* Posts the replays that fit in their QPs' send queues and in their pacing window now
 * (RAILNET_IB_FO_REPLAY_WINDOW chunks in flight per QP). */
static ncclResult_t postReplays(struct ncclIbSendComm* comm) {
  struct ncclIbNetCommBase* base = &comm->base;
  int want = 0;
  for (int s = 0; s < RAILNET_IB_FIFO_SLOTS; s++) want |= railnetIbSlotToWrite(base, s) != 0;
  if (!want) return ncclSuccess;
  uint8_t inFlight[NCCL_IB_MAX_QPS];
  memset(inFlight, 0, sizeof(inFlight));
  for (int s = 0; s < RAILNET_IB_FIFO_SLOTS; s++) {
    uint64_t m = railnetIbSlotRewriting(base, s);
    for (int i = 0; m && i < RAILNET_IB_FO_MAX_CHUNKS; i++)
      if (m & (1ull << i)) inFlight[railnetIbSlotChunkQp(base, s, i)]++;
  }
  for (int s = 0; s < RAILNET_IB_FIFO_SLOTS; s++) {
    for (int i = 0; railnetIbSlotToWrite(base, s) && i < RAILNET_IB_FO_MAX_CHUNKS; i++) {
      uint64_t bit = 1ull << i;
      if (!(railnetIbSlotToWrite(base, s) & bit)) continue;
      int q = railnetIbSlotChunkQp(base, s, i);
      struct ncclIbQp* qp = &base->qps[q];
      if (railnetIbQpGone(base, q)) continue; /* gone since: the next answer settles it */
      if (inFlight[q] >= RAILNET_IB_FO_REPLAY_WINDOW || !railnetIbQpRoom(base, qp, comm->slotWrs[s])) continue;
      NCCLCHECK(railnetIbPostChunk(comm, s, i, qp, railnetIbSlotCts(base, s)));
      railnetIbSlotRewritten(base, s, i);
      inFlight[q]++;
    }
  }
  return ncclSuccess;
}

static ncclResult_t sendStep(struct ncclIbSendComm* comm, uint64_t now) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  char peer[SOCKET_NAME_MAXLEN];
  int unasked = 0;
  for (int q = 0; q < base->nqps; q++) unasked += railnetIbQpGone(base, q) && !fo->told[q];
  if (fo->state == RAILNET_IB_FO_IDLE && unasked) {
    fo->state = RAILNET_IB_FO_DELAY;
    fo->stateNs = now + (uint64_t)fo->probeDelayMs * 1000000ull;
  }
  if (fo->state == RAILNET_IB_FO_DELAY && now >= fo->stateNs) {
    struct railnetIbFoMsg m;
    memset(&m, 0, sizeof(m));
    m.type = RAILNET_IB_FO_QUERY;
    m.fifoHead = base->fifoHead;
    m.nEntries = 1;
    m.entries[0].id = ++fo->queryRound; /* echoed in the answer: a late answer is known as such */
    NCCLCHECK(railnetIbFoSend(base, &m, "failover query"));
    for (int q = 0; q < base->nqps; q++) fo->told[q] |= railnetIbQpGone(base, q);
    fo->state = RAILNET_IB_FO_WAIT;
    fo->stateNs = now + answerBoundNs(fo);
    fo->readState = RAILNET_IB_FO_READ_NONE;
    /* what the gone QPs sent before they were stopped may still be on its way: a record read
     * too early would have a chunk replayed that lands anyway (docs/ib-resiliency.md) */
    uint64_t delay = (uint64_t)fo->probeDelayMs * 1000000ull;
    fo->readNs = now + (delay < SETTLE_NS ? SETTLE_NS - delay : 0);
  }
  if (fo->state == RAILNET_IB_FO_WAIT && railnetIbRecordsOn(base)) NCCLCHECK(readStep(comm));
  if (fo->state == RAILNET_IB_FO_WAIT && base->sockClosed) {
    WARN("NET/IB : port failover: %s closed its connection before it answered the failover query: its process "
         "exited or its comm failed (look at its log); the comm fails", railnetIbPeerStr(base, peer));
    return railnetIbFoFail(base);
  }
  if (fo->state == RAILNET_IB_FO_WAIT && now > fo->stateNs) {
    /* the peer is there (its socket is open) but calls nothing on its comm: between steps,
     * in a checkpoint, or hung. Waiting loses nothing; say so and look again later */
    WARN("NET/IB : port failover: %s has not answered the failover query for %.0f s although its connection is "
         "open: its process does not call the comm (busy elsewhere, or hung: look at its stack). Still waiting",
         railnetIbPeerStr(base, peer), (now - fo->stateNs + answerBoundNs(fo)) / 1e9);
    fo->stateNs = now + answerBoundNs(fo);
  }
  NCCLCHECK(postReplays(comm));
  if (fo->client && fo->client->resend) NCCLCHECK(fo->client->resend(comm)); /* (eager: send queue full at the failover) */
  NCCLCHECK(railnetIbProbeSendStep(comm, now));
  return railnetIbRecoverySendStep(comm, now);
}

static ncclResult_t sendProgress(struct ncclIbSendComm* comm) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  uint64_t now = railnetClockNs();
  if (fo->state == RAILNET_IB_FO_WAIT || now >= fo->nextLookNs) {
    fo->nextLookNs = now + LOOK_INTERVAL_NS;
    for (;;) {
      int got = 0;
      NCCLCHECK(railnetIbFoLook(base, &got));
      if (!got) break;
      if (fo->in.type == RAILNET_IB_FO_NOTIFY) {
        NCCLCHECK(peerFailure(base, takeDead(base, &fo->in)));
      } else if (fo->in.type == RAILNET_IB_FO_PROBE_ACK) {
        struct railnetIbFoMsg m = fo->in;
        NCCLCHECK(railnetIbProbeAnswer(comm, &m));
      } else if (fo->in.type == RAILNET_IB_FO_RECOVER_ACK || fo->in.type == RAILNET_IB_FO_RECOVER_NACK) {
        struct railnetIbFoMsg m = fo->in;
        NCCLCHECK(railnetIbRecoveryAnswer(comm, &m));
      } else if (fo->in.type == RAILNET_IB_FO_STATE && railnetIbRecordsOn(base) &&
                 (fo->state != RAILNET_IB_FO_WAIT || fo->in.fifoHead != fo->queryRound)) {
        /* the answer to a query its completion records settled already */
        NCCLCHECK(peerFailure(base, takeDead(base, &fo->in)));
      } else if (fo->in.type == RAILNET_IB_FO_STATE && fo->state == RAILNET_IB_FO_WAIT) {
        NCCLCHECK(peerFailure(base, takeDead(base, &fo->in)));
        NCCLCHECK(applyState(comm, &fo->in));
        fo->state = RAILNET_IB_FO_IDLE;
      } else {
        char peer[SOCKET_NAME_MAXLEN];
        WARN("NET/IB : peer %s sent failover message type %u to a send comm %s: the peer is broken", railnetIbPeerStr(base, peer),
             fo->in.type, fo->state == RAILNET_IB_FO_WAIT ? "" : "that asked nothing");
        return railnetIbFoFail(base);
      }
    }
  }
  return sendStep(comm, now);
}

ncclResult_t railnetIbFoProgress(struct ncclIbNetCommBase* base) {
  if (base->fo == NULL || base->failed) return ncclSuccess;
  if (base->isSend) return sendProgress((struct ncclIbSendComm*)base);
  return recvProgress((struct ncclIbRecvComm*)base);
}

int railnetIbFoBusy(struct ncclIbNetCommBase* base) {
  return base->fo != NULL && base->fo->state != RAILNET_IB_FO_IDLE;
}
