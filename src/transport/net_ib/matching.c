/*
 * The receive-side matching scheme and pre-posted receives (matching.h).
 */
#include <endian.h>
#include <stdint.h>
#include <string.h>
#include "matching.h"
#include "caps.h"
#include "comm.h"
#include "debug.h"
#include "resilience/failover.h"
#include "post.h"
#include "ibvwrap.h"
#include "socket.h"
#include "param.h"
#include "qp.h"
#include "resiliency.h"
#include "slots.h"

enum { P_MATCHING_SCHEME, P_PREPOST };
static const railnetParam matchingParams[] = {
    [P_MATCHING_SCHEME] = RAILNET_PARAM_INT_DEF("NCCL_IB_RECEIVER_SIDE_MATCHING_SCHEME", -2, -2, 1,
                                                "Match receive completions to requests: 0 by index (-2: automatic, "
                                                "by index), 1 by ID (forced by OOO RQ and port failover)"),
    [P_PREPOST] = RAILNET_PARAM_INT_DEF("NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS", -2, -2, 1,
                                        "1: keep receive work requests posted ahead of the irecvs (-2: automatic, "
                                        "off; forced on by OOO RQ and port failover)"),
};
RAILNET_PARAM_TABLE("net_ib/matching", matchingParams);

int railnetIbRecvMatchingScheme(void) {
  if (railnetIbParamOooRq() || railnetIbParamPortFailover()) return RAILNET_IB_MATCH_BY_ID;
  int64_t s = railnetParamInt(&matchingParams[P_MATCHING_SCHEME]);
  return s == RAILNET_IB_MATCH_BY_ID ? RAILNET_IB_MATCH_BY_ID : RAILNET_IB_MATCH_BY_INDEX;
}

int railnetIbPrepostRecvs(void) {
  if (railnetIbParamOooRq() || railnetIbParamPortFailover()) return 1;
  return railnetParamInt(&matchingParams[P_PREPOST]) == 1;
}

void railnetIbMatchingReport(void) {
  railnetIbResiliencyReport();
  int64_t scheme = railnetParamInt(&matchingParams[P_MATCHING_SCHEME]);
  int64_t prepost = railnetParamInt(&matchingParams[P_PREPOST]);
  int byId = railnetIbRecvMatchingScheme() == RAILNET_IB_MATCH_BY_ID;
  if (byId && scheme == RAILNET_IB_MATCH_BY_INDEX)
    INFO(NCCL_NET, "NET/IB: NCCL_IB_RECEIVER_SIDE_MATCHING_SCHEME=0 overridden to ID-based (1) by %s",
         railnetIbParamOooRq() ? "NCCL_IB_OOO_RQ=1" : "NCCL_IB_RESILIENCY_PORT_FAILOVER=1");
  if (railnetIbPrepostRecvs() && prepost == 0)
    INFO(NCCL_NET, "NET/IB: NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS=0 overridden to 1 by %s",
         railnetIbParamOooRq() ? "NCCL_IB_OOO_RQ=1" : "NCCL_IB_RESILIENCY_PORT_FAILOVER=1");
}

ncclResult_t railnetIbRecvModeSetup(struct ncclIbRecvComm* comm, struct ncclIbConnectionMetadata* meta,
                                    const char* peer) {
  struct ncclIbNetCommBase* base = &comm->base;
  base->matchById = railnetIbRecvMatchingScheme() == RAILNET_IB_MATCH_BY_ID;
  comm->prepost = railnetIbPrepostRecvs();
  if (base->matchById) meta->devs[0].flags |= RAILNET_IB_FLAG_MATCH_BY_ID;
  int per = base->splitDataOnQps ? base->nqps : 1;
  for (int q = 0; q < base->nqps; q++) {
    comm->qpNextId[q] = per == 1 ? (uint64_t)q : 0;
    if (comm->prepost) NCCLCHECK(railnetIbPostRecvs(base, base->qps[q].qp, RAILNET_IB_FIFO_SLOTS));
  }
  INFO(NCCL_NET, "NET/IB: receive comm with %s: completions matched by %s, receive work requests %s", peer,
       base->matchById ? "ID" : "index", comm->prepost ? "pre-posted" : "posted on demand");
  return ncclSuccess;
}

