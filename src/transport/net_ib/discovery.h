/*
 * IB device discovery (NCCL's ncclIbInitDevices without its reference count, which is
 * init.c's): every HCA from ibv_get_device_list, every port that is ACTIVE with link layer
 * InfiniBand or Ethernet and that NCCL_IB_HCA selects becomes a physical device, ordered by
 * PCI address (NCCL_IB_DEVICE_PCI_ORDER; devices without one, like rxe, last, in discovery
 * order), each a virtual device of its own; the out-of-band interface comes from
 * ncclFindInterfaces; each HCA gets its event thread (async.c) and each port its GID.
 */
#ifndef RAILNET_NET_IB_DISCOVERY_H
#define RAILNET_NET_IB_DISCOVERY_H
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Fills ncclIbDevs / ncclIbMergedDevs; the caller holds ncclIbLock and ncclNIbDevs is -1.
 * On failure everything is back to "not discovered". */
ncclResult_t railnetIbDiscoverLocked(void);
/* Teardown after the event threads stopped and the comms are gone: the registrations and
 * PDs left, the contexts, the tables back to "not discovered", the GDR answers forgotten.
 * The caller holds ncclIbLock. */
void railnetIbCloseDevicesLocked(void);

/* Port speed in Mbps as NCCL computes it: the lowest set bit of active_speed (active_speed_ex
 * when non-zero, rdma-core >= 48) picks SDR 2500 .. XDR 200000, the lowest set bit of
 * active_width picks 1x/4x/8x/12x/2x (no bit: the last entry, as NCCL). */
int ncclIbSpeed(int activeSpeed);
int ncclIbWidth(int activeWidth);
int railnetIbPortSpeed(int activeSpeed, int activeSpeedEx, int activeWidth);

#ifdef __cplusplus
}
#endif
#endif
