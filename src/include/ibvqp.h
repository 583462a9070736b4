/*
 * An RC queue pair brought up towards its peer: RESET -> INIT, then INIT -> RTR -> RTS with
 * the address vector, path MTU, PSNs and transport timeouts of one path. One fill of those
 * attributes for every user: the IB transport's data, flush and probe QPs (net_ib/qp.c) and
 * railnet-diag's pair probe (tools/diaglib/pairrdma.c). Errors are ibv_modify_qp's, WARNed
 * with the QP's description and HINT by ibvwrap (railnetIbvModifyQp).
 */
#ifndef RAILNET_IBVQP_H
#define RAILNET_IBVQP_H
#include <infiniband/verbs.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Where a QP sends, and how hard it tries. */
struct railnetIbvQpPath {
  uint8_t port;             /* the local port */
  enum ibv_mtu mtu;         /* the path MTU: the smaller of the two ends' active MTUs */
  uint32_t remoteQpn;
  uint32_t remotePsn;       /* the peer's first send PSN (our rq_psn) */
  uint32_t localPsn;        /* our first send PSN */
  int global;               /* with a GRH: RoCE always, InfiniBand to another subnet */
  union ibv_gid remoteGid;  /* with global */
  uint8_t gidIndex;         /* our source GID, with global */
  uint8_t tc;               /* traffic class, with global */
  uint8_t sl;               /* service level */
  uint16_t remoteLid;       /* InfiniBand */
  uint8_t timeout;          /* ACK timeout: 4.096 us x 2^timeout */
  uint8_t retryCnt;         /* transport retries (7: for ever on some providers) */
  uint8_t rnrRetry;         /* receiver-not-ready retries (7: for ever) */
  int retryModify;          /* 1: ibv_modify_qp retried as NCCL_IB_MQP_RETRY_* say; 0: one try */
  uint8_t rdAtomicIn;       /* RDMA reads and atomics of the peer served at once (0: 1) */
  uint8_t rdAtomicOut;      /* ours in flight at once (0: 1); at most the peer's rdAtomicIn */
};

/* RESET -> INIT on port with the partition key index and remote access flags; 0 or errno. */
int railnetIbvQpInit(struct ibv_qp* qp, uint8_t port, uint16_t pkeyIndex, int accessFlags, int retryModify);
/* INIT -> RTR -> RTS along path; 0, or the errno with *failedState the state it could not
 * reach (IBV_QPS_RTR or IBV_QPS_RTS). */
int railnetIbvQpConnect(struct ibv_qp* qp, const struct railnetIbvQpPath* path, enum ibv_qp_state* failedState);

#ifdef __cplusplus
}
#endif
#endif
