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
#include "ib_explain.h" /* RAILNET_IB_PORT_* */
#include "socket.h"     /* railnetIfList */

#ifdef __cplusplus
extern "C" {
#endif

/* NCCL_IB_HCA as discovery reads it. */
struct railnetIbHca {
  const char* spec;   /* the setting; NULL when unset */
  railnetIfList list;
  int parsed;         /* 0: spec is malformed (discovery fails on it, after a WARN) */
};
/* Reads and parses NCCL_IB_HCA: ncclSuccess, or the parser's failure (hca->parsed = 0). */
ncclResult_t railnetIbHcaRead(struct railnetIbHca* hca);
/* Does discovery take port `port` of HCA dev, in state `state` (IBV_PORT_*) with link layer
 * linkLayer (IBV_LINK_LAYER_*), under hca? 0 yes; else every RAILNET_IB_PORT_* reason that
 * applies. why (may be NULL) gets the verdict in a sentence, naming the first reason in
 * discovery's order (state, link layer, NCCL_IB_HCA). Discovery and railnetIbExplainPorts
 * both decide with it. */
unsigned railnetIbPortWanted(const char* dev, int port, int state, int linkLayer, const struct railnetIbHca* hca,
                             char* why, size_t whySize);

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
