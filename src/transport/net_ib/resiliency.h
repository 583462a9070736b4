/*
 * NCCL 2.30's IB resiliency knobs (p2p_resiliency.cc, p2p_resiliency_recovery.cc): port
 * failover of a fused device (a member's port lost: its QPs replaced on the others, the
 * in-flight messages replayed) and port recovery (the member taken back when its port
 * returns). Declared here with NCCL's names, defaults and ranges. This railnet does not fail
 * over yet: with NCCL_IB_RESILIENCY_PORT_FAILOVER=1 a comm still fails on the first error
 * completion, and one INFO says so.
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
/* The _PORT_RECOVERY_* variables (milliseconds, counts). */
struct railnetIbRecoveryParams {
  int startDelayMs, attemptsMax, batchIntervalMs, batchSize, sequenceSize, aliveTimeoutMs, ackTimeoutMs;
};
void railnetIbRecoveryParams(struct railnetIbRecoveryParams* p);
/* At discovery: one INFO when failover or recovery is asked for. */
void railnetIbResiliencyReport(void);

#ifdef __cplusplus
}
#endif
#endif
