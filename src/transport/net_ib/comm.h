/*
 * The IB transport's comms in this process: a send or receive comm is a base (its devices,
 * QPs, requests, the peer's devices) and the fifo a sender's receiver writes its
 * clear-to-send entries into, or the entries a receiver writes from. Set up by setup.c and
 * connect.c, driven by p2p.c. Types, and the peer's name for log lines.
 */
#ifndef RAILNET_NET_IB_COMM_H
#define RAILNET_NET_IB_COMM_H
#include <infiniband/verbs.h>
#include <stdint.h>
#include "core.h"
#include "devices.h" /* struct ncclIbStats */
#include "regpool.h"
#include "socket.h"
#include "wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* requests of a send comm: an isend per buffer of the RAILNET_IB_FIFO_SLOTS receives in
 * flight (up to 8 buffers each); of a receive comm: its receives and their flushes */
#define NET_IB_MAX_REQUESTS (RAILNET_IB_FIFO_SLOTS * NCCL_NET_IB_MAX_RECVS)
#define NET_IB_RECV_REQUESTS (2 * RAILNET_IB_FIFO_SLOTS)
/* requests come this many at a time (NCCL keeps 8 steps in flight per comm, a receive comm
 * their flushes beside them: most comms never use more); the first chunk is in the comm,
 * touched with it at setup, the next ones are allocated when needed */
#define NET_IB_REQ_CHUNK 16

#define NCCL_NET_IB_REQ_UNUSED 0
#define NCCL_NET_IB_REQ_SEND 1
#define NCCL_NET_IB_REQ_RECV 2
#define NCCL_NET_IB_REQ_FLUSH 3
#define NCCL_NET_IB_REQ_EAGER 4          /* an isend written eagerly (eager.h): done at once */

struct railnetIbEagerSend;
struct railnetIbSlots;
struct railnetIbRecords;
struct railnetIbEagerRecv;
struct ncclIbMrHandle;

struct ncclIbQp {
  struct ibv_qp* qp;
  int devIndex;                        /* local device of the vDevice */
  int remDevIndex;                     /* the peer's device of its vDevice */
  struct ibv_ece ece;
  int eceSupported;
  int sqPosted;                        /* sender: work requests posted and not yet completed */
  uint8_t eagerUnsig;                  /* sender: unsignaled eager writes since the last signaled WR */
  uint8_t ctsUnsig;                    /* receiver: unsignaled clear-to-send writes since a signaled write */
  uint8_t gone;                        /* port failover took it out of use (qp.h: the QP set's own) */
};

/* Per physical device of a comm. */
struct ncclIbCommDev {
  int ibDevN;                          /* index in ncclIbDevs */
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  int gidIndex;
  union ibv_gid gid;
  struct ibv_mr* fifoMr;               /* sender: fifo; receiver: sizes records */
  /* receiver, GPUDirect flush: a QP connected to itself that reads one byte */
  struct ibv_qp* flushQp;
  struct ibv_mr* flushMr;
  /* liveness.c: the device's asynchronous events looked at so far, and since when its port
   * has not been ACTIVE (0: it is) */
  uint32_t portErrSeen, qpErrSeen;
  uint64_t portDownNs;
};

struct ncclIbRequest {
  struct ncclIbNetCommBase* base;
  int type;
  int events[NCCL_IB_MAX_DEVS_PER_NIC];
  uint64_t id;                         /* fifo position */
  int nreqs;
  void* phandle;                       /* isend's profiler parent (NULL: none) */
  union {
    struct {
      size_t size;
      void* data;
      uint32_t lkeys[NCCL_IB_MAX_DEVS_PER_NIC];
    } send;
    struct {
      int* sizes;                      /* nreqs entries (the sizes records of its slot) */
      void* buf;                       /* buffer 0 (an eager message is copied there) */
      uint64_t lateNs;                 /* eager, no clear-to-send: when one is sent anyway (0: sent; 1: not set yet) */
      const struct ncclIbMrHandle* mh; /* eager: buffer 0's registration (its type: who copies) */
      size_t posted[NCCL_NET_IB_MAX_RECVS]; /* the sizes irecv posted: a peer may not report more */
      /* eager.h, after a close: nbuf buffers, of which nreqs (map[j]: entry j's buffer) went on
       * the wire; own: their sizes (0: all did, sizes says them) */
      int nbuf;
      uint8_t map[NCCL_NET_IB_MAX_RECVS];
      int own[NCCL_NET_IB_MAX_RECVS];
    } recv;
  };
};

