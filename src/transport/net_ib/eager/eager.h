/*
 * Eager small messages (RAILNET_IB_EAGER_SIZE > 0 at both ends; default RAILNET_IB_EAGER_DEFAULT, 0:
 * off, NCCL's clear-to-send protocol). A message of at most that many bytes does not wait for a
 * clear-to-send entry: the sender copies it with its tag and size (wire.h railnetIbEagerHdr) into a
 * bounce slot and RDMA-writes it with an immediate (RAILNET_IB_EAGER_IMM | size) into a ring slot the
 * receiver registered; the receiver checks the tag against its irecv, copies the bytes (the CPU into
 * host memory, the NIC into GPU memory) and tells the sender with a credit write how far it
 * delivered. Lazy clear-to-send, multi-receives (the close), ID matching, split messages and port
 * failover (eager_fo.c) build on that.
 *
 * The protocol, its rules and the bit layouts of the immediates, wr_ids and credit words are
 * described once, in docs/ib-eager.md; this header declares the API and the constants.
 */
#ifndef RAILNET_NET_IB_EAGER_H
#define RAILNET_NET_IB_EAGER_H
#include <stdint.h>
#include "../comm.h"
#include "../wrid.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RAILNET_IB_EAGER_SLOTS 16
#define RAILNET_IB_EAGER_MAX RAILNET_IB_EAGER_MAX_BYTES /* the largest RAILNET_IB_EAGER_SIZE */
/* Its default: the latency sweep (bench/ib.sh --lat-sweep) has eager paying up to 8 KiB, and
 * at 4096 the ring and bounce slots keep the memory per comm below IBext's (bench/scale.sh). */
#define RAILNET_IB_EAGER_DEFAULT 4096

#define RAILNET_IB_EAGER_RETRY 16        /* small messages through a clear-to-send before irecvs try without */
#define RAILNET_IB_EAGER_RETRY_MAX 1024  /* ... doubled at each small message's request-to-send, up to this */
#define RAILNET_IB_EAGER_SIGNAL 8        /* the sender signals one eager write in this many per QP */
#define RAILNET_IB_EAGER_CLOSING (1ull << 63) /* receiver's mode word: a multi-receive came, close */
/* wr_id and immediate layouts: wrid.h */

/* The eager state (struct railnetIbEagerSend / railnetIbEagerRecv, one per side, and what
 * both have, struct railnetIbEager) is the eager files' own: eager_state.h, included by
 * eager_int.h; the rest of the transport holds a pointer and calls the functions below. */
struct railnetIbEagerSend;
struct railnetIbEagerRecv;

/* The comm takes eager messages now (agreed, not closed); e NULL: no. */
int railnetIbEagerSendOpen(const struct railnetIbEagerSend* e);
int railnetIbEagerRecvOpen(const struct railnetIbEagerRecv* e);
/* Receiver: a multi-receive came and the comm is closing its eager messages; e NULL: no. */
int railnetIbEagerClosing(const struct railnetIbEagerRecv* e);

/* RAILNET_IB_EAGER_SIZE (0: off; default RAILNET_IB_EAGER_DEFAULT). */
int railnetIbEagerSize(void);
/* Sender, before sending its metadata: asks for eager messages (flag, its size, its credit
 * word's address, in its fifo's registration). */
void railnetIbEagerSendMeta(struct ncclIbSendComm* comm, struct ncclIbConnectionMetadata* meta);
/* Sender, the receiver's metadata in hand: on when it agreed (bounce slots registered). */
ncclResult_t railnetIbEagerSendConnect(struct ncclIbSendComm* comm, const struct ncclIbConnectionMetadata* rem,
                                       const char* peer);
/* Receiver, QPs connected and its mode set: agrees or not (INFO either way when asked),
 * registers the ring, keeps receive WRs posted, fills meta's eager fields. */
ncclResult_t railnetIbEagerRecvSetup(struct ncclIbRecvComm* comm, const struct ncclIbConnectionMetadata* rem,
                                     struct ncclIbConnectionMetadata* meta, const char* peer);
/* isend: whether this message goes eagerly now (position fifoHead): 1 yes, 0 no, -1 - d
 * when it waits for room in the ring or in its QP's send queue (on device d): the caller
 * polls d's completions (which also tells a gone receiver: its signaled writes fail);
 * RAILNET_IB_EAGER_BAD_CREDIT when the receiver's credit word is beyond what was sent. */
#define RAILNET_IB_EAGER_BAD_CREDIT (-2 - NCCL_IB_MAX_DEVS_PER_NIC)
int railnetIbEagerCanSend(struct ncclIbSendComm* comm, size_t size, int memType);
/* Writes it with its tag (req: a fresh request of the comm, made NCCL_NET_IB_REQ_EAGER and done). */
ncclResult_t railnetIbEagerSend(struct ncclIbSendComm* comm, struct ncclIbRequest* req, void* data, size_t size,
                                int tag, void* phandle);
/* irecv of one buffer (req counted on its QP's device): delivers a message already in the
 * ring; *cts: whether the irecv still announces itself with a clear-to-send entry. */
struct ncclIbMrHandle;
ncclResult_t railnetIbEagerRecvPosted(struct ncclIbRecvComm* comm, struct ncclIbRequest* req, void* data,
                                      size_t posted, const struct ncclIbMrHandle* mh, int* cts);
