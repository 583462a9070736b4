/*
 * Port failover's hooks for the data path (failover.h): what p2p, post, completion, matching,
 * liveness and the eager files ask of the failover state or tell it. The failover struct is
 * read and written here and in the failover files only; without failover (base->fo NULL)
 * every hook is a no-op that says "nothing gone, nothing to do".
 */
#include <string.h>
#include "failover.h"
#include "../qp.h"
#include "../wrid.h"

int railnetIbFoSendOwnWc(struct ncclIbNetCommBase* base, int q, const struct ibv_wc* wc) {
  struct railnetIbFailover* fo = base->fo;
  if (fo == NULL) return 0;
  switch (railnetIbSendWrKind(wc->wr_id)) {
    case RAILNET_IB_SWR_FO_PROBE: { /* a path probe came back (probe.c) */
      int pd = railnetIbWrIdFoProbeDev(wc->wr_id);
      if (pd < NCCL_IB_MAX_DEVS_PER_NIC && fo->probeQps[pd] && fo->probeQps[pd]->qp_num == wc->qp_num)
        fo->probeInFlight[pd] = 0; /* (a late one of a probe QP retired by recovery changes nothing) */
      return 1;
    }
    case RAILNET_IB_SWR_FO_READ: /* the receiver's completion records are here (records.c) */
      if (q >= 0 && !railnetIbQpGone(base, q)) railnetIbQpRetired(&base->qps[q], 1);
      fo->readsOut--;
      if (fo->readState == RAILNET_IB_FO_READ_POSTED && railnetIbWrIdFoReadIs(wc->wr_id, fo->readRound))
        fo->readState = RAILNET_IB_FO_READ_DONE;
      return 1;
    case RAILNET_IB_SWR_FO_ALIVE: /* port recovery's check of a new QP */
      fo->aliveInFlight--;
      return 1;
    default:
      return 0;
  }
}

