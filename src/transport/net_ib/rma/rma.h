/*
 * One-sided RMA over verbs: NCCL's RMA plugin interface (ext-net/include/railnet_net/rma.h,
 * version 14) on railnet's IB devices. A group (collComm) is the ring of rma_group.h over the
 * ranks of a connect; a context set (rmaCtx) holds, per context, the devices of the group's
 * vDevice (a PD, a CQ and the GID each, as a comm's) and an RC QP to every connected rank
 * (NCCL's rankStride: the ranks at a multiple of it from this one, itself included), made
 * with the two-sided path's QP attributes (NCCL_IB_TIMEOUT, NCCL_IB_RETRY_CNT, GID choice,
 * NCCL_IB_SL; the traffic class NCCL_GIN_IB_TC, else NCCL_IB_TC, else the config's); a
 * symmetric registration is every rank's base address and rkeys. The files: rma_init.c
 * (init, devices, properties, listen, connect, close), rma_ctx.c (contexts), rma_reg.c
 * (registrations), rma_ops.c (put, put with signal, get, flush, test, progress), rma_plugin.c
 * (the version 13 and 14 tables).
 */
#ifndef RAILNET_NET_IB_RMA_H
#define RAILNET_NET_IB_RMA_H
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include "railnet_net/rma.h"
#include "../comm.h"
#include "rma_group.h"

