/*
 * NCCL 2.30's IB resiliency knobs (p2p_resiliency.cc, p2p_resiliency_recovery.cc): port
 * failover of a fused device (a member's port lost: its QPs replaced on the others, the
 * in-flight messages replayed) and port recovery (the member taken back when its port
 * returns). Declared here with NCCL's names, defaults and ranges; railnet's own path probe
 * (probe.c) has RAILNET_IB_PATH_PROBE_*.
 */
#ifndef RAILNET_NET_IB_RESILIENCY_H
#define RAILNET_NET_IB_RESILIENCY_H

#ifdef __cplusplus
extern "C" {
#endif

/* NCCL_IB_RESILIENCY_PORT_FAILOVER / _PORT_RECOVERY as set. */
int railnetIbParamPortFailover(void);
int railnetIbParamPortRecovery(void);
int railnetIbParamFailoverMaxAttempts(void);
int railnetIbParamFailoverProbeDelay(void);
/* RAILNET_IB_FAILOVER_RECORDS: a failover receiver keeps completion records (records.c). */
int railnetIbParamFailoverRecords(void);
/* The _PORT_RECOVERY_* variables (milliseconds, counts). */
struct railnetIbRecoveryParams {
  int startDelayMs, attemptsMax, batchIntervalMs, batchSize, sequenceSize, aliveTimeoutMs, ackTimeoutMs;
};
void railnetIbRecoveryParams(struct railnetIbRecoveryParams* p);
/* RAILNET_IB_PATH_PROBE_INTERVAL (ms, 0: off), _TIMEOUT and _RETRY_CNT of the probe QPs. */
void railnetIbPathProbeParams(int* intervalMs, int* timeout, int* retryCnt);
/* At discovery: one INFO when failover or recovery is asked for. */
void railnetIbResiliencyReport(void);

#ifdef __cplusplus
}
#endif
#endif
