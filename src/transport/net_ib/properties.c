/*
 * IB virtual devices and properties (properties.h): makeVDevice checks that the members
 * exist and share a link layer, and names the fused device "mlx5_0+mlx5_1"; getProperties
 * answers for a virtual device from its first member, with the summed speed.
 */
#include <stdio.h>
#include <string.h>
#include "properties.h"
#include "devices.h"
#include "eager/eager.h"
#include "gdr.h"
#include "param.h"

enum { P_MERGE_NICS };
static const railnetParam ibPropParams[] = {
    [P_MERGE_NICS] = RAILNET_PARAM_INT_DEF("NCCL_IB_MERGE_NICS", 1, 0, 1,
                                           "Allow makeVDevice to fuse several NICs into one virtual device"),
};
RAILNET_PARAM_TABLE("net_ib/vdevice", ibPropParams);

/* ------------------------------------------------------------------ virtual devices */

ncclResult_t railnetIbMakeVDeviceLocked(int* d, ncclNetVDeviceProps_t* props) {
  if (ncclNIbDevs < 0) {
    WARN("NET/IB : makeVDevice before init");
    return ncclInvalidUsage;
  }
  if (props->ndevs > 1 && railnetParamInt(&ibPropParams[P_MERGE_NICS]) == 0) {
    INFO(NCCL_NET, "NET/IB : Skipping makeVDevice, NCCL_IB_MERGE_NICS=0");
    return ncclInvalidUsage;
  }
  if (props->ndevs <= 0) {
    WARN("NET/IB : Can't make virtual NIC with %d devices", props->ndevs);
    return ncclInvalidUsage;
  }
  if (props->ndevs > NCCL_IB_MAX_DEVS_PER_NIC) {
    WARN("NET/IB : Can't make virtual NIC with %d devices, the maximum is %d", props->ndevs,
         NCCL_IB_MAX_DEVS_PER_NIC);
    return ncclInvalidUsage;
  }
  if (ncclNMergedIbDevs == MAX_IB_VDEVS) {
    WARN("NET/IB : Cannot allocate any more virtual devices (%d)", MAX_IB_VDEVS);
    return ncclInvalidUsage;
  }
  for (int i = 0; i < props->ndevs; i++) {
    if (props->devs[i] < 0 || props->devs[i] >= ncclNIbDevs) {
      WARN("NET/IB : Cannot use physical device %d, max %d", props->devs[i], ncclNIbDevs);
      return ncclInvalidUsage;
    }
  }
  struct ncclIbDev* dev0 = &ncclIbDevs[props->devs[0]];
  for (int i = 1; i < props->ndevs; i++) {
    struct ncclIbDev* dev = &ncclIbDevs[props->devs[i]];
    if (dev->link != dev0->link) {
      WARN("NET/IB : Attempted to merge incompatible devices: [%d]%s:%d/%s and [%d]%s:%d/%s. Try selecting NICs of "
           "only one link type using NCCL_IB_HCA",
           props->devs[0], dev0->devName, dev0->portNum, NCCL_IB_LLSTR(dev0->link), props->devs[i], dev->devName,
           dev->portNum, NCCL_IB_LLSTR(dev->link));
      return ncclInvalidUsage;
    }
  }
  struct ncclIbMergedDev* m = &ncclIbMergedDevs[ncclNMergedIbDevs];
  memset(m, 0, sizeof(*m));
  m->railId = dev0->railId;
  m->planeId = dev0->planeId;
  for (int i = 0; i < props->ndevs; i++) {
    struct ncclIbDev* dev = &ncclIbDevs[props->devs[i]];
    m->vProps.devs[m->vProps.ndevs++] = props->devs[i];
    m->speed += dev->speed;
    if (dev->railId == NCCL_NET_ID_UNDEF || dev->railId != m->railId) m->railId = NCCL_NET_ID_UNDEF;
    if (dev->planeId != m->planeId) m->planeId = NCCL_NET_ID_UNDEF;
    size_t l = strlen(m->devName);
    snprintf(m->devName + l, sizeof(m->devName) - l, "%s%s", i ? "+" : "", dev->devName);
  }
  *d = ncclNMergedIbDevs++;
  INFO(NCCL_NET, "NET/IB : Made virtual device [%d] name=%s speed=%d ndevs=%d", *d, m->devName, m->speed,
       m->vProps.ndevs);
  return ncclSuccess;
}

ncclResult_t ncclIbMakeVDevice(int* d, ncclNetVDeviceProps_t* props) {
  if (d == NULL || props == NULL) {
    WARN("NET/IB : makeVDevice called with a NULL %s", d == NULL ? "device pointer" : "props");
    return ncclInvalidArgument;
  }
  pthread_mutex_lock(&ncclIbLock);
  ncclResult_t res = railnetIbMakeVDeviceLocked(d, props);
  pthread_mutex_unlock(&ncclIbLock);
  return res;
}

/* ------------------------------------------------------------------ properties */

ncclResult_t ncclIbGetPhysProperties(int dev, ncclNetProperties_t* props) {
  if (dev < 0 || dev >= ncclNIbDevs) {
    WARN("NET/IB : Requested properties for physical device %d, there are %d", dev, ncclNIbDevs < 0 ? 0 : ncclNIbDevs);
    return ncclInvalidUsage;
  }
  struct ncclIbDev* ibDev = &ncclIbDevs[dev];
  memset(props, 0, sizeof(*props));
  props->name = ibDev->devName;
  props->speed = ibDev->speed;
  props->pciPath = ibDev->pciPath;
  props->guid = ibDev->guid;
  props->ptrSupport = NCCL_PTR_HOST;
  if (ncclIbGdrSupport() == ncclSuccess) props->ptrSupport |= NCCL_PTR_CUDA; /* peer memory */
  if (dev < RAILNET_GDR_MAX_DEVS && ncclIbDmaBufSupport(dev, ibDev->context) == ncclSuccess)
    props->ptrSupport |= NCCL_PTR_DMABUF;
  props->regIsGlobal = 1;
  props->forceFlush = 0;
  props->latency = ibDev->latency;
  props->port = ibDev->portNum + ibDev->realPort;
  props->maxComms = ibDev->maxQp;
  props->maxRecvs = NCCL_NET_IB_MAX_RECVS; /* eager comms close for multi-receives (eager.h) */
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = RAILNET_IB_MAX_MSG_BYTES; /* what the wire carries (wire.h) */
  props->maxCollBytes = RAILNET_IB_MAX_COLL_BYTES;
  props->maxMultiRequestSize = 1;
  props->railId = ibDev->railId;
  props->planeId = ibDev->planeId;
  return ncclSuccess;
}

ncclResult_t ncclIbGetProperties(int dev, ncclNetProperties_t* props) {
  if (dev < 0 || dev >= ncclNMergedIbDevs) {
    WARN("NET/IB : Requested properties for vNic %d, only %d vNics have been created", dev,
         ncclNMergedIbDevs < 0 ? 0 : ncclNMergedIbDevs);
    return ncclInvalidUsage;
  }
  struct ncclIbMergedDev* m = &ncclIbMergedDevs[dev];
  /* the rest from the first member (members share link layer and features) */
  NCCLCHECK(ncclIbGetPhysProperties(m->vProps.devs[0], props));
  props->name = m->devName;
  props->speed = m->speed;
  props->railId = m->railId;
  props->planeId = m->planeId;
  memcpy(&props->vProps, &m->vProps, sizeof(props->vProps));
  return ncclSuccess;
}
