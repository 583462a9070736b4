/*
 * Socket connection setup (net_socket_connect.c): NCCL's listen / connect / accept and
 * closeListen. railnetSocketCheckHandle, its handle check, is in net_socket.h.
 */
#ifndef RAILNET_NET_SOCKET_CONNECT_H
#define RAILNET_NET_SOCKET_CONNECT_H
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

ncclResult_t ncclNetSocketListen(void* ctx, int dev, void* opaqueHandle, void** listenComm);
ncclResult_t ncclNetSocketConnect(void* ctx, int dev, void* opaqueHandle, void** sendComm,
                                  ncclNetDeviceHandle_t** sendDevComm);
ncclResult_t ncclNetSocketAccept(void* listenComm, void** recvComm, ncclNetDeviceHandle_t** recvDevComm);
ncclResult_t ncclNetSocketCloseListen(void* listenComm);

#ifdef __cplusplus
}
#endif
#endif
