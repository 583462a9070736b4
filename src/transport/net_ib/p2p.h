/*
 * The IB data path (NCCL's net_ib/p2p.cc): p2p.c.
 */
#ifndef RAILNET_NET_IB_P2P_H
#define RAILNET_NET_IB_P2P_H
#include <stddef.h>
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

ncclResult_t ncclIbIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                         void** request);
ncclResult_t ncclIbIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                         void** phandles, void** request);
ncclResult_t ncclIbIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
ncclResult_t ncclIbTest(void* request, int* done, int* sizes);

#ifdef __cplusplus
}
#endif
#endif
