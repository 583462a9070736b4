/*
 * What NCCL sees of the IB devices: virtual devices (one per physical device, made at
 * discovery, plus the fused ones makeVDevice asks for) and their properties.
 */
#ifndef RAILNET_NET_IB_PROPERTIES_H
#define RAILNET_NET_IB_PROPERTIES_H
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RAILNET_IB_MAX_COLL_BYTES (512 * 1024 * 1024L)

ncclResult_t ncclIbMakeVDevice(int* d, ncclNetVDeviceProps_t* props);
/* The same, the caller holding ncclIbLock (discovery). */
ncclResult_t railnetIbMakeVDeviceLocked(int* d, ncclNetVDeviceProps_t* props);
ncclResult_t ncclIbGetProperties(int dev, ncclNetProperties_t* props);
ncclResult_t ncclIbGetPhysProperties(int dev, ncclNetProperties_t* props);

#ifdef __cplusplus
}
#endif
#endif