/* Common head of send and receive comms. */
struct ncclIbNetCommBase {
  int isSend;
  int ready;
  ncclNetVDeviceProps_t vProps;
  int vDev;
  struct ncclIbCommDev devs[NCCL_IB_MAX_DEVS_PER_NIC];
  int nRemDevs;
  struct ncclIbDevInfo remDevs[NCCL_IB_MAX_DEVS_PER_NIC];
  char remDevName[MAX_MERGED_DEV_NAME];
  struct ncclIbQp* qps;                /* nqps of them (at most NCCL_IB_MAX_QPS) */
  int nqps;
  int splitDataOnQps;
  int qpIndex;                         /* round robin when not splitting */
  uint64_t fifoHead;
  struct ncclSocket sock;
  union ncclSocketAddress peerAddr;    /* for messages */
  int useInline;
  uint32_t maxInline;                  /* what the QPs were granted */
  int qpTc, qpSl;                      /* traffic class and service level of the data QPs */
  int failed;                          /* an error completion was seen (railnetIbCommFail below) */
  int sockClosed;                      /* the peer closed the comm's socket (failover_msg.c reads it
                                          under failover; liveness.c looks at it) */
  uint32_t clockCalls;                 /* liveness.h: data path calls since the clock was last read */
  uint64_t peerLookNs;                 /* liveness.h: when to look at the peer's socket next */
  uint64_t peerGoneNs;                 /* ... when it was first seen closed (0: it was not) */
  int peerErr;                         /* ... the socket's error then (ETIMEDOUT: it stopped answering) */
  uint64_t portLookNs;                 /* liveness.h: when to query the ports of the comm next */
  int matchById;                       /* receives matched by the id in the immediate (matching.c) */
  struct railnetIbFailover* fo;        /* port failover on (resilience/failover.h); NULL: off */
  struct railnetIbSlots* slots;        /* per-slot chunk state (slots.h); NULL: not kept */
  struct railnetIbRecords* recs;       /* completion records (records.h); NULL: none */
  /* what the data path cost so far: requests completed, work requests posted (data and
   * clear-to-send writes, receives, flush reads), completions polled; INFO at close */
  struct {
    uint64_t msgs, wrs, cqes;
  } work;
  struct ncclIbStats stats;
  int maxReqs;                         /* NET_IB_MAX_REQUESTS (send) or NET_IB_RECV_REQUESTS */
  int sqDepth;                         /* work requests the send queue of each QP takes */
  ncclProfilerCallback_t prof;         /* NCCL's profiler callback, from init (NULL: none; prof.h) */
  struct railnetIbProfList* profEvents; /* the profiler events running (made at the first) */
  struct ncclIbRequest* reqChunks[NET_IB_MAX_REQUESTS / NET_IB_REQ_CHUNK]; /* request i: chunk i / CHUNK */
  /* chunk 0: a chunk allocated at the first isend or irecv cost that message its fresh
   * pages' faults, 190 us of a new comm's first round trip under TCG (bench/results/2026-12-07-ib-8.txt) */
  struct ncclIbRequest reqFirst[NET_IB_REQ_CHUNK];
  /* what the comm's writes read from, never written by the peer (sender: the sizes of a
   * multi-send; receiver: its clear-to-send entries): a block of the process's registered pool
   * (regpool.h, setup.c), ctrl.mrs[d]->lkey on device d */
  struct railnetIbRegBuf ctrl;
};

