/*
 * IB memory registration (NCCL's net_ib/reg.cc): regMr, regMrDmaBuf, deregMr and the
 * per-device registration cache that makes regIsGlobal true.
 *
 * A registration covers whole pages. Each physical device keeps a list of the ranges it
 * registered with a reference count: a regMr whose pages lie inside a cached range takes a
 * reference on it (a cache hit) instead of registering again; deregMr drops a reference and
 * the last one deregisters. A vDevice registers on each of its physical devices; the handle
 * holds one MR per device. The protection domain of a device is allocated by its first comm
 * and freed when the last comm and the last registration are gone.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include "reg.h"
#include "comm.h"
#include "devices.h"
#include "ibvwrap.h"
#include "testing.h"

static long mrCacheHits; /* atomic */

static size_t pageSize(void) {
  static size_t ps;
  if (ps == 0) {
    long p = sysconf(_SC_PAGESIZE);
    ps = p > 0 ? (size_t)p : 4096;
  }
  return ps;
}

ncclResult_t railnetIbPdAcquire(int ibDevN, struct ibv_pd** pd) {
  struct ncclIbDev* dev = &ncclIbDevs[ibDevN];
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&dev->lock);
  if (dev->pdRefs == 0 && dev->pd == NULL) {
    res = wrap_ibv_alloc_pd(&dev->pd, dev->context);
    if (res != ncclSuccess) {
      WARN("NET/IB : %s:%d: cannot allocate a protection domain", dev->devName, dev->portNum);
      dev->pd = NULL;
    }
  }
  if (res == ncclSuccess) {
    dev->pdRefs++;
    *pd = dev->pd;
  }
  pthread_mutex_unlock(&dev->lock);
  return res;
}

/* Caller holds dev->lock. The PD goes when no comm and no registration uses it. */
static void pdMaybeFreeLocked(struct ncclIbDev* dev) {
  if (dev->pdRefs == 0 && dev->mrCache.population == 0 && dev->pd != NULL) {
    wrap_ibv_dealloc_pd(dev->pd);
    dev->pd = NULL;
    free(dev->mrCache.slots);
    dev->mrCache.slots = NULL;
    dev->mrCache.capacity = 0;
  }
}

void railnetIbPdRelease(int ibDevN) {
  struct ncclIbDev* dev = &ncclIbDevs[ibDevN];
  pthread_mutex_lock(&dev->lock);
  if (dev->pdRefs > 0) dev->pdRefs--;
  pdMaybeFreeLocked(dev);
  pthread_mutex_unlock(&dev->lock);
}

ncclResult_t railnetIbRegMrDev(int ibDevN, void* data, size_t size, uint64_t offset, int fd, struct ibv_mr** out) {
  struct ncclIbDev* dev = &ncclIbDevs[ibDevN];
  size_t ps = pageSize();
  uintptr_t addr = (uintptr_t)data & ~(uintptr_t)(ps - 1);
  size_t pages = ((uintptr_t)data + (size ? size : 1) - addr + ps - 1) / ps;
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&dev->lock);
  struct ncclIbMrCache* cache = &dev->mrCache;
  for (int i = 0; i < cache->population; i++) {
    struct ncclIbMr* s = &cache->slots[i];
    if (addr >= s->addr && addr + pages * ps <= s->addr + s->pages * ps) {
      s->refs++;
      *out = s->mr;
      __atomic_fetch_add(&mrCacheHits, 1, __ATOMIC_RELAXED);
      pthread_mutex_unlock(&dev->lock);
      return ncclSuccess;
    }
  }
  if (dev->pd == NULL) {
    if ((res = wrap_ibv_alloc_pd(&dev->pd, dev->context)) != ncclSuccess) {
      dev->pd = NULL;
      goto out;
    }
  }
  if (cache->population == cache->capacity) {
    int cap = cache->capacity ? cache->capacity * 2 : 32;
    struct ncclIbMr* slots = realloc(cache->slots, (size_t)cap * sizeof(*slots));
    if (slots == NULL) {
      WARN("NET/IB : out of memory for the registration cache of %s (%d entries)", dev->devName, cap);
      res = ncclSystemError;
      goto out;
    }
    cache->slots = slots;
    cache->capacity = cap;
  }
  int flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (ncclIbRelaxedOrderingEnabled) flags |= IBV_ACCESS_RELAXED_ORDERING;
  struct ibv_mr* mr = NULL;
  if (fd != -1) {
    res = wrap_ibv_reg_dmabuf_mr(&mr, dev->pd, offset, pages * ps, addr, fd, flags);
  } else if (ncclIbRelaxedOrderingEnabled) {
    res = wrap_ibv_reg_mr_iova2(&mr, dev->pd, (void*)addr, pages * ps, addr, flags);
  } else {
    res = wrap_ibv_reg_mr(&mr, dev->pd, (void*)addr, pages * ps, flags);
  }
  if (res != ncclSuccess || mr == NULL) {
    WARN("NET/IB : %s:%d: registration of %p (%zu bytes, %zu pages from %p%s) failed", dev->devName, dev->portNum,
         data, size, pages, (void*)addr, fd != -1 ? ", DMA-BUF" : "");
    if (res == ncclSuccess) res = ncclSystemError;
    pdMaybeFreeLocked(dev);
    goto out;
  }
  TRACE(NCCL_INIT | NCCL_NET, "regAddr=%p size=%zu rkey=0x%x lkey=0x%x fd=%d", (void*)addr, pages * ps, mr->rkey,
        mr->lkey, fd);
  struct ncclIbMr* s = &cache->slots[cache->population++];
  s->addr = addr;
  s->pages = pages;
  s->refs = 1;
  s->mr = mr;
  *out = mr;
