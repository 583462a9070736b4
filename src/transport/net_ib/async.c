/*
 * IB asynchronous event threads (async.h).
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include "async.h"
#include "devices.h"
#include "ibvwrap.h"

struct ibAsync {
  pthread_t thread;
  struct ibv_context* context;
  char name[MAXNAMESIZE];
  int running;
};
static struct ibAsync ibAsyncs[MAX_IB_DEVS];
static int nIbAsyncs;
static int ibAsyncStop; /* atomic */

static void markContextFatal(struct ibv_context* ctx) {
  for (int d = 0; d < ncclNIbDevs; d++)
    if (ncclIbDevs[d].context == ctx) __atomic_fetch_add(&ncclIbDevs[d].stats.fatalErrorCount, 1, __ATOMIC_RELAXED);
}

/* A QP's error: for the comm that owns it only (QP numbers are unique per context). */
static void markQpError(struct ibv_context* ctx, uint32_t qpNum) {
  for (int d = 0; d < ncclNIbDevs; d++) {
    struct ncclIbStats* st = &ncclIbDevs[d].stats;
    if (ncclIbDevs[d].context != ctx) continue;
    uint32_t k = __atomic_load_n(&st->qpErrors, __ATOMIC_RELAXED);
    __atomic_store_n(&st->qpErrorNums[k % RAILNET_IB_QP_EVENTS], qpNum, __ATOMIC_RELAXED);
    __atomic_store_n(&st->qpErrors, k + 1, __ATOMIC_RELEASE);
  }
}

static void markPortError(struct ibv_context* ctx, int port) {
  for (int d = 0; d < ncclNIbDevs; d++)
    if (ncclIbDevs[d].context == ctx && ncclIbDevs[d].portNum == port)
      __atomic_fetch_add(&ncclIbDevs[d].stats.portErrors, 1, __ATOMIC_RELEASE);
}

static void ibHandleAsyncEvent(struct ibAsync* a, struct ibv_async_event* ev) {
  const char* str = "unknown";
  if (wrap_ibv_event_type_str(&str, ev->event_type) != ncclSuccess || str == NULL) str = "unknown";
  const char* name = a->name;
  switch (ev->event_type) {
    case IBV_EVENT_DEVICE_FATAL:
      WARN("NET/IB : %s async fatal event: %s", name, str);
      markContextFatal(a->context);
      break;
    case IBV_EVENT_CQ_ERR:
      WARN("NET/IB : %s async fatal event on CQ (%p): %s", name, (void*)ev->element.cq, str);
      markContextFatal(a->context);
      break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
      WARN("NET/IB : %s async fatal event on QP (%p) qpn=%u: %s", name, (void*)ev->element.qp,
           ev->element.qp ? ev->element.qp->qp_num : 0u, str);
      if (ev->element.qp) markQpError(a->context, ev->element.qp->qp_num);
      break;
    case IBV_EVENT_SRQ_ERR:
      WARN("NET/IB : %s async fatal event on SRQ, unused for now (%p): %s", name, (void*)ev->element.srq, str);
      break;
    case IBV_EVENT_GID_CHANGE:
      WARN("NET/IB : %s:%d GID table changed", name, ev->element.port_num);
      break;
    case IBV_EVENT_PORT_ERR:
      WARN("NET/IB : %s:%d Got non-fatal async event: %s(%d): the port left ACTIVE; its comms fail over or fail",
           name, ev->element.port_num, str, ev->event_type);
      markPortError(a->context, ev->element.port_num);
      break;
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
      WARN("NET/IB : %s:%d Got non-fatal async event: %s(%d)", name, ev->element.port_num, str, ev->event_type);
      break;
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      WARN("NET/IB : %s Got non-fatal async event: %s(%d)", name, str, ev->event_type);
      break;
    case IBV_EVENT_COMM_EST:
      break;
    default:
      WARN("NET/IB : %s unknown event type (%d)", name, ev->event_type);
      break;
  }
}

static void* ibAsyncMain(void* arg) {
  struct ibAsync* a = (struct ibAsync*)arg;
  while (!__atomic_load_n(&ibAsyncStop, __ATOMIC_ACQUIRE)) {
    /* poll with a timeout so that teardown can stop the thread; a context without an
     * event fd (tests) just idles */
    struct pollfd pfd = {a->context->async_fd, POLLIN, 0};
    int r = poll(&pfd, a->context->async_fd >= 0 ? 1 : 0, 100);
    if (r <= 0 || !(pfd.revents & POLLIN)) continue;
    struct ibv_async_event ev;
    if (wrap_ibv_get_async_event(a->context, &ev) != ncclSuccess) break;
    ibHandleAsyncEvent(a, &ev);
    if (wrap_ibv_ack_async_event(&ev) != ncclSuccess) break;
  }
  return NULL;
}

void railnetIbAsyncStart(struct ibv_context* ctx, const char* name) {
  if (nIbAsyncs == MAX_IB_DEVS) return;
  struct ibAsync* a = &ibAsyncs[nIbAsyncs];
  memset(a, 0, sizeof(*a));
  a->context = ctx;
  snprintf(a->name, sizeof(a->name), "%s", name);
  if (pthread_create(&a->thread, NULL, ibAsyncMain, a) != 0) {
    WARN("NET/IB : %s: cannot start the async event thread (%s); device events will not be logged", name,
         strerror(errno));
    return;
  }
  a->running = 1;
  nIbAsyncs++;
}

void railnetIbAsyncStopAll(void) {
  __atomic_store_n(&ibAsyncStop, 1, __ATOMIC_RELEASE);
  for (int i = 0; i < nIbAsyncs; i++)
    if (ibAsyncs[i].running) pthread_join(ibAsyncs[i].thread, NULL);
  nIbAsyncs = 0;
  __atomic_store_n(&ibAsyncStop, 0, __ATOMIC_RELEASE);
}

/* NCCL dlcloses net plugins, and the v8..v10 interfaces have no finalize: stop the async
 * event threads before their code is unmapped (also runs at exit: each waits <= 100 ms). */
__attribute__((destructor)) static void ibUnload(void) {
  __atomic_store_n(&ibAsyncStop, 1, __ATOMIC_RELEASE);
  for (int i = 0; i < nIbAsyncs; i++)
    if (ibAsyncs[i].running) pthread_join(ibAsyncs[i].thread, NULL);
  nIbAsyncs = 0;
}
