/*
 * The RMA plugin's set-up and tear-down (rma.h): IB discovery shared with the net plugin
 * (counted: the last finalize of either closes the devices), the devices as GIN proxy
 * devices, the group's listen and connect.
 */
#include <stdlib.h>
#include <string.h>
#include "rma.h"
#include "debug.h"
#include "../devices.h"
#include "../init.h"
#include "../properties.h"

struct railnetRmaInitCtx {
  uint64_t commId;
};

struct railnetRmaListenComm {
  struct railnetRmaListen* listen;
  int dev;
};

ncclResult_t railnetRmaInit(void** ctx, uint64_t commId, ncclDebugLogger_t logger) {
  if (ctx == NULL) return ncclInvalidArgument;
  NCCLCHECK(ncclIbInitDevices(logger));
  struct railnetRmaInitCtx* c;
  ncclResult_t r = RAILNET_CALLOC(&c, 1, "an RMA context");
  if (r != ncclSuccess) {
    ncclIbFinalizeDevices();
    return r;
  }
  c->commId = commId;
  *ctx = c;
  return ncclSuccess;
}

ncclResult_t railnetRmaDevices(int* ndev) {
  if (ndev == NULL) return ncclInvalidArgument;
  *ndev = ncclNMergedIbDevs < 0 ? 0 : ncclNMergedIbDevs;
  return ncclSuccess;
}

ncclResult_t railnetRmaGetProperties(int dev, ncclNetProperties_v12_t* props) {
  if (props == NULL) return ncclInvalidArgument;
  NCCLCHECK(ncclIbGetProperties(dev, props));
  props->netDeviceType = NCCL_NET_DEVICE_GIN_PROXY; /* NCCL keeps an RMA plugin of version 13 only so */
  return ncclSuccess;
}

ncclResult_t railnetRmaListen(void* ctx, int dev, void* handle, void** listenComm) {
  (void)ctx;
  if (handle == NULL || listenComm == NULL) return ncclInvalidArgument;
  if (dev < 0 || dev >= ncclNMergedIbDevs) {
    WARN("NET/IB RMA : listen on device %d, there are %d", dev, ncclNMergedIbDevs < 0 ? 0 : ncclNMergedIbDevs);
    return ncclInvalidUsage;
  }
  struct railnetRmaListenComm* lc;
  NCCLCHECK(RAILNET_CALLOC(&lc, 1, "an RMA listen comm"));
  lc->dev = dev;
  ncclResult_t r = railnetRmaGroupListen(&ncclIbIfAddr, handle, &lc->listen);
  if (r != ncclSuccess) {
    free(lc);
    return r;
  }
  *listenComm = lc;
  return ncclSuccess;
}

ncclResult_t railnetRmaConnect(void* ctx, void* handles[], int nranks, int rank, void* listenComm, void** collComm) {
  (void)ctx; /* NCCL hands the net plugin's context here, not the RMA init's */
  struct railnetRmaListenComm* lc = (struct railnetRmaListenComm*)listenComm;
  if (lc == NULL || collComm == NULL) return ncclInvalidArgument;
  struct railnetRmaColl* cc;
  NCCLCHECK(RAILNET_CALLOC(&cc, 1, "an RMA group"));
  cc->vDev = lc->dev, cc->rank = rank, cc->nranks = nranks;
  pthread_mutex_init(&cc->lock, NULL);
  ncclResult_t r = railnetRmaGroupConnect(handles, nranks, rank, lc->listen, &cc->group);
  if (r != ncclSuccess) {
    free(cc);
    return r;
  }
  INFO(NCCL_INIT | NCCL_NET, "NET/IB RMA : rank %d of %d joined its group on %s", rank, nranks,
       ncclIbMergedDevs[cc->vDev].devName);
  *collComm = cc;
  return ncclSuccess;
}

ncclResult_t railnetRmaCloseListen(void* listenComm) {
  struct railnetRmaListenComm* lc = (struct railnetRmaListenComm*)listenComm;
  if (lc == NULL) return ncclSuccess;
  railnetRmaGroupListenClose(lc->listen);
  free(lc);
  return ncclSuccess;
}

ncclResult_t railnetRmaCloseColl(void* collComm) {
  struct railnetRmaColl* cc = (struct railnetRmaColl*)collComm;
  if (cc == NULL) return ncclSuccess;
  if (cc->mrs != NULL) {
    WARN("NET/IB RMA : closeColl of a group with registrations left: deregister them first (deregMrSym)");
    return ncclInvalidUsage;
  }
  railnetRmaGroupClose(cc->group);
  pthread_mutex_destroy(&cc->lock);
  free(cc);
  return ncclSuccess;
}

ncclResult_t railnetRmaFinalize(void* ctx) {
  free(ctx);
  return ncclIbFinalizeDevices();
}