/* test() of a receive still in flight: an irecv that announced no clear-to-send and got no
 * message within RAILNET_IB_EAGER_LATE_MS announces itself after all, so a sender whose
 * message does not fit it (larger than the agreed size) gets the entry and its WARN
 * instead of waiting for ever. */
#define RAILNET_IB_EAGER_LATE_MS 1000
ncclResult_t railnetIbEagerCheckLate(struct ncclIbRecvComm* comm, struct ncclIbRequest* req);
/* Sender: the message at fifoHead (of memType, NCCL_PTR_*) found no clear-to-send and does
 * not go eagerly: asks for one (once per position); RAILNET_IB_EAGER_RTS_SMALL only for a
 * small message whose memory is not host memory (host memory waits only for ring room).
 * *pollDev: -1, or the device whose completions the caller polls before it tries again
 * (the QP's send queue is full: nothing was posted). */
ncclResult_t railnetIbEagerRts(struct ncclIbSendComm* comm, size_t size, int memType, int* pollDev);
/* Receiver: whether an irecv of n buffers is queued (railnetIbEagerQueue) rather than posted:
 * a multi-receive on an open comm, and every irecv from then on while the close is not
 * through, irecvs are queued before it, or messages from before it wait for irecvs. A
 * multi-receive on a comm without a ring yet closes its eager messages at once (not queued). */
int railnetIbEagerQueues(struct railnetIbEagerRecv* e, int n);
/* ... whether one more fits (queued and posted irecvs together at most RAILNET_IB_FIFO_SLOTS,
 * NCCL's limit of requests in flight): if not, irecv returns no request (later). */
int railnetIbEagerQueueRoom(const struct ncclIbRecvComm* comm);
/* ... queues it (the first one asks the sender to close: the mode word of the credit write):
 * messages that came beyond the irecvs fill its buffers of their tag, the oldest first; once
 * the sender's close is here with every message before it, the buffers left take a fifo
 * position with clear-to-send entries (none left: no position). *taken 1 (0 only if it
 * could not be queued). req counts its buffers in events[0]; nbuf, own and map say their sizes
 * (comm.h). */
ncclResult_t railnetIbEagerQueue(struct ncclIbRecvComm* comm, struct ncclIbRequest* req, int n, void** data,
                                 size_t* sizes, int* tags, void** mhandles, int* taken);
/* test() of a receive on a comm whose irecvs are queued: takes what it can. */
ncclResult_t railnetIbEagerProgress(struct ncclIbRecvComm* comm);
/* Sender, at isend while open: when the receiver asked, writes the close at fifoHead and
 * closes; *pollDev: -1, or the device whose completions to poll first (send queue full). */
ncclResult_t railnetIbEagerSendClose(struct ncclIbSendComm* comm, int* pollDev);
/* A receive completion with RAILNET_IB_EAGER_IMM on device d. */
ncclResult_t railnetIbEagerArrived(struct ncclIbRecvComm* comm, int d, const struct ibv_wc* wc);
/* A NIC copy into a GPU receive buffer completed on device d (wr_id RAILNET_IB_EAGER_COPY). */
ncclResult_t railnetIbEagerCopied(struct ncclIbRecvComm* comm, int d, const struct ibv_wc* wc);
/* A message of the eager comm reached its buffer some other way (a data write): position id,
 * size bytes. */
ncclResult_t railnetIbEagerDelivered(struct ncclIbRecvComm* comm, uint64_t id, size_t size);
/* ---- eager_fo.c: port failover */
/* What the eager messages do at a failover, handed to failover at the eager setup
 * (railnetIbFoSetClient): the three functions below marked (client). */
struct railnetIbFoClient;
extern const struct railnetIbFoClient railnetIbEagerFoClient;
/* (client) Sender: a failover was settled (failover.c applyState): marks the eager messages and the
 * close lost with a gone QP to be written again (*n: how many messages) and lets a
 * request-to-send go again. */
ncclResult_t railnetIbEagerFoFailedOver(struct ncclIbSendComm* comm, int* n);
/* (client) Sender: writes again what is marked, as far as the send queues have room. */
ncclResult_t railnetIbEagerFoResend(struct ncclIbSendComm* comm);
/* Sender: an eager message's write (wr_id RAILNET_IB_EAGER_FO_WR) completed on QP q. */
void railnetIbEagerFoSent(struct ncclIbSendComm* comm, int q, uint64_t wrId);
/* (client) Receiver, answering a failover query: writes its credit words again (the last ones may have
 * been lost with a gone QP). */
ncclResult_t railnetIbEagerFoRetell(struct ncclIbRecvComm* comm);
/* Receiver: a NIC copy (wr_id RAILNET_IB_EAGER_COPY) failed on device d: made again on a
 * device left (ncclSuccess), or the comm fails. */
ncclResult_t railnetIbEagerFoCopyFailed(struct ncclIbRecvComm* comm, int d, const struct ibv_wc* wc);
/* "; eager: ..." for the comm's close INFO: messages that went (sender) or came (receiver)
 * eagerly, whether a buffer was taken from the pool, takes the pool refused. */
void railnetIbEagerReport(const struct ncclIbNetCommBase* base, char* out, size_t len);
/* Frees a side's eager state (NULL: nothing). */
void railnetIbEagerSendFree(struct railnetIbEagerSend* e);
void railnetIbEagerRecvFree(struct railnetIbEagerRecv* e);

#ifdef __cplusplus
}
#endif
#endif
