/*
 * The IB transport's devices: the physical ones (one per active HCA port) found by
 * discovery (discovery.c), the virtual ones NCCL sees (one per physical device, plus fused
 * ones made by makeVDevice, properties.c), the lock that guards both, the sysfs root and
 * the fatal-event counters. Everything else in net_ib reads them; only discovery and
 * makeVDevice write them. NCCL's names (ncclIbDevs, ncclIbMergedDevs, ncclIbLock).
 */
#ifndef RAILNET_NET_IB_DEVICES_H
#define RAILNET_NET_IB_DEVICES_H
#include <infiniband/verbs.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include "core.h"
#include "socket.h"
#include "wire.h" /* MAXNAMESIZE, MAX_MERGED_DEV_NAME, NCCL_IB_MAX_DEVS_PER_NIC */

#ifdef __cplusplus
extern "C" {
#endif

#define MAX_IB_DEVS 32                         /* physical devices (HCA ports) */
#define MAX_IB_VDEVS (MAX_IB_DEVS * 8)         /* virtual devices, fused ones included */

#define NCCL_IB_LLSTR(ll) \
  (((ll) == IBV_LINK_LAYER_INFINIBAND) ? "IB" : (((ll) == IBV_LINK_LAYER_ETHERNET) ? "RoCE" : "UNSPECIFIED"))

/* Asynchronous events seen on a device (async.c writes, comms read; all atomic). A device
 * or CQ error is fatal for every comm of the device; a QP's error only for the comm that
 * owns the QP: its number goes into a ring the comms look through (liveness.c); a port
 * that went down bumps portErrors and the comms on it look at the port. */
#define RAILNET_IB_QP_EVENTS 16
struct ncclIbStats {
  int fatalErrorCount;
  uint32_t portErrors;
  uint32_t qpErrors;                        /* QP events so far; the last ones in qpErrorNums */
  uint32_t qpErrorNums[RAILNET_IB_QP_EVENTS]; /* qp_num of event k at k % RAILNET_IB_QP_EVENTS */
};

/* One registration of a page-aligned range, shared by every regMr that falls inside it. */
struct ncclIbMr {
  uintptr_t addr;                /* page-aligned start */
  size_t pages;
  int refs;
  struct ibv_mr* mr;
};
struct ncclIbMrCache {
  struct ncclIbMr* slots;
  int capacity, population;
};

/* One active port of one HCA: what NCCL calls a physical IB device. */
struct ncclIbDev {
  pthread_mutex_t lock;
  int device;                    /* index in ibv_get_device_list at discovery */
  uint64_t guid;                 /* sys_image_guid */
  uint8_t portNum;
  uint8_t link;                  /* IBV_LINK_LAYER_* */
  int speed;                     /* Mbps */
  struct ibv_context* context;   /* shared by the ports of one HCA */
  int ownsContext;               /* the first port of its HCA closes the context */
  int pdRefs;                    /* comms using pd (under lock) */
  struct ibv_pd* pd;
  struct ncclIbMrCache mrCache;  /* registrations on pd (under lock), reg.c */
  char devName[MAXNAMESIZE];
  char fullPciPath[PATH_MAX];    /* realpath of <sysfs>/class/infiniband/<dev>/device; "" when none */
  char* pciPath;                 /* the same with port/VF digits merged; NULL when none (rxe) */
  int realPort;                  /* earlier devices on the same PCI device */
  int maxQp;
  int maxRdAtom, maxInitRdAtom;  /* RDMA reads and atomics a QP serves / has in flight at once */
  int maxCqe;                    /* entries a CQ can hold */
  int physPorts;                 /* ports of its HCA (ibv_device_attr.phys_port_cnt) */
  float latency;
  int ar;                        /* adaptive routing */
  struct ibv_port_attr portAttr;
  struct ncclIbStats stats;
  int16_t railId, planeId;
  /* the GID chosen at discovery (ncclIbGetGidIndex), logged once */
  int gidIndex;
  union ibv_gid gid;
};

/* What NCCL sees: a virtual device of 1..NCCL_IB_MAX_DEVS_PER_NIC physical ones. */
struct ncclIbMergedDev {
  ncclNetVDeviceProps_t vProps;
  int speed;                     /* sum of the members' speeds */
  int16_t railId, planeId;
  char devName[MAX_MERGED_DEV_NAME]; /* "mlx5_0+mlx5_1" */
};

extern int ncclNIbDevs;          /* -1 until discovery ran */
extern int ncclNMergedIbDevs;
extern struct ncclIbDev ncclIbDevs[MAX_IB_DEVS];
extern struct ncclIbMergedDev ncclIbMergedDevs[MAX_IB_VDEVS];
extern char ncclIbIfName[MAX_IF_NAME_SIZE + 1]; /* the OOB interface */
extern union ncclSocketAddress ncclIbIfAddr;
extern int ncclIbRelaxedOrderingEnabled;
extern int64_t ncclIbArThreshold;              /* messages from this size use adaptive routing */
/* Guards discovery, teardown and the virtual devices. */
extern pthread_mutex_t ncclIbLock;

/* $SYSFS_PATH (libibverbs' convention) or "/sys", without a trailing '/'. */
const char* railnetIbSysfsRoot(void);
/* The first line of <sysfs root>/<fmt ...> into buf, without its newline: 0, or an errno
 * value (ENOENT, EINVAL for an empty file, ...). */
int railnetIbSysfsLine(char* buf, size_t size, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

/* Fatal asynchronous event seen on stats (NCCL_IB_RETURN_ASYNC_EVENTS=1, the default):
 * WARN once per caller and ncclSystemError, so a comm fails instead of hanging. */
ncclResult_t ncclIbStatsCheckFatalCount(struct ncclIbStats* stats, const char* funcName);

#ifdef __cplusplus
}
#endif
#endif
