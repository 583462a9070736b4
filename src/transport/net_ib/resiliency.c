/*
 * The resiliency variables (resiliency.h). Times are milliseconds, as in NCCL.
 */
#include "resiliency.h"
#include "debug.h"
#include "param.h"

enum {
  P_FAILOVER, P_FAILOVER_MAX_ATTEMPTS, P_FAILOVER_PROBE_DELAY,
  P_RECOVERY, P_RECOVERY_START_DELAY, P_RECOVERY_ATTEMPTS_MAX, P_ALIVE_BATCH_INTERVAL, P_ALIVE_BATCH_SIZE,
  P_ALIVE_SEQUENCE_SIZE, P_ALIVE_TIMEOUT, P_ACK_TIMEOUT, P_PATH_PROBE_INTERVAL, P_PATH_PROBE_TIMEOUT,
  P_PATH_PROBE_RETRY_CNT, P_FAILOVER_RECORDS
};
#define MS_MAX 3600000
static const railnetParam resiliencyParams[] = {
    [P_FAILOVER] = RAILNET_PARAM_INT_DEF("NCCL_IB_RESILIENCY_PORT_FAILOVER", 0, 0, 1,
                                         "1: a fused device that loses a port keeps the comm on its other ports "
                                         "(both sides must set it)"),
    [P_FAILOVER_MAX_ATTEMPTS] = RAILNET_PARAM_INT_DEF("NCCL_IB_RESILIENCY_PORT_FAILOVER_MAX_ATTEMPTS", 1, 0, 128,
                                                      "Port failures a comm survives before it fails"),
    [P_FAILOVER_PROBE_DELAY] = RAILNET_PARAM_INT_DEF("NCCL_IB_RESILIENCY_PORT_FAILOVER_PROBE_DELAY", 10, 0, MS_MAX,
                                                     "ms between probes of what the peer received after a port "
                                                     "failure"),
    [P_RECOVERY] = RAILNET_PARAM_INT_DEF("NCCL_IB_RESILIENCY_PORT_RECOVERY", 0, 0, 1,
                                         "1: a failed-over port that comes back is taken into use again "
                                         "(needs NCCL_IB_RESILIENCY_PORT_FAILOVER=1)"),
    [P_RECOVERY_START_DELAY] = RAILNET_PARAM_INT_DEF("NCCL_IB_RESILIENCY_PORT_RECOVERY_START_DELAY", 200, 0, MS_MAX,
                                                     "ms after a failover before recovery starts"),
    [P_RECOVERY_ATTEMPTS_MAX] = RAILNET_PARAM_INT_DEF("NCCL_IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX", 5, 0, 1000,
                                                      "Recovery attempts of a port before it stays failed"),
    [P_ALIVE_BATCH_INTERVAL] = RAILNET_PARAM_INT_DEF(
        "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_INTERVAL", 500, 0, MS_MAX,
        "ms between batches of alive messages on a recovering port"),
    [P_ALIVE_BATCH_SIZE] = RAILNET_PARAM_INT_DEF("NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_SIZE", 5, 1, 1000,
                                                 "Alive messages per batch on a recovering port"),
    [P_ALIVE_SEQUENCE_SIZE] = RAILNET_PARAM_INT_DEF("NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_SEQUENCE_SIZE", 5, 1,
                                                    1000, "Batches that must arrive before a port counts as back"),
    [P_ALIVE_TIMEOUT] = RAILNET_PARAM_INT_DEF("NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_TIMEOUT", 4000, 0, MS_MAX,
                                              "ms without an alive message before a recovery attempt fails"),
    [P_ACK_TIMEOUT] = RAILNET_PARAM_INT_DEF("NCCL_IB_RESILIENCY_PORT_RECOVERY_ACK_TIMEOUT", 5000, 0, MS_MAX,
                                            "ms the peer has to acknowledge a recovered port"),
    [P_PATH_PROBE_INTERVAL] = RAILNET_PARAM_INT_DEF(
        "RAILNET_IB_PATH_PROBE_INTERVAL", 500, 0, MS_MAX,
        "Port failover: ms between empty RDMA writes that check each path of a busy comm on a QP of their own "
        "(0: no probes; a path that drops packets is then noticed after the data QPs' retry time)"),
    [P_PATH_PROBE_TIMEOUT] = RAILNET_PARAM_INT_DEF(
        "RAILNET_IB_PATH_PROBE_TIMEOUT", 17, 1, 31,
        "Port failover: ACK timeout of the probe QPs (4.096 us x 2^value; 17: 537 ms)"),
    [P_PATH_PROBE_RETRY_CNT] = RAILNET_PARAM_INT_DEF(
        "RAILNET_IB_PATH_PROBE_RETRY_CNT", 6, 0, 6,
        "Port failover: retries of a probe before its path counts as lost (17 and 6: 3.8 s)"),
    [P_FAILOVER_RECORDS] = RAILNET_PARAM_INT_DEF(
        "RAILNET_IB_FAILOVER_RECORDS", 1, 0, 1,
        "Port failover, receiver: 1: keep completion records the sender reads with an RDMA READ after a failure, "
        "so it learns what arrived without this process calling the comm; 0: only the socket exchange tells"),
};
RAILNET_PARAM_TABLE("net_ib/resiliency", resiliencyParams);

