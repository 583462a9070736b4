/*
 * IB transport: device discovery, properties and virtual (fused) devices — NCCL's
 * net_ib/init.cc.
 *
 * Discovery runs once (the first init; the last finalize tears it down): every HCA from
 * ibv_get_device_list, every port that is ACTIVE with link layer InfiniBand or Ethernet and
 * that NCCL_IB_HCA selects becomes a physical device. They are ordered by PCI address
 * (NCCL_IB_DEVICE_PCI_ORDER; devices without one, like rxe, last, in discovery order), and
 * each becomes a virtual device of its own; makeVDevice adds fused ones. The out-of-band
 * interface comes from ncclFindInterfaces. One thread per HCA logs its asynchronous events.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "common.h"
#include "gdr.h"
#include "ibvwrap.h"
#include "param.h"

enum {
  P_DISABLE,
  P_HCA,
  P_MERGE_VFS,
  P_MERGE_NICS,
  P_PCI_ORDER,
  P_RELAXED_ORDERING,
  P_ADAPTIVE_ROUTING,
  P_AR_THRESHOLD,
  P_ASYNC_EVENTS,
  P_SYSFS
};
static const railnetParam ibInitParams[] = {
    [P_DISABLE] = RAILNET_PARAM_INT_DEF("NCCL_IB_DISABLE", 0, 0, 1, "1: do not use the IB transport"),
    [P_HCA] = RAILNET_PARAM_STR_DEF("NCCL_IB_HCA", NULL,
                                    "HCAs (and :ports) to use: prefixes, '=' exact names, '^' to exclude, "
                                    "e.g. mlx5_0:1,mlx5_1 or ^=mlx5_3"),
    [P_MERGE_VFS] = RAILNET_PARAM_INT_DEF("NCCL_IB_MERGE_VFS", 1, 0, 1,
                                          "Treat the virtual functions of one NIC as one PCI device"),
    [P_MERGE_NICS] = RAILNET_PARAM_INT_DEF("NCCL_IB_MERGE_NICS", 1, 0, 1,
                                           "Allow makeVDevice to fuse several NICs into one virtual device"),
    [P_PCI_ORDER] = RAILNET_PARAM_INT_DEF("NCCL_IB_DEVICE_PCI_ORDER", 1, 0, 1,
                                          "Order devices by PCI address so that every node numbers them alike"),
    [P_RELAXED_ORDERING] = RAILNET_PARAM_INT_DEF("NCCL_IB_PCI_RELAXED_ORDERING", 2, 0, 2,
                                                 "PCI relaxed ordering for registrations (0 off, 1 on, 2 when "
                                                 "libibverbs has ibv_reg_mr_iova2)"),
    [P_ADAPTIVE_ROUTING] = RAILNET_PARAM_INT_DEF("NCCL_IB_ADAPTIVE_ROUTING", -2, -2, 1,
                                                 "Adaptive routing (-2: on for InfiniBand, off for RoCE)"),
    [P_AR_THRESHOLD] = RAILNET_PARAM_INT_DEF("NCCL_IB_AR_THRESHOLD", 8192, 0, INT64_MAX,
                                             "Messages of at least this size use adaptive routing"),
    [P_ASYNC_EVENTS] = RAILNET_PARAM_INT_DEF("NCCL_IB_RETURN_ASYNC_EVENTS", 1, 0, 1,
                                             "A fatal asynchronous event makes the device's comms fail"),
    [P_SYSFS] = RAILNET_PARAM_STR_DEF("SYSFS_PATH", "/sys",
                                      "Root of sysfs (libibverbs' convention); tests point it at a tree of their own"),
};
RAILNET_PARAM_TABLE("net_ib", ibInitParams);

int ncclNIbDevs = -1;
int ncclNMergedIbDevs = -1;
struct ncclIbDev ncclIbDevs[MAX_IB_DEVS];
struct ncclIbMergedDev ncclIbMergedDevs[MAX_IB_VDEVS];
char ncclIbIfName[MAX_IF_NAME_SIZE + 1];
union ncclSocketAddress ncclIbIfAddr;
int ncclIbRelaxedOrderingEnabled = 0;
int64_t ncclIbArThreshold = 8192;

static pthread_mutex_t ibLock = PTHREAD_MUTEX_INITIALIZER;
static int refCount;

/* ------------------------------------------------------------------ small helpers */

