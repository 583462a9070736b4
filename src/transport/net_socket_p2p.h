/*
 * The Socket data path (net_socket_p2p.c): isend, irecv, test, iflush.
 */
#ifndef RAILNET_NET_SOCKET_P2P_H
#define RAILNET_NET_SOCKET_P2P_H
#include <stddef.h>
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

ncclResult_t ncclNetSocketIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                                void** request);
ncclResult_t ncclNetSocketIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                                void** phandles, void** request);
ncclResult_t ncclNetSocketTest(void* request, int* done, int* size);
ncclResult_t ncclNetSocketIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);

#ifdef __cplusplus
}
#endif
#endif
