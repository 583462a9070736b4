/*
 * Port recovery (failover.h, NCCL_IB_RESILIENCY_PORT_RECOVERY=1): a device that a comm failed
 * over from is taken back once its port is ACTIVE again. The sender drives it, one device at
 * a time, no earlier than _PORT_RECOVERY_START_DELAY ms after the failure:
 *   REQ   sender: new QPs (INIT) for the device's gone ones, their numbers;
 *   ACK   receiver: its new QPs, connected to those, their receives posted (NACK: its port is
 *         not back); the sender connects its own;
 *   alive the sender writes _ALIVE_MSG_BATCH_SIZE empty RDMA writes per new QP every
 *         _ALIVE_MSG_BATCH_INTERVAL ms; _ALIVE_MSG_SEQUENCE_SIZE batches all acknowledged, each
 *         within _ALIVE_MSG_TIMEOUT ms, and the QPs are good;
 *   DONE  sender: it uses them from now on; the receiver takes them in (or at their first data).
 * An attempt that fails (no answer within _ACK_TIMEOUT ms, a NACK, an alive write failing or
 * late) is retried after the start delay, _PORT_RECOVERY_ATTEMPTS_MAX times at most.
 */
#include <stdio.h>
#include <string.h>
#include "failover.h"
#include "debug.h"
#include "../devices.h"
#include "ibvwrap.h"
#include "../matching.h"
#include "../post.h"
#include "../qp.h"
#include "socket.h"

enum { REC_IDLE = 0, REC_WAIT_ACK, REC_ALIVE };
#define PORT_LOOK_INTERVAL_NS 100000000ull /* a gone device's port is looked at every 100 ms */
#define MS 1000000ull

static int portActive(struct ncclIbNetCommBase* base, int d) {
  struct ncclIbDev* dev = &ncclIbDevs[base->devs[d].ibDevN];
  struct ibv_port_attr pa;
  memset(&pa, 0, sizeof(pa));
  return wrap_ibv_query_port(dev->context, dev->portNum, &pa) == ncclSuccess && pa.state == IBV_PORT_ACTIVE;
}

static const char* devStr(struct ncclIbNetCommBase* base, int d, char* buf, size_t len) {
  struct ncclIbDev* dev = &ncclIbDevs[base->devs[d].ibDevN];
  snprintf(buf, len, "%s:%d", dev->devName, dev->portNum);
  return buf;
}

static void dropNewQps(struct ncclIbNetCommBase* base, int d) {
  for (int q = 0; q < base->nqps; q++) {
    if (base->qps[q].devIndex != d || base->fo->newQps[q] == NULL) continue;
    wrap_ibv_destroy_qp(base->fo->newQps[q]);
    base->fo->newQps[q] = NULL;
  }
}

/* ------------------------------------------------------------------ sender */

static ncclResult_t attemptFailed(struct ncclIbSendComm* comm, const char* why, uint64_t now) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  char peer[SOCKET_NAME_MAXLEN], dev[96];
  int d = fo->recDev;
  INFO(NCCL_NET, "NET/IB : port recovery of %s for the send comm with %s failed: %s; %s", devStr(base, d, dev, sizeof(dev)),
       railnetIbPeerStr(base, peer), why,
       fo->recAttempts[d] < fo->rp.attemptsMax ? "it is tried again after NCCL_IB_RESILIENCY_PORT_RECOVERY_START_DELAY"
                                               : "it stays failed (NCCL_IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX)");
  dropNewQps(base, d);
  fo->recState = REC_IDLE;
  fo->failedNs[d] = now;
  return ncclSuccess;
}

static ncclResult_t startAttempt(struct ncclIbSendComm* comm, int d, uint64_t now) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  struct railnetIbFoMsg m;
  memset(&m, 0, sizeof(m));
  m.type = RAILNET_IB_FO_RECOVER_REQ;
  fo->recAttempts[d]++;
  fo->recDev = d;
  for (int q = 0; q < base->nqps && m.nEntries < RAILNET_IB_FIFO_SLOTS; q++) {
    if (base->qps[q].devIndex != d || !railnetIbQpGone(base, q)) continue;
    if (railnetIbQpCreate(base, d, &fo->newQps[q]) != ncclSuccess) return attemptFailed(comm, "no new QP", now);
    m.entries[m.nEntries].id = (uint64_t)q;
    m.entries[m.nEntries].missing = fo->newQps[q]->qp_num;
    m.nEntries++;
  }
  char peer[SOCKET_NAME_MAXLEN], dev[96];
  WARN("NET/IB : port recovery: %s is ACTIVE again: bringing its %u QP(s) of the send comm with %s back (attempt %d "
       "of NCCL_IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX=%d)", devStr(base, d, dev, sizeof(dev)), m.nEntries,
       railnetIbPeerStr(base, peer), fo->recAttempts[d], fo->rp.attemptsMax);
  NCCLCHECK(railnetIbFoSend(base, &m, "recovery request"));
  fo->recState = REC_WAIT_ACK;
  fo->recNs = now + (uint64_t)fo->rp.ackTimeoutMs * MS;
  return ncclSuccess;
}

