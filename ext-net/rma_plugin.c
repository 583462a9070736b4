/*
 * The RMA tables NCCL 2.30 looks up in the net plugin's library once no RMA plugin of its own
 * name was found: ncclRmaPlugin_v14, else ncclRmaPlugin_v13 (ext-net/include/railnet_net/rma.h),
 * over src/transport/net_ib/rma/. Their init refuses, as NCCL's own RMA over verbs does, when no
 * device has GPUDirect RDMA (NCCL then runs without one-sided networking), and when
 * RAILNET_RMA_PLUGIN=0 (NCCL then goes on to its own). Version 13 (GIN v13) goes through small
 * adapters: its config has no rank stride (1), it returns no device handle and no GIN handle of
 * a registration, and every signal is strong.
 */
#include <stddef.h>
#include "core.h"
#include "debug.h"
#include "param.h"
#include "../src/transport/net_ib/rma/rma.h"

#define RAILNET_EXPORT __attribute__((visibility("default")))

enum { P_RMA_PLUGIN };
static const railnetParam rmaPluginParams[] = {
    [P_RMA_PLUGIN] = RAILNET_PARAM_INT_DEF("RAILNET_RMA_PLUGIN", 1, 0, 1,
                                           "Serve NCCL's one-sided (RMA) calls from the net plugin's library "
                                           "(0: NCCL uses its own RMA over verbs)"),
};
RAILNET_PARAM_TABLE("plugin/rma", rmaPluginParams);

/* init as NCCL's tables have it: the devices up, then GPUDirect RDMA on at least one of them
 * (peer memory or DMA-BUF, as getProperties reports it), else refused with the reason. */
static ncclResult_t ncclFacingInit(void** ctx, uint64_t commId, ncclDebugLogger_t logger) {
  if (logger) railnetSetLogger(logger); /* NULL: keep the one NCCL gave the net plugin */
  if (railnetParamInt(&rmaPluginParams[P_RMA_PLUGIN]) == 0) {
    INFO(NCCL_INIT | NCCL_NET, "NET/IB RMA : off (RAILNET_RMA_PLUGIN=0): NCCL uses its own RMA");
    return ncclInvalidUsage;
  }
  NCCLCHECK(railnetRmaInit(ctx, commId, logger));
  int ndev = 0, gdr = 0;
  (void)railnetRmaDevices(&ndev);
  for (int d = 0; d < ndev && !gdr; d++) {
    ncclNetProperties_v12_t props;
    gdr = railnetRmaGetProperties(d, &props) == ncclSuccess && (props.ptrSupport & (NCCL_PTR_CUDA | NCCL_PTR_DMABUF));
  }
  if (gdr) return ncclSuccess;
  INFO(NCCL_INIT | NCCL_NET, "NET/IB RMA : unable to serve NCCL's one-sided calls: %s; load nvidia-peermem or use a "
       "kernel and NIC with DMA-BUF (railnet-diag says which works)",
       ndev ? "no GPUDirect RDMA (no peer-memory module, no DMA-BUF)" : "no IB device");
  railnetRmaFinalize(*ctx);
  *ctx = NULL;
  return ncclSystemError;
}

static ncclResult_t v13CreateContext(void* collComm, ncclGinConfig_v13_t* config, void** ginCtx,
                                     ncclNetDeviceHandle_v11_t** devHandle) {
  if (config == NULL) return ncclInvalidArgument;
  if (devHandle) *devHandle = NULL; /* a proxy: nothing for device code */
  ncclRmaConfig_v14_t c = {config->nContexts, config->trafficClass, 1};
  return railnetRmaCreateContext(collComm, &c, ginCtx);
}

static ncclResult_t v13RegMrSym(void* collComm, void* data, size_t size, int type, uint64_t mrFlags, void** mhandle,
                                void** ginHandle) {
  if (ginHandle) *ginHandle = NULL;
  return railnetRmaRegMrSym(collComm, data, size, type, mrFlags, mhandle);
}

static ncclResult_t v13RegMrSymDmaBuf(void* collComm, void* data, size_t size, int type, uint64_t offset, int fd,
                                      uint64_t mrFlags, void** mhandle, void** ginHandle) {
  if (ginHandle) *ginHandle = NULL;
  return railnetRmaRegMrSymDmaBuf(collComm, data, size, type, offset, fd, mrFlags, mhandle);
}

static ncclResult_t v13IputSignal(void* ginCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
                                  uint64_t dstOff, void* dstMhandle, uint32_t rank, uint64_t signalOff,
                                  void* signalMhandle, uint64_t signalValue, uint32_t signalOp, void** request) {
  return railnetRmaIputSignal(ginCtx, context, srcOff, srcMhandle, size, dstOff, dstMhandle, rank, signalOff,
                              signalMhandle, signalValue, signalOp, true, request);
}

RAILNET_EXPORT const ncclRma_v14_t ncclRmaPlugin_v14 = RAILNET_RMA_V14_TABLE(ncclFacingInit);

RAILNET_EXPORT const ncclRma_v13_t ncclRmaPlugin_v13 = {
    .name = "RailIB_RMA",
    .init = ncclFacingInit,
    .devices = railnetRmaDevices,
    .getProperties = railnetRmaGetProperties,
    .listen = railnetRmaListen,
    .connect = railnetRmaConnect,
    .createContext = v13CreateContext,
    .regMrSym = v13RegMrSym,
    .regMrSymDmaBuf = v13RegMrSymDmaBuf,
    .deregMrSym = railnetRmaDeregMrSym,
    .destroyContext = railnetRmaDestroyContext,
    .closeColl = railnetRmaCloseColl,
    .closeListen = railnetRmaCloseListen,
    .iput = railnetRmaIput,
    .iputSignal = v13IputSignal,
    .iget = railnetRmaIget,
    .iflush = railnetRmaIflush,
    .test = railnetRmaTest,
    .ginProgress = railnetRmaProgress,
    .queryLastError = railnetRmaQueryLastError,
    .finalize = railnetRmaFinalize,
};
