/*
 * The IB transport's shared types: the physical devices (one per active HCA port) found at
 * init, the virtual devices NCCL sees (one per physical device, plus fused ones made by
 * makeVDevice), and the helpers discovery and connection setup share.
 *
 * Discovery, properties and vNICs live in init.c; the GID choice in connect.c; GPUDirect
 * probing in gdr.c. NCCL's src/transport/net_ib/ is the model: same names where the concept
 * is NCCL's (ncclIbDevs, ncclIbMergedDevs, ncclIbGetGidIndex).
 */
#ifndef RAILNET_NET_IB_COMMON_H
#define RAILNET_NET_IB_COMMON_H
#include <infiniband/verbs.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include "core.h"
#include "socket.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MAXSUFFIXSIZE 16
#define MAXNAMESIZE (64 + MAXSUFFIXSIZE)
#define MAX_IB_DEVS 32                         /* physical devices (HCA ports) */
#define MAX_IB_VDEVS (MAX_IB_DEVS * 8)         /* virtual devices, fused ones included */
#define NCCL_IB_MAX_DEVS_PER_NIC NCCL_NET_MAX_DEVS_PER_NIC
#define MAX_MERGED_DEV_NAME ((MAXNAMESIZE * NCCL_IB_MAX_DEVS_PER_NIC) + NCCL_IB_MAX_DEVS_PER_NIC)
#define NCCL_NET_IB_MAX_RECVS 8
#define RAILNET_IB_MAX_COLL_BYTES (512 * 1024 * 1024L)

#define NCCL_IB_LLSTR(ll) \
  (((ll) == IBV_LINK_LAYER_INFINIBAND) ? "IB" : (((ll) == IBV_LINK_LAYER_ETHERNET) ? "RoCE" : "UNSPECIFIED"))

/* Fatal asynchronous events seen on a device (or, through qp_context/cq_context, a comm). */
struct ncclIbStats {
  int fatalErrorCount; /* atomic */
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
  int pdRefs;                    /* for the data path (issue 8) */
  struct ibv_pd* pd;
  char devName[MAXNAMESIZE];
  char fullPciPath[PATH_MAX];    /* realpath of <sysfs>/class/infiniband/<dev>/device; "" when none */
  char* pciPath;                 /* the same with port/VF digits merged; NULL when none (rxe) */
  int realPort;                  /* earlier devices on the same PCI device */
  int maxQp;
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

/* The IB transport (v12 interface). Data-path entries are filled by issue 8. */
extern const ncclNet_t railnetNetIb;

/* ---------------------------------------------------------------- init.c */
ncclResult_t ncclIbInitDevices(ncclDebugLogger_t logger);
ncclResult_t ncclIbFinalizeDevices(void);
ncclResult_t ncclIbMakeVDevice(int* d, ncclNetVDeviceProps_t* props);
ncclResult_t ncclIbGetProperties(int dev, ncclNetProperties_t* props);
ncclResult_t ncclIbGetPhysProperties(int dev, ncclNetProperties_t* props);

/* Port speed in Mbps as NCCL computes it: the lowest set bit of active_speed (active_speed_ex
 * when non-zero, rdma-core >= 48) picks SDR 2500 .. XDR 200000, the lowest set bit of
 * active_width picks 1x/4x/8x/12x/2x (no bit: the last entry, as NCCL). */
int ncclIbSpeed(int activeSpeed);
int ncclIbWidth(int activeWidth);
int railnetIbPortSpeed(int activeSpeed, int activeSpeedEx, int activeWidth);

/* $SYSFS_PATH (libibverbs' convention) or "/sys", without a trailing '/'. */
const char* railnetIbSysfsRoot(void);

/* Fatal asynchronous event seen on stats (NCCL_IB_RETURN_ASYNC_EVENTS=1, the default):
 * WARN once per caller and ncclSystemError, so a comm fails instead of hanging. */
ncclResult_t ncclIbStatsCheckFatalCount(struct ncclIbStats* stats, const char* funcName);

/* Tests: tear every device down now whatever the reference count (threads, contexts). */
void railnetIbResetDevices(void);

/* ---------------------------------------------------------------- connect.c (GID) */

/* How the GID types were learnt. */
enum railnetIbGidSource {
  RAILNET_GID_SRC_NONE = 0,    /* no scan (InfiniBand, forced index) */
  RAILNET_GID_SRC_TABLE = 1,   /* ibv_query_gid_table: one call, types included */
  RAILNET_GID_SRC_SYSFS = 2    /* ibv_query_gid per slot, types from gid_attrs/types/<i> */
};

struct railnetIbGidChoice {
  int index;
  union ibv_gid gid;
  int roceVersion;             /* 1, 2; 0 InfiniBand; -1 unknown */
  enum railnetIbGidSource source;
  int scanned;                 /* non-empty GID entries looked at */
  char why[320];
};

/* NCCL's ncclIbGetGidIndex. InfiniBand: NCCL_IB_ROUTABLE_FLID_GID_INDEX when that GID has
 * a routable FLID, else 0. RoCE: NCCL_IB_GID_INDEX when >= 0, else the table scan with
 * NCCL's preference rules (NCCL_IB_ADDR_FAMILY, NCCL_IB_ADDR_RANGE, NCCL_IB_ROCE_VERSION_NUM;
 * link-local and empty entries lose). */
ncclResult_t ncclIbGetGidIndex(struct ibv_context* context, uint8_t portNum, struct ibv_port_attr* portAttr,
                               int* gidIndex);
/* The same with the GID, its type, the source and a sentence saying why (for INFO/diag). */
ncclResult_t railnetIbChooseGid(struct ibv_context* context, const char* devName, uint8_t portNum,
                                const struct ibv_port_attr* portAttr, struct railnetIbGidChoice* choice);
/* The RoCE version in <sysfs>/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<index>:
 * 1 ("IB/RoCE v1", "RoCE v1"), 2 ("RoCE v2"), -1 unreadable (empty slot) or unknown text. */
int railnetIbSysfsRoceVersion(const char* devName, int portNum, int gidIndex);
/* Address family of a GID (IPv4-mapped, unicast or multicast, is AF_INET). */
sa_family_t railnetIbGidFamily(const union ibv_gid* gid);

#ifdef __cplusplus
}
#endif
#endif