const char* railnetIbSysfsRoot(void) {
  static _Thread_local char root[PATH_MAX];
  const char* s = railnetParamStr(&ibInitParams[P_SYSFS]);
  if (s == NULL || s[0] == '\0') s = "/sys";
  size_t n = strlen(s);
  while (n > 1 && s[n - 1] == '/') n--;
  snprintf(root, sizeof(root), "%.*s", (int)n, s);
  return root;
}

static const int ibvWidths[] = {1, 4, 8, 12, 2};
static const int ibvSpeeds[] = {
    2500,   /* SDR */
    5000,   /* DDR */
    10000,  /* QDR */
    10000,  /* FDR10 */
    14000,  /* FDR */
    25000,  /* EDR */
    50000,  /* HDR */
    100000, /* NDR */
    200000  /* XDR */
};

/* Index of the lowest set bit below max; max when none is. */
static int firstBitSet(int val, int max) {
  int i = 0;
  while (i < max && (val & (1 << i)) == 0) i++;
  return i;
}
int ncclIbWidth(int activeWidth) {
  return ibvWidths[firstBitSet(activeWidth, (int)RAILNET_ARRAY_SIZE(ibvWidths) - 1)];
}
int ncclIbSpeed(int activeSpeed) {
  return ibvSpeeds[firstBitSet(activeSpeed, (int)RAILNET_ARRAY_SIZE(ibvSpeeds) - 1)];
}
int railnetIbPortSpeed(int activeSpeed, int activeSpeedEx, int activeWidth) {
  return ncclIbSpeed(activeSpeedEx ? activeSpeedEx : activeSpeed) * ncclIbWidth(activeWidth);
}

ncclResult_t ncclIbStatsCheckFatalCount(struct ncclIbStats* stats, const char* funcName) {
  if (railnetParamInt(&ibInitParams[P_ASYNC_EVENTS]) &&
      __atomic_load_n(&stats->fatalErrorCount, __ATOMIC_RELAXED) != 0) {
    WARN("communicator encountered a fatal error (detected in %s)", funcName);
    return ncclSystemError;
  }
  return ncclSuccess;
}

/* ------------------------------------------------------------------ PCI paths */

/* fullPath: realpath of the device link ("" when none); *path: a copy with the port digit
 * (and with NCCL_IB_MERGE_VFS the device digits of a VF) set to 0, or NULL. */
static void ibGetPciPath(const char* devName, char** path, char* fullPath) {
  char link[PATH_MAX];
  snprintf(link, sizeof(link), "%s/class/infiniband/%s/device", railnetIbSysfsRoot(), devName);
  char* p = realpath(link, NULL);
  snprintf(fullPath, PATH_MAX, "%s", p ? p : "");
  if (p == NULL) {
    /* rxe, siw and other software devices have no PCI device behind them */
    INFO(NCCL_NET, "NET/IB : %s has no PCI device (%s: %s); its pciPath is NULL", devName, link, strerror(errno));
  } else {
    size_t len = strlen(p);
    if (len >= 4) {
      p[len - 1] = '0';
      if (railnetParamInt(&ibInitParams[P_MERGE_VFS])) p[len - 3] = p[len - 4] = '0';
    }
  }
  *path = p;
}

/* Same PCI device (VFs merged with NCCL_IB_MERGE_VFS)? */
static int ibMatchVfPath(const char* a, const char* b) {
  if (a == NULL || b == NULL) return 0;
  size_t len = strlen(a), cut = railnetParamInt(&ibInitParams[P_MERGE_VFS]) ? 4 : 1;
  if (len < cut) return 0;
  return strncmp(a, b, len - cut) == 0;
}

/* The last component of a PCI path ("0000:17:00.1") as a number without its function. */
static int64_t pciPathToInt64(const char* path) {
  const char* s = strrchr(path, '/');
  s = s ? s + 1 : path;
  int64_t id = 0;
  for (; *s; s++) {
    int v;
    if (*s >= '0' && *s <= '9') v = *s - '0';
    else if (*s >= 'a' && *s <= 'f') v = *s - 'a' + 10;
    else if (*s >= 'A' && *s <= 'F') v = *s - 'A' + 10;
    else if (*s == ':' || *s == '.') continue;
    else break;
    id = id * 16 + v;
  }
  return id - (id & 0xf);
}

