/*
 * NCCL's RMA plugin interface (one-sided put, get and signals over a group of ranks), as NCCL
 * 2.30 loads it from a net plugin's library: the table ncclRmaPlugin_v14 (else ncclRmaPlugin_v13,
 * which is the GIN table of version 13). Declared here from the interface's published
 * description, in the layout NCCL reads; railnet's implementation is in
 * src/transport/net_ib/rma/, exported by ext-net/rma_plugin.c.
 */
#ifndef RAILNET_NET_RMA_H
#define RAILNET_NET_RMA_H
#include <assert.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "net.h"

/* Registration flags of regMrSym: the region takes signals (strong ordering), and signal
 * words that are never reset by NCCL. */
#ifndef NCCL_NET_MR_FLAG_FORCE_SO
#define NCCL_NET_MR_FLAG_FORCE_SO (1 << 0)
#endif
#ifndef NCCL_NET_MR_FLAG_SIGNAL_NEVER_RESET
#define NCCL_NET_MR_FLAG_SIGNAL_NEVER_RESET (1 << 1)
#endif
/* iputSignal's operations on the 64-bit signal word: add 1 (the value is ignored), add the value. */
#ifndef NCCL_NET_SIGNAL_OP_INC
#define NCCL_NET_SIGNAL_OP_INC 0x1
#endif
#ifndef NCCL_NET_SIGNAL_OP_ADD
#define NCCL_NET_SIGNAL_OP_ADD 0x2
#endif

/* ---------------------------------------------------------------- version 14 */

typedef struct {
  int nContexts;    /* sets of connections to create (1 for NCCL's host API) */
  int trafficClass; /* INT_MIN: none set (then NCCL_GIN_IB_TC, else NCCL_IB_TC) */
  int rankStride;   /* > 0, divides the group's size */
} ncclRmaConfig_v14_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t* props);
  /* a handle of up to NCCL_NET_HANDLE_MAXSIZE bytes, all-gathered by NCCL */
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  /* collective: every rank with every rank's handle; ctx is the NET plugin's context */
  ncclResult_t (*connect)(void* ctx, void* handles[], int nranks, int rank, void* listenComm, void** collComm);
  ncclResult_t (*createContext)(void* collComm, ncclRmaConfig_v14_t* config, void** rmaCtx);
  /* collective registrations: every offset in an operation is relative to the target's base */
  ncclResult_t (*regMrSym)(void* collComm, void* data, size_t size, int type, uint64_t mrFlags, void** mhandle);
  ncclResult_t (*regMrSymDmaBuf)(void* collComm, void* data, size_t size, int type, uint64_t offset, int fd,
                                 uint64_t mrFlags, void** mhandle);
  ncclResult_t (*deregMrSym)(void* collComm, void* mhandle);
  ncclResult_t (*destroyContext)(void* rmaCtx);
  ncclResult_t (*closeColl)(void* collComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*iput)(void* rmaCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size, uint64_t dstOff,
                       void* dstMhandle, uint32_t rank, void** request);
  /* the data, then the signal word's operation: the signal is seen only after the data */
  ncclResult_t (*iputSignal)(void* rmaCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size, uint64_t dstOff,
                             void* dstMhandle, uint32_t rank, uint64_t signalOff, void* signalMhandle,
                             uint64_t signalValue, uint32_t signalOp, bool isStrongSignal, void** request);
  ncclResult_t (*iget)(void* rmaCtx, int context, uint64_t remoteOff, void* remoteMhandle, size_t size,
                       uint64_t localOff, void* localMhandle, uint32_t rank, void** request);
  /* a NULL request: nothing to wait for */
  ncclResult_t (*iflush)(void* rmaCtx, int context, void* mhandle, uint32_t rank, void** request);
  /* takes the group, not a context; a done request is gone */
  ncclResult_t (*test)(void* collComm, void* request, int* done);
  ncclResult_t (*rmaProgress)(void* rmaCtx);                   /* may be NULL */
  ncclResult_t (*queryLastError)(void* rmaCtx, bool* hasError); /* may be NULL */
  ncclResult_t (*finalize)(void* ctx);
} ncclRma_v14_t;

/* ---------------------------------------------------------------- version 13 (GIN v13) */

typedef struct {
  int nSignals;
  int nCounters;
  int nContexts;
  int queueDepth;
  int trafficClass;
} ncclGinConfig_v13_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, ncclDebugLogger_t logFunction);
  ncclResult_t (*devices)(int* ndev);
  /* NCCL calls getProperties(0) at init and keeps the plugin only for netDeviceType
   * NCCL_NET_DEVICE_GIN_PROXY */
  ncclResult_t (*getProperties)(int dev, ncclNetProperties_v12_t* props);
  ncclResult_t (*listen)(void* ctx, int dev, void* handle, void** listenComm);
  ncclResult_t (*connect)(void* ctx, void* handles[], int nranks, int rank, void* listenComm, void** collComm);
  ncclResult_t (*createContext)(void* collComm, ncclGinConfig_v13_t* config, void** ginCtx,
                                ncclNetDeviceHandle_v11_t** devHandle);
  ncclResult_t (*regMrSym)(void* collComm, void* data, size_t size, int type, uint64_t mrFlags, void** mhandle,
                           void** ginHandle);
  ncclResult_t (*regMrSymDmaBuf)(void* collComm, void* data, size_t size, int type, uint64_t offset, int fd,
                                 uint64_t mrFlags, void** mhandle, void** ginHandle);
  ncclResult_t (*deregMrSym)(void* collComm, void* mhandle);
  ncclResult_t (*destroyContext)(void* ginCtx);
  ncclResult_t (*closeColl)(void* collComm);
  ncclResult_t (*closeListen)(void* listenComm);
  ncclResult_t (*iput)(void* ginCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size, uint64_t dstOff,
                       void* dstMhandle, uint32_t rank, void** request);
  /* every signal strong (no isStrongSignal) */
  ncclResult_t (*iputSignal)(void* ginCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size, uint64_t dstOff,
                             void* dstMhandle, uint32_t rank, uint64_t signalOff, void* signalMhandle,
                             uint64_t signalValue, uint32_t signalOp, void** request);
  ncclResult_t (*iget)(void* ginCtx, int context, uint64_t remoteOff, void* remoteMhandle, size_t size,
                       uint64_t localOff, void* localMhandle, uint32_t rank, void** request);
  ncclResult_t (*iflush)(void* ginCtx, int context, void* mhandle, uint32_t rank, void** request);
  ncclResult_t (*test)(void* collComm, void* request, int* done);
  ncclResult_t (*ginProgress)(void* ginCtx);
  ncclResult_t (*queryLastError)(void* ginCtx, bool* hasError);
  ncclResult_t (*finalize)(void* ctx);
} ncclGin_v13_t;
typedef ncclGin_v13_t ncclRma_v13_t;

/* The layout NCCL reads: 20 entries after the name in v14 and in v13. */
static_assert(sizeof(ncclRmaConfig_v14_t) == 3 * sizeof(int), "ncclRmaConfig_v14_t: NCCL 2.30's layout");
static_assert(sizeof(ncclGinConfig_v13_t) == 5 * sizeof(int), "ncclGinConfig_v13_t: NCCL 2.30's layout");
static_assert(offsetof(ncclRma_v14_t, finalize) == 20 * sizeof(void*), "ncclRma_v14_t: NCCL 2.30's layout");
static_assert(offsetof(ncclGin_v13_t, finalize) == 20 * sizeof(void*), "ncclGin_v13_t: NCCL 2.30's layout");

#endif
