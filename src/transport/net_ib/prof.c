/* NCCL profiler events of the IB transport (prof.h). A comm keeps the events that run in a
 * small list, made at its first event; it holds at most one per request and QP in flight. */
#include "prof.h"
#include <stdlib.h>
#include "core.h"
#include "net_prof.h"

struct railnetIbProfEvent {
  void* eh;
  const struct ncclIbRequest* req;
  uint32_t qpNum;
};

struct railnetIbProfList {
  int n, cap;
  struct railnetIbProfEvent ev[];
};

ncclResult_t railnetIbProfStart(struct ncclIbNetCommBase* base, struct ncclIbRequest* req, void* phandle, int q,
                                int opcode, size_t length) {
  ncclProfilerCallback_t cb = base->prof;
  if (cb == NULL || phandle == NULL) return ncclSuccess;
  struct railnetIbProfList* l = base->profEvents;
  if (l == NULL || l->n == l->cap) {
    int cap = l ? 2 * l->cap : 64;
    struct railnetIbProfList* bigger = realloc(l, sizeof(*l) + (size_t)cap * sizeof(l->ev[0]));
    if (bigger == NULL) {
      WARN("NET/IB : out of memory for %d profiler events: the profiler misses this work request", cap);
      return ncclSuccess; /* the data path goes on without the event */
    }
    if (l == NULL) bigger->n = 0;
    bigger->cap = cap;
    base->profEvents = l = bigger;
  }
  struct ncclIbQp* qp = &base->qps[q];
  struct railnetIbProfEvent* e = &l->ev[l->n];
  railnetProfIbStart(cb, &e->eh, phandle, qp->devIndex, req->id % RAILNET_IB_FIFO_SLOTS, opcode, (int)qp->qp->qp_num,
                     length);
  if (e->eh == NULL) return ncclSuccess; /* the profiler does not follow it */
  e->req = req;
  e->qpNum = qp->qp->qp_num;
  l->n++;
  return ncclSuccess;
}

void railnetIbProfStop(struct ncclIbNetCommBase* base, struct ncclIbRequest* req, int64_t qpNum) {
  struct railnetIbProfList* l = base->profEvents;
  if (l == NULL) return;
  for (int i = 0; i < l->n;) {
    struct railnetIbProfEvent* e = &l->ev[i];
    if (e->req != req || (qpNum >= 0 && e->qpNum != (uint32_t)qpNum)) {
      i++;
      continue;
    }
    railnetProfStop(base->prof, &e->eh);
    l->ev[i] = l->ev[--l->n];
  }
}

void railnetIbProfFree(struct ncclIbNetCommBase* base) {
  struct railnetIbProfList* l = base->profEvents;
  if (l == NULL) return;
  for (int i = 0; i < l->n; i++) railnetProfStop(base->prof, &l->ev[i].eh);
  free(l);
  base->profEvents = NULL;
}
