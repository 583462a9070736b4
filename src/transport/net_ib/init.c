/*
 * IB transport: the ncclNet table and init/finalize (NCCL's net_ib/init.cc). The first
 * init discovers the devices (discovery.c); the last finalize tears everything down: the
 * event threads, the connects their callers abandoned, the devices.
 */
#include <stdlib.h>
#include "init.h"
#include "async.h"
#include "conn_stage.h"
#include "connect.h"
#include "devices.h"
#include "discovery.h"
#include "ibvwrap.h"
#include "p2p.h"
#include "param.h"
#include "properties.h"
#include "reg.h"
#include "testing.h"
#include "net_prof.h"

enum { P_DISABLE };
static const railnetParam ibParams[] = {
    [P_DISABLE] = RAILNET_PARAM_INT_DEF("NCCL_IB_DISABLE", 0, 0, 1, "1: do not use the IB transport"),
};
RAILNET_PARAM_TABLE("net_ib", ibParams);

static int refCount; /* under ncclIbLock */

/* Everything back to "not discovered". Caller holds ncclIbLock. */
static void ibTeardownLocked(void) {
  railnetIbAsyncStopAll();
  railnetIbDropConnectStages();
  railnetIbCloseDevicesLocked();
  refCount = 0;
}

void railnetIbResetDevices(void) {
  pthread_mutex_lock(&ncclIbLock);
  if (ncclNIbDevs >= 0) ibTeardownLocked();
  refCount = 0;
  pthread_mutex_unlock(&ncclIbLock);
}

ncclResult_t ncclIbInitDevices(ncclDebugLogger_t logger) {
  if (logger) railnetSetLogger(logger);
  if (railnetParamInt(&ibParams[P_DISABLE])) {
    INFO(NCCL_INIT | NCCL_NET, "NET/IB : disabled by NCCL_IB_DISABLE=1");
    return ncclInternalError;
  }
  if (wrap_ibv_symbols() != ncclSuccess) return ncclInternalError;
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&ncclIbLock);
  if (ncclNIbDevs == -1) res = railnetIbDiscoverLocked();
  if (res == ncclSuccess) refCount++;
  pthread_mutex_unlock(&ncclIbLock);
  return res;
}

ncclResult_t ncclIbFinalizeDevices(void) {
  pthread_mutex_lock(&ncclIbLock);
  if (refCount > 0 && --refCount == 0 && ncclNIbDevs >= 0) ibTeardownLocked();
  pthread_mutex_unlock(&ncclIbLock);
  return ncclSuccess;
}

/* ------------------------------------------------------------------ ncclNet entry points */

static ncclResult_t ibInit(void** ctx, uint64_t commId, ncclNetCommConfig_t* config, ncclDebugLogger_t logger,
                           ncclProfilerCallback_t prof) {
  (void)commId;
  NCCLCHECK(ncclIbInitDevices(logger));
  railnetProfSet(RAILNET_PROF_IB, prof);
  ncclResult_t res = railnetConnCtxCreate(config, "an IB context", ctx);
  if (res != ncclSuccess) ncclIbFinalizeDevices();
  return res;
}

static ncclResult_t ibDevices(int* ndev) {
  *ndev = ncclNMergedIbDevs < 0 ? 0 : ncclNMergedIbDevs;
  return ncclSuccess;
}

static ncclResult_t ibFinalize(void* ctx) {
  free(ctx);
  return ncclIbFinalizeDevices();
}

static ncclResult_t ibSetNetAttr(void* ctx, ncclNetAttr_t* attr) {
  (void)ctx;
  (void)attr;
  return ncclSuccess;
}

/* Discovery in discovery.c, properties and vNICs in properties.c, connection setup in
 * connect.c, registration in reg.c, the data path in p2p.c. */
const ncclNet_t railnetNetIb = {
    .name = "RailIB",
    .init = ibInit,
    .devices = ibDevices,
    .getProperties = ncclIbGetProperties,
    .listen = ncclIbListen,
    .connect = ncclIbConnect,
    .accept = ncclIbAccept,
    .regMr = ncclIbRegMr,
    .regMrDmaBuf = ncclIbRegMrDmaBuf,
    .deregMr = ncclIbDeregMr,
    .isend = ncclIbIsend,
    .irecv = ncclIbIrecv,
    .iflush = ncclIbIflush,
    .test = ncclIbTest,
    .closeSend = ncclIbCloseSend,
    .closeRecv = ncclIbCloseRecv,
    .closeListen = ncclIbCloseListen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = ncclIbMakeVDevice,
    .finalize = ibFinalize,
    .setNetAttr = ibSetNetAttr,
};