/* One batch of empty RDMA writes on every new QP (their completions: completion.c). */
static ncclResult_t postAlive(struct ncclIbSendComm* comm) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  int n = fo->rp.batchSize < base->sqDepth ? fo->rp.batchSize : base->sqDepth;
  for (int q = 0; q < base->nqps; q++) {
    if (fo->newQps[q] == NULL || base->qps[q].devIndex != fo->recDev) continue;
    for (int i = 0; i < n; i++) {
      struct ibv_send_wr wr, *bad = NULL;
      memset(&wr, 0, sizeof(wr));
      wr.opcode = IBV_WR_RDMA_WRITE;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr_id = railnetIbWrIdFoAlive();
      wr.wr.rdma.remote_addr = comm->remSizesAddr;
      wr.wr.rdma.rkey = comm->remSizesRkeys[base->qps[q].remDevIndex];
      if (wrap_ibv_post_send(fo->newQps[q], &wr, &bad) != ncclSuccess) {
        fo->aliveFailed = 1;
        return ncclSuccess;
      }
      fo->aliveInFlight++;
    }
  }
  return ncclSuccess;
}

static ncclResult_t finish(struct ncclIbSendComm* comm) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  int d = fo->recDev;
  struct railnetIbFoMsg m;
  memset(&m, 0, sizeof(m));
  m.type = RAILNET_IB_FO_RECOVER_DONE;
  for (int q = 0; q < base->nqps; q++) {
    if (fo->newQps[q] == NULL || base->qps[q].devIndex != d) continue;
    m.entries[m.nEntries].id = (uint64_t)q;
    m.entries[m.nEntries].missing = fo->newQps[q]->qp_num;
    m.nEntries++;
  }
  NCCLCHECK(railnetIbFoSend(base, &m, "recovery done"));
  for (uint32_t e = 0; e < m.nEntries; e++) railnetIbFoAdopt(base, (int)m.entries[e].id);
  fo->failedNs[d] = 0;
  fo->recAttempts[d] = 0;
  fo->recState = REC_IDLE;
  NCCLCHECK(railnetIbProbeRenew(comm, d)); /* its probe QP may have gone with the failure */
  char peer[SOCKET_NAME_MAXLEN], dev[96];
  INFO(NCCL_NET, "NET/IB : port recovery: %s carries the send comm's traffic to %s again (%u QP(s), %d alive batch(es) "
       "of %d writes passed)", devStr(base, d, dev, sizeof(dev)), railnetIbPeerStr(base, peer),
       m.nEntries, fo->recBatches, fo->rp.batchSize);
  return ncclSuccess;
}

static ncclResult_t aliveStep(struct ncclIbSendComm* comm, uint64_t now) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  int n = 0;
  NCCLCHECK(fo->poll(base, fo->recDev, &n));
  if (fo->aliveFailed) return attemptFailed(comm, "an alive write on a new QP failed", now);
  if (fo->aliveInFlight > 0) {
    if (now > fo->recNs + (uint64_t)fo->rp.aliveTimeoutMs * MS)
      return attemptFailed(comm, "alive writes were not acknowledged within NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_TIMEOUT",
                           now);
    return ncclSuccess;
  }
  if (now < fo->recNs) return ncclSuccess;
  if (fo->recBatches >= fo->rp.sequenceSize) return finish(comm);
  fo->recBatches++;
  fo->recNs = now + (uint64_t)fo->rp.batchIntervalMs * MS;
  return postAlive(comm);
}

