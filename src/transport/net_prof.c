/* NCCL profiler events (net_prof.h): one descriptor per event, built on the stack; NCCL's
 * profiler copies what it needs when the event starts. */
#include "net_prof.h"
#include <stddef.h>
#include <string.h>
#include "core.h"

/* The descriptors' layout is NCCL's ABI: profiler plugins read them by offset. */
_Static_assert(offsetof(ncclProfilerNetSockDescr_v1_t, sock.fd) == 8, "socket descriptor fd offset");
_Static_assert(offsetof(ncclProfilerNetSockDescr_v1_t, sock.length) == 16, "socket descriptor length offset");
_Static_assert(sizeof(ncclProfilerNetSockDescr_v1_t) == 24, "socket descriptor size");
_Static_assert(offsetof(ncclProfilerNetIbDescr_v1_t, qp.wr_id) == 16, "IB descriptor wr_id offset");
_Static_assert(offsetof(ncclProfilerNetIbDescr_v1_t, qp.qpNum) == 28, "IB descriptor qpNum offset");
_Static_assert(sizeof(ncclProfilerNetIbDescr_v1_t) == 40, "IB descriptor size");

static ncclProfilerCallback_t profCallbacks[RAILNET_PROF_TRANSPORTS];

void railnetProfSet(railnetProfTransport t, ncclProfilerCallback_t cb) {
  if (t >= 0 && t < RAILNET_PROF_TRANSPORTS) __atomic_store_n(&profCallbacks[t], cb, __ATOMIC_RELEASE);
}

ncclProfilerCallback_t railnetProfGet(railnetProfTransport t) {
  return t >= 0 && t < RAILNET_PROF_TRANSPORTS ? __atomic_load_n(&profCallbacks[t], __ATOMIC_ACQUIRE) : NULL;
}

/* A profiler that fails an event is told once; the data path goes on without it. */
static void profFailed(ncclResult_t res, const char* what) {
  static int told;
  if (res != ncclSuccess && !__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
    WARN("NET : the profiler plugin's callback returned %d for %s; railnet goes on (later failures are not logged)",
         (int)res, what);
}

void railnetProfSockStart(ncclProfilerCallback_t cb, void** eh, void* phandle, int fd, int op, size_t length) {
  *eh = NULL;
  if (cb == NULL || phandle == NULL) return;
  ncclProfilerNetSockDescr_v1_t d;
  memset(&d, 0, sizeof(d));
  d.type = ncclProfileSocket;
  d.sock.fd = fd;
  d.sock.op = op;
  d.sock.length = length;
  profFailed(cb(eh, ncclProfilerNetEventStart, phandle, (int64_t)(NCCL_PROFILER_NET_TYPE_SOCK | NCCL_PROFILER_NET_SOCKET_VER), &d),
             "a socket event");
}

void railnetProfIbStart(ncclProfilerCallback_t cb, void** eh, void* phandle, int device, uint64_t wrId, int opcode,
                        int qpNum, size_t length) {
  *eh = NULL;
  if (cb == NULL || phandle == NULL) return;
  ncclProfilerNetIbDescr_v1_t d;
  memset(&d, 0, sizeof(d));
  d.type = ncclProfileQp;
  d.qp.device = device;
  d.qp.wr_id = wrId;
  d.qp.opcode = opcode;
  d.qp.qpNum = qpNum;
  d.qp.length = length;
  profFailed(cb(eh, ncclProfilerNetEventStart, phandle, (int64_t)(NCCL_PROFILER_NET_TYPE_IB | NCCL_PROFILER_NET_IB_VER), &d),
             "a QP event");
}

void railnetProfStop(ncclProfilerCallback_t cb, void** eh) {
  if (cb == NULL || *eh == NULL) return;
  profFailed(cb(eh, ncclProfilerNetEventStop, NULL, 0, NULL), "the end of an event");
  *eh = NULL;
}