/* The comm's set of devices, as the registered pool knows them. */
static inline void railnetIbCommRegDevs(const struct ncclIbNetCommBase* base, struct railnetIbRegDevs* d) {
  d->ndevs = base->vProps.ndevs;
  for (int i = 0; i < d->ndevs; i++) d->ibDevN[i] = base->devs[i].ibDevN;
}

struct ncclIbSendComm {
  struct ncclIbNetCommBase base;
  /* written by the receiver */
  struct ncclIbSendFifo fifo[RAILNET_IB_FIFO_SLOTS][NCCL_NET_IB_MAX_RECVS] __attribute__((aligned(64)));
  /* written by the receiver of an eager comm (eager/eager.h): fifo positions it delivered, its
   * clear-to-send mode and its ring; in the fifo's registration */
  volatile struct railnetIbEagerCredit eagerCredit __attribute__((aligned(64))); /* and its ring (wire.h) */
  struct railnetIbEagerSend* eager;    /* NULL: no eager messages */
  /* the sizes of a multi-send, written into the receiver's records (base.ctrl) */
  int (*sizes)[NCCL_NET_IB_MAX_RECVS];
  uint64_t remSizesAddr;
  uint32_t remSizesRkeys[NCCL_IB_MAX_DEVS_PER_NIC];
  struct ncclIbRequest* sendReqs[RAILNET_IB_FIFO_SLOTS][NCCL_NET_IB_MAX_RECVS];
  int sendReqsCnt[RAILNET_IB_FIFO_SLOTS];
  /* the clear-to-send entries of slot fifoHead (the only one isend takes) as validated by its
   * first isend (railnetIbFifoTake): the later isends of a multi-receive and the RDMA writes
   * use this copy, never the fifo, which the peer may rewrite at any time; ctsCount 0: not
   * taken yet */
  struct ncclIbSendFifo cts[NCCL_NET_IB_MAX_RECVS];
  int ctsCount;
  uint8_t slotWrs[RAILNET_IB_FIFO_SLOTS]; /* work requests per QP a slot's writes took */
  int ar;                              /* adaptive routing on the first device */
};

struct ncclIbRecvComm {
  struct ncclIbNetCommBase base;
  /* entries written into the sender's fifo, from here (base.ctrl) */
  struct ncclIbSendFifo (*elems)[NCCL_NET_IB_MAX_RECVS];
  /* written by the sender: the sizes of a multi-receive, then (eager messages) the comm's first
   * message (wire.h RAILNET_IB_EAGER_FIRST_BYTES); one registration (devs[d].fifoMr) */
  int sizes[RAILNET_IB_FIFO_SLOTS][NCCL_NET_IB_MAX_RECVS];
  uint8_t first[RAILNET_IB_EAGER_FIRST_BYTES];
  uint64_t remFifoAddr;
  struct ncclIbRequest* recvReqs[RAILNET_IB_FIFO_SLOTS];
  int flushEnabled;
  int flushBuf[16];                    /* where the flush reads go */
  /* NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS=1: receive WRs are kept posted (matching.c);
   * matched by index, qpNextId[q] is the id of the next message QP q completes */
  int prepost;
  uint64_t qpNextId[NCCL_IB_MAX_QPS];
  struct railnetIbEagerRecv* eager;    /* eager messages agreed (eager.h); NULL: off */
};

/* Marks the comm failed and tells the peer (its socket's sending side is shut down): every
 * part of the data path that finds the comm broken calls this, and its caller returns the
 * error after its WARN. */
static inline void railnetIbCommFail(struct ncclIbNetCommBase* base) {
  if (!base->failed) railnetSocketShutdownSend(&base->sock);
  base->failed = 1;
}

/* "1.2.3.4<5>" of a comm's peer (its socket's address), for log lines. */
static inline const char* railnetIbPeerStr(struct ncclIbNetCommBase* base, char* buf) {
  return ncclSocketToString(&base->sock.addr, buf, 1);
}

#ifdef __cplusplus
}
#endif
#endif
