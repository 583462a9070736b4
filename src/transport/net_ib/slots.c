/*
 * The clear-to-send data path's per-slot chunk state (slots.h).
 */
#include <stdlib.h>
#include <string.h>
#include "slots.h"
#include "qp.h"

struct railnetIbSlots {
  /* sender */
  struct ncclIbSendFifo cts[RAILNET_IB_FIFO_SLOTS][NCCL_NET_IB_MAX_RECVS];
  uint8_t chunkQp[RAILNET_IB_FIFO_SLOTS][RAILNET_IB_FO_MAX_CHUNKS];
  uint64_t pending[RAILNET_IB_FIFO_SLOTS];
  uint64_t toWrite[RAILNET_IB_FIFO_SLOTS];
  uint64_t rewriting[RAILNET_IB_FIFO_SLOTS];
  /* receiver */
  uint64_t missing[RAILNET_IB_FIFO_SLOTS];
  int ctsRewrites;                     /* rewritten clear-to-send entries posted, not completed */
};

ncclResult_t railnetIbSlotsSetup(struct ncclIbNetCommBase* base) {
  if (base->slots != NULL) return ncclSuccess;
  return RAILNET_CALLOC(&base->slots, 1, "IB per-slot chunk state");
}

void railnetIbSlotsFree(struct ncclIbNetCommBase* base) {
  free(base->slots);
  base->slots = NULL;
}

const struct ncclIbSendFifo* railnetIbSlotKeepCts(struct ncclIbNetCommBase* base, int slot,
                                                  const struct ncclIbSendFifo* cts, int n) {
  struct railnetIbSlots* sl = base->slots;
  if (sl == NULL) return cts;
  memcpy(sl->cts[slot], cts, (size_t)n * sizeof(cts[0]));
  return sl->cts[slot];
}

const struct ncclIbSendFifo* railnetIbSlotCts(struct ncclIbNetCommBase* base, int slot) {
  return base->slots ? base->slots->cts[slot] : NULL;
}

void railnetIbSlotChunkPosted(struct ncclIbNetCommBase* base, int slot, int chunk, int q) {
  struct railnetIbSlots* sl = base->slots;
  if (sl == NULL) return;
  uint64_t bit = 1ull << chunk;
  sl->chunkQp[slot][chunk] = (uint8_t)q;
  sl->pending[slot] |= bit;
  sl->rewriting[slot] &= ~bit;
  sl->toWrite[slot] &= ~bit;
}

int railnetIbSlotChunkCompleted(struct ncclIbNetCommBase* base, int q, int slot, int chunk) {
  struct railnetIbSlots* sl = base->slots;
  if (sl == NULL) return 1;
  /* a gone QP's completions are settled by the failover exchange; a chunk already settled (it
   * was written again, or the receiver had it) is not counted twice */
  if (q < 0 || railnetIbQpGone(base, q) || slot >= RAILNET_IB_FIFO_SLOTS || chunk >= RAILNET_IB_FO_MAX_CHUNKS) return 0;
  uint64_t bit = 1ull << chunk;
  if (!(sl->pending[slot] & bit)) return 0;
  sl->pending[slot] &= ~bit;
  sl->rewriting[slot] &= ~bit; /* a paced write again is done: the next may go */
  return 1;
}

uint64_t railnetIbSlotPending(const struct ncclIbNetCommBase* base, int slot) {
  return base->slots ? base->slots->pending[slot] : 0;
}

int railnetIbSlotChunkQp(const struct ncclIbNetCommBase* base, int slot, int chunk) {
  return base->slots ? base->slots->chunkQp[slot][chunk] : -1;
}

void railnetIbSlotWriteAgain(struct ncclIbNetCommBase* base, int slot, int chunk, int q) {
  struct railnetIbSlots* sl = base->slots;
  if (sl == NULL) return;
  uint64_t bit = 1ull << chunk;
  sl->chunkQp[slot][chunk] = (uint8_t)q;
  sl->toWrite[slot] |= bit;
  sl->rewriting[slot] &= ~bit; /* one lost with its QP no longer counts as in flight */
}

void railnetIbSlotSettled(struct ncclIbNetCommBase* base, int slot, int chunk) {
  struct railnetIbSlots* sl = base->slots;
  if (sl == NULL) return;
  sl->pending[slot] &= ~(1ull << chunk);
  sl->toWrite[slot] &= ~(1ull << chunk); /* one still queued is not needed any more */
}

uint64_t railnetIbSlotToWrite(const struct ncclIbNetCommBase* base, int slot) {
  return base->slots ? base->slots->toWrite[slot] : 0;
}

uint64_t railnetIbSlotRewriting(const struct ncclIbNetCommBase* base, int slot) {
  return base->slots ? base->slots->rewriting[slot] & base->slots->pending[slot] : 0;
}

void railnetIbSlotRewritten(struct ncclIbNetCommBase* base, int slot, int chunk) {
  struct railnetIbSlots* sl = base->slots;
  if (sl == NULL) return;
  sl->toWrite[slot] &= ~(1ull << chunk);
  sl->rewriting[slot] |= 1ull << chunk;
}

void railnetIbSlotRecvExpect(struct ncclIbNetCommBase* base, int slot, int chunks) {
  if (base->slots == NULL) return;
  base->slots->missing[slot] = chunks ? ~0ull >> (64 - chunks) : 0;
}

int railnetIbSlotRecvArrived(struct ncclIbNetCommBase* base, int slot, int chunk) {
  struct railnetIbSlots* sl = base->slots;
  if (sl == NULL) return 1;
  if (!(sl->missing[slot] & (1ull << chunk))) return 0; /* arrived before */
  sl->missing[slot] &= ~(1ull << chunk);
  return 1;
}

uint64_t railnetIbSlotRecvMissing(const struct ncclIbNetCommBase* base, int slot) {
  return base->slots ? base->slots->missing[slot] : 0;
}

void railnetIbSlotCtsRewrite(struct ncclIbNetCommBase* base, int delta) {
  if (base->slots) base->slots->ctsRewrites += delta;
}

int railnetIbSlotCtsRewrites(const struct ncclIbNetCommBase* base) { return base->slots ? base->slots->ctsRewrites : 0; }
