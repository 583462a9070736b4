/* RC QP state transitions along one path (ibvqp.h), on ibvwrap's ibv_modify_qp. */
#include <string.h>
#include "ibvqp.h"
#include "ibvwrap.h"

int railnetIbvQpInit(struct ibv_qp* qp, uint8_t port, uint16_t pkeyIndex, int accessFlags, int retryModify) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = pkeyIndex;
  a.port_num = port;
  a.qp_access_flags = (unsigned int)accessFlags;
  return railnetIbvModifyQp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
                            retryModify);
}

static int toRtr(struct ibv_qp* qp, const struct railnetIbvQpPath* p) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = p->mtu;
  a.dest_qp_num = p->remoteQpn;
  a.rq_psn = p->remotePsn;
  a.max_dest_rd_atomic = p->rdAtomicIn ? p->rdAtomicIn : 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = p->port;
  a.ah_attr.sl = p->sl;
  a.ah_attr.dlid = p->remoteLid;
  if (p->global) {
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = p->remoteGid;
    a.ah_attr.grh.sgid_index = p->gidIndex;
    a.ah_attr.grh.hop_limit = 255;
    a.ah_attr.grh.traffic_class = p->tc;
  }
  return railnetIbvModifyQp(qp, &a,
                            IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
                            p->retryModify);
}

static int toRts(struct ibv_qp* qp, const struct railnetIbvQpPath* p) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = p->timeout;
  a.retry_cnt = p->retryCnt;
  a.rnr_retry = p->rnrRetry;
  a.sq_psn = p->localPsn;
  a.max_rd_atomic = p->rdAtomicOut ? p->rdAtomicOut : 1;
  return railnetIbvModifyQp(qp, &a,
                            IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                IBV_QP_MAX_QP_RD_ATOMIC,
                            p->retryModify);
}

int railnetIbvQpConnect(struct ibv_qp* qp, const struct railnetIbvQpPath* path, enum ibv_qp_state* failedState) {
  int err = toRtr(qp, path);
  if (err) {
    *failedState = IBV_QPS_RTR;
    return err;
  }
  err = toRts(qp, path);
  if (err) *failedState = IBV_QPS_RTS;
  return err;
}