/* NCCL's order: by PCI address; devices without one last. Stable, so that ties (ports of
 * one NIC, PCI-less devices) keep the order of discovery. */
static int ibCompareDevs(const struct ncclIbDev* a, const struct ncclIbDev* b) {
  int ea = a->fullPciPath[0] == '\0', eb = b->fullPciPath[0] == '\0';
  if (ea || eb) return ea - eb;
  int64_t ia = pciPathToInt64(a->fullPciPath), ib = pciPathToInt64(b->fullPciPath);
  return ia < ib ? -1 : ia > ib;
}

static void ibSortDevs(struct ncclIbDev* devs, int n) {
  static struct ncclIbDev tmp;
  for (int i = 1; i < n; i++) {
    int j = i;
    if (ibCompareDevs(&devs[j - 1], &devs[i]) <= 0) continue;
    tmp = devs[i];
    while (j > 0 && ibCompareDevs(&devs[j - 1], &tmp) > 0) {
      devs[j] = devs[j - 1];
      j--;
    }
    devs[j] = tmp;
  }
}

/* ------------------------------------------------------------------ async events */

struct ibAsync {
  pthread_t thread;
  struct ibv_context* context;
  char name[MAXNAMESIZE];
  int running;
};
static struct ibAsync ibAsyncs[MAX_IB_DEVS];
static int nIbAsyncs;
static int ibAsyncStop; /* atomic */

static void markContextFatal(struct ibv_context* ctx) {
  for (int d = 0; d < ncclNIbDevs; d++)
    if (ncclIbDevs[d].context == ctx) __atomic_fetch_add(&ncclIbDevs[d].stats.fatalErrorCount, 1, __ATOMIC_RELAXED);
}

static void ibHandleAsyncEvent(struct ibAsync* a, struct ibv_async_event* ev) {
  const char* str = "unknown";
  if (wrap_ibv_event_type_str(&str, ev->event_type) != ncclSuccess || str == NULL) str = "unknown";
  const char* name = a->name;
  switch (ev->event_type) {
    case IBV_EVENT_DEVICE_FATAL:
      WARN("NET/IB : %s async fatal event: %s", name, str);
      markContextFatal(a->context);
      break;
    case IBV_EVENT_CQ_ERR:
      WARN("NET/IB : %s async fatal event on CQ (%p): %s", name, (void*)ev->element.cq, str);
      markContextFatal(a->context);
      break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
      WARN("NET/IB : %s async fatal event on QP (%p) qpn=%u: %s", name, (void*)ev->element.qp,
           ev->element.qp ? ev->element.qp->qp_num : 0u, str);
      markContextFatal(a->context);
      break;
    case IBV_EVENT_SRQ_ERR:
      WARN("NET/IB : %s async fatal event on SRQ, unused for now (%p): %s", name, (void*)ev->element.srq, str);
      break;
    case IBV_EVENT_GID_CHANGE:
      WARN("NET/IB : %s:%d GID table changed", name, ev->element.port_num);
      break;
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_PORT_ACTIVE:
    case IBV_EVENT_LID_CHANGE:
    case IBV_EVENT_PKEY_CHANGE:
    case IBV_EVENT_SM_CHANGE:
    case IBV_EVENT_CLIENT_REREGISTER:
      WARN("NET/IB : %s:%d Got non-fatal async event: %s(%d)", name, ev->element.port_num, str, ev->event_type);
      break;
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      WARN("NET/IB : %s Got non-fatal async event: %s(%d)", name, str, ev->event_type);
      break;
    case IBV_EVENT_COMM_EST:
      break;
    default:
      WARN("NET/IB : %s unknown event type (%d)", name, ev->event_type);
      break;
  }
}

