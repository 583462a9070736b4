/*
 * Registered memory shared by the IB comms of a process: blocks of one size and one access, in
 * chunks of up to 32 blocks, each chunk mapped and registered once on every device of a set (a
 * vDevice's) through the devices' shared PDs, and freed once all of its blocks are back. Below
 * both of its users: the eager pool (eager/eager_pool.h), with a bound, and the comms' local
 * control blocks (setup.c), so that setting up a comm registers no memory of its own there.
 */
#ifndef RAILNET_NET_IB_REGPOOL_H
#define RAILNET_NET_IB_REGPOOL_H
#include <infiniband/verbs.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include "core.h"
#include "wire.h"

#ifdef __cplusplus
extern "C" {
#endif

struct railnetIbRegChunk;
/* A block: its bytes and its registration on each device of the set, in the set's order. */
struct railnetIbRegBuf {
  uint8_t* buf;
  struct ibv_mr* mrs[NCCL_IB_MAX_DEVS_PER_NIC];
  struct railnetIbRegChunk* chunk;     /* NULL: none taken */
  int index;
};

/* A set of devices (ncclIbDevs indices), the one of a comm's vDevice. */
struct railnetIbRegDevs {
  int ndevs;
  int ibDevN[NCCL_IB_MAX_DEVS_PER_NIC];
};

struct railnetIbRegPool {
  const char* what;                    /* what its blocks are, in WARNs */
  const char* fix;                     /* what to do when memory runs out, in WARNs */
  int perChunk;                        /* blocks registered together, 1..32 */
  pthread_mutex_t lock;
  struct railnetIbRegChunk* chunks;
  uint64_t inUse, nChunks;
};
#define RAILNET_IB_REGPOOL_INIT(WHAT, FIX, PER) {(WHAT), (FIX), (PER), PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0}

/* Takes a block of bytes (rounded up to 64), zeroed, registered with access on every device of
 * devs. max > 0: when max blocks of that set of devices are in use, *got 0 and nothing taken.
 * An error only when memory or a registration failed (a WARN said which). */
ncclResult_t railnetIbRegPoolTake(struct railnetIbRegPool* p, const struct railnetIbRegDevs* devs, size_t bytes,
                                  int access, int max, struct railnetIbRegBuf* out, int* got);
/* Gives a block back (none taken: nothing); its chunk is freed once all of its blocks are back.
 * The caller's QPs that could read or write it are gone. */
void railnetIbRegPoolGive(struct railnetIbRegPool* p, struct railnetIbRegBuf* b);
/* Blocks in use and chunks registered now. */
void railnetIbRegPoolCount(struct railnetIbRegPool* p, uint64_t* inUse, uint64_t* chunks);

#ifdef __cplusplus
}
#endif
#endif
