/*
 * The Socket transport's devices (net_socket_devices.c): one per interface that
 * ncclFindInterfaces chose (NCCL_SOCKET_IFNAME, NCCL_SOCKET_FAMILY), found once.
 */
#ifndef RAILNET_NET_SOCKET_DEVICES_H
#define RAILNET_NET_SOCKET_DEVICES_H
#include "core.h"
#include "socket.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Finds the interfaces the first time (later calls: nothing); WARN when there is none. */
ncclResult_t railnetSocketDevicesInit(void);
/* ncclSuccess for a device that exists, else a WARN naming call and ncclInvalidArgument. */
ncclResult_t railnetSocketCheckDev(int dev, const char* call);
/* The address of device dev (checked). */
const union ncclSocketAddress* railnetSocketDevAddr(int dev);
/* NCCL's automatic threads x sockets for a comm on dev (NCCL_SOCKET_NTHREADS,
 * NCCL_NSOCKS_PERTHREAD; more streams on cloud NICs known to need them). */
void railnetSocketThreadsAndSockets(int dev, int* nThreads, int* nSocks);
ncclResult_t ncclNetSocketDevices(int* n);
ncclResult_t ncclNetSocketGetProperties(int dev, ncclNetProperties_t* props);

#ifdef __cplusplus
}
#endif
#endif
