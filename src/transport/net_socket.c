/*
 * The Socket transport: ncclNet over TCP, NCCL's design.
 *
 * A comm is one control socket plus nSocks data sockets served by nThreads helper
 * threads (NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD, automatic on known cloud NICs).
 * Each message first sends a control record on the control socket; larger payloads travel
 * as tasks on the data sockets.
 *   net_socket.c          this ncclNet table, init/finalize, registration (host memory only)
 *   net_socket_devices.c  the interfaces, their properties, threads x sockets per comm
 *   net_socket_connect.c  listen / connect / accept
 *   net_socket_comm.c     a comm's buffers, timeouts, helper threads, teardown
 *   net_socket_helper.c   the helper threads' loop over the data sockets
 *   net_socket_p2p.c      isend / irecv / test: the control socket and the requests
 */
#include <stdlib.h>
#include "conn_stage.h"
#include "core.h"
#include "net_socket_comm.h"
#include "net_socket_connect.h"
#include "net_socket_devices.h"
#include "net_socket_p2p.h"
#include "net_socket_types.h"
#include "net_prof.h"

static ncclResult_t socketInit(void** ctx, uint64_t commId, ncclNetCommConfig_t* config, ncclDebugLogger_t logger,
                               ncclProfilerCallback_t prof) {
  (void)commId;
  if (logger) railnetSetLogger(logger);
  railnetProfSet(RAILNET_PROF_SOCKET, prof);
  NCCLCHECK(railnetSocketDevicesInit());
  return railnetConnCtxCreate(config, "a socket context", ctx);
}

static ncclResult_t socketFinalize(void* ctx) {
  free(ctx);
  return ncclSuccess;
}

static ncclResult_t socketRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  (void)comm;
  (void)data;
  (void)size;
  if (type != NCCL_PTR_HOST) {
    WARN("NET/Socket : cannot register memory of type %d (%s): the Socket transport moves host memory only "
         "(ptrSupport is NCCL_PTR_HOST)",
         type, type == NCCL_PTR_CUDA ? "CUDA" : type == NCCL_PTR_DMABUF ? "DMA-BUF" : "unknown");
    return ncclInternalError;
  }
  if (mhandle) *mhandle = NULL;
  return ncclSuccess;
}

static ncclResult_t socketDeregMr(void* comm, void* mhandle) {
  (void)comm;
  (void)mhandle;
  return ncclSuccess;
}

static ncclResult_t socketCloseComm(void* comm) {
  railnetSocketCommFree((socketComm*)comm);
  return ncclSuccess;
}

static ncclResult_t socketSetNetAttr(void* ctx, ncclNetAttr_t* attr) {
  (void)ctx;
  (void)attr; /* the Socket transport has nothing to tune from these hints */
  return ncclSuccess;
}

const ncclNet_t railnetNetSocket = {
    .name = "RailSocket",
    .init = socketInit,
    .devices = ncclNetSocketDevices,
    .getProperties = ncclNetSocketGetProperties,
    .listen = ncclNetSocketListen,
    .connect = ncclNetSocketConnect,
    .accept = ncclNetSocketAccept,
    .regMr = socketRegMr,
    .regMrDmaBuf = NULL,
    .deregMr = socketDeregMr,
    .isend = ncclNetSocketIsend,
    .irecv = ncclNetSocketIrecv,
    .iflush = ncclNetSocketIflush,
    .test = ncclNetSocketTest,
    .closeSend = socketCloseComm,
    .closeRecv = socketCloseComm,
    .closeListen = ncclNetSocketCloseListen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
    .finalize = socketFinalize,
    .setNetAttr = socketSetNetAttr,
};
