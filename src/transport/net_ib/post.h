/*
 * The work requests of the IB data path (post.c): the sender's writes of one chunk of a
 * fifo slot, the receiver's clear-to-send write, and which QP a chunk goes to. Used by the
 * API calls (p2p.c) and by port failover's replays (failover.c).
 */
#ifndef RAILNET_NET_IB_POST_H
#define RAILNET_NET_IB_POST_H
#include "comm.h"

#ifdef __cplusplus
extern "C" {
#endif

/* QPs a message is cut over: all of them with NCCL_IB_SPLIT_DATA_ON_QPS=1, else 1. */
int railnetIbChunksPerMsg(struct ncclIbNetCommBase* base);
/* The QP chunk i of message id is meant for (both sides compute the same) ... */
struct ncclIbQp* railnetIbMsgQp(struct ncclIbNetCommBase* base, uint64_t id, int i);
/* ... and the one it goes to: that one, or with port failover the QP standing in for it;
 * NULL when no QP is left. */
struct ncclIbQp* railnetIbChunkQp(struct ncclIbNetCommBase* base, uint64_t id, int i);
/* Sender: posts chunk i of fifo slot `slot` (the slot's requests in comm->sendReqs, rem: the
 * clear-to-send entries they go to) on qp: a write per buffer, then the write with immediate
 * (separately with the sizes record for a multi-receive or a comm matched by id). */
ncclResult_t railnetIbPostChunk(struct ncclIbSendComm* comm, int slot, int i, struct ncclIbQp* qp,
                                const struct ncclIbSendFifo* rem);
/* Receiver: writes the clear-to-send entries of req (fifo slot `slot`) into the sender's
 * fifo; rewrite: failover's second copy (signaled, counted by slots.h's railnetIbSlotCtsRewrite). */
ncclResult_t railnetIbPostCts(struct ncclIbRecvComm* comm, struct ncclIbRequest* req, int slot, int rewrite);

/* n pre-posted receive work requests (no buffer: the data comes by RDMA write with immediate)
 * on qp of base: kept posted (matching.c, eager), and on port recovery's new QPs. */
ncclResult_t railnetIbPostRecvs(struct ncclIbNetCommBase* base, struct ibv_qp* qp, int n);

#ifdef __cplusplus
}
#endif
#endif
