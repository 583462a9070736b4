/*
 * The RMA tables (ext-net/include/railnet_net/rma.h) over rma.h's functions: version 14 as it
 * is, version 13 (GIN v13) through small adapters: its config has no rank stride (1), it
 * returns no device handle and no GIN handle of a registration, and every signal is strong.
 * Not exported from the plugin yet (docs/ib-rma.md).
 */
#include <stddef.h>
#include "rma.h"

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

const ncclRma_v14_t railnetRmaIb_v14 = {
    .name = "RailIB_RMA",
    .init = railnetRmaInit,
    .devices = railnetRmaDevices,
    .getProperties = railnetRmaGetProperties,
    .listen = railnetRmaListen,
    .connect = railnetRmaConnect,
    .createContext = railnetRmaCreateContext,
    .regMrSym = railnetRmaRegMrSym,
    .regMrSymDmaBuf = railnetRmaRegMrSymDmaBuf,
    .deregMrSym = railnetRmaDeregMrSym,
    .destroyContext = railnetRmaDestroyContext,
    .closeColl = railnetRmaCloseColl,
    .closeListen = railnetRmaCloseListen,
    .iput = railnetRmaIput,
    .iputSignal = railnetRmaIputSignal,
    .iget = railnetRmaIget,
    .iflush = railnetRmaIflush,
    .test = railnetRmaTest,
    .rmaProgress = railnetRmaProgress,
    .queryLastError = railnetRmaQueryLastError,
    .finalize = railnetRmaFinalize,
};

const ncclRma_v13_t railnetRmaIb_v13 = {
    .name = "RailIB_RMA",
    .init = railnetRmaInit,
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
