/*
 * Port failover of a fused (multi-device) IB comm, NCCL_IB_RESILIENCY_PORT_FAILOVER=1 on both
 * sides. When a device loses its path (its port leaves ACTIVE: liveness.c; its path probe runs out
 * of retries: probe.c; an error completion) its QPs are declared gone and moved to the error state,
 * traffic moves to the QPs left, and the two sides agree on what arrived: the sender reads the
 * receiver's completion records (records.c) with an RDMA READ and replays exactly the chunks they
 * lack; the NOTIFY / QUERY / STATE exchange over the comm's ncclSocket settles it where there are
 * no records. More failures than NCCL_IB_RESILIENCY_PORT_FAILOVER_MAX_ATTEMPTS, or no QP left: the
 * comm fails as without failover.
 *
 * failover_state.c keeps the bookkeeping (which QPs are gone, what each chunk is waiting for) and
 * is used by the posting and completion code; failover.c runs the exchange and is used by the API
 * calls (p2p.c) only. The protocol step by step, its bounds, the wire layouts and what is noticed
 * how fast are described once, in docs/ib-resiliency.md.
 */
#ifndef RAILNET_NET_IB_FAILOVER_H
#define RAILNET_NET_IB_FAILOVER_H
#include <infiniband/verbs.h>
#include <stdint.h>
#include "../comm.h"
#include "../resiliency.h"
#include "../wire.h"
#include "../wrid.h"

