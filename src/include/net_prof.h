/* NCCL profiler events of both transports (ext-net/include/railnet_net/profiler_net.h): the
 * callback each transport got from init, and starting/stopping events. Without a callback,
 * or without a parent event (a NULL phandle from NCCL), nothing is called. */
#ifndef RAILNET_NET_PROF_H
#define RAILNET_NET_PROF_H
#include <railnet_net/net.h>
#include <railnet_net/profiler_net.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { RAILNET_PROF_SOCKET = 0, RAILNET_PROF_IB = 1, RAILNET_PROF_TRANSPORTS } railnetProfTransport;

/* The callback init() got (NULL: none, as ABI v8/v9 and direct users without one give). */
void railnetProfSet(railnetProfTransport t, ncclProfilerCallback_t cb);
ncclProfilerCallback_t railnetProfGet(railnetProfTransport t);

/* Starts a Socket / IB event under phandle into *eh; a no-op without cb or phandle. */
void railnetProfSockStart(ncclProfilerCallback_t cb, void** eh, void* phandle, int fd, int op, size_t length);
void railnetProfIbStart(ncclProfilerCallback_t cb, void** eh, void* phandle, int device, uint64_t wrId, int opcode,
                        int qpNum, size_t length);
/* Stops the event in *eh (started by one of the above) and clears it. */
void railnetProfStop(ncclProfilerCallback_t cb, void** eh);

#ifdef __cplusplus
}
#endif
#endif
