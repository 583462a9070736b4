/*
 * IB connection setup (NCCL's ncclIbListen / ncclIbConnect / ncclIbAccept) and the close
 * calls: connect.c.
 */
#ifndef RAILNET_NET_IB_CONNECT_H
#define RAILNET_NET_IB_CONNECT_H
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

ncclResult_t ncclIbListen(void* ctx, int dev, void* handle, void** listenComm);
ncclResult_t ncclIbConnect(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_t** sendDevComm);
ncclResult_t ncclIbAccept(void* listenComm, void** recvComm, ncclNetDeviceHandle_t** recvDevComm);
ncclResult_t ncclIbCloseSend(void* sendComm);
ncclResult_t ncclIbCloseRecv(void* recvComm);
ncclResult_t ncclIbCloseListen(void* listenComm);
/* Teardown: free the connects their callers abandoned. */
void railnetIbDropConnectStages(void);

#ifdef __cplusplus
}
#endif
#endif