static void* ibAsyncMain(void* arg) {
  struct ibAsync* a = (struct ibAsync*)arg;
  while (!__atomic_load_n(&ibAsyncStop, __ATOMIC_ACQUIRE)) {
    /* poll with a timeout so that teardown can stop the thread; a context without an
     * event fd (tests) just idles */
    struct pollfd pfd = {a->context->async_fd, POLLIN, 0};
    int r = poll(&pfd, a->context->async_fd >= 0 ? 1 : 0, 100);
    if (r <= 0 || !(pfd.revents & POLLIN)) continue;
    struct ibv_async_event ev;
    if (wrap_ibv_get_async_event(a->context, &ev) != ncclSuccess) break;
    ibHandleAsyncEvent(a, &ev);
    if (wrap_ibv_ack_async_event(&ev) != ncclSuccess) break;
  }
  return NULL;
}

static void ibAsyncStart(struct ibv_context* ctx, const char* name) {
  if (nIbAsyncs == MAX_IB_DEVS) return;
  struct ibAsync* a = &ibAsyncs[nIbAsyncs];
  memset(a, 0, sizeof(*a));
  a->context = ctx;
  snprintf(a->name, sizeof(a->name), "%s", name);
  if (pthread_create(&a->thread, NULL, ibAsyncMain, a) != 0) {
    WARN("NET/IB : %s: cannot start the async event thread (%s); device events will not be logged", name,
         strerror(errno));
    return;
  }
  a->running = 1;
  nIbAsyncs++;
}

/* ------------------------------------------------------------------ discovery */

/* Everything back to "not discovered". Caller holds ibLock. */
static void ibTeardownLocked(void) {
  __atomic_store_n(&ibAsyncStop, 1, __ATOMIC_RELEASE);
  for (int i = 0; i < nIbAsyncs; i++)
    if (ibAsyncs[i].running) pthread_join(ibAsyncs[i].thread, NULL);
  nIbAsyncs = 0;
  __atomic_store_n(&ibAsyncStop, 0, __ATOMIC_RELEASE);
  railnetIbDropConnectStages();
  for (int d = 0; d < ncclNIbDevs; d++) railnetIbReleaseDevMrs(&ncclIbDevs[d]);
  for (int d = 0; d < ncclNIbDevs; d++) {
    struct ncclIbDev* dev = &ncclIbDevs[d];
    if (dev->ownsContext && dev->context) wrap_ibv_close_device(dev->context);
    free(dev->pciPath);
    pthread_mutex_destroy(&dev->lock);
  }
  memset(ncclIbDevs, 0, sizeof(ncclIbDevs));
  memset(ncclIbMergedDevs, 0, sizeof(ncclIbMergedDevs));
  ncclNIbDevs = -1;
  ncclNMergedIbDevs = -1;
  refCount = 0;
  railnetIbGdrReset();
}

/* NCCL dlcloses net plugins, and the v8..v10 interfaces have no finalize: stop the async
 * event threads before their code is unmapped (also runs at exit: each waits <= 100 ms). */
__attribute__((destructor)) static void ibUnload(void) {
  __atomic_store_n(&ibAsyncStop, 1, __ATOMIC_RELEASE);
  for (int i = 0; i < nIbAsyncs; i++)
    if (ibAsyncs[i].running) pthread_join(ibAsyncs[i].thread, NULL);
  nIbAsyncs = 0;
}

void railnetIbResetDevices(void) {
  pthread_mutex_lock(&ibLock);
  if (ncclNIbDevs >= 0) ibTeardownLocked();
  refCount = 0;
  pthread_mutex_unlock(&ibLock);
}

static ncclResult_t ibMakeVDeviceLocked(int* d, ncclNetVDeviceProps_t* props);