#ifdef __cplusplus
extern "C" {
#endif

/* the requests a context keeps in flight towards one rank: NCCL's 32 x maxRecvs, each at
 * most two work requests (the data write and the signal's atomic) */
#define RAILNET_RMA_REQS_PER_RANK (32 * NCCL_NET_IB_MAX_RECVS)
#define RAILNET_RMA_SQ_DEPTH (2 * RAILNET_RMA_REQS_PER_RANK)
/* RDMA reads (gets) and atomics (signals) a QP keeps in flight, and serves, at once: at most
 * this, the device's limits and (in flight) what the peer serves. NCCL's QPs keep 1: a get of
 * 64 KiB then waits for the one before it (half ib_read_bw's bandwidth on soft-RoCE). */
#define RAILNET_RMA_RD_ATOMIC 16
/* work requests of one operation at most: a transfer of up to 16 GiB (1 GiB each) and a signal */
#define RAILNET_RMA_MAX_WRS 17

/* What crosses the wire, beside the ring's hello (rma_group.h): each rank's QP towards each
 * rank of each context (qpn 0: none), all-gathered at createContext. */
struct railnetRmaQpInfo {
  uint32_t qpn;
  int32_t devIndex;             /* the device of the sender's vDevice it is on */
  uint32_t rdAtomic;            /* the peer's gets and signals it serves at once (max_dest_rd_atomic) */
  struct ncclIbDevInfo dev;     /* its address (qp.h railnetIbDevInfoFill) */
};
static_assert(sizeof(struct railnetRmaQpInfo) == 56, "the RMA QP exchange: its layout changed");

struct railnetRmaMr;
struct railnetRmaColl {
  struct railnetRmaGroup* group;
  int vDev, rank, nranks;
  pthread_mutex_t lock;
  struct railnetRmaMr* mrs;                   /* the live registrations: a handle not here is refused */
};

/* What every rank tells the others of one of its registrations. */
struct railnetRmaRemoteMr {
  uint64_t base;
  uint64_t size;
  uint32_t rkeys[NCCL_IB_MAX_DEVS_PER_NIC];
};

struct railnetRmaMr {
  struct railnetRmaMr* next;
  struct railnetRmaColl* coll;
  uint8_t* base;
  size_t size;
  int type;                                   /* NCCL_PTR_HOST, _CUDA, _DMABUF */
  int ndevs;
  int ibDevN[NCCL_IB_MAX_DEVS_PER_NIC];
  struct ibv_mr* mrs[NCCL_IB_MAX_DEVS_PER_NIC];
  struct railnetRmaRemoteMr* remote;          /* [nranks] */
};

/* One rank's end of a context: its QP (NULL: not connected, outside the rank stride). */
struct railnetRmaPeer {
  struct ibv_qp* qp;
  int devIndex;                               /* the local device of the vDevice it is on */
  int remDevIndex;                            /* the peer's device of its QP: its rkey's index */
  int posted;                                 /* work requests posted, not yet completed */
  int depth;                                  /* its send queue's */
};

struct railnetRmaRequest;
struct railnetRmaContext {
  struct ncclIbNetCommBase* base;             /* the devices (PD, CQ, GID); no QP of its own */
  struct railnetRmaPeer* peers;               /* [nranks] */
  struct railnetRmaPeer flush[NCCL_IB_MAX_DEVS_PER_NIC]; /* per device a QP to itself (GPU flushes), made at the first */
  struct railnetRmaRequest* orphans;          /* posted in part when the post failed: kept until destroy */
  uint64_t* scratch;                          /* where the signals' atomics put the old value */
  struct ibv_mr* scratchMrs[NCCL_IB_MAX_DEVS_PER_NIC];
  int cqRoom;                                 /* entries of each device's CQ: work requests in flight on it at most */
  int inFlight[NCCL_IB_MAX_DEVS_PER_NIC];     /* work requests posted on the device, not yet completed */
  pthread_mutex_t lock;                       /* posting and polling */
};

struct railnetRmaCtx {
  struct railnetRmaColl* coll;
  int nranks, nContexts, rankStride, tc, sl;
  struct railnetRmaContext* contexts;         /* [nContexts] */
  volatile int failed;                        /* a work request failed: queryLastError says so */
  uint64_t lastCheckNs;                       /* the group's connections, looked at then (atomic) */
  int lost;                                   /* the group broke at this rank's neighbour (-1: no; atomic) */
};

struct railnetRmaRequest {
  struct railnetRmaRequest* next;             /* in the context's orphans */
  struct railnetRmaCtx* ctx;
  struct railnetRmaContext* context;
  struct railnetRmaPeer* peer;                /* the QP it went on */
  int rank;
  int nwr;                                    /* work requests it posted */
  int pending;                                /* its last one not completed (under the context's lock) */
  int status;                                 /* an ibv_wc_status that failed it, 0: none */
  uint32_t vendorErr;
  const char* what;                           /* "put", "put with signal", "get", "flush" */
};

/* The version 14 table over the functions below, but its init: railnetGetRma()'s (rma_plugin.c)
 * and NCCL's (ext-net/rma_plugin.c, whose init asks for GPUDirect RDMA). */
#define RAILNET_RMA_V14_TABLE(initFn)                                                                                   \
  {                                                                                                             \
    .name = "RailIB_RMA", .init = initFn, .devices = railnetRmaDevices, .getProperties = railnetRmaGetProperties, \
    .listen = railnetRmaListen, .connect = railnetRmaConnect, .createContext = railnetRmaCreateContext,        \
    .regMrSym = railnetRmaRegMrSym, .regMrSymDmaBuf = railnetRmaRegMrSymDmaBuf,                                 \
    .deregMrSym = railnetRmaDeregMrSym, .destroyContext = railnetRmaDestroyContext,                            \
    .closeColl = railnetRmaCloseColl, .closeListen = railnetRmaCloseListen, .iput = railnetRmaIput,            \
    .iputSignal = railnetRmaIputSignal, .iget = railnetRmaIget, .iflush = railnetRmaIflush,                    \
    .test = railnetRmaTest, .rmaProgress = railnetRmaProgress, .queryLastError = railnetRmaQueryLastError,     \
    .finalize = railnetRmaFinalize,                                                                             \
  }


/* rma_init.c */
ncclResult_t railnetRmaInit(void** ctx, uint64_t commId, ncclDebugLogger_t logger);
ncclResult_t railnetRmaDevices(int* ndev);
ncclResult_t railnetRmaGetProperties(int dev, ncclNetProperties_v12_t* props);
ncclResult_t railnetRmaListen(void* ctx, int dev, void* handle, void** listenComm);
ncclResult_t railnetRmaConnect(void* ctx, void* handles[], int nranks, int rank, void* listenComm, void** collComm);
ncclResult_t railnetRmaCloseListen(void* listenComm);
ncclResult_t railnetRmaCloseColl(void* collComm);
ncclResult_t railnetRmaFinalize(void* ctx);
/* rma_ctx.c */
ncclResult_t railnetRmaCreateContext(void* collComm, ncclRmaConfig_v14_t* config, void** rmaCtx);
ncclResult_t railnetRmaDestroyContext(void* rmaCtx);
/* A context's CQ entries per device: every work request its QPs may have in flight (the send
 * queues of npeers ranks and a flush QP), within the smallest max_cqe of the vDevice's devices
 * (with an INFO when that is less); post() keeps what is in flight on a device within it
 * (*room). -1, with a WARN, when that holds less than one operation's work requests. */
int railnetRmaCqEntries(const struct railnetRmaColl* cc, int npeers, int* room);
/* NCCL_GIN_IB_TC as set (-1: not set) */
int railnetRmaParamTc(void);
/* rma_reg.c */
/* m is a live registration of cc (not deregistered, not another group's): looked up, never read. */
int railnetRmaMrLive(struct railnetRmaColl* cc, const struct railnetRmaMr* m);
ncclResult_t railnetRmaRegMrSym(void* collComm, void* data, size_t size, int type, uint64_t mrFlags, void** mhandle);
ncclResult_t railnetRmaRegMrSymDmaBuf(void* collComm, void* data, size_t size, int type, uint64_t offset, int fd,
                                      uint64_t mrFlags, void** mhandle);
ncclResult_t railnetRmaDeregMrSym(void* collComm, void* mhandle);
/* rma_ops.c */
ncclResult_t railnetRmaIput(void* rmaCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
                            uint64_t dstOff, void* dstMhandle, uint32_t rank, void** request);
ncclResult_t railnetRmaIputSignal(void* rmaCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
                                  uint64_t dstOff, void* dstMhandle, uint32_t rank, uint64_t signalOff,
                                  void* signalMhandle, uint64_t signalValue, uint32_t signalOp, bool isStrongSignal,
                                  void** request);
ncclResult_t railnetRmaIget(void* rmaCtx, int context, uint64_t remoteOff, void* remoteMhandle, size_t size,
                            uint64_t localOff, void* localMhandle, uint32_t rank, void** request);
ncclResult_t railnetRmaIflush(void* rmaCtx, int context, void* mhandle, uint32_t rank, void** request);
ncclResult_t railnetRmaTest(void* collComm, void* request, int* done);
ncclResult_t railnetRmaProgress(void* rmaCtx);
ncclResult_t railnetRmaQueryLastError(void* rmaCtx, bool* hasError);

#ifdef __cplusplus
}
#endif
#endif
