/*
 * The clear-to-send data path's per-slot chunk state (slots.c): for each fifo slot of a send
 * comm, the clear-to-send entries its writes went to, the QP each chunk went on, the chunks
 * with no completion yet and those to be written again; for a receive comm, the chunks of
 * each slot's receive not arrived. Kept only when a feature asks for it (port failover,
 * failover_state.c, which replays a gone QP's chunks from it); without it every function
 * here is a no-op that says "counts, nothing missing".
 */
#ifndef RAILNET_NET_IB_SLOTS_H
#define RAILNET_NET_IB_SLOTS_H
#include <stdint.h>
#include "comm.h"
#include "wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Keeps the per-slot state for base from now on / frees it. */
ncclResult_t railnetIbSlotsSetup(struct ncclIbNetCommBase* base);
void railnetIbSlotsFree(struct ncclIbNetCommBase* base);

/* ---- sender */
/* The n clear-to-send entries slot's writes go to: the kept copy (a write again goes to the
 * same entries), or cts itself when nothing is kept. */
const struct ncclIbSendFifo* railnetIbSlotKeepCts(struct ncclIbNetCommBase* base, int slot,
                                                  const struct ncclIbSendFifo* cts, int n);
/* ... the kept entries of slot (NULL: none). */
const struct ncclIbSendFifo* railnetIbSlotCts(struct ncclIbNetCommBase* base, int slot);
/* Chunk of slot was posted on QP q (a new message: nothing of an earlier one is written again). */
void railnetIbSlotChunkPosted(struct ncclIbNetCommBase* base, int slot, int chunk, int q);
/* Chunk of slot completed on QP q: 1 when it counts (the first time, on a QP not gone), 0 when
 * it was settled already (written again, or the receiver had it). */
int railnetIbSlotChunkCompleted(struct ncclIbNetCommBase* base, int q, int slot, int chunk);
/* The chunks of slot with no completion yet, and the QP chunk went on last. */
uint64_t railnetIbSlotPending(const struct ncclIbNetCommBase* base, int slot);
int railnetIbSlotChunkQp(const struct ncclIbNetCommBase* base, int slot, int chunk);
/* Chunk of slot goes again, on QP q (queued: railnetIbSlotToWrite), or is settled (the
 * receiver has it: no completion is waited for). */
void railnetIbSlotWriteAgain(struct ncclIbNetCommBase* base, int slot, int chunk, int q);
void railnetIbSlotSettled(struct ncclIbNetCommBase* base, int slot, int chunk);
/* The chunks of slot queued to be written again; those written again and not completed. */
uint64_t railnetIbSlotToWrite(const struct ncclIbNetCommBase* base, int slot);
uint64_t railnetIbSlotRewriting(const struct ncclIbNetCommBase* base, int slot);
/* Chunk of slot was written again (posted). */
void railnetIbSlotRewritten(struct ncclIbNetCommBase* base, int slot, int chunk);

/* ---- receiver */
/* A rewritten clear-to-send entry was posted (+1) / completed or lost (-1); how many are out. */
void railnetIbSlotCtsRewrite(struct ncclIbNetCommBase* base, int delta);
int railnetIbSlotCtsRewrites(const struct ncclIbNetCommBase* base);
/* Slot's receive waits for this many chunks (0: none, it came eagerly). */
void railnetIbSlotRecvExpect(struct ncclIbNetCommBase* base, int slot, int chunks);
/* Chunk of slot arrived: 1 the first time, 0 for a repeat of one counted. */
int railnetIbSlotRecvArrived(struct ncclIbNetCommBase* base, int slot, int chunk);
/* The chunks of slot's receive not arrived. */
uint64_t railnetIbSlotRecvMissing(const struct ncclIbNetCommBase* base, int slot);

#ifdef __cplusplus
}
#endif
#endif
