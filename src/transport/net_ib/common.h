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


/* ---------------------------------------------------------------- data path (issue 8) */

#define NCCL_IB_MAX_QPS 128
/* requests per comm: NCCL_NET_MAX_REQUESTS receives of up to 8 buffers each; a request's
 * index fits the 8 bits per request that a send's wr_id carries */
#define NET_IB_MAX_REQUESTS (NCCL_NET_MAX_REQUESTS * NCCL_NET_IB_MAX_RECVS)
#define RAILNET_IB_HANDLE_MAGIC 0x7261696c4e494231ULL /* "railNIB1" */
#define RAILNET_IB_META_MAGIC 0x7261696c4d455441ULL   /* "railMETA" */
#define RAILNET_IB_META_VERSION 1

#define NCCL_NET_IB_REQ_UNUSED 0
#define NCCL_NET_IB_REQ_SEND 1
#define NCCL_NET_IB_REQ_RECV 2
#define NCCL_NET_IB_REQ_FLUSH 3

/* What listen hands out (inside NCCL_NET_HANDLE_MAXSIZE). Connect's progress is kept in the
 * process, keyed by the handle's address, never read back from the handle. */
struct ncclIbHandle {
  uint64_t handleMagic;                /* RAILNET_IB_HANDLE_MAGIC */
  union ncclSocketAddress connectAddr; /* the listener */
  uint64_t socketMagic;                /* the listener's ncclSocket magic */
};

/* Clear-to-send entry: the receiver RDMA-writes one per buffer into the sender's fifo. */
struct ncclIbSendFifo {
  uint64_t addr;
  uint64_t size;
  uint32_t rkeys[NCCL_IB_MAX_DEVS_PER_NIC];
  uint32_t nreqs;
  uint32_t tag;
  uint64_t idx;                        /* fifo position + 1: the entry is valid when it matches */
};

/* Per device, in the connection metadata. */
struct ncclIbDevInfo {
  uint32_t lid;
  uint8_t ibPort;
  uint8_t linkLayer;
  uint8_t mtu;                         /* enum ibv_mtu */
  uint8_t pad;
  int32_t gidIndex;
  union ibv_gid gid;
  uint32_t fifoRkey;                   /* sender: its fifo; receiver: its sizes records */
  uint32_t pad2;
};

struct ncclIbQpInfo {
  uint32_t qpn;
  int32_t devIndex;                    /* index into the sender's/receiver's vDevice */
  struct ibv_ece ece;
  int32_t eceSupported;
  int32_t pad;
};

/* Exchanged once each way over the comm's ncclSocket. Fixed size; validated on receipt. */
struct ncclIbConnectionMetadata {
  uint64_t magic;                      /* RAILNET_IB_META_MAGIC */
  uint32_t version;
  int32_t ndevs;
  int32_t nqps;
  int32_t splitDataOnQps;
  int32_t tc, sl;
  uint64_t fifoAddr;                   /* sender: its fifo; receiver: its sizes records */
  struct ncclIbDevInfo devs[NCCL_IB_MAX_DEVS_PER_NIC];
  struct ncclIbQpInfo qpInfo[NCCL_IB_MAX_QPS];
  char devName[MAX_MERGED_DEV_NAME];
};

struct ncclIbMrHandle {
  struct ibv_mr* mrs[NCCL_IB_MAX_DEVS_PER_NIC];
  int ndevs;
  int ibDevs[NCCL_IB_MAX_DEVS_PER_NIC];  /* physical devices, for deregistration */
};

struct ncclIbQp {
  struct ibv_qp* qp;
  int devIndex;                        /* local device of the vDevice */
  int remDevIndex;                     /* the peer's device of its vDevice */
  struct ibv_ece ece;
  int eceSupported;
};

