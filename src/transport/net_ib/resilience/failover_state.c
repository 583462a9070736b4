/*
 * Port failover bookkeeping (failover.h): which QPs of a comm are gone, where their traffic
 * goes, and whether an error completion is one failover takes.
 */
#include <stdio.h>
#include <string.h>
#include "failover.h"
#include "../records.h"
#include "../slots.h"
#include "debug.h"
#include "../devices.h"
#include "ibvwrap.h"
#include "../qp.h"
#include "../resiliency.h"
#include "socket.h"

int railnetIbFoWanted(void) { return railnetIbParamPortFailover(); }

ncclResult_t railnetIbFoSetup(struct ncclIbNetCommBase* base, int peerFlag, const char* peer, railnetIbFoPollFn poll) {
  base->fo = NULL;
  if (!railnetIbFoWanted()) return ncclSuccess;
  int per = base->splitDataOnQps ? base->nqps : 1;
  const char* off = NULL;
  if (!peerFlag)
    off = "the peer does not fail over (NCCL_IB_RESILIENCY_PORT_FAILOVER=1 must be set on every rank)";
  else if (base->vProps.ndevs < 2)
    off = "the comm has one device (failover needs a fused device, NCCL_IB_MERGE_NICS / makeVDevice)";
  else if (per > RAILNET_IB_FO_MAX_CHUNKS)
    off = "messages are split over more than 64 QPs (lower NCCL_IB_QPS_PER_CONNECTION)";
  if (off) {
    INFO(NCCL_NET, "NET/IB : comm with %s: no port failover: %s", peer, off);
    return ncclSuccess;
  }
  NCCLCHECK(RAILNET_CALLOC(&base->fo, 1, "IB port failover state"));
  base->fo->poll = poll;
  NCCLCHECK(railnetIbSlotsSetup(base)); /* replays come from the chunks' state */
  base->fo->maxAttempts = railnetIbParamFailoverMaxAttempts();
  base->fo->probeDelayMs = railnetIbParamFailoverProbeDelay();
  base->fo->recovery = railnetIbParamPortRecovery();
  railnetIbRecoveryParams(&base->fo->rp);
  railnetIbPathProbeParams(&base->fo->probeIntervalMs, &base->fo->probeTimeout, &base->fo->probeRetryCnt);
  INFO(NCCL_NET, "NET/IB : %s comm with %s: port failover on over %d devices (%d failure(s) survived)",
       base->isSend ? "send" : "receive", peer, base->vProps.ndevs, base->fo->maxAttempts);
  return ncclSuccess;
}

void railnetIbFoSetClient(struct ncclIbNetCommBase* base, const struct railnetIbFoClient* client) {
  if (base->fo) base->fo->client = client;
}

void railnetIbFoFree(struct ncclIbNetCommBase* base) {
  struct railnetIbFailover* fo = base->fo;
  railnetIbSlotsFree(base);
  if (fo == NULL) return;
  for (int q = 0; q < NCCL_IB_MAX_QPS; q++)
    if (fo->newQps[q]) wrap_ibv_destroy_qp(fo->newQps[q]);
  for (int i = 0; i < fo->nReplaced; i++) wrap_ibv_destroy_qp(fo->replaced[i]);
  for (int d = 0; d < NCCL_IB_MAX_DEVS_PER_NIC; d++)
    if (fo->probeQps[d]) wrap_ibv_destroy_qp(fo->probeQps[d]);
  railnetIbRecordsFree(base);
  free(fo);
  base->fo = NULL;
}

void railnetIbFoMarkQp(struct ncclIbNetCommBase* base, int q) {
  struct railnetIbFailover* fo = base->fo;
  if (fo == NULL || !railnetIbQpSetGone(base, q)) return;
  fo->lastDeadNs = railnetClockNs();
  if (fo->failedNs[base->qps[q].devIndex] == 0) fo->failedNs[base->qps[q].devIndex] = railnetClockNs();
}

int railnetIbFoMarkDevice(struct ncclIbNetCommBase* base, int d) {
  int n = 0;
  for (int q = 0; q < base->nqps; q++) {
    if (base->qps[q].devIndex != d || railnetIbQpGone(base, q)) continue;
    railnetIbFoMarkQp(base, q);
    n++;
  }
  return n;
}

