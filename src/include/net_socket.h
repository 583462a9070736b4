/* Socket transport internals that tests and fuzzers drive directly. */
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

/* Tests: forget the interfaces found by the first init, so that the next init looks
 * again (under the test's NCCL_SOCKET_IFNAME). Comms already made keep their sockets. */
void railnetSocketResetDevices(void);

#ifdef __cplusplus
}
#endif
#endif
