/*
 * The eager buffers of a process (eager.h): a receiver's ring and a sender's bounce slots come
 * from one pool per set of devices (a vDevice's), registered once per chunk of
 * RAILNET_IB_EAGER_POOL_CHUNK buffers (rings and bounce slots in chunks of their own; the chunks
 * are the registered pool's, regpool.h), taken by a comm when its first small messages are about
 * to go eagerly and given back when it closes (after its QPs are gone). A comm that never sends
 * small messages takes none. At most RAILNET_IB_EAGER_POOL buffers per set of devices are in
 * use: beyond that a comm's messages keep the clear-to-send path (never an error). A chunk
 * whose buffers are all back is freed.
 */
#ifndef RAILNET_NET_IB_EAGER_POOL_H
#define RAILNET_NET_IB_EAGER_POOL_H
#include <stddef.h>
#include <stdint.h>
#include "../comm.h"
#include "../regpool.h"

#ifdef __cplusplus
extern "C" {
#endif

#define RAILNET_IB_EAGER_POOL_CHUNK 8    /* buffers registered together */
#define RAILNET_IB_EAGER_POOL_DEFAULT 512 /* RAILNET_IB_EAGER_POOL's default */

/* RAILNET_IB_EAGER_POOL: the most buffers in use per set of devices. */
int railnetIbEagerPoolMax(void);
/* Takes a buffer of bytes (rounded up to 64) registered on every device of base: remote 1, a
 * ring (local and remote write), 0: bounce slots (local write only; never in a ring's chunk);
 * *got 0 (and nothing taken) when the pool is at its bound. An error only when memory or a
 * registration failed (WARN said which). */
ncclResult_t railnetIbEagerPoolTake(struct ncclIbNetCommBase* base, size_t bytes, int remote,
                                    struct railnetIbRegBuf* out, int* got);
/* Gives a buffer back (none taken: nothing); its chunk is freed once all of its buffers are back. */
void railnetIbEagerPoolGive(struct railnetIbRegBuf* b);
/* What the pool holds now: buffers in use, chunks registered, and takes refused at the bound
 * since the process started. */
struct railnetIbEagerPoolStats {
  uint64_t inUse, chunks, refused;
};
void railnetIbEagerPoolGetStats(struct railnetIbEagerPoolStats* s);

#ifdef __cplusplus
}
#endif
#endif