/* Per physical device of a comm. */
struct ncclIbCommDev {
  int ibDevN;                          /* index in ncclIbDevs */
  struct ibv_pd* pd;
  struct ibv_cq* cq;
  int gidIndex;
  union ibv_gid gid;
  struct ibv_mr* fifoMr;               /* sender: fifo; receiver: sizes records */
  struct ibv_mr* localMr;              /* sender: sizes to write; receiver: fifo entries to write */
  /* receiver, GPUDirect flush: a QP connected to itself that reads one byte */
  struct ibv_qp* flushQp;
  struct ibv_mr* flushMr;
};

struct ncclIbRequest {
  struct ncclIbNetCommBase* base;
  int type;
  int events[NCCL_IB_MAX_DEVS_PER_NIC];
  uint64_t id;                         /* fifo position */
  int nreqs;
  union {
    struct {
      size_t size;
      void* data;
      uint32_t lkeys[NCCL_IB_MAX_DEVS_PER_NIC];
    } send;
    struct {
      int* sizes;                      /* nreqs entries (the sizes records of its slot) */
      size_t posted[NCCL_NET_IB_MAX_RECVS]; /* the sizes irecv posted: a peer may not report more */
    } recv;
  };
};

/* Common head of send and receive comms. */
struct ncclIbNetCommBase {
  int isSend;
  int ready;
  ncclNetVDeviceProps_t vProps;
  int vDev;
  struct ncclIbCommDev devs[NCCL_IB_MAX_DEVS_PER_NIC];
  int nRemDevs;
  struct ncclIbDevInfo remDevs[NCCL_IB_MAX_DEVS_PER_NIC];
  char remDevName[MAX_MERGED_DEV_NAME];
  struct ncclIbQp qps[NCCL_IB_MAX_QPS];
  int nqps;
  int splitDataOnQps;
  int qpIndex;                         /* round robin when not splitting */
  uint64_t fifoHead;
  struct ncclSocket sock;
  union ncclSocketAddress peerAddr;    /* for messages */
  int useInline;
  uint32_t maxInline;                  /* what the QPs were granted */
  int failed;                          /* an error completion was seen */
  struct ncclIbStats stats;
  struct ncclIbRequest reqs[NET_IB_MAX_REQUESTS];
};

struct ncclIbSendComm {
  struct ncclIbNetCommBase base;
  /* written by the receiver */
  struct ncclIbSendFifo fifo[NET_IB_MAX_REQUESTS][NCCL_NET_IB_MAX_RECVS] __attribute__((aligned(64)));
  /* the sizes of a multi-send, written into the receiver's records */
  int sizes[NET_IB_MAX_REQUESTS][NCCL_NET_IB_MAX_RECVS];
  uint64_t remSizesAddr;
  uint32_t remSizesRkeys[NCCL_IB_MAX_DEVS_PER_NIC];
  struct ncclIbRequest* sendReqs[NET_IB_MAX_REQUESTS][NCCL_NET_IB_MAX_RECVS];
  int sendReqsCnt[NET_IB_MAX_REQUESTS];
  /* a slot's clear-to-send entries as validated by its first isend (railnetIbFifoTake): the
   * later isends of a multi-receive and the RDMA writes use this copy, never the fifo, which
   * the peer may rewrite at any time; ctsCount 0: not taken yet */
  struct ncclIbSendFifo cts[NET_IB_MAX_REQUESTS][NCCL_NET_IB_MAX_RECVS];
  int ctsCount[NET_IB_MAX_REQUESTS];
  int ar;                              /* adaptive routing on the first device */
};

struct ncclIbRecvComm {
  struct ncclIbNetCommBase base;
  /* entries written into the sender's fifo, from here */
  struct ncclIbSendFifo elems[NET_IB_MAX_REQUESTS][NCCL_NET_IB_MAX_RECVS] __attribute__((aligned(64)));
  /* written by the sender: the sizes of a multi-receive */
  int sizes[NET_IB_MAX_REQUESTS][NCCL_NET_IB_MAX_RECVS];
  uint64_t remFifoAddr;
  struct ncclIbRequest* recvReqs[NET_IB_MAX_REQUESTS];
  int flushEnabled;
  int flushBuf[16];                    /* where the flush reads go */
};