/* Errors that say the path is gone; the others are the application's or the peer's bugs. */
static int pathGone(enum ibv_wc_status s) {
  switch (s) {
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_WR_FLUSH_ERR:
    case IBV_WC_LOC_QP_OP_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
    case IBV_WC_FATAL_ERR:
    case IBV_WC_RESP_TIMEOUT_ERR:
    case IBV_WC_GENERAL_ERR:
      return 1;
    default:
      return 0;
  }
}

/* Device d of the comm lost its path (cause: how that was seen): its QPs, and those of the
 * other devices whose port is not ACTIVE either, are gone; 0 when nothing is left or the
 * attempts are spent (the comm must fail; WARN said why). */
static int takeDevice(struct ncclIbNetCommBase* base, int d, const char* cause) {
  struct railnetIbFailover* fo = base->fo;
  /* a link that went down often takes its neighbours along (one switch, one cable tray):
   * a device left whose port is not active cannot take the traffic either */
  uint32_t down = 1u << d;
  for (int k = 0; k < base->vProps.ndevs; k++) {
    struct ibv_port_attr pa;
    struct ncclIbDev* dk = &ncclIbDevs[base->devs[k].ibDevN];
    memset(&pa, 0, sizeof(pa));
    if (k != d && railnetIbQpDevInUse(base, k) && wrap_ibv_query_port(dk->context, dk->portNum, &pa) == ncclSuccess &&
        pa.state != IBV_PORT_ACTIVE)
      down |= 1u << k;
  }
  int left = 0;
  for (int k = 0; k < base->nqps; k++) left += !railnetIbQpGone(base, k) && !(down & (1u << base->qps[k].devIndex));
  char peer[SOCKET_NAME_MAXLEN];
  if (left == 0 || fo->failures + __builtin_popcount(down) > fo->maxAttempts) {
    WARN("NET/IB : port failover of the %s comm with %s is not possible: %s", base->isSend ? "send" : "receive",
         ncclSocketToString(&base->sock.addr, peer, 1),
         left == 0 ? "no device of the comm is left"
                   : "it failed over NCCL_IB_RESILIENCY_PORT_FAILOVER_MAX_ATTEMPTS times already (raise it to survive more)");
    return 0;
  }
  for (int k = 0; k < base->vProps.ndevs; k++) {
    if (k == d || !(down & (1u << k))) continue;
    fo->failures++;
    railnetIbFoMarkDevice(base, k);
    struct ncclIbDev* dk = &ncclIbDevs[base->devs[k].ibDevN];
    WARN("NET/IB : port failover: %s:%d of the %s comm is not ACTIVE either; its QPs are gone too", dk->devName,
         dk->portNum, base->isSend ? "send" : "receive");
  }
  fo->failures++;
  struct ncclIbDev* dev = &ncclIbDevs[base->devs[d].ibDevN];
  snprintf(fo->why, sizeof(fo->why), "%s:%d lost its path to %s (%s)", dev->devName, dev->portNum,
           ncclSocketToString(&base->sock.addr, peer, 1), cause);
  railnetIbFoMarkDevice(base, d);
  WARN("NET/IB : port failover: %s; its QPs of the %s comm are gone, traffic moves to the comm's other devices "
       "(failure %d of NCCL_IB_RESILIENCY_PORT_FAILOVER_MAX_ATTEMPTS=%d). Check the cable, the switch port and "
       "ibv_devinfo on both hosts",
       fo->why, base->isSend ? "send" : "receive", fo->failures, fo->maxAttempts);
  return 1;
}

