/*
 * The eager state of a comm (eager.h): the eager files' own (eager*.c through eager_int.h);
 * the rest of the transport holds a pointer and calls eager.h's functions. Tests may read it.
 */
#ifndef RAILNET_NET_IB_EAGER_STATE_H
#define RAILNET_NET_IB_EAGER_STATE_H
#include <stddef.h>
#include <stdint.h>
#include "../comm.h"
#include "eager.h"
#include "eager_pool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* An irecv queued while the comm closes its eager messages (railnetIbEagerQueue). */
struct ncclIbMrHandle;
struct railnetIbEagerPending {
  struct ncclIbRequest* req;
  int n;
  uint8_t filled;                      /* bit i: buffer i got a message that came eagerly */
  void* data[NCCL_NET_IB_MAX_RECVS];
  size_t sizes[NCCL_NET_IB_MAX_RECVS];
  int tags[NCCL_NET_IB_MAX_RECVS];
  const struct ncclIbMrHandle* mh[NCCL_NET_IB_MAX_RECVS];
};

/* What both sides have: the agreed size, this side's registered buffer and the peer's
 * address, whether failover is on, the close's two flags and the request-to-send count. */
struct railnetIbEager {
  uint32_t size;                       /* the largest message sent eagerly (agreed) */
  uint32_t stride;                     /* bytes per ring / bounce slot: header and size rounded up to 64 */
  size_t bytes;                        /* buf's length (the slots) */
  /* sender: bounce slots; receiver: the ring; taken from the pool
   * (eager_pool.h) when the first small messages are about to go eagerly: NULL until then */
  uint8_t* buf;
  struct railnetIbRegBuf pool;          /* buf and its registration per device (pool.mrs) */
  uint64_t refused;                    /* takes the pool refused (at RAILNET_IB_EAGER_POOL) */
  uint64_t retryAt;                    /* ... sender: the position from which it tries again */
  uint64_t remAddr;                    /* sender: the receiver's ring; receiver: the sender's credit word */
  int fo;                              /* port failover on for this comm (eager_fo.c) */
  /* the close (a multi-receive): sender: closed once it wrote it; receiver: closing once it
   * asked, closed once the close was taken */
  int closing, closed;
  uint64_t rtsCount;                   /* lazy: requests-to-send taken (receiver) or sent (sender) */
};

/* The sender's eager state (ncclIbSendComm.eager). */
struct railnetIbEagerSend {
  struct railnetIbEager c;
  uint64_t rtsSent;                    /* position + 1 of the last request-to-send */
  uint32_t remRkeys[NCCL_IB_MAX_DEVS_PER_NIC]; /* the receiver's ring's */
  /* port failover (eager_fo.c): per bounce slot the position + 1 of the message in it, its
   * request until a write of it completed, the QP of its last write; bit s: to be written
   * again, written again and not completed; the close's QP (-1: none) and position, the close
   * to be written again; messages sent eagerly and written again */
  uint64_t slotPos[RAILNET_IB_EAGER_SLOTS];
  struct ncclIbRequest* slotReq[RAILNET_IB_EAGER_SLOTS];
  uint8_t slotQp[RAILNET_IB_EAGER_SLOTS];
  uint32_t resend, resendOut;
  int closeQp, closeResend;
  uint64_t closePos;
  uint64_t sent, resent;
  /* the receiver's first-message box (wire.h RAILNET_IB_EAGER_FIRST_BYTES; firstAddr 0: none)
   * and its rkey per device; the position + 1 of the message written there (once per comm;
   * 0: not yet) and the block of the comm's control memory it was written from (base.ctrl) */
  uint64_t firstAddr;
  uint32_t firstRkeys[NCCL_IB_MAX_DEVS_PER_NIC];
  uint64_t firstPos;
  uint8_t* firstStage;
};

/* The receiver's eager state (ncclIbRecvComm.eager). */
struct railnetIbEagerRecv {
  struct railnetIbEager c;
  uint64_t arrived[RAILNET_IB_EAGER_SLOTS]; /* position + 1 of a message waiting in the slot, 0: none */
  uint32_t arrivedSize[RAILNET_IB_EAGER_SLOTS];
  uint64_t released;                   /* positions below it delivered */
  uint64_t doneMask;                   /* bit i: position released + i delivered */
  uint64_t told;                       /* the count last written to the sender */
  uint64_t nicCopies;                  /* messages the NIC copied into GPU receive buffers */
  uint64_t eagerIn;                    /* messages that came eagerly, delivered */
  int grantTold;                       /* the ring's grant write went (eager_ring.c) */
  int takeDue;                         /* the first small message was delivered: the ring is taken at
                                          the next irecv (not on that message's way: a registration) */
  int small;                           /* lazy: irecvs write no clear-to-send now */
  int smallRun;                        /* lazy: small messages delivered through a clear-to-send in a row */
  int retryAfter;                      /* lazy: how many of those before trying (0: RAILNET_IB_EAGER_RETRY) */
  uint64_t rtsLast;                    /* lazy: position + 1 of the last request-to-send taken (one written
                                          again after a failover doubles retryAfter no more) */
  int asked;                           /* lazy: a request-to-send came since the last eager message */
  uint64_t rts[RAILNET_IB_EAGER_SLOTS]; /* lazy: position + 1 of a request-to-send that came before its irecv */
  uint64_t mode, modeTold;             /* lazy: (position << 1) | every irecv writes its clear-to-send */
  uint64_t everyFrom;                  /* ... where the last such period began */
  /* the close: closeAt the sender's position + 1 once the close came */
  uint64_t closeAt;
  uint64_t pendFrom;                   /* its fifoHead when closing began (irecvs queued from there) */
  uint64_t frontier;                   /* ... every position below it came (from pendFrom on) */
  struct railnetIbEagerPending* pend;  /* ... the queued irecvs (RAILNET_IB_FIFO_SLOTS, made at the close) */
  int pendHead, pendCount;
  struct ncclIbRequest* copyReq[RAILNET_IB_EAGER_SLOTS]; /* the NIC copy out of ring slot s: for it */
  uint64_t copyPos[RAILNET_IB_EAGER_SLOTS];              /* ... of the message at this position */
  void* copyBuf[RAILNET_IB_EAGER_SLOTS];                 /* ... into this buffer, */
  const struct ncclIbMrHandle* copyMh[RAILNET_IB_EAGER_SLOTS]; /* registered so, */
  size_t copyLen[RAILNET_IB_EAGER_SLOTS];                /* this many bytes */
  /* port failover: the QP its credit writes go on (QP 0 until it is gone); repeats dropped,
   * NIC copies made again; bit s: slot s's NIC copy was made again once */
  int tellQp;
  uint64_t repeats, copyRedos;
  uint32_t copyRedone;
  /* the first-message box (comm->first) agreed; the position + 1 of the message that came into
   * it (0: none yet); the credit words written to the sender, in the comm's control memory
   * (base.ctrl, after the clear-to-send entries) */
  int firstOn;
  uint64_t firstAt;
  volatile struct railnetIbEagerCredit* credit;
};

#ifdef __cplusplus
}
#endif
#endif
