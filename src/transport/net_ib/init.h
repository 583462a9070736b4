/*
 * The IB transport as NCCL sees it: the ncclNet table, and the device discovery behind its
 * init and finalize, counted (the first init discovers, the last finalize tears down).
 */
#ifndef RAILNET_NET_IB_INIT_H
#define RAILNET_NET_IB_INIT_H
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The IB transport (v12 interface). */
extern const ncclNet_t railnetNetIb;

ncclResult_t ncclIbInitDevices(ncclDebugLogger_t logger);
ncclResult_t ncclIbFinalizeDevices(void);

#ifdef __cplusplus
}
#endif
#endif
