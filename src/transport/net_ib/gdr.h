/*
 * GPUDirect RDMA probing for the IB transport: is a peer-memory module loaded (so NICs can
 * register GPU memory by address), and does a device accept DMA-BUF registrations?
 * sysfs is read under $SYSFS_PATH when set (libibverbs' convention), /sys else.
 */
#ifndef RAILNET_NET_IB_GDR_H
#define RAILNET_NET_IB_GDR_H
#include <infiniband/verbs.h>
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Device slots the DMA-BUF answers are remembered for. */
#define RAILNET_GDR_MAX_DEVS 64

/* ncclSuccess when any peer-memory module is loaded (nv_peer_mem: memory_peers/nv_mem or
 * nv_mem_nc; nvidia-peermem: module/nvidia_peermem), ncclSystemError else. Decided once per
 * process (thread-safe). */
ncclResult_t ncclIbGdrSupport(void);

/* ncclSuccess only when the nvidia_peermem module is loaded (not the legacy nv_peer_mem). */
ncclResult_t ncclIbPeerMemSupport(void);

/* Probe one device: allocate a PD, call ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0), classify errno
 * (EOPNOTSUPP/EPROTONOSUPPORT: unsupported; anything else, normally EBADF: supported), free
 * the PD. Returns 1 supported, 0 unsupported, -1 when the probe itself failed (no PD).
 * *probeErrno (may be NULL) gets the errno the probe saw. Not cached. */
int railnetIbDmaBufProbe(struct ibv_context* ctx, int* probeErrno);

/* ncclSuccess when device dev (0 <= dev < RAILNET_GDR_MAX_DEVS, whose context is ctx)
 * supports DMA-BUF, ncclSystemError else. Probed once per device (thread-safe), then
 * remembered. */
ncclResult_t ncclIbDmaBufSupport(int dev, struct ibv_context* ctx);

/* Teardown: forget every remembered answer (peermem and DMA-BUF); the next init asks again. */
void railnetIbGdrForget(void);

#ifdef __cplusplus
}
#endif
#endif