ncclResult_t railnetIbRecoverySendStep(struct ncclIbSendComm* comm, uint64_t now) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  if (!fo->recovery || fo->state != RAILNET_IB_FO_IDLE) return ncclSuccess;
  if (fo->recState == REC_WAIT_ACK && now > fo->recNs)
    return attemptFailed(comm, "the peer did not answer within NCCL_IB_RESILIENCY_PORT_RECOVERY_ACK_TIMEOUT", now);
  if (fo->recState == REC_ALIVE) return aliveStep(comm, now);
  if (fo->recState != REC_IDLE || now < fo->nextPortLookNs) return ncclSuccess;
  fo->nextPortLookNs = now + PORT_LOOK_INTERVAL_NS;
  for (int d = 0; d < base->vProps.ndevs; d++) {
    if (fo->failedNs[d] == 0 || now < fo->failedNs[d] + (uint64_t)fo->rp.startDelayMs * MS) continue;
    if (fo->recAttempts[d] >= fo->rp.attemptsMax || railnetIbQpDevInUse(base, d) || !portActive(base, d)) continue;
    return startAttempt(comm, d, now);
  }
  return ncclSuccess;
}

ncclResult_t railnetIbRecoveryAnswer(struct ncclIbSendComm* comm, const struct railnetIbFoMsg* m) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  uint64_t now = railnetClockNs();
  if (fo->recState != REC_WAIT_ACK) return ncclSuccess; /* an answer to an attempt given up */
  if (m->type == RAILNET_IB_FO_RECOVER_NACK) return attemptFailed(comm, "the peer's port is not ACTIVE yet", now);
  for (uint32_t e = 0; e < m->nEntries; e++) {
    int q = (int)m->entries[e].id;
    if (fo->newQps[q] == NULL ||
        railnetIbQpConnect(base, fo->recDev, fo->newQps[q], base->qps[q].remDevIndex, (uint32_t)m->entries[e].missing) !=
            ncclSuccess)
      return attemptFailed(comm, "a new QP could not be connected to the peer's", now);
  }
  fo->recState = REC_ALIVE;
  fo->recBatches = 0;
  fo->aliveInFlight = 0;
  fo->aliveFailed = 0;
  fo->recNs = now;
  return ncclSuccess;
}

/* ------------------------------------------------------------------ receiver */

static ncclResult_t answerRequest(struct ncclIbRecvComm* comm, const struct railnetIbFoMsg* req) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct railnetIbFailover* fo = base->fo;
  struct railnetIbFoMsg m;
  memset(&m, 0, sizeof(m));
  m.type = RAILNET_IB_FO_RECOVER_ACK;
  char peer[SOCKET_NAME_MAXLEN], dev[96] = "?";
  int ok = fo->recovery && req->nEntries > 0;
  for (uint32_t e = 0; ok && e < req->nEntries; e++) {
    int q = (int)req->entries[e].id, d = base->qps[q].devIndex;
    devStr(base, d, dev, sizeof(dev));
    ok = railnetIbQpGone(base, q) && portActive(base, d);
    if (!ok) break;
    if (fo->newQps[q]) wrap_ibv_destroy_qp(fo->newQps[q]); /* an earlier attempt's */
    fo->newQps[q] = NULL;
    ok = railnetIbQpCreate(base, d, &fo->newQps[q]) == ncclSuccess &&
         railnetIbQpConnect(base, d, fo->newQps[q], base->qps[q].remDevIndex, (uint32_t)req->entries[e].missing) ==
             ncclSuccess &&
         railnetIbPostRecvs(base, fo->newQps[q], RAILNET_IB_FIFO_SLOTS) == ncclSuccess;
    if (ok) {
      m.entries[m.nEntries].id = (uint64_t)q;
      m.entries[m.nEntries].missing = fo->newQps[q]->qp_num;
      m.nEntries++;
    }
  }
  if (!ok) {
    m.type = RAILNET_IB_FO_RECOVER_NACK;
    m.nEntries = 0;
  }
  INFO(NCCL_NET, "NET/IB : port recovery: %s asks to bring %u QP(s) of the receive comm on %s back: %s",
       railnetIbPeerStr(base, peer), req->nEntries, dev,
       ok ? "new QPs connected" : "not possible here (port not ACTIVE, recovery off, or no new QP)");
  return railnetIbFoSend(base, &m, ok ? "recovery answer" : "recovery refusal");
}

ncclResult_t railnetIbRecoveryRecv(struct ncclIbRecvComm* comm, const struct railnetIbFoMsg* m) {
  struct ncclIbNetCommBase* base = &comm->base;
  if (m->type == RAILNET_IB_FO_RECOVER_REQ) return answerRequest(comm, m);
  int n = 0;
  for (uint32_t e = 0; e < m->nEntries; e++) n += railnetIbFoAdopt(base, (int)m->entries[e].id);
  char peer[SOCKET_NAME_MAXLEN];
  INFO(NCCL_NET, "NET/IB : port recovery: the receive comm with %s uses %d recovered QP(s) again",
       railnetIbPeerStr(base, peer), n);
  return ncclSuccess;
}
