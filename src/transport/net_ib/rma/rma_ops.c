/*
 * The RMA operations (rma.h): a put is an RDMA write into the target rank's window, a put
 * with signal the write and then an atomic fetch-and-add on the signal word through the same
 * QP (the target sees the signal only after the data), a get an RDMA read, a flush of GPU
 * memory a read through the QP to this rank itself. Each request signals its last work
 * request (wr_id: the request, bit 0 set on that one); test() polls the context's CQs.
 */
#include <inttypes.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include "rma.h"
#include "debug.h"
#include "ibvwrap.h"
#include "../qp.h"
#include "../wrid.h"

#define RMA_MAX_WR_BYTES (1ull << 30) /* a longer transfer goes in several writes or reads */

static ncclResult_t contextOf(struct railnetRmaCtx* x, int context, struct railnetRmaContext** out) {
  if (x == NULL) return ncclInvalidArgument;
  if (context < 0 || context >= x->nContexts) {
    WARN("NET/IB RMA : context %d: the set has %d", context, x->nContexts);
    return ncclInvalidArgument;
  }
  *out = &x->contexts[context];
  return ncclSuccess;
}

static ncclResult_t peerOf(struct railnetRmaCtx* x, struct railnetRmaContext* c, uint32_t rank,
                           struct railnetRmaPeer** out) {
  if (rank >= (uint32_t)x->coll->nranks || c->peers[rank].qp == NULL) {
    WARN("NET/IB RMA : rank %u is %s (group of %d ranks, rank stride %d)", rank,
         rank >= (uint32_t)x->coll->nranks ? "not in the group" : "not connected to this rank", x->coll->nranks,
         x->rankStride);
    return ncclInvalidArgument;
  }
  *out = &c->peers[rank];
  return ncclSuccess;
}