/* Adds the usable ports of one HCA. */
static ncclResult_t ibAddDevice(struct ibv_device* device, int index, const railnetIfList* hca) {
  const char* name = wrap_ibv_get_device_name(device);
  struct ibv_context* context = NULL;
  if (wrap_ibv_open_device(&context, device) != ncclSuccess || context == NULL) {
    WARN("NET/IB : Unable to open device %s", name);
    return ncclSuccess;
  }
  struct ibv_device_attr devAttr;
  memset(&devAttr, 0, sizeof(devAttr));
  if (wrap_ibv_query_device(context, &devAttr) != ncclSuccess) {
    WARN("NET/IB : Unable to query device %s", name);
    wrap_ibv_close_device(context);
    return ncclSuccess;
  }
  int nPorts = 0;
  for (int port = 1; port <= devAttr.phys_port_cnt; port++) {
    struct ibv_port_attr portAttr;
    memset(&portAttr, 0, sizeof(portAttr));
    if (wrap_ibv_query_port(context, (uint8_t)port, &portAttr) != ncclSuccess) {
      WARN("NET/IB : Unable to query port_num %d of %s", port, name);
      continue;
    }
    if (portAttr.state != IBV_PORT_ACTIVE) {
      INFO(NCCL_NET, "NET/IB : %s:%d skipped: port state %s", name, port,
           portAttr.state == IBV_PORT_DOWN ? "DOWN" : portAttr.state == IBV_PORT_INIT ? "INIT" : "not ACTIVE");
      continue;
    }
    if (portAttr.link_layer != IBV_LINK_LAYER_INFINIBAND && portAttr.link_layer != IBV_LINK_LAYER_ETHERNET) {
      INFO(NCCL_NET, "NET/IB : %s:%d skipped: link layer %d is neither InfiniBand nor Ethernet", name, port,
           portAttr.link_layer);
      continue;
    }
    if (!railnetIfListSelects(hca, name, port)) {
      TRACE(NCCL_NET, "NET/IB : %s:%d not selected by NCCL_IB_HCA", name, port);
      continue;
    }
    if (ncclNIbDevs == MAX_IB_DEVS) {
      WARN("NET/IB : more than %d active ports; %s:%d and later ones are not used (select some with NCCL_IB_HCA)",
           MAX_IB_DEVS, name, port);
      break;
    }
    struct ncclIbDev* dev = &ncclIbDevs[ncclNIbDevs];
    memset(dev, 0, sizeof(*dev));
    dev->device = index;
    dev->guid = devAttr.sys_image_guid;
    dev->portAttr = portAttr;
    dev->portNum = (uint8_t)port;
    dev->link = portAttr.link_layer;
    dev->speed = railnetIbPortSpeed(portAttr.active_speed, 0, portAttr.active_width);
    dev->context = context;
    dev->ownsContext = nPorts == 0;
    snprintf(dev->devName, sizeof(dev->devName), "%s", name);
    ibGetPciPath(dev->devName, &dev->pciPath, dev->fullPciPath);
    dev->maxQp = devAttr.max_qp;
    dev->railId = NCCL_NET_ID_UNDEF;
    dev->planeId = NCCL_NET_ID_UNDEF;
    dev->gidIndex = -1;
    /* adaptive routing: on by default on InfiniBand only */
    dev->ar = portAttr.link_layer == IBV_LINK_LAYER_INFINIBAND;
    int64_t ar = railnetParamInt(&ibInitParams[P_ADAPTIVE_ROUTING]);
    if (ar != -2) dev->ar = (int)ar;
    INFO(NCCL_NET, "NET/IB: [%d] %s:%s:%d/%s speed=%d context=%p pciPath=%s ar=%d", index, name,
         device->dev_name, port, NCCL_IB_LLSTR(portAttr.link_layer), dev->speed, (void*)context,
         dev->pciPath ? dev->pciPath : "(none)", dev->ar);
    ncclNIbDevs++;
    nPorts++;
  }
  if (nPorts == 0) {
    if (wrap_ibv_close_device(context) != ncclSuccess) return ncclInternalError;
  } else {
    ibAsyncStart(context, name);
  }
  return ncclSuccess;
}

static void ibLogGid(struct ncclIbDev* dev) {
  struct railnetIbGidChoice ch;
  if (railnetIbChooseGid(dev->context, dev->devName, dev->portNum, &dev->portAttr, &ch) != ncclSuccess) {
    WARN("NET/IB : %s:%d: could not choose a GID index (see above); connections will choose again", dev->devName,
         dev->portNum);
    return;
  }
  dev->gidIndex = ch.index;
  dev->gid = ch.gid;
  char gidStr[INET6_ADDRSTRLEN] = "?";
  ibvGetGidStr(&ch.gid, gidStr, sizeof(gidStr));
  char type[24];
  if (dev->link == IBV_LINK_LAYER_INFINIBAND) snprintf(type, sizeof(type), "IB");
  else if (ch.roceVersion > 0) snprintf(type, sizeof(type), "RoCE v%d", ch.roceVersion);
  else snprintf(type, sizeof(type), "RoCE v?");
  INFO(NCCL_INIT | NCCL_NET, "NET/IB : %s:%d GID index %d %s (%s, %s): %s", dev->devName, dev->portNum, ch.index,
       gidStr, type, railnetIbGidFamily(&ch.gid) == AF_INET ? "IPv4" : "IPv6", ch.why);
}

