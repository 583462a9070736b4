/*
 * The IB data path's progress step (progress.h).
 */
#include "progress.h"
#include "completion.h"
#include "eager/eager.h"
#include "resilience/failover.h"
#include "liveness.h"

ncclResult_t railnetIbProgress(struct ncclIbNetCommBase* base, struct ncclIbRequest* r, int* polled) {
  *polled = 0;
  NCCLCHECK(railnetIbDevicesCheck(base, "test"));
  if (base->fo) NCCLCHECK(railnetIbFoProgress(base));
  struct railnetIbEagerRecv* eager = base->isSend ? NULL : ((struct ncclIbRecvComm*)base)->eager;
  if (r->type == NCCL_NET_IB_REQ_RECV && eager) {
    NCCLCHECK(railnetIbEagerCheckLate((struct ncclIbRecvComm*)base, r));
    NCCLCHECK(railnetIbEagerProgress((struct ncclIbRecvComm*)base));
  }
  for (int d = 0; d < base->vProps.ndevs; d++) {
    /* with failover every device's CQ: the receiver's completions may come on any, and a
     * gone QP's flushes are taken in; so while an eager comm closes (a queued irecv's
     * messages and the close come on any) */
    if (r->events[d] == 0 && base->fo == NULL && !railnetIbEagerClosing(eager)) continue;
    int n = 0;
    NCCLCHECK(railnetIbPollDev(base, d, &n));
    *polled += n;
  }
  return ncclSuccess;
}
