/*
 * The eager buffers of a process (eager_pool.h).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "eager_pool.h"
#include "debug.h"
#include "ibvwrap.h"
#include "param.h"
#include "../reg.h"

enum { P_POOL };
static const railnetParam poolParams[] = {
    [P_POOL] = RAILNET_PARAM_INT_DEF("RAILNET_IB_EAGER_POOL", RAILNET_IB_EAGER_POOL_DEFAULT, 1, 1 << 20,
                                     "IB: the most eager buffers (a receive comm's ring, a send comm's bounce "
                                     "slots: 16 slots of RAILNET_IB_EAGER_SIZE + 8 bytes rounded up to 64, and 64 "
                                     "bytes of credit words) in use per set of devices (a vDevice's) in a process; "
                                     "registered 8 at a time when a comm's first small message came. A comm that "
                                     "finds the pool at this bound keeps the clear-to-send protocol"),
};
RAILNET_PARAM_TABLE("net_ib/eager_pool", poolParams);

int railnetIbEagerPoolMax(void) { return (int)railnetParamInt(&poolParams[P_POOL]); }

struct railnetIbEagerChunk {
  struct railnetIbEagerChunk* next;
  int ndevs;
  int ibDevN[NCCL_IB_MAX_DEVS_PER_NIC]; /* the set of devices: each registration's */
  size_t bytes;                         /* per buffer */
  int remote;                           /* rings (remote write) or bounce slots */
  uint8_t* base;
  size_t mapBytes;
  struct ibv_mr* mrs[NCCL_IB_MAX_DEVS_PER_NIC];
  uint32_t used;                        /* bit i: buffer i is taken */
};

static pthread_mutex_t poolLock = PTHREAD_MUTEX_INITIALIZER;
static struct railnetIbEagerChunk* chunks;
static struct railnetIbEagerPoolStats stats;

static int sameDevs(const struct railnetIbEagerChunk* c, const struct ncclIbNetCommBase* base) {
  if (c->ndevs != base->vProps.ndevs) return 0;
  for (int d = 0; d < c->ndevs; d++)
    if (c->ibDevN[d] != base->devs[d].ibDevN) return 0;
  return 1;
}

static void chunkFree(struct railnetIbEagerChunk* c) {
  for (int d = 0; d < c->ndevs; d++) {
    if (c->mrs[d] == NULL) continue;
    wrap_ibv_dereg_mr(c->mrs[d]);
    railnetIbPdRelease(c->ibDevN[d]);
  }
  if (c->base) munmap(c->base, c->mapBytes);
  free(c);
}

/* A chunk of RAILNET_IB_EAGER_POOL_CHUNK buffers of bytes each, pages of its own (munmap gives
 * them back), registered on each device of base through the device's shared PD. */
static ncclResult_t chunkNew(struct ncclIbNetCommBase* base, size_t bytes, int remote,
                             struct railnetIbEagerChunk** out) {
  struct railnetIbEagerChunk* c = NULL;
  NCCLCHECK(RAILNET_CALLOC(&c, 1, "IB eager pool chunk"));
  c->ndevs = base->vProps.ndevs;
  c->bytes = bytes;
  c->remote = remote;
  c->mapBytes = (bytes * RAILNET_IB_EAGER_POOL_CHUNK + 4095) & ~(size_t)4095;
  void* p = mmap(NULL, c->mapBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    WARN("NET/IB : out of memory for %d eager buffers (%zu bytes): %s; lower RAILNET_IB_EAGER_POOL or "
         "RAILNET_IB_EAGER_SIZE", RAILNET_IB_EAGER_POOL_CHUNK, c->mapBytes, strerror(errno));
    free(c);
    return ncclSystemError;
  }
  c->base = (uint8_t*)p;
  int access = IBV_ACCESS_LOCAL_WRITE | (remote ? IBV_ACCESS_REMOTE_WRITE : 0);
  for (int d = 0; d < c->ndevs; d++) {
    struct ibv_pd* pd = NULL;
    c->ibDevN[d] = base->devs[d].ibDevN;
    ncclResult_t r = railnetIbPdAcquire(c->ibDevN[d], &pd);
    if (r == ncclSuccess) {
      r = wrap_ibv_reg_mr(&c->mrs[d], pd, c->base, c->mapBytes, access);
      if (r != ncclSuccess) railnetIbPdRelease(c->ibDevN[d]);
    }
    if (r != ncclSuccess) {
      c->mrs[d] = NULL;
      chunkFree(c);
      return r;
    }
  }
  *out = c;
  return ncclSuccess;
}

static void take(struct railnetIbEagerChunk* c, struct railnetIbEagerBuf* out) {
  int i = 0;
  while (c->used >> i & 1) i++;
  c->used |= 1u << i;
  out->chunk = c;
  out->index = i;
  out->buf = c->base + (size_t)i * c->bytes;
  memset(out->buf, 0, c->bytes); /* a buffer given back holds an earlier comm's bytes */
  for (int d = 0; d < c->ndevs; d++) out->mrs[d] = c->mrs[d];
  stats.inUse++;
}

ncclResult_t railnetIbEagerPoolTake(struct ncclIbNetCommBase* base, size_t bytes, int remote,
                                    struct railnetIbEagerBuf* out, int* got) {
  bytes = (bytes + 63) & ~(size_t)63;
  memset(out, 0, sizeof(*out));
  *got = 0;
  ncclResult_t r = ncclSuccess;
  pthread_mutex_lock(&poolLock);
  int inUse = 0;
  struct railnetIbEagerChunk* room = NULL;
  for (struct railnetIbEagerChunk* c = chunks; c; c = c->next) {
    if (!sameDevs(c, base)) continue;
    inUse += __builtin_popcount(c->used);
    if (room == NULL && c->bytes == bytes && c->remote == remote && c->used != (1u << RAILNET_IB_EAGER_POOL_CHUNK) - 1)
      room = c;
  }
  if (inUse >= railnetIbEagerPoolMax()) {
    stats.refused++;
  } else if (room == NULL && (r = chunkNew(base, bytes, remote, &room)) == ncclSuccess) {
    room->next = chunks;
    chunks = room;
    stats.chunks++;
  }
  if (r == ncclSuccess && inUse < railnetIbEagerPoolMax()) {
    take(room, out);
    *got = 1;
  }
  pthread_mutex_unlock(&poolLock);
  return r;
}

void railnetIbEagerPoolGive(struct railnetIbEagerBuf* b) {
  struct railnetIbEagerChunk* c = b->chunk;
  if (c == NULL) return;
  pthread_mutex_lock(&poolLock);
  c->used &= ~(1u << b->index);
  stats.inUse--;
  if (c->used == 0) { /* nothing of it in use: its memory and registrations go back */
    struct railnetIbEagerChunk** p = &chunks;
    while (*p != c) p = &(*p)->next;
    *p = c->next;
    stats.chunks--;
    chunkFree(c);
  }
  pthread_mutex_unlock(&poolLock);
  memset(b, 0, sizeof(*b));
}

void railnetIbEagerPoolGetStats(struct railnetIbEagerPoolStats* s) {
  pthread_mutex_lock(&poolLock);
  *s = stats;
  pthread_mutex_unlock(&poolLock);
}