static ncclResult_t ibDiscoverLocked(void) {
  ncclResult_t res = ncclSuccess;
  static int shownHca = 0;
  struct ibv_device** devices = NULL;
  int nDevices = 0;
  wrap_ibv_fork_init();

  int nIfs = 0;
  NCCLCHECK(railnetFindInterfaces(ncclIbIfName, &ncclIbIfAddr, MAX_IF_NAME_SIZE, 1, &nIfs, NULL));
  if (nIfs != 1) {
    WARN("NET/IB : No IP interface found.");
    return ncclInternalError;
  }

  const char* hcaSpec = railnetParamStr(&ibInitParams[P_HCA]);
  if (hcaSpec != NULL && shownHca++ == 0) INFO(NCCL_NET | NCCL_ENV, "NCCL_IB_HCA set to %s", hcaSpec);
  railnetIfList hca;
  NCCLCHECK(railnetIfListParse(hcaSpec, 1, &hca));

  ncclNIbDevs = 0;
  ncclNMergedIbDevs = 0;
  NCCLCHECKGOTO(wrap_ibv_get_device_list(&devices, &nDevices), res, fail);
  for (int d = 0; d < nDevices && ncclNIbDevs < MAX_IB_DEVS; d++)
    NCCLCHECKGOTO(ibAddDevice(devices[d], d, &hca), res, fail);
  if (devices) wrap_ibv_free_device_list(devices);
  devices = NULL;

  if (ncclNIbDevs == 0) INFO(NCCL_INIT | NCCL_NET, "NET/IB : No device found.");

  int roMode = (int)railnetParamInt(&ibInitParams[P_RELAXED_ORDERING]);
  ncclIbRelaxedOrderingEnabled =
      (roMode == 1 || roMode == 2) && wrap_ibv_reg_mr_iova2(NULL, NULL, NULL, 0, 0, 0) != ncclInternalError;
  ncclIbArThreshold = railnetParamInt(&ibInitParams[P_AR_THRESHOLD]);

  if (railnetParamInt(&ibInitParams[P_PCI_ORDER])) ibSortDevs(ncclIbDevs, ncclNIbDevs);
  char line[2048] = "";
  for (int d = 0; d < ncclNIbDevs; d++) {
    struct ncclIbDev* dev = &ncclIbDevs[d];
    pthread_mutex_init(&dev->lock, NULL);
    dev->realPort = 0;
    for (int e = 0; e < d; e++) dev->realPort += ibMatchVfPath(dev->pciPath, ncclIbDevs[e].pciPath);
    size_t l = strlen(line);
    snprintf(line + l, sizeof(line) - l, " [%d]%s:%d/%s", d, dev->devName, dev->portNum, NCCL_IB_LLSTR(dev->link));
    ncclNetVDeviceProps_t vProps;
    memset(&vProps, 0, sizeof(vProps));
    vProps.ndevs = 1;
    vProps.devs[0] = d;
    int vDev;
    NCCLCHECKGOTO(ibMakeVDeviceLocked(&vDev, &vProps), res, fail);
  }
  for (int d = 0; d < ncclNIbDevs; d++) ibLogGid(&ncclIbDevs[d]);
  if (ncclNIbDevs > 0) {
    char addr[SOCKET_NAME_MAXLEN + 1];
    INFO(NCCL_INIT | NCCL_NET, "NET/IB : Using%s %s; OOB %s:%s", line, ncclIbRelaxedOrderingEnabled ? "[RO]" : "",
         ncclIbIfName, ncclSocketToString(&ncclIbIfAddr, addr, 1));
  }
  return ncclSuccess;
fail:
  if (devices) wrap_ibv_free_device_list(devices);
  ibTeardownLocked();
  return res;
}