#ifdef __cplusplus
extern "C" {
#endif

enum { RAILNET_IB_FO_IDLE = 0, RAILNET_IB_FO_DELAY, RAILNET_IB_FO_WAIT };

/* What a feature above failover does when the comm fails over (the eager messages,
 * eager_fo.c): it hands failover this table at its setup (railnetIbFoSetClient), so failover
 * calls it without knowing that feature (a lower layer never calls up). Any entry may be NULL. */
struct ncclIbSendComm;
struct ncclIbRecvComm;
struct railnetIbFoClient {
  /* sender: a failover was settled: mark what went with a gone QP to be written again (*n: how many) */
  ncclResult_t (*failedOver)(struct ncclIbSendComm* comm, int* n);
  /* sender, each failover step: write again what is marked, as far as the send queues have room */
  ncclResult_t (*resend)(struct ncclIbSendComm* comm);
  /* receiver, answering a failover query: say again what the last writes on a gone QP said */
  ncclResult_t (*retell)(struct ncclIbRecvComm* comm);
};

/* The data path's poll of device d's completion queue (completion.c's railnetIbPollDev), handed
 * to failover at its setup: a replay's read of the receiver's records, the recovery's alive
 * writes and a drain all complete on the data CQ (recovered QPs carry data again, so they
 * cannot have a CQ of their own), and failover must not call up into the data path for it. */
typedef ncclResult_t (*railnetIbFoPollFn)(struct ncclIbNetCommBase* base, int d, int* n);

struct railnetIbFailover {
  const struct railnetIbFoClient* client; /* NULL: none (railnetIbFoSetClient) */
  railnetIbFoPollFn poll;              /* the data path's poll (railnetIbFoSetup) */
  int maxAttempts;                     /* NCCL_IB_RESILIENCY_PORT_FAILOVER_MAX_ATTEMPTS */
  int probeDelayMs;                    /* NCCL_IB_RESILIENCY_PORT_FAILOVER_PROBE_DELAY */
  int failures;                        /* devices declared gone so far */
  uint64_t lastDeadNs;                 /* when the last QP was declared gone (qp.h's QP set says which are) */
  uint8_t told[NCCL_IB_MAX_QPS];       /* QP q is gone and the peer was told (NOTIFY or QUERY) */
  int state;                           /* sender: RAILNET_IB_FO_* */
  uint64_t stateNs;                    /* DELAY: when the query goes out; WAIT: its deadline */
  uint64_t nextLookNs;                 /* when to look at the socket for the peer's message next */
  char why[320];                       /* the last failure, for the INFO when it is over */
  struct railnetIbFoMsg in;            /* the message being received */
  int inOffset;
  /* the chunks of each fifo slot (which QP, which completed, which to replay; the receiver's
   * missing ones, its clear-to-send rewrites in flight) are the clear-to-send path's: slots.h,
   * kept while failover is on. Receiver: a rewrite completed with an error */
  int ctsRewriteLost;
  /* port recovery (recovery.c): on for this comm, its variables; per device when it failed
   * (0: it did not) and the attempts made; the attempt under way (sender: its state, device,
   * deadline, alive batches done and writes in flight); the new QPs not in use yet; the QPs
   * replaced (destroyed with the comm: their last completions may still come) */
  int recovery;
  struct railnetIbRecoveryParams rp;
  uint64_t failedNs[NCCL_IB_MAX_DEVS_PER_NIC];
  int recAttempts[NCCL_IB_MAX_DEVS_PER_NIC];
  int recState, recDev, recBatches, aliveInFlight, aliveFailed;
  uint64_t recNs, nextPortLookNs;
  struct ibv_qp* newQps[NCCL_IB_MAX_QPS];
  struct ibv_qp* replaced[2 * NCCL_IB_MAX_QPS];
  int nReplaced;
  /* path probes (probe.c): their variables, the setup's state, per device of this side its
   * probe QP, whether a probe is in flight on it and whether that QP failed; the next round */
  int probeIntervalMs, probeTimeout, probeRetryCnt;
  int probeState;
  struct ibv_qp* probeQps[NCCL_IB_MAX_DEVS_PER_NIC];
  uint8_t probeInFlight[NCCL_IB_MAX_DEVS_PER_NIC];
  uint8_t probeFailed[NCCL_IB_MAX_DEVS_PER_NIC];
  uint64_t probeNs;
  /* completion records (records.h): the read under way (READ_* state, the QP it went on, its
   * round) */
  int readState, readQp, readsOut;     /* ... reads posted and not completed (either way) */
  uint32_t readRound;
  uint64_t readNs;                     /* no read before (the gone QPs' last packets had time to land) */
  uint8_t probeRenew[NCCL_IB_MAX_DEVS_PER_NIC]; /* probe.c: device d's new probe QP waits for the receiver */
  uint64_t queryRound;                 /* sender: queries sent (a query carries its number, the answer echoes it) */
};

enum { RAILNET_IB_FO_READ_NONE = 0, RAILNET_IB_FO_READ_POSTED, RAILNET_IB_FO_READ_DONE };

/* Replays are paced: at most this many replayed chunks in flight per QP (the next one is
 * posted when one completed), so that a QP left does not take every replay of a failover at
 * once on top of its own traffic and run out of retries under the burst. */
#define RAILNET_IB_FO_REPLAY_WINDOW 2

/* the wr_ids of failover's own work requests: wrid.h */

/* ---- failover_state.c: bookkeeping */
/* Whether this side asks for failover (the variable), for its metadata flags. */
int railnetIbFoWanted(void);
/* After the metadata exchange: failover on for base when both sides set the flag, the comm
 * has 2+ devices and at most RAILNET_IB_FO_MAX_CHUNKS QPs per message (else one INFO why
 * not). Allocates base->fo. */
ncclResult_t railnetIbFoSetup(struct ncclIbNetCommBase* base, int peerFlag, const char* peer, railnetIbFoPollFn poll);
void railnetIbFoFree(struct ncclIbNetCommBase* base);
/* A feature of the comm that takes part in its failovers (no-op without failover). */
void railnetIbFoSetClient(struct ncclIbNetCommBase* base, const struct railnetIbFoClient* client);
/* Marks every QP of device d gone (error state); returns how many were not gone before. */
int railnetIbFoMarkDevice(struct ncclIbNetCommBase* base, int d);
/* Marks QP q gone (qp.h's railnetIbQpSetGone), when failover is on; no-op if gone already. */
void railnetIbFoMarkQp(struct ncclIbNetCommBase* base, int q);
/* An error completion of QP q on device d of a failover comm: 1 when failover takes it (the
 * device's QPs are now gone, or the QP was gone already); 0 when the comm must fail (an
 * access or length error, no QP left, or too many failures). */
int railnetIbFoTakeError(struct ncclIbNetCommBase* base, int d, int q, const struct ibv_wc* wc);
/* Device d lost its port or its QPs failed asynchronously (liveness.c; cause: how that was
 * seen): 1 when failover takes it (or it was gone already), 0 when the comm must fail. */
int railnetIbFoPortGone(struct ncclIbNetCommBase* base, int d, const char* cause);

/* Port recovery: new QP q (fo->newQps) replaces the gone one, which is kept until the comm
 * closes; 1 if there was one. By number: the new QP of device d numbered qpNum (the
 * receiver's first data on it says the sender uses it), its index or -1. */
int railnetIbFoAdopt(struct ncclIbNetCommBase* base, int q);
/* A QP taken out of use (replaced by recovery, or an old probe QP): kept until the comm
 * closes, its last completions may still come; 0 when the list was full and it was
 * destroyed at once. */
int railnetIbFoRetireQp(struct railnetIbFailover* fo, struct ibv_qp* qp);
int railnetIbFoAdoptByNum(struct ncclIbNetCommBase* base, int d, uint32_t qpNum);

/* ---- failover_msg.c: the messages over the comm's socket */
/* Sends m (its magic set; NOTIFY/QUERY/STATE also carry the gone QPs); ncclRemoteError and
 * the comm failed when it cannot leave within 5 s. */
ncclResult_t railnetIbFoSend(struct ncclIbNetCommBase* base, struct railnetIbFoMsg* m, const char* what);
/* Marks the comm failed: ncclRemoteError (the caller has said why). */
ncclResult_t railnetIbFoFail(struct ncclIbNetCommBase* base);
/* Receives what the peer sent, without blocking; *got: a whole, checked message in fo->in
 * (a broken one fails the comm). A closed socket sets base->sockClosed. */
ncclResult_t railnetIbFoLook(struct ncclIbNetCommBase* base, int* got);

/* ---- recovery.c: port recovery, driven by failover.c */
/* Sender, no failover under way: a gone device whose port is ACTIVE again gets new QPs
 * (REQUEST), connects them when the receiver answers, checks them with alive writes and
 * takes them into use (DONE). */
ncclResult_t railnetIbRecoverySendStep(struct ncclIbSendComm* comm, uint64_t now);
/* Sender: an ACK or NACK from the receiver. */
ncclResult_t railnetIbRecoveryAnswer(struct ncclIbSendComm* comm, const struct railnetIbFoMsg* m);
/* Receiver: a REQUEST (new QPs connected to the sender's, or NACK) or DONE (they are used). */
ncclResult_t railnetIbRecoveryRecv(struct ncclIbRecvComm* comm, const struct railnetIbFoMsg* m);

/* ---- probe.c: path probes, driven by failover.c */
/* Sender: sets the probes up (PROBE_REQ) once, then posts one empty RDMA write per device in
 * use every RAILNET_IB_PATH_PROBE_INTERVAL ms on the device's probe QP (a QP of its own with
 * RAILNET_IB_PATH_PROBE_TIMEOUT / _RETRY_CNT), and takes in the completions of those in
 * flight. A probe that fails (completion.c -> railnetIbFoTakeError) fails its device over:
 * a path that drops packets with both ports ACTIVE is noticed within the probe's retry time,
 * whatever NCCL_IB_TIMEOUT the data QPs have. */
ncclResult_t railnetIbProbeSendStep(struct ncclIbSendComm* comm, uint64_t now);
/* Sender: the receiver's PROBE_ACK. Receiver: a PROBE_REQ (answered with PROBE_ACK). */
ncclResult_t railnetIbProbeAnswer(struct ncclIbSendComm* comm, const struct railnetIbFoMsg* m);
ncclResult_t railnetIbProbeRecv(struct ncclIbRecvComm* comm, const struct railnetIbFoMsg* m);
/* Sender: device d was taken back by port recovery: its probe QP (failed with the path) is
 * replaced by a new one, connected through another PROBE_REQ/ACK; the device is probed again
 * once the receiver answered. */
ncclResult_t railnetIbProbeRenew(struct ncclIbSendComm* comm, int d);

/* ---- failover.c: the exchange (called by the API calls of p2p.c only) */
/* One step: look at the socket for the peer's message (every call while a failover is under
 * way, else at most once a millisecond), send the query, apply the answer, post the replays.
 * ncclRemoteError when the comm must fail (a WARN said why). */
ncclResult_t railnetIbFoProgress(struct ncclIbNetCommBase* base);
/* Sender: while a failover is under way no new fifo slot is taken. */
int railnetIbFoBusy(struct ncclIbNetCommBase* base);

/* ---- failover_hooks.c: the data path's hooks (each a no-op without failover) */
/* Sender: a successful completion of failover's own work on QP q (a path probe, the read of
 * the receiver's records, an alive write): 1 when it was one (and is accounted), else 0. */
int railnetIbFoSendOwnWc(struct ncclIbNetCommBase* base, int q, const struct ibv_wc* wc);

#ifdef __cplusplus
}
#endif
#endif
