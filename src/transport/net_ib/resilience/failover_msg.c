/*
 * Port failover's messages over the comm's ncclSocket (failover.h, wire.h): sending one,
 * and receiving what the peer sent without blocking.
 */
#include <string.h>
#include "failover.h"
#include "../qp.h"
#include "../comm.h"
#include "debug.h"
#include "socket.h"

#define SEND_TIMEOUT_NS 5000000000ull /* a message of ~600 bytes leaves within 5 s */

ncclResult_t railnetIbFoFail(struct ncclIbNetCommBase* base) {
  railnetIbCommFail(base);
  return ncclRemoteError;
}

static void putDead(struct ncclIbNetCommBase* base, struct railnetIbFoMsg* m) {
  for (int q = 0; q < base->nqps; q++)
    if (railnetIbQpGone(base, q)) m->deadQps[q / 64] |= 1ull << (q % 64);
}

ncclResult_t railnetIbFoSend(struct ncclIbNetCommBase* base, struct railnetIbFoMsg* m, const char* what) {
  char peer[SOCKET_NAME_MAXLEN];
  m->magic = RAILNET_IB_FO_MAGIC;
  if (m->type <= RAILNET_IB_FO_STATE) putDead(base, m);
  int offset = 0, closed = 0;
  uint64_t deadline = railnetClockNs() + SEND_TIMEOUT_NS;
  while (offset < (int)sizeof(*m) && !base->sockClosed) {
    ncclResult_t r = ncclSocketProgress(NCCL_SOCKET_SEND, &base->sock, m, (int)sizeof(*m), &offset, &closed);
    if (r != ncclSuccess || closed) base->sockClosed = 1;
    if (railnetClockNs() > deadline) break;
  }
  if (offset == (int)sizeof(*m)) return ncclSuccess;
  WARN("NET/IB : port failover: could not send the %s to %s over the comm's socket (%s): the peer process died or "
       "closed its comm, or the network of NCCL_SOCKET_IFNAME is down too; the comm fails",
       what, railnetIbPeerStr(base, peer), base->sockClosed ? "closed" : "timed out");
  return railnetIbFoFail(base);
}

ncclResult_t railnetIbFoLook(struct ncclIbNetCommBase* base, int* got) {
  struct railnetIbFailover* fo = base->fo;
  *got = 0;
  if (base->sockClosed) return ncclSuccess;
  int closed = 0;
  ncclResult_t r = ncclSocketProgress(NCCL_SOCKET_RECV, &base->sock, &fo->in, (int)sizeof(fo->in), &fo->inOffset,
                                      &closed);
  if (r != ncclSuccess || closed) {
    base->sockClosed = 1; /* the peer closed its comm: nothing more will come */
    return ncclSuccess;
  }
  if (fo->inOffset < (int)sizeof(fo->in)) return ncclSuccess;
  fo->inOffset = 0;
  char peer[SOCKET_NAME_MAXLEN];
  if (railnetIbCheckFoMsg(&fo->in, base->nqps, railnetIbPeerStr(base, peer)) != ncclSuccess) return railnetIbFoFail(base);
  *got = 1;
  return ncclSuccess;
}

