/*
 * Registered memory shared by the IB comms of a process (regpool.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "regpool.h"
#include "debug.h"
#include "ibvwrap.h"
#include "reg.h"

struct railnetIbRegChunk {
  struct railnetIbRegChunk* next;
  struct railnetIbRegDevs devs;        /* each registration's device */
  size_t bytes;                        /* per block */
  int access;
  uint8_t* base;
  size_t mapBytes;
  struct ibv_mr* mrs[NCCL_IB_MAX_DEVS_PER_NIC];
  uint32_t used;                       /* bit i: block i is taken */
};

static int sameDevs(const struct railnetIbRegChunk* c, const struct railnetIbRegDevs* devs) {
  if (c->devs.ndevs != devs->ndevs) return 0;
  for (int d = 0; d < devs->ndevs; d++)
    if (c->devs.ibDevN[d] != devs->ibDevN[d]) return 0;
  return 1;
}

static void chunkFree(struct railnetIbRegChunk* c) {
  for (int d = 0; d < c->devs.ndevs; d++) {
    if (c->mrs[d] == NULL) continue;
    wrap_ibv_dereg_mr(c->mrs[d]);
    railnetIbPdRelease(c->devs.ibDevN[d]);
  }
  if (c->base) munmap(c->base, c->mapBytes);
  free(c);
}

/* A chunk of the pool's blocks of bytes each, pages of its own (munmap gives them back),
 * registered on each device of devs through the device's shared PD. */
static ncclResult_t chunkNew(const struct railnetIbRegPool* p, const struct railnetIbRegDevs* devs, size_t bytes,
                             int access, struct railnetIbRegChunk** out) {
  struct railnetIbRegChunk* c = NULL;
  NCCLCHECK(RAILNET_CALLOC(&c, 1, "an IB registered chunk"));
  c->devs = *devs;
  c->bytes = bytes;
  c->access = access;
  c->mapBytes = (bytes * (size_t)p->perChunk + 4095) & ~(size_t)4095;
  void* m = mmap(NULL, c->mapBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    WARN("NET/IB : out of memory for %d %s (%zu bytes): %s; %s", p->perChunk, p->what, c->mapBytes, strerror(errno),
         p->fix);
    free(c);
    return ncclSystemError;
  }
  c->base = (uint8_t*)m;
  for (int d = 0; d < c->devs.ndevs; d++) {
    struct ibv_pd* pd = NULL;
    ncclResult_t r = railnetIbPdAcquire(c->devs.ibDevN[d], &pd);
    if (r == ncclSuccess) {
      r = wrap_ibv_reg_mr(&c->mrs[d], pd, c->base, c->mapBytes, access);
      if (r != ncclSuccess) railnetIbPdRelease(c->devs.ibDevN[d]);
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

static void take(struct railnetIbRegPool* p, struct railnetIbRegChunk* c, struct railnetIbRegBuf* out) {
  int i = 0;
  while (c->used >> i & 1) i++;
  c->used |= 1u << i;
  out->chunk = c;
  out->index = i;
  out->buf = c->base + (size_t)i * c->bytes;
  memset(out->buf, 0, c->bytes); /* a block given back holds an earlier comm's bytes */
  for (int d = 0; d < c->devs.ndevs; d++) out->mrs[d] = c->mrs[d];
  p->inUse++;
}

/* Under the lock: a chunk of devs with a free block of bytes and access (NULL: none), and the
 * blocks of devs in use. */
static struct railnetIbRegChunk* findRoom(struct railnetIbRegPool* p, const struct railnetIbRegDevs* devs, size_t bytes,
                                          int access, int* inUse) {
  uint32_t full = p->perChunk >= 32 ? 0xffffffffu : (1u << p->perChunk) - 1;
  struct railnetIbRegChunk* room = NULL;
  *inUse = 0;
  for (struct railnetIbRegChunk* c = p->chunks; c; c = c->next) {
    if (!sameDevs(c, devs)) continue;
    *inUse += __builtin_popcount(c->used);
    if (room == NULL && c->bytes == bytes && c->access == access && c->used != full) room = c;
  }
  return room;
}

ncclResult_t railnetIbRegPoolTake(struct railnetIbRegPool* p, const struct railnetIbRegDevs* devs, size_t bytes,
                                  int access, int max, struct railnetIbRegBuf* out, int* got) {
  bytes = (bytes + 63) & ~(size_t)63;
  memset(out, 0, sizeof(*out));
  *got = 0;
  /* a new chunk is mapped and registered outside the lock (milliseconds for a large one): other
   * comms take from the chunks there meanwhile. Made while another thread made one too, it goes
   * back unused. */
  struct railnetIbRegChunk* fresh = NULL;
  for (;;) {
    pthread_mutex_lock(&p->lock);
    int inUse = 0;
    struct railnetIbRegChunk* room = findRoom(p, devs, bytes, access, &inUse);
    int refused = max > 0 && inUse >= max;
    if (!refused && room == NULL && fresh != NULL) {
      fresh->next = p->chunks;
      p->chunks = fresh;
      p->nChunks++;
      room = fresh;
      fresh = NULL;
    }
    if (!refused && room != NULL) {
      take(p, room, out);
      *got = 1;
    }
    pthread_mutex_unlock(&p->lock);
    if (refused || room != NULL) break;
    NCCLCHECK(chunkNew(p, devs, bytes, access, &fresh));
  }
  if (fresh) chunkFree(fresh);
  return ncclSuccess;
}

void railnetIbRegPoolGive(struct railnetIbRegPool* p, struct railnetIbRegBuf* b) {
  struct railnetIbRegChunk* c = b->chunk;
  if (c == NULL) return;
  pthread_mutex_lock(&p->lock);
  c->used &= ~(1u << b->index);
  p->inUse--;
  if (c->used == 0) { /* nothing of it in use: its memory and registrations go back */
    struct railnetIbRegChunk** q = &p->chunks;
    while (*q != c) q = &(*q)->next;
    *q = c->next;
    p->nChunks--;
    chunkFree(c);
  }
  pthread_mutex_unlock(&p->lock);
  memset(b, 0, sizeof(*b));
}

void railnetIbRegPoolCount(struct railnetIbRegPool* p, uint64_t* inUse, uint64_t* chunks) {
  pthread_mutex_lock(&p->lock);
  if (inUse) *inUse = p->inUse;
  if (chunks) *chunks = p->nChunks;
  pthread_mutex_unlock(&p->lock);
}