void railnetIbSendModeSetup(struct ncclIbSendComm* comm, const struct ncclIbConnectionMetadata* remote) {
  comm->base.matchById = (remote->devs[0].flags & RAILNET_IB_FLAG_MATCH_BY_ID) != 0;
}

/* Failover comms: the immediate is (id & 0xffffff) | chunk << 24; each chunk counts once,
 * on the device it was meant for (where irecv counted it). */
static ncclResult_t foMatch(struct ncclIbRecvComm* comm, int q, const struct ibv_wc* wc, struct ncclIbRequest** req,
                            int* evDev) {
  struct ncclIbNetCommBase* base = &comm->base;
  uint32_t imm = be32toh(wc->imm_data), want = railnetIbImmFoId(imm);
  int chunk = railnetIbImmFoChunk(imm), slot = (int)(want % RAILNET_IB_FIFO_SLOTS);
  struct ncclIbRequest* r = comm->recvReqs[slot];
  int stale = r == NULL || r->type != NCCL_NET_IB_REQ_RECV || railnetIbImmFoId((uint32_t)r->id) != want;
  if (stale && railnetIbQpGone(base, q) && chunk < railnetIbChunksPerMsg(base)) {
    *req = NULL; /* a late original of a chunk the sender replayed and this side counted already */
    return ncclSuccess;
  }
  if (stale || chunk >= railnetIbChunksPerMsg(base)) {
    char peer[SOCKET_NAME_MAXLEN];
    WARN("NET/IB : data completion from %s (qp %u, request id %u, chunk %d) without a receive in flight for it",
         ncclSocketToString(&base->sock.addr, peer, 1), wc->qp_num, want, chunk);
    return ncclRemoteError;
  }
  if (!railnetIbQpGone(base, q)) NCCLCHECK(railnetIbPostRecvs(base, base->qps[q].qp, 1));
  *req = NULL;
  if (!railnetIbSlotRecvArrived(base, slot, chunk)) return ncclSuccess; /* arrived before */
  *evDev = railnetIbMsgQp(base, r->id, chunk)->devIndex;
  *req = r;
  return ncclSuccess;
}

ncclResult_t railnetIbRecvMatch(struct ncclIbRecvComm* comm, int d, const struct ibv_wc* wc,
                                struct ncclIbRequest** req, int* evDev) {
  struct ncclIbNetCommBase* base = &comm->base;
  char peer[SOCKET_NAME_MAXLEN];
  int q = comm->prepost ? railnetIbQpIndex(base, d, wc->qp_num) : -1;
  *evDev = d;
  *req = NULL;
  if (base->fo && q < 0) q = railnetIbFoAdoptByNum(base, d, wc->qp_num); /* the sender uses a recovered QP */
  if (base->fo && q < 0) return ncclSuccess; /* a QP replaced by port recovery: its last completions */
  if (comm->prepost && q < 0) {
    WARN("NET/IB : data completion from %s on qp %u, which is not one of this comm's",
         ncclSocketToString(&base->sock.addr, peer, 1), wc->qp_num);
    return ncclInternalError;
  }
  if (base->fo) return foMatch(comm, q, wc, req, evDev);
  uint64_t want;
  const char* how;
  if (base->matchById) {
    want = be32toh(wc->imm_data);
    how = "request id";
  } else if (comm->prepost) {
    want = comm->qpNextId[q];
    how = "order on its QP";
  } else {
    want = wc->wr_id;
    how = "slot";
  }
  struct ncclIbRequest* r = comm->recvReqs[want % RAILNET_IB_FIFO_SLOTS];
  int ok = r != NULL && r->type == NCCL_NET_IB_REQ_RECV && r->events[d] > 0;
  if (ok && base->matchById) ok = railnetIbImmById(r->id, comm->eager != NULL) == (uint32_t)want;
  if (ok && !base->matchById && comm->prepost) ok = r->id == want;
  if (!ok) {
    WARN("NET/IB : data completion from %s (qp %u, %s %llu) without a receive in flight for it",
         ncclSocketToString(&base->sock.addr, peer, 1), wc->qp_num, how, (unsigned long long)want);
    return base->matchById ? ncclRemoteError : ncclInternalError;
  }
  if (comm->prepost) {
    comm->qpNextId[q] += base->splitDataOnQps ? 1 : (uint64_t)base->nqps;
    NCCLCHECK(railnetIbPostRecvs(base, base->qps[q].qp, 1));
  }
  *req = r;
  return ncclSuccess;
}
