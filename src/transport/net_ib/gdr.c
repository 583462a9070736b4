/*
 * GPUDirect RDMA probing: peer-memory modules in sysfs, DMA-BUF support per device.
 */
#include "gdr.h"
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "devices.h"
#include "ibvwrap.h"
#include "testing.h"

static pthread_mutex_t gdrLock = PTHREAD_MUTEX_INITIALIZER;

/* ------------------------------------------------------------------ peer memory */

static const char* const nvMemFile = "kernel/mm/memory_peers/nv_mem/version";       /* nv_peer_mem */
static const char* const nvMemNcFile = "kernel/mm/memory_peers/nv_mem_nc/version";  /* nv_peer_mem, non-coherent */
static const char* const peermemFile = "module/nvidia_peermem/version";             /* nvidia-peermem */

enum { PEERMEM_UNKNOWN = 0, PEERMEM_KNOWN = 1, PEERMEM_ANY = 2, PEERMEM_NVIDIA = 4 };
static int peermemState;

static int sysfsExists(const char* root, const char* rel) {
  char path[PATH_MAX];
  size_t n = strlen(root);
  while (n > 1 && root[n - 1] == '/') n--;
  if (snprintf(path, sizeof(path), "%.*s/%s", (int)n, root, rel) >= (int)sizeof(path)) return 0;
  return access(path, F_OK) == 0;
}

static int peermemDetect(void) {
  int state = __atomic_load_n(&peermemState, __ATOMIC_ACQUIRE);
  if (state != PEERMEM_UNKNOWN) return state;
  pthread_mutex_lock(&gdrLock);
  state = peermemState;
  if (state == PEERMEM_UNKNOWN) {
    const char* root = railnetIbSysfsRoot(); /* SYSFS_PATH, declared once in devices.c */
    if (root == NULL || root[0] == '\0') root = "/sys";
    int nvMem = sysfsExists(root, nvMemFile), nvMemNc = sysfsExists(root, nvMemNcFile);
    int nvidia = sysfsExists(root, peermemFile);
    state = PEERMEM_KNOWN;
    if (nvMem || nvMemNc || nvidia) state |= PEERMEM_ANY;
    if (nvidia) state |= PEERMEM_NVIDIA;
    if (state & PEERMEM_ANY)
      INFO(NCCL_INIT | NCCL_NET, "NET/IB : GPU Direct RDMA peer memory module loaded:%s%s%s",
           nvidia ? " nvidia_peermem" : "", nvMem ? " nv_mem (nv_peer_mem)" : "", nvMemNc ? " nv_mem_nc (nv_peer_mem)" : "");
    else
      INFO(NCCL_INIT | NCCL_NET,
           "NET/IB : no GPU Direct RDMA peer memory module (nvidia_peermem / nv_peer_mem) under %s; "
           "GPU buffers need DMA-BUF for GDR",
           root);
    __atomic_store_n(&peermemState, state, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&gdrLock);
  return state;
}

ncclResult_t ncclIbGdrSupport(void) { return (peermemDetect() & PEERMEM_ANY) ? ncclSuccess : ncclSystemError; }

ncclResult_t ncclIbPeerMemSupport(void) {
  return (peermemDetect() & PEERMEM_NVIDIA) ? ncclSuccess : ncclSystemError;
}

/* ------------------------------------------------------------------ DMA-BUF */

static int dmaBufState[RAILNET_GDR_MAX_DEVS]; /* 0 unknown, 1 supported, -1 not */

int railnetIbDmaBufProbe(struct ibv_context* ctx, int* probeErrno) {
  const char* dev = (ctx && ctx->device) ? wrap_ibv_get_device_name(ctx->device) : "N/A";
  struct ibv_pd* pd = NULL;
  if (probeErrno) *probeErrno = 0;
  if (wrap_ibv_alloc_pd(&pd, ctx) != ncclSuccess) {
    INFO(NCCL_INIT | NCCL_NET, "NET/IB : %s DMA-BUF probe failed: no protection domain", dev);
    return -1;
  }
  /* fd -1 never names a DMA-BUF: a kernel path that knows DMA-BUF answers EBADF. */
  errno = 0;
  struct ibv_mr* mr = wrap_direct_ibv_reg_dmabuf_mr(pd, 0ULL, 0ULL, 0ULL, -1, 0);
  int err = errno;
  if (mr != NULL) { /* not expected, but then the verb plainly works */
    err = 0;
    (void)wrap_ibv_dereg_mr(mr);
  }
  if (probeErrno) *probeErrno = err;
  int supported = !(err == EOPNOTSUPP || err == EPROTONOSUPPORT);
  if (wrap_ibv_dealloc_pd(pd) != ncclSuccess) {
    INFO(NCCL_INIT | NCCL_NET, "NET/IB : %s DMA-BUF probe failed: could not free its protection domain", dev);
    return -1;
  }
  INFO(NCCL_INIT | NCCL_NET, "NET/IB : %s DMA-BUF %s (ibv_reg_dmabuf_mr probe: %s)", dev,
       supported ? "supported" : "not supported", err ? strerror(err) : "registered");
  return supported;
}

ncclResult_t ncclIbDmaBufSupport(int dev, struct ibv_context* ctx) {
  if (dev < 0 || dev >= RAILNET_GDR_MAX_DEVS) {
    WARN("NET/IB : DMA-BUF support asked for device %d, outside [0, %d)", dev, RAILNET_GDR_MAX_DEVS);
    return ncclInternalError;
  }
  int state = __atomic_load_n(&dmaBufState[dev], __ATOMIC_ACQUIRE);
  if (state == 0) {
    pthread_mutex_lock(&gdrLock);
    state = dmaBufState[dev];
    if (state == 0) {
      state = railnetIbDmaBufProbe(ctx, NULL) == 1 ? 1 : -1;
      __atomic_store_n(&dmaBufState[dev], state, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&gdrLock);
  }
  return state == 1 ? ncclSuccess : ncclSystemError;
}

void railnetIbGdrForget(void) {
  pthread_mutex_lock(&gdrLock);
  __atomic_store_n(&peermemState, PEERMEM_UNKNOWN, __ATOMIC_RELEASE);
  for (int i = 0; i < RAILNET_GDR_MAX_DEVS; i++) __atomic_store_n(&dmaBufState[i], 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&gdrLock);
}

void railnetIbGdrReset(void) { railnetIbGdrForget(); }