out:
  pthread_mutex_unlock(&dev->lock);
  return res;
}

ncclResult_t railnetIbDeregMrDev(int ibDevN, struct ibv_mr* mr) {
  struct ncclIbDev* dev = &ncclIbDevs[ibDevN];
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&dev->lock);
  struct ncclIbMrCache* cache = &dev->mrCache;
  int i = 0;
  while (i < cache->population && cache->slots[i].mr != mr) i++;
  if (i == cache->population) {
    WARN("NET/IB : deregMr of an unknown registration %p on %s", (void*)mr, dev->devName);
    res = ncclInternalError;
  } else if (--cache->slots[i].refs == 0) {
    res = wrap_ibv_dereg_mr(mr);
    cache->slots[i] = cache->slots[--cache->population];
    pdMaybeFreeLocked(dev);
  }
  pthread_mutex_unlock(&dev->lock);
  return res;
}

int railnetIbMrCacheCount(int ibDevN) {
  if (ibDevN < 0 || ibDevN >= ncclNIbDevs) return -1;
  struct ncclIbDev* dev = &ncclIbDevs[ibDevN];
  pthread_mutex_lock(&dev->lock);
  int n = dev->mrCache.population;
  pthread_mutex_unlock(&dev->lock);
  return n;
}

long railnetIbMrCacheHits(void) { return __atomic_load_n(&mrCacheHits, __ATOMIC_RELAXED); }

ncclResult_t ncclIbRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                               void** mhandle) {
  struct ncclIbNetCommBase* base = (struct ncclIbNetCommBase*)comm;
  if (base == NULL || mhandle == NULL) return ncclInvalidArgument;
  *mhandle = NULL;
  if (type != NCCL_PTR_HOST && type != NCCL_PTR_CUDA && type != NCCL_PTR_DMABUF) {
    WARN("NET/IB : regMr: unknown memory type %d", type);
    return ncclInvalidArgument;
  }
  if (type == NCCL_PTR_DMABUF && fd < 0) {
    WARN("NET/IB : regMrDmaBuf: memory of type DMA-BUF needs a file descriptor, got %d", fd);
    return ncclInvalidArgument;
  }
  struct ncclIbMrHandle* h;
  NCCLCHECK(RAILNET_CALLOC(&h, 1, "an IB memory handle"));
  h->type = fd >= 0 ? NCCL_PTR_DMABUF : type;
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < base->vProps.ndevs; i++) {
    int ibDevN = base->devs[i].ibDevN;
    res = railnetIbRegMrDev(ibDevN, data, size, offset, fd, &h->mrs[i]);
    if (res != ncclSuccess) break;
    h->ibDevs[i] = ibDevN;
    h->ndevs++;
  }
  if (res != ncclSuccess) {
    for (int i = 0; i < h->ndevs; i++) railnetIbDeregMrDev(h->ibDevs[i], h->mrs[i]);
    free(h);
    return res;
  }
  *mhandle = h;
  return ncclSuccess;
}

ncclResult_t ncclIbRegMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  return ncclIbRegMrDmaBuf(comm, data, size, type, 0ULL, -1, mhandle);
}

ncclResult_t ncclIbDeregMr(void* comm, void* mhandle) {
  (void)comm;
  struct ncclIbMrHandle* h = (struct ncclIbMrHandle*)mhandle;
  if (h == NULL) return ncclSuccess;
  ncclResult_t res = ncclSuccess;
  for (int i = 0; i < h->ndevs; i++) {
    ncclResult_t r = railnetIbDeregMrDev(h->ibDevs[i], h->mrs[i]);
    if (r != ncclSuccess) res = r;
  }
  free(h);
  return res;
}

void railnetIbReleaseDevMrs(struct ncclIbDev* dev) {
  if (dev->mrCache.population)
    INFO(NCCL_NET, "NET/IB : %s: %d registration(s) still alive at finalize; deregistering them", dev->devName,
         dev->mrCache.population);
  for (int i = 0; i < dev->mrCache.population; i++) wrap_ibv_dereg_mr(dev->mrCache.slots[i].mr);
  free(dev->mrCache.slots);
  memset(&dev->mrCache, 0, sizeof(dev->mrCache));
  if (dev->pd) wrap_ibv_dealloc_pd(dev->pd);
  dev->pd = NULL;
  dev->pdRefs = 0;
}