int railnetIbParamPortFailover(void) { return (int)railnetParamInt(&resiliencyParams[P_FAILOVER]); }
int railnetIbParamPortRecovery(void) { return (int)railnetParamInt(&resiliencyParams[P_RECOVERY]); }
int railnetIbParamFailoverMaxAttempts(void) { return (int)railnetParamInt(&resiliencyParams[P_FAILOVER_MAX_ATTEMPTS]); }
int railnetIbParamFailoverRecords(void) { return (int)railnetParamInt(&resiliencyParams[P_FAILOVER_RECORDS]); }
int railnetIbParamFailoverProbeDelay(void) { return (int)railnetParamInt(&resiliencyParams[P_FAILOVER_PROBE_DELAY]); }

void railnetIbRecoveryParams(struct railnetIbRecoveryParams* p) {
  p->startDelayMs = (int)railnetParamInt(&resiliencyParams[P_RECOVERY_START_DELAY]);
  p->attemptsMax = (int)railnetParamInt(&resiliencyParams[P_RECOVERY_ATTEMPTS_MAX]);
  p->batchIntervalMs = (int)railnetParamInt(&resiliencyParams[P_ALIVE_BATCH_INTERVAL]);
  p->batchSize = (int)railnetParamInt(&resiliencyParams[P_ALIVE_BATCH_SIZE]);
  p->sequenceSize = (int)railnetParamInt(&resiliencyParams[P_ALIVE_SEQUENCE_SIZE]);
  p->aliveTimeoutMs = (int)railnetParamInt(&resiliencyParams[P_ALIVE_TIMEOUT]);
  p->ackTimeoutMs = (int)railnetParamInt(&resiliencyParams[P_ACK_TIMEOUT]);
}

void railnetIbPathProbeParams(int* intervalMs, int* timeout, int* retryCnt) {
  *intervalMs = (int)railnetParamInt(&resiliencyParams[P_PATH_PROBE_INTERVAL]);
  *timeout = (int)railnetParamInt(&resiliencyParams[P_PATH_PROBE_TIMEOUT]);
  *retryCnt = (int)railnetParamInt(&resiliencyParams[P_PATH_PROBE_RETRY_CNT]);
}

void railnetIbResiliencyReport(void) {
  if (railnetIbParamPortFailover())
    INFO(NCCL_INIT | NCCL_NET, "NET/IB : NCCL_IB_RESILIENCY_PORT_FAILOVER=1: fused comms fail over to their other "
         "devices when a port is lost (up to %d time(s) per comm)", railnetIbParamFailoverMaxAttempts());
  if (railnetIbParamPortRecovery())
    INFO(NCCL_INIT | NCCL_NET, "NET/IB : NCCL_IB_RESILIENCY_PORT_RECOVERY=1: %s",
         railnetIbParamPortFailover() ? "a failed-over device whose port is ACTIVE again is brought back into its comms"
                                      : "ignored: port recovery needs NCCL_IB_RESILIENCY_PORT_FAILOVER=1");
}
