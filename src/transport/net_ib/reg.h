/*
 * IB memory registration (NCCL's net_ib/reg.cc): regMr, regMrDmaBuf, deregMr, the
 * per-device registration cache and the device's protection domain. reg.c.
 */
#ifndef RAILNET_NET_IB_REG_H
#define RAILNET_NET_IB_REG_H
#include <infiniband/verbs.h>
#include <stddef.h>
#include <stdint.h>
#include "core.h"
#include "devices.h"
#include "wire.h" /* NCCL_IB_MAX_DEVS_PER_NIC */

#ifdef __cplusplus
extern "C" {
#endif

/* What regMr hands out: one MR per physical device of the comm's vDevice. */
struct ncclIbMrHandle {
  struct ibv_mr* mrs[NCCL_IB_MAX_DEVS_PER_NIC];
  int ndevs;
  int ibDevs[NCCL_IB_MAX_DEVS_PER_NIC];  /* physical devices, for deregistration */
  int type;                             /* NCCL_PTR_HOST / _CUDA / _DMABUF, as registered */
};

ncclResult_t ncclIbRegMr(void* comm, void* data, size_t size, int type, void** mhandle);
ncclResult_t ncclIbRegMrDmaBuf(void* comm, void* data, size_t size, int type, uint64_t offset, int fd,
                               void** mhandle);
ncclResult_t ncclIbDeregMr(void* comm, void* mhandle);
/* Register/deregister on one physical device through its cache (fd -1: not DMA-BUF). */
ncclResult_t railnetIbRegMrDev(int ibDevN, void* data, size_t size, uint64_t offset, int fd, struct ibv_mr** mr);
ncclResult_t railnetIbDeregMrDev(int ibDevN, struct ibv_mr* mr);
/* Teardown: deregister what is left in the device's cache and free its PD. */
void railnetIbReleaseDevMrs(struct ncclIbDev* dev);
/* The device's protection domain, allocated by the first comm and freed by the last. */
ncclResult_t railnetIbPdAcquire(int ibDevN, struct ibv_pd** pd);
void railnetIbPdRelease(int ibDevN);

#ifdef __cplusplus
}
#endif
#endif
