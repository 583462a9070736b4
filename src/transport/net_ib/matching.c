/*
 * The receive-side matching scheme and pre-posted receives (matching.h).
 */
#include "matching.h"
#include "caps.h"
#include "debug.h"
#include "param.h"
#include "resiliency.h"

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
  if (byId || railnetIbPrepostRecvs())
    INFO(NCCL_INIT | NCCL_NET, "NET/IB : asked for %s%s%s: not available in this railnet yet; receives are matched "
         "by index and posted on demand", byId ? "ID-based receive matching" : "",
         byId && railnetIbPrepostRecvs() ? " and " : "", railnetIbPrepostRecvs() ? "pre-posted receive WRs" : "");
}
