/*
 * The group of an RMA connect (ext-net/include/railnet_net/rma.h: connect(handles[], nranks,
 * rank)): the ranks joined in a ring of TCP connections, each rank connected to the next and
 * accepted from the one before, through railnet's socket layer, with the all-gather and the
 * barrier the RMA setup needs (every rank's registration keys, QP numbers). Every wait is
 * bounded: the ring's forming by the socket layer's connect budget (NCCL_SOCKET_RETRY_CNT,
 * NCCL_SOCKET_RETRY_SLEEP_MSEC), each exchange by RAILNET_SOCKET_TIMEOUT_MSEC without
 * progress, and a rank that leaves fails the others' next exchange at once, with a WARN naming
 * it. Knows nothing of verbs: the RMA contexts sit above it.
 */
#ifndef RAILNET_NET_IB_RMA_GROUP_H
#define RAILNET_NET_IB_RMA_GROUP_H
#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include "core.h"
#include "socket.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RAILNET_RMA_HANDLE_MAGIC 0x7261696c524d4131ULL /* "railRMA1" */

/* What listen hands out (within NCCL_NET_HANDLE_MAXSIZE); NCCL all-gathers it. */
struct railnetRmaHandle {
  uint64_t magic;                /* RAILNET_RMA_HANDLE_MAGIC */
  union ncclSocketAddress addr;  /* the listener */
  uint64_t socketMagic;          /* its ncclSocket magic */
  uint64_t token;                /* its random token: a connector proves it was handed the handle */
};

/* What a connector sends first on the ring, to the next rank's listener (24 bytes). */
struct railnetRmaHello {
  uint64_t magic;  /* RAILNET_RMA_HANDLE_MAGIC */
  uint64_t token;  /* the listener's token, from its handle */
  int32_t rank, nranks;
};

struct railnetRmaListen {
  struct ncclSocket sock;
  uint64_t token;
};

struct railnetRmaGroup {
  int rank, nranks;
  struct ncclSocket next;  /* to rank + 1 */
  struct ncclSocket prev;  /* from rank - 1 */
  int broken, lost;        /* a ring connection closed: the neighbour whose did */
};

/* A listener on ifAddr (port chosen by the kernel); its handle into handle (zeroed first). */
ncclResult_t railnetRmaGroupListen(const union ncclSocketAddress* ifAddr, void* handle, struct railnetRmaListen** out);
void railnetRmaGroupListenClose(struct railnetRmaListen* l);
/* Collective: joins the ring of handles[0..nranks-1] (each from a railnetRmaGroupListen) as
 * rank. A connection that is not the previous rank's (a stranger, a rank of another group)
 * is dropped and the listener keeps waiting. */
ncclResult_t railnetRmaGroupConnect(void* handles[], int nranks, int rank, struct railnetRmaListen* l,
                                    struct railnetRmaGroup** out);
/* Collective: all[r * bytes ..] gets rank r's `bytes` from mine (the same bytes on every rank). */
ncclResult_t railnetRmaGroupAllGather(struct railnetRmaGroup* g, const void* mine, void* all, size_t bytes);
/* Collective: returns once every rank has called it. */
ncclResult_t railnetRmaGroupBarrier(struct railnetRmaGroup* g);
/* Whether the group broke, without blocking: a ring connection closed (its rank exited or
 * lost its host, or the break came around the ring). The first time, this rank ends its own
 * ring connections so that the break goes on to every rank. 1 and the neighbour whose
 * connection closed in *lost, else 0. */
int railnetRmaGroupBroken(struct railnetRmaGroup* g, int* lost);
/* This rank cannot go on with the group (a failed exchange, or no memory to take part): ends
 * its ring connections so that every rank's next exchange fails at once instead of waiting;
 * lost: the rank at fault if known, else -1 (then this rank's). Exchanges of a broken group
 * are refused. */
void railnetRmaGroupAbort(struct railnetRmaGroup* g, int lost);
void railnetRmaGroupClose(struct railnetRmaGroup* g);

#ifdef __cplusplus
}
#endif
static_assert(sizeof(struct railnetRmaHello) == 24, "the RMA ring's hello: version 1 layout");
static_assert(sizeof(struct railnetRmaHandle) <= 128, "the RMA handle must fit NCCL's handle");
#endif