/* off + size within the window (of `rank`'s registration when remote, else this rank's). */
static ncclResult_t checkWindow(const char* what, const struct railnetRmaMr* m, struct railnetRmaColl* cc, int remote,
                                uint32_t rank, uint64_t off, size_t size) {
  if (m == NULL || !railnetRmaMrLive(cc, m)) {
    WARN("NET/IB RMA : %s: %s", what,
         m == NULL ? "no registration" : "not a live registration of this group (deregistered, or another group's)");
    return ncclInvalidArgument;
  }
  uint64_t have = remote ? m->remote[rank].size : m->size;
  if (off > have || size > have - off) {
    WARN("NET/IB RMA : %s: offset %" PRIu64 " + %zu bytes is outside the %s window (%" PRIu64 " bytes)%s", what, off,
         size, remote ? "target rank's" : "local", have, remote && have == 0 ? ": its registration failed" : "");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* Work request i of n: a write or a read of len bytes between local and remote. */
static void fillRdma(struct ibv_send_wr* wr, struct ibv_sge* sge, enum ibv_wr_opcode op, uint64_t local, uint32_t lkey,
                     uint64_t remote, uint32_t rkey, uint64_t len) {
  memset(wr, 0, sizeof(*wr));
  sge->addr = local, sge->length = (uint32_t)len, sge->lkey = lkey;
  wr->opcode = op;
  wr->sg_list = sge;
  wr->num_sge = len ? 1 : 0;
  wr->wr.rdma.remote_addr = remote;
  wr->wr.rdma.rkey = rkey;
}

/* Polls context c's CQs once (the caller holds c->lock): the requests they complete. */
static void pollLocked(struct railnetRmaCtx* x, struct railnetRmaContext* c) {
  for (int d = 0; d < c->base->vProps.ndevs; d++) {
    struct ibv_wc wcs[16];
    int n = 0;
    if (wrap_ibv_poll_cq(c->base->devs[d].cq, 16, wcs, &n) != ncclSuccess) n = 0;
    for (int i = 0; i < n; i++) {
      struct railnetRmaRequest* r = (struct railnetRmaRequest*)railnetIbWrIdRmaReq(wcs[i].wr_id);
      if (r == NULL) continue;
      if (wcs[i].status != IBV_WC_SUCCESS && r->status == 0) {
        r->status = (int)wcs[i].status;
        r->vendorErr = wcs[i].vendor_err;
        x->failed = 1;
      }
      if (railnetIbWrIdRmaLast(wcs[i].wr_id)) { /* its last work request: every one before it is done too */
        r->peer->posted -= r->nwr;
        c->inFlight[r->peer->devIndex] -= r->nwr;
        r->pending = 0;
      }
    }
  }
}

static void checkGroup(struct railnetRmaCtx* x);

/* A new operation on a broken group is refused at once (the group is checked first, at most
 * every 100 ms): 1 after a WARN naming the rank, else 0. */
static int groupLost(struct railnetRmaCtx* x, const char* what, uint32_t rank) {
  checkGroup(x);
  int lost = __atomic_load_n(&x->lost, __ATOMIC_ACQUIRE);
  if (lost < 0) return 0;
  WARN("NET/IB RMA : rank %d: %s to rank %u refused: the group broke at rank %d (its connection closed)",
       x->coll->rank, what, rank, lost);
  return 1;
}

/* Posts n work requests to peer's QP for request r, the last one signaled. Waits for room in
 * the QP's send queue and its device's CQ polling the CQs (the lock let go between polls), as long as the group
 * holds and at most RAILNET_RMA_POST_WAIT_MS. A post that fails part way moves the QP to the
 * error state: what went completes flushed into r, which stays (an orphan) until destroy. */
#define RAILNET_RMA_POST_WAIT_MS 60000
static ncclResult_t post(struct railnetRmaCtx* x, struct railnetRmaContext* c, struct railnetRmaPeer* peer,
                         struct railnetRmaRequest* r, struct ibv_send_wr* wrs, int n) {
  for (int i = 0; i < n; i++) {
    wrs[i].wr_id = railnetIbWrIdRma(r, i == n - 1);
    wrs[i].send_flags |= i == n - 1 ? IBV_SEND_SIGNALED : 0;
    wrs[i].next = i + 1 < n ? &wrs[i + 1] : NULL;
  }
  r->peer = peer;
  r->nwr = n;
  r->pending = 1;
  uint64_t start = railnetClockNs();
  for (;;) {
    pthread_mutex_lock(&c->lock);
    pollLocked(x, c);
    /* room in the QP's send queue and in its device's CQ (holding the lock) */
    if (peer->posted + n <= peer->depth && c->inFlight[peer->devIndex] + n <= c->cqRoom) break;
    pthread_mutex_unlock(&c->lock);
    checkGroup(x);
    int lost = __atomic_load_n(&x->lost, __ATOMIC_ACQUIRE);
    if (lost >= 0 || railnetClockNs() - start > RAILNET_RMA_POST_WAIT_MS * 1000000ull) {
      WARN("NET/IB RMA : rank %d: the %s towards rank %d stayed full %s", x->coll->rank,
           peer->posted + n > peer->depth ? "send queue" : "device's completion queue (shared by its ranks)", r->rank,
           lost >= 0 ? "and the group broke" : "for 60 s: its operations do not complete (check the ranks' logs)");
      free(r);
      return ncclRemoteError;
    }
    sched_yield();
  }
  struct ibv_send_wr* bad = NULL;
  ncclResult_t res = wrap_ibv_post_send(peer->qp, wrs, &bad);
  if (res == ncclSuccess) peer->posted += n, c->inFlight[peer->devIndex] += n;
  else if (bad != NULL && bad != wrs) { /* some went: they must complete into r, so r stays */
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_ERR;
    (void)wrap_ibv_modify_qp(peer->qp, &a, IBV_QP_STATE);
    r->next = c->orphans;
    c->orphans = r;
    /* what went completes (flushed) into the device's CQ, uncounted: its room is given up */
    c->cqRoom -= (int)(bad - wrs);
    WARN("NET/IB RMA : rank %d: a %s towards rank %d was posted in part; its QP is closed (error state)",
         x->coll->rank, r->what, r->rank);
    res = ncclRemoteError;
  }
  pthread_mutex_unlock(&c->lock);
  if (res != ncclSuccess && (bad == NULL || bad == wrs)) free(r);
  return res;
}

static ncclResult_t newRequest(struct railnetRmaCtx* x, struct railnetRmaContext* c, uint32_t rank, const char* what,
                               struct railnetRmaRequest** out) {
  NCCLCHECK(RAILNET_CALLOC(out, 1, "an RMA request"));
  (*out)->ctx = x;
  (*out)->context = c;
  (*out)->rank = (int)rank;
  (*out)->what = what;
  return ncclSuccess;
}

/* The data of a put or get as work requests (several for more than RMA_MAX_WR_BYTES). */
static int rdmaWrs(struct ibv_send_wr* wrs, struct ibv_sge* sges, enum ibv_wr_opcode op, uint64_t local,
                   uint32_t lkey, uint64_t remote, uint32_t rkey, size_t size) {
  int n = 0;
  for (uint64_t done = 0; done < size; n++) {
    uint64_t len = size - done < RMA_MAX_WR_BYTES ? size - done : RMA_MAX_WR_BYTES;
    fillRdma(&wrs[n], &sges[n], op, local + done, lkey, remote + done, rkey, len);
    done += len;
  }
  return n;
}

static ncclResult_t rdmaOp(struct railnetRmaCtx* x, int context, const char* what, enum ibv_wr_opcode op,
                           uint64_t localOff, struct railnetRmaMr* local, uint64_t remoteOff, struct railnetRmaMr* remote,
                           size_t size, uint32_t rank, void** request) {
  struct railnetRmaContext* c;
  struct railnetRmaPeer* peer;
  if (request == NULL) return ncclInvalidArgument;
  *request = NULL;
  NCCLCHECK(contextOf(x, context, &c));
  NCCLCHECK(peerOf(x, c, rank, &peer));
  if (groupLost(x, what, rank)) return ncclRemoteError;
  if (size > (RAILNET_RMA_MAX_WRS - 1) * RMA_MAX_WR_BYTES) {
    WARN("NET/IB RMA : %s of %zu bytes: at most %llu in one operation", what, size,
         (unsigned long long)((RAILNET_RMA_MAX_WRS - 1) * RMA_MAX_WR_BYTES));
    return ncclInvalidArgument;
  }
  NCCLCHECK(checkWindow(what, local, x->coll, 0, rank, localOff, size));
  NCCLCHECK(checkWindow(what, remote, x->coll, 1, rank, remoteOff, size));
  struct railnetRmaRequest* r;
  NCCLCHECK(newRequest(x, c, rank, what, &r));
  struct ibv_send_wr wrs[RAILNET_RMA_MAX_WRS];
  struct ibv_sge sges[RAILNET_RMA_MAX_WRS];
  int n = rdmaWrs(wrs, sges, op, (uint64_t)(uintptr_t)(local->base + localOff), local->mrs[peer->devIndex] ?
                  local->mrs[peer->devIndex]->lkey : 0, remote->remote[rank].base + remoteOff,
                  remote->remote[rank].rkeys[peer->remDevIndex], size);
  if (n == 0) { /* nothing to move: done at once */
    *request = r;
    return ncclSuccess;
  }
  NCCLCHECK(post(x, c, peer, r, wrs, n)); /* r is post's on a failure */
  *request = r;
  return ncclSuccess;
}

ncclResult_t railnetRmaIput(void* rmaCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
                            uint64_t dstOff, void* dstMhandle, uint32_t rank, void** request) {
  return rdmaOp((struct railnetRmaCtx*)rmaCtx, context, "put", IBV_WR_RDMA_WRITE, srcOff,
                (struct railnetRmaMr*)srcMhandle, dstOff, (struct railnetRmaMr*)dstMhandle, size, rank, request);
}

ncclResult_t railnetRmaIget(void* rmaCtx, int context, uint64_t remoteOff, void* remoteMhandle, size_t size,
                            uint64_t localOff, void* localMhandle, uint32_t rank, void** request) {
  return rdmaOp((struct railnetRmaCtx*)rmaCtx, context, "get", IBV_WR_RDMA_READ, localOff,
                (struct railnetRmaMr*)localMhandle, remoteOff, (struct railnetRmaMr*)remoteMhandle, size, rank, request);
}

ncclResult_t railnetRmaIputSignal(void* rmaCtx, int context, uint64_t srcOff, void* srcMhandle, size_t size,
                                  uint64_t dstOff, void* dstMhandle, uint32_t rank, uint64_t signalOff,
                                  void* signalMhandle, uint64_t signalValue, uint32_t signalOp, bool isStrongSignal,
                                  void** request) {
  (void)isStrongSignal; /* every signal is strong: it goes after the data on the same QP */
  struct railnetRmaCtx* x = (struct railnetRmaCtx*)rmaCtx;
  struct railnetRmaMr *src = (struct railnetRmaMr*)srcMhandle, *dst = (struct railnetRmaMr*)dstMhandle,
                      *sig = (struct railnetRmaMr*)signalMhandle;
  struct railnetRmaContext* c;
  struct railnetRmaPeer* peer;
  if (request == NULL) return ncclInvalidArgument;
  *request = NULL;
  NCCLCHECK(contextOf(x, context, &c));
  NCCLCHECK(peerOf(x, c, rank, &peer));
  if (groupLost(x, "put with signal", rank)) return ncclRemoteError;
  if (signalOp != NCCL_NET_SIGNAL_OP_INC && signalOp != NCCL_NET_SIGNAL_OP_ADD) {
    WARN("NET/IB RMA : put with signal: signal operation %u; railnet knows NCCL_NET_SIGNAL_OP_INC (%d) and _ADD (%d)",
         signalOp, NCCL_NET_SIGNAL_OP_INC, NCCL_NET_SIGNAL_OP_ADD);
    return ncclInvalidArgument;
  }
  if (size > (RAILNET_RMA_MAX_WRS - 1) * RMA_MAX_WR_BYTES) {
    WARN("NET/IB RMA : put with signal of %zu bytes: too large for one operation", size);
    return ncclInvalidArgument;
  }
  if (size > 0) {
    NCCLCHECK(checkWindow("put with signal", src, x->coll, 0, rank, srcOff, size));
    NCCLCHECK(checkWindow("put with signal", dst, x->coll, 1, rank, dstOff, size));
  }
  NCCLCHECK(checkWindow("signal", sig, x->coll, 1, rank, signalOff, sizeof(uint64_t)));
  uint64_t sigAddr = sig->remote[rank].base + signalOff;
  if (sigAddr % 8) {
    WARN("NET/IB RMA : signal at offset %" PRIu64 " of rank %u's window: not 8-byte aligned", signalOff, rank);
    return ncclInvalidArgument;
  }
  struct railnetRmaRequest* r;
  NCCLCHECK(newRequest(x, c, rank, "put with signal", &r));
  struct ibv_send_wr wrs[RAILNET_RMA_MAX_WRS];
  struct ibv_sge sges[RAILNET_RMA_MAX_WRS];
  int n = size == 0 ? 0
                    : rdmaWrs(wrs, sges, IBV_WR_RDMA_WRITE, (uint64_t)(uintptr_t)(src->base + srcOff),
                              src->mrs[peer->devIndex]->lkey, dst->remote[rank].base + dstOff,
                              dst->remote[rank].rkeys[peer->remDevIndex], size);
  struct ibv_send_wr* a = &wrs[n];
  memset(a, 0, sizeof(*a));
  sges[n].addr = (uint64_t)(uintptr_t)c->scratch;
  sges[n].length = sizeof(uint64_t);
  sges[n].lkey = c->scratchMrs[peer->devIndex]->lkey;
  a->opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  a->sg_list = &sges[n];
  a->num_sge = 1;
  a->wr.atomic.remote_addr = sigAddr;
  a->wr.atomic.rkey = sig->remote[rank].rkeys[peer->remDevIndex];
  a->wr.atomic.compare_add = signalOp == NCCL_NET_SIGNAL_OP_INC ? 1 : signalValue;
  NCCLCHECK(post(x, c, peer, r, wrs, n + 1)); /* r is post's on a failure */
  *request = r;
  return ncclSuccess;
}

ncclResult_t railnetRmaIflush(void* rmaCtx, int context, void* mhandle, uint32_t rank, void** request) {
  struct railnetRmaCtx* x = (struct railnetRmaCtx*)rmaCtx;
  struct railnetRmaMr* m = (struct railnetRmaMr*)mhandle;
  if (request == NULL) return ncclInvalidArgument;
  *request = NULL;
  struct railnetRmaContext* c;
  struct railnetRmaPeer* from;
  NCCLCHECK(contextOf(x, context, &c));
  NCCLCHECK(checkWindow("flush", m, x->coll, 0, 0, 0, 0));
  if (m->type == NCCL_PTR_HOST || m->size == 0) return ncclSuccess; /* the CPU sees what the NIC wrote */
  NCCLCHECK(peerOf(x, c, rank, &from));
  /* GPU memory: rank's writes came in through the device of this rank's QP to it; a read
   * through that device's QP to itself is placed after them, so the GPU's view is complete
   * once it is back */
  int d = from->devIndex;
  pthread_mutex_lock(&c->lock);
  ncclResult_t res = ncclSuccess;
  if (c->flush[d].qp == NULL) {
    res = railnetIbQpSelf(c->base, d, x->tc, x->sl, &c->flush[d].qp);
    c->flush[d].devIndex = c->flush[d].remDevIndex = d;
    c->flush[d].depth = NET_IB_RECV_REQUESTS; /* what railnetIbQpSelf asks for */
  }
  pthread_mutex_unlock(&c->lock);
  NCCLCHECK(res);
  struct railnetRmaRequest* r;
  NCCLCHECK(newRequest(x, c, rank, "flush", &r));
  struct ibv_send_wr wr;
  struct ibv_sge sge;
  fillRdma(&wr, &sge, IBV_WR_RDMA_READ, (uint64_t)(uintptr_t)c->scratch, c->scratchMrs[d]->lkey,
           (uint64_t)(uintptr_t)m->base, m->mrs[d]->rkey, 1);
  NCCLCHECK(post(x, c, &c->flush[d], r, &wr, 1)); /* r is post's on a failure */
  *request = r;
  return ncclSuccess;
}

/* While requests wait (at most every 100 ms): did the group break? Then every QP of every
 * context goes to the error state, so that what is posted completes (flushed) and fails,
 * instead of retrying for ever towards a rank that is gone (soft-RoCE retries a QP with
 * NCCL_IB_RETRY_CNT=7 without end). */
static void checkGroup(struct railnetRmaCtx* x) {
  uint64_t now = railnetClockNs(), last = __atomic_load_n(&x->lastCheckNs, __ATOMIC_RELAXED);
  if (__atomic_load_n(&x->lost, __ATOMIC_ACQUIRE) >= 0 || now - last < 100000000ull) return;
  /* one thread looks; the others go on */
  if (!__atomic_compare_exchange_n(&x->lastCheckNs, &last, now, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) return;
  int lost = -1, none = -1;
  if (!railnetRmaGroupBroken(x->coll->group, &lost)) return;
  if (!__atomic_compare_exchange_n(&x->lost, &none, lost, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return;
  x->failed = 1;
  WARN("NET/IB RMA : rank %d: the group broke: the connection to rank %d closed (that rank, or one beyond it on the "
       "ring, exited or lost its host); every operation of the group fails now: check that rank's log",
       x->coll->rank, lost);
  for (int ci = 0; ci < x->nContexts; ci++) {
    struct railnetRmaContext* c = &x->contexts[ci];
    pthread_mutex_lock(&c->lock);
    for (int p = 0; p < x->coll->nranks; p++) {
      if (c->peers[p].qp == NULL) continue;
      struct ibv_qp_attr a;
      memset(&a, 0, sizeof(a));
      a.qp_state = IBV_QPS_ERR;
      (void)wrap_ibv_modify_qp(c->peers[p].qp, &a, IBV_QP_STATE);
    }
    pthread_mutex_unlock(&c->lock);
  }
}

ncclResult_t railnetRmaTest(void* collComm, void* request, int* done) {
  struct railnetRmaRequest* r = (struct railnetRmaRequest*)request;
  if (r == NULL || done == NULL) return ncclInvalidArgument;
  struct railnetRmaContext* c = r->context;
  struct railnetRmaColl* cc = (struct railnetRmaColl*)collComm;
  *done = 0;
  pthread_mutex_lock(&c->lock); /* pending and status are written by whichever thread polls */
  if (r->pending) pollLocked(r->ctx, c);
  int pending = r->pending;
  pthread_mutex_unlock(&c->lock);
  if (pending) {
    checkGroup(r->ctx);
    return ncclSuccess;
  }
  *done = 1;
  ncclResult_t res = ncclSuccess;
  int lost = __atomic_load_n(&r->ctx->lost, __ATOMIC_ACQUIRE);
  if (r->status && lost >= 0) {
    WARN("NET/IB RMA : rank %d: %s to rank %d failed: the group broke at rank %d (its connection closed)",
         cc ? cc->rank : -1, r->what, r->rank, lost);
    res = ncclRemoteError;
  } else if (r->status) {
    WARN("NET/IB RMA : rank %d: %s to rank %d failed: %s (status %d, vendor error 0x%x): rank %d is gone or "
         "unreachable (a retry count exceeded after NCCL_IB_TIMEOUT x NCCL_IB_RETRY_CNT), or the window was "
         "deregistered; check that rank's log",
         cc ? cc->rank : -1, r->what, r->rank, wrap_ibv_wc_status_str((enum ibv_wc_status)r->status), r->status,
         r->vendorErr, r->rank);
    res = ncclRemoteError;
  }
  free(r);
  return res;
}

ncclResult_t railnetRmaProgress(void* rmaCtx) {
  struct railnetRmaCtx* x = (struct railnetRmaCtx*)rmaCtx;
  if (x == NULL) return ncclInvalidArgument;
  for (int ci = 0; ci < x->nContexts; ci++) {
    struct railnetRmaContext* c = &x->contexts[ci];
    pthread_mutex_lock(&c->lock);
    pollLocked(x, c);
    pthread_mutex_unlock(&c->lock);
  }
  checkGroup(x);
  return ncclSuccess;
}

ncclResult_t railnetRmaQueryLastError(void* rmaCtx, bool* hasError) {
  struct railnetRmaCtx* x = (struct railnetRmaCtx*)rmaCtx;
  if (x == NULL || hasError == NULL) return ncclInvalidArgument;
  *hasError = x->failed != 0;
  return ncclSuccess;
}
