/*
 * Eager small messages (eager.h): what eager.c, eager_close.c (the close at a multi-receive)
 * and eager_fo.c (port failover) share. Not for the rest of the transport.
 */
#ifndef RAILNET_NET_IB_EAGER_INT_H
#define RAILNET_NET_IB_EAGER_INT_H
#include "eager.h"
#include "eager_state.h"
#include "../wire.h"

/* Ring slot s (of RAILNET_IB_EAGER_SLOTS, e->c.stride bytes each: a railnetIbEagerHdr, then the
 * message's bytes). */
#define SLOT(e, s) ((e)->c.buf + (size_t)(s) * (e)->c.stride)
#define HDR_BYTES sizeof(struct railnetIbEagerHdr)

/* Receiver: where the message at position pos (held in ring slot s) is: the first-message box
 * when it came there, else the ring slot; *lkey (d >= 0): its registration's on device d. */
static inline uint8_t* railnetIbEagerMsgAt(struct ncclIbRecvComm* comm, int s, uint64_t pos, int d, uint32_t* lkey) {
  struct railnetIbEagerRecv* e = comm->eager;
  int first = e->firstAt == pos + 1;
  if (d >= 0) *lkey = first ? comm->base.devs[d].fifoMr->lkey : e->c.pool.mrs[d]->lkey;
  return first ? comm->first : SLOT(e, s);
}

/* Sender: whether the receiver's credit write named its ring yet (RAILNET_IB_FLAG_EAGER_POOL);
 * once it did, e->c.remAddr and e->remRkeys are its address and rkeys. No ring write before. */
int railnetIbEagerRingKnown(struct ncclIbSendComm* comm);
/* Sender: writes sge (NULL: no bytes) with immediate imm into ring slot pos %
 * RAILNET_IB_EAGER_SLOTS of the receiver on qp; signaled when wrId is not 0 (it then carries
 * wrId's bits too), else one in RAILNET_IB_EAGER_SIGNAL. */
ncclResult_t railnetIbEagerRingWrite(struct ncclIbNetCommBase* base, struct railnetIbEagerSend* e, struct ncclIbQp* qp,
                                     uint64_t pos, struct ibv_sge* sge, uint32_t imm, uint64_t wrId);
/* Receiver: tells the sender the positions delivered (and the mode) when due, or now (force). */
ncclResult_t railnetIbEagerTell(struct ncclIbRecvComm* comm, int force);
/* Receiver: position id reached its buffer. */
ncclResult_t railnetIbEagerRelease(struct ncclIbRecvComm* comm, uint64_t id);
/* Receiver: the NIC copies n bytes of ring slot s (the message at position pos) into buf of
 * receive r (registered as mh) on device d. */
struct ncclIbMrHandle;
ncclResult_t railnetIbEagerNicCopy(struct ncclIbRecvComm* comm, struct ncclIbRequest* r, int s, void* buf,
                                   const struct ncclIbMrHandle* mh, size_t n, int d, uint64_t pos);
/* Receiver, closing (eager_close.c): the sender's close at position id on QP q; the held
 * messages into the queued irecvs; positions for the queued irecvs once the close is through. */
ncclResult_t railnetIbEagerCloseArrived(struct ncclIbRecvComm* comm, int q, uint64_t id);
ncclResult_t railnetIbEagerMatchHeld(struct ncclIbRecvComm* comm);
ncclResult_t railnetIbEagerResolve(struct ncclIbRecvComm* comm);

/* The immediate of a ring write for position pos: RAILNET_IB_EAGER_IMM | bits (its kind and
 * size), under failover with the position's low bits (eager.h). */
static inline uint32_t railnetIbEagerImm(const struct railnetIbEagerSend* e, uint64_t pos, uint32_t bits) {
  return railnetIbImmEager(e->c.fo, pos, bits);
}
/* Sender: the QP the ring write of position pos goes on (under failover the one standing in
 * for it; NULL: none left). */
struct ncclIbQp* railnetIbEagerQp(struct ncclIbNetCommBase* base, uint64_t pos);
/* Receiver: the device the NIC copies the message at position pos on (one its QPs still use). */
int railnetIbEagerCopyDev(struct ncclIbNetCommBase* base, uint64_t pos);
/* Receiver: posts the receive WR a ring write took on QP q again (not on a gone QP). */
ncclResult_t railnetIbEagerRepost(struct ncclIbRecvComm* comm, int q);
/* Receiver under failover (eager_fo.c): the position an immediate names (the one nearest to
 * the count delivered), and whether the message at position id is a repeat of one delivered
 * or held (the sender wrote it again). */
uint64_t railnetIbEagerFoPos(const struct railnetIbEagerRecv* e, uint32_t imm);
int railnetIbEagerFoRepeat(const struct railnetIbEagerRecv* e, uint64_t id);
#endif