ncclResult_t ncclIbInitDevices(ncclDebugLogger_t logger) {
  if (logger) railnetSetLogger(logger);
  if (railnetParamInt(&ibInitParams[P_DISABLE])) {
    INFO(NCCL_INIT | NCCL_NET, "NET/IB : disabled by NCCL_IB_DISABLE=1");
    return ncclInternalError;
  }
  if (wrap_ibv_symbols() != ncclSuccess) return ncclInternalError;
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&ibLock);
  if (ncclNIbDevs == -1) res = ibDiscoverLocked();
  if (res == ncclSuccess) refCount++;
  pthread_mutex_unlock(&ibLock);
  return res;
}

ncclResult_t ncclIbFinalizeDevices(void) {
  pthread_mutex_lock(&ibLock);
  if (refCount > 0 && --refCount == 0 && ncclNIbDevs >= 0) ibTeardownLocked();
  pthread_mutex_unlock(&ibLock);
  return ncclSuccess;
}

/* ------------------------------------------------------------------ virtual devices */

static ncclResult_t ibMakeVDeviceLocked(int* d, ncclNetVDeviceProps_t* props) {
  if (ncclNIbDevs < 0) {
    WARN("NET/IB : makeVDevice before init");
    return ncclInvalidUsage;
  }
  if (props->ndevs > 1 && railnetParamInt(&ibInitParams[P_MERGE_NICS]) == 0) {
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
  pthread_mutex_lock(&ibLock);
  ncclResult_t res = ibMakeVDeviceLocked(d, props);
  pthread_mutex_unlock(&ibLock);
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
  props->maxRecvs = NCCL_NET_IB_MAX_RECVS;
  props->netDeviceType = NCCL_NET_DEVICE_HOST;
  props->netDeviceVersion = NCCL_NET_DEVICE_INVALID_VERSION;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES;
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

/* ------------------------------------------------------------------ ncclNet entry points */

static ncclResult_t ibInit(void** ctx, uint64_t commId, ncclNetCommConfig_t* config, ncclDebugLogger_t logger,
                           ncclProfilerCallback_t prof) {
  (void)commId;
  (void)prof;
  NCCLCHECK(ncclIbInitDevices(logger));
  ncclNetCommConfig_t* c;
  ncclResult_t res = RAILNET_CALLOC(&c, 1, "an IB context");
  if (res != ncclSuccess) {
    ncclIbFinalizeDevices();
    return res;
  }
  c->trafficClass = config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
  if (ctx) *ctx = c;
  else free(c);
  return ncclSuccess;
}

static ncclResult_t ibDevices(int* ndev) {
  *ndev = ncclNMergedIbDevs < 0 ? 0 : ncclNMergedIbDevs;
  return ncclSuccess;
}

static ncclResult_t ibFinalize(void* ctx) {
  free(ctx);
  return ncclIbFinalizeDevices();
}

static ncclResult_t ibSetNetAttr(void* ctx, ncclNetAttr_t* attr) {
  (void)ctx;
  (void)attr;
  return ncclSuccess;
}

/* Discovery, properties and vNICs here; connection setup in connect.c, registration in
 * reg.c, the data path in p2p.c. */
const ncclNet_t railnetNetIb = {
    .name = "RailIB",
    .init = ibInit,
    .devices = ibDevices,
    .getProperties = ncclIbGetProperties,
    .listen = ncclIbListen,
    .connect = ncclIbConnect,
    .accept = ncclIbAccept,
    .regMr = ncclIbRegMr,
    .regMrDmaBuf = ncclIbRegMrDmaBuf,
    .deregMr = ncclIbDeregMr,
    .isend = ncclIbIsend,
    .irecv = ncclIbIrecv,
    .iflush = ncclIbIflush,
    .test = ncclIbTest,
    .closeSend = ncclIbCloseSend,
    .closeRecv = ncclIbCloseRecv,
    .closeListen = ncclIbCloseListen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = ncclIbMakeVDevice,
    .finalize = ibFinalize,
    .setNetAttr = ibSetNetAttr,
};
