/* The Socket transport's handle check, which its connect and the fuzzers run. */
#ifndef RAILNET_NET_SOCKET_H
#define RAILNET_NET_SOCKET_H
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Validates a connect handle (NCCL_NET_HANDLE_MAXSIZE bytes, any alignment) as the
 * Socket transport's connect() does before touching the network: magic, address family
 * and port, socket and thread counts. WARNs and returns ncclInvalidArgument if invalid. */
ncclResult_t railnetSocketCheckHandle(const void* handle);

#ifdef __cplusplus
}
#endif
#endif