int railnetIbFoTakeError(struct ncclIbNetCommBase* base, int d, int q, const struct ibv_wc* wc) {
  struct railnetIbFailover* fo = base->fo;
  if (fo == NULL) return 0;
  /* the sender's own kinds (wrid.h); an eager write's QP, like a data write's, is judged at the end */
  enum railnetIbSendWr kind = base->isSend ? railnetIbSendWrKind(wc->wr_id) : RAILNET_IB_SWR_RECV;
  if (kind == RAILNET_IB_SWR_FO_ALIVE) { /* a recovering QP failed its alive check */
    fo->aliveFailed = 1;
    return 1;
  }
  if (kind == RAILNET_IB_SWR_FO_READ) { /* the read of the receiver's records (records.c) */
    fo->readsOut--;
    if (fo->readState == RAILNET_IB_FO_READ_POSTED && railnetIbWrIdFoReadIs(wc->wr_id, fo->readRound))
      fo->readState = RAILNET_IB_FO_READ_NONE; /* made again on another QP; its QP is judged below */
  }
  if (kind == RAILNET_IB_SWR_FO_PROBE) { /* a path probe failed (probe.c) */
    int pd = railnetIbWrIdFoProbeDev(wc->wr_id);
    if (pd >= base->vProps.ndevs) return 0;
    if (fo->probeQps[pd] == NULL || fo->probeQps[pd]->qp_num != wc->qp_num) return 1; /* a probe QP retired */
    fo->probeInFlight[pd] = 0;
    fo->probeFailed[pd] = 1;
    if (!railnetIbQpDevInUse(base, pd)) return 1; /* flushed: the device went another way */
    int elsewhere = 0;
    for (int k = 0; k < base->nqps; k++) elsewhere += !railnetIbQpGone(base, k) && base->qps[k].devIndex != pd;
    if (elsewhere == 0) { /* nowhere to move to: the data QPs, with the user's timeout, decide */
      INFO(NCCL_NET, "NET/IB : path probe of the last device of the %s comm got no acknowledgement; its data QPs "
           "(NCCL_IB_TIMEOUT) decide whether the path is lost", base->isSend ? "send" : "receive");
      return 1;
    }
    char cause[192];
    snprintf(cause, sizeof(cause),
             "its path probe got no acknowledgement within %.1f s (RAILNET_IB_PATH_PROBE_TIMEOUT=%d, _RETRY_CNT=%d, "
             "status %d): the path drops packets",
             4.096e-6 * (double)(1ull << fo->probeTimeout) * (fo->probeRetryCnt + 1), fo->probeTimeout,
             fo->probeRetryCnt, wc->status);
    return takeDevice(base, pd, cause);
  }
  if (!base->isSend && railnetIbWrIdIsCtsRewrite(wc->wr_id)) {
    railnetIbSlotCtsRewrite(base, -1); /* a rewritten clear-to-send that did not land: answerQuery writes it again */
    fo->ctsRewriteLost = 1;
  }
  if (q >= 0 && railnetIbQpGone(base, q)) return 1; /* the flushes of a QP already gone */
  if (q < 0 && !railnetIbQpDevInUse(base, d)) return 1;
  if (!pathGone(wc->status)) return 0;
  char cause[96];
  snprintf(cause, sizeof(cause), "completion status=%s(%d) on qp_num=%u", wrap_ibv_wc_status_str(wc->status),
           wc->status, wc->qp_num);
  return takeDevice(base, d, cause);
}

int railnetIbFoPortGone(struct ncclIbNetCommBase* base, int d, const char* cause) {
  if (base->fo == NULL) return 0;
  if (!railnetIbQpDevInUse(base, d)) return 1;
  return takeDevice(base, d, cause);
}

int railnetIbFoRetireQp(struct railnetIbFailover* fo, struct ibv_qp* qp) {
  if (fo->nReplaced < (int)(sizeof(fo->replaced) / sizeof(fo->replaced[0]))) {
    fo->replaced[fo->nReplaced++] = qp; /* its last completions may still come */
    return 1;
  }
  wrap_ibv_destroy_qp(qp);
  return 0;
}

int railnetIbFoAdopt(struct ncclIbNetCommBase* base, int q) {
  struct railnetIbFailover* fo = base->fo;
  if (fo == NULL || q < 0 || q >= base->nqps || fo->newQps[q] == NULL) return 0;
  int d = base->qps[q].devIndex, wasInUse = railnetIbQpDevInUse(base, d);
  railnetIbFoRetireQp(fo, base->qps[q].qp);
  base->qps[q].qp = fo->newQps[q];
  railnetIbQpCreditsReset(&base->qps[q]); /* (the unsignaled writes counted went with the old QP) */
  fo->newQps[q] = NULL;
  railnetIbQpSetLive(base, q);
  fo->told[q] = 0;
  if (!wasInUse && fo->failures > 0) fo->failures--; /* the device may fail over again */
  return 1;
}

int railnetIbFoAdoptByNum(struct ncclIbNetCommBase* base, int d, uint32_t qpNum) {
  struct railnetIbFailover* fo = base->fo;
  for (int q = 0; fo && q < base->nqps; q++)
    if (base->qps[q].devIndex == d && fo->newQps[q] && fo->newQps[q]->qp_num == qpNum) return railnetIbFoAdopt(base, q) ? q : -1;
  return -1;
}
