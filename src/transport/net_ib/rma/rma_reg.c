/*
 * Symmetric registrations of the RMA group (rma.h): a window registered on every device of
 * the group's vDevice, for remote write, read and atomics, host memory as well as GPU memory
 * (peer memory or DMA-BUF); every rank's base address, size and rkeys all-gathered, so that an
 * operation names a target by its offset in the target rank's window.
 */
#include <stdlib.h>
#include <string.h>
#include "rma.h"
#include "debug.h"
#include "ibvwrap.h"
#include "../devices.h"
#include "../reg.h"

static void mrRelease(struct railnetRmaMr* m) {
  for (int d = 0; d < m->ndevs; d++) {
    if (m->mrs[d] == NULL) continue;
    wrap_ibv_dereg_mr(m->mrs[d]);
    railnetIbPdRelease(m->ibDevN[d]);
  }
  free(m->remote);
  free(m);
}

static ncclResult_t mrRegister(struct railnetRmaMr* m, uint64_t offset, int fd) {
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  for (int d = 0; d < m->ndevs; d++) {
    struct ibv_pd* pd = NULL;
    NCCLCHECK(railnetIbPdAcquire(m->ibDevN[d], &pd));
    ncclResult_t r = fd >= 0 ? wrap_ibv_reg_dmabuf_mr(&m->mrs[d], pd, offset, m->size, (uint64_t)(uintptr_t)m->base, fd, access)
                             : wrap_ibv_reg_mr(&m->mrs[d], pd, m->base, m->size, access);
    if (r != ncclSuccess || m->mrs[d] == NULL) {
      struct ncclIbDev* dev = &ncclIbDevs[m->ibDevN[d]];
      WARN("NET/IB RMA : %s:%d: registration of %p (%zu bytes%s) for remote write, read and atomics failed; %s",
           dev->devName, dev->portNum, (void*)m->base, m->size, fd >= 0 ? ", DMA-BUF" : "",
           m->type == NCCL_PTR_HOST ? "check the locked-memory limit (ulimit -l)"
                                    : "GPU memory needs nvidia-peermem or DMA-BUF (railnet-diag says which works)");
      m->mrs[d] = NULL;
      railnetIbPdRelease(m->ibDevN[d]);
      return r != ncclSuccess ? r : ncclSystemError;
    }
  }
  return ncclSuccess;
}

ncclResult_t railnetRmaRegMrSymDmaBuf(void* collComm, void* data, size_t size, int type, uint64_t offset, int fd,
                                      uint64_t mrFlags, void** mhandle) {
  (void)mrFlags; /* FORCE_SO, SIGNAL_NEVER_RESET: every write and atomic of a QP lands in order here */
  struct railnetRmaColl* cc = (struct railnetRmaColl*)collComm;
  if (cc == NULL || mhandle == NULL || (data == NULL && size > 0)) return ncclInvalidArgument;
  *mhandle = NULL;
  struct railnetRmaMr* m;
  NCCLCHECK(RAILNET_CALLOC(&m, 1, "an RMA registration"));
  m->coll = cc;
  m->base = (uint8_t*)data;
  m->size = size;
  m->type = type;
  m->ndevs = ncclIbMergedDevs[cc->vDev].vProps.ndevs;
  for (int d = 0; d < m->ndevs; d++) m->ibDevN[d] = ncclIbMergedDevs[cc->vDev].vProps.devs[d];
  ncclResult_t r = RAILNET_CALLOC(&m->remote, (size_t)cc->nranks, "the RMA window's ranks");
  if (r == ncclSuccess && size > 0) r = mrRegister(m, offset, fd);
  /* collective: a rank whose registration failed still takes part (size 0: the others refuse
   * every operation on its window); one without memory for it breaks the group instead, so
   * that nobody waits for it */
  if (m->remote == NULL) railnetRmaGroupAbort(cc->group, -1);
  if (m->remote != NULL) {
    struct railnetRmaRemoteMr mine;
    memset(&mine, 0, sizeof(mine));
    if (r == ncclSuccess) {
      mine.base = (uint64_t)(uintptr_t)data;
      mine.size = size;
      for (int d = 0; d < m->ndevs; d++) mine.rkeys[d] = m->mrs[d] ? m->mrs[d]->rkey : 0;
    }
    ncclResult_t g = railnetRmaGroupAllGather(cc->group, &mine, m->remote, sizeof(mine));
    if (r == ncclSuccess) r = g;
  }
  if (r != ncclSuccess) {
    mrRelease(m);
    return r;
  }
  pthread_mutex_lock(&cc->lock);
  m->next = cc->mrs;
  cc->mrs = m;
  pthread_mutex_unlock(&cc->lock);
  *mhandle = m;
  return ncclSuccess;
}

int railnetRmaMrLive(struct railnetRmaColl* cc, const struct railnetRmaMr* m) {
  int live = 0;
  pthread_mutex_lock(&cc->lock);
  for (struct railnetRmaMr* q = cc->mrs; q && !live; q = q->next) live = q == m;
  pthread_mutex_unlock(&cc->lock);
  return live;
}

ncclResult_t railnetRmaRegMrSym(void* collComm, void* data, size_t size, int type, uint64_t mrFlags, void** mhandle) {
  return railnetRmaRegMrSymDmaBuf(collComm, data, size, type, 0, -1, mrFlags, mhandle);
}

ncclResult_t railnetRmaDeregMrSym(void* collComm, void* mhandle) {
  struct railnetRmaMr* m = (struct railnetRmaMr*)mhandle;
  struct railnetRmaColl* cc = (struct railnetRmaColl*)collComm;
  if (m == NULL) return ncclSuccess;
  if (cc == NULL) return ncclInvalidArgument;
  pthread_mutex_lock(&cc->lock);
  struct railnetRmaMr** q = &cc->mrs;
  while (*q && *q != m) q = &(*q)->next;
  int found = *q != NULL;
  if (found) *q = m->next;
  pthread_mutex_unlock(&cc->lock);
  if (!found) {
    WARN("NET/IB RMA : deregMrSym of %p: not a registration of this group (deregistered already, or another "
         "group's)", mhandle);
    return ncclInvalidArgument;
  }
  mrRelease(m);
  return ncclSuccess;
}