struct ncclIbListenComm {
  int dev;
  struct ncclSocket sock;
  struct ncclIbCommStage* stage;       /* the accept in progress */
};

/* ---------------------------------------------------------------- connect.c (data path) */
ncclResult_t ncclIbListen(void* ctx, int dev, void* handle, void** listenComm);
ncclResult_t ncclIbConnect(void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_t** sendDevComm);
ncclResult_t ncclIbAccept(void* listenComm, void** recvComm, ncclNetDeviceHandle_t** recvDevComm);
ncclResult_t ncclIbCloseSend(void* sendComm);
ncclResult_t ncclIbCloseRecv(void* recvComm);
ncclResult_t ncclIbCloseListen(void* listenComm);
/* Check a metadata block received from peer (WARN naming the peer on any problem). */
ncclResult_t railnetIbCheckMetadata(const struct ncclIbConnectionMetadata* m, const char* peer, int wantNqps);
/* Check a connect handle before anything is read from it beyond its bytes (WARN, ncclInvalidArgument). */
ncclResult_t railnetIbCheckHandle(const struct ncclIbHandle* h);
int railnetIbParamQpsPerConn(void);
/* Teardown: free the connects their callers abandoned. */
void railnetIbDropConnectStages(void);
int railnetIbParamSplitDataOnQps(void);

/* ---------------------------------------------------------------- p2p.c */
ncclResult_t ncclIbIsend(void* sendComm, void* data, size_t size, int tag, void* mhandle, void* phandle,
                         void** request);
ncclResult_t ncclIbIrecv(void* recvComm, int n, void** data, size_t* sizes, int* tags, void** mhandles,
                         void** phandles, void** request);
ncclResult_t ncclIbIflush(void* recvComm, int n, void** data, int* sizes, void** mhandles, void** request);
ncclResult_t ncclIbTest(void* request, int* done, int* sizes);
/* Copy the clear-to-send entries of fifo slot `slots` (NCCL_NET_IB_MAX_RECVS entries as the
 * receiver RDMA-wrote them) for fifo position pos into copy, once all of them have arrived:
 * *nreqs = their number, 0 when the slot is not complete yet. A slot announcing 0 or more
 * than 8 buffers, or entries that disagree on their number or position: a WARN naming the
 * peer and ncclRemoteError. */
ncclResult_t railnetIbFifoTake(const volatile struct ncclIbSendFifo* slots, uint64_t pos,
                               const union ncclSocketAddress* peerAddr, struct ncclIbSendFifo* copy, int* nreqs);
/* The entry of a taken slot (nreqs entries) that an isend of size bytes with tag takes;
 * taken[r]: entry r has its isend already. *match = -1 when no free entry has the tag. An
 * entry smaller than size (ncclInvalidUsage), or without address or without an rkey for one
 * of the receiver's remDevs devices (ncclRemoteError): a WARN naming the peer. */
ncclResult_t railnetIbFifoMatch(const struct ncclIbSendFifo* entries, int nreqs, const int* taken, int remDevs,
                                size_t size, int tag, const union ncclSocketAddress* peerAddr, int* match);
/* The sizes a sender reported for the n buffers of a receive (immediate data or its sizes
 * records) against what irecv posted: negative or larger is a WARN naming the peer and
 * ncclRemoteError (the peer is not railnet's, or it is broken). */
ncclResult_t railnetIbCheckRecvSizes(const size_t* posted, const int* reported, int n,
                                     const union ncclSocketAddress* peerAddr);
/* "1.2.3.4<5>" of a comm's peer. */
const char* railnetIbPeerStr(struct ncclIbNetCommBase* base, char* buf);

/* ---------------------------------------------------------------- reg.c */
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
/* Tests: registrations alive on a device, and cache hits since the process started. */
int railnetIbMrCacheCount(int ibDevN);
long railnetIbMrCacheHits(void);

#ifdef __cplusplus
}
#endif
#endif
