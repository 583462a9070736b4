/*
 * IB transport: device discovery (discovery.h) — NCCL's net_ib/init.cc without the
 * ncclNet table, which is init.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "discovery.h"
#include "async.h"
#include "caps.h"
#include "matching.h"
#include "devices.h"
#include "gdr.h"
#include "gid.h"
#include "ibvwrap.h"
#include "param.h"
#include "properties.h"
#include "reg.h"

enum { P_HCA, P_MERGE_VFS, P_PCI_ORDER, P_RELAXED_ORDERING, P_ADAPTIVE_ROUTING, P_AR_THRESHOLD };
static const railnetParam ibDiscoveryParams[] = {
    [P_HCA] = RAILNET_PARAM_STR_DEF("NCCL_IB_HCA", NULL,
                                    "HCAs (and :ports) to use: prefixes, '=' exact names, '^' to exclude, "
                                    "e.g. mlx5_0:1,mlx5_1 or ^=mlx5_3"),
    [P_MERGE_VFS] = RAILNET_PARAM_INT_DEF("NCCL_IB_MERGE_VFS", 1, 0, 1,
                                          "Treat the virtual functions of one NIC as one PCI device"),
    [P_PCI_ORDER] = RAILNET_PARAM_INT_DEF("NCCL_IB_DEVICE_PCI_ORDER", 1, 0, 1,
                                          "Order devices by PCI address so that every node numbers them alike"),
    [P_RELAXED_ORDERING] = RAILNET_PARAM_INT_DEF("NCCL_IB_PCI_RELAXED_ORDERING", 2, 0, 2,
                                                 "PCI relaxed ordering for registrations (0 off, 1 on, 2 when "
                                                 "libibverbs has ibv_reg_mr_iova2)"),
    [P_ADAPTIVE_ROUTING] = RAILNET_PARAM_INT_DEF("NCCL_IB_ADAPTIVE_ROUTING", -2, -2, 1,
                                                 "Adaptive routing (-2: on for InfiniBand, off for RoCE)"),
    [P_AR_THRESHOLD] = RAILNET_PARAM_INT_DEF("NCCL_IB_AR_THRESHOLD", 8192, 0, INT64_MAX,
                                             "Messages of at least this size use adaptive routing"),
};
RAILNET_PARAM_TABLE("net_ib/discovery", ibDiscoveryParams);

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
      if (railnetParamInt(&ibDiscoveryParams[P_MERGE_VFS])) p[len - 3] = p[len - 4] = '0';
    }
  }
  *path = p;
}

/* Same PCI device (VFs merged with NCCL_IB_MERGE_VFS)? */
static int ibMatchVfPath(const char* a, const char* b) {
  if (a == NULL || b == NULL) return 0;
  size_t len = strlen(a), cut = railnetParamInt(&ibDiscoveryParams[P_MERGE_VFS]) ? 4 : 1;
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

/* ------------------------------------------------------------------ which ports */

ncclResult_t railnetIbHcaRead(struct railnetIbHca* hca) {
  hca->spec = railnetParamStr(&ibDiscoveryParams[P_HCA]);
  ncclResult_t res = railnetIfListParse(hca->spec, 1, &hca->list);
  hca->parsed = res == ncclSuccess;
  return res;
}

static const char* portStateName(int state, char* buf, size_t size) {
  static const char* const names[] = {"NOP", "DOWN", "INIT", "ARMED", "ACTIVE", "ACTIVE_DEFER"};
  if (state >= 0 && state < (int)RAILNET_ARRAY_SIZE(names)) return names[state];
  snprintf(buf, size, "%d", state);
  return buf;
}

unsigned railnetIbPortWanted(const char* dev, int port, int state, int linkLayer, const struct railnetIbHca* hca,
                             char* why, size_t whySize) {
  unsigned no = 0;
  if (state != IBV_PORT_ACTIVE) no |= RAILNET_IB_PORT_NOT_ACTIVE;
  if (linkLayer != IBV_LINK_LAYER_INFINIBAND && linkLayer != IBV_LINK_LAYER_ETHERNET) no |= RAILNET_IB_PORT_LINK_LAYER;
  int hcaSet = hca->spec != NULL && hca->spec[0] != '\0';
  if (!hca->parsed || !railnetIfListSelects(&hca->list, dev, port)) no |= RAILNET_IB_PORT_HCA;
  if (why == NULL || whySize == 0) return no;
  char num[16];
  if (no & RAILNET_IB_PORT_NOT_ACTIVE)
    snprintf(why, whySize, "port state %s, not ACTIVE", portStateName(state, num, sizeof(num)));
  else if (no & RAILNET_IB_PORT_LINK_LAYER)
    snprintf(why, whySize, "link layer %d is neither InfiniBand nor Ethernet", linkLayer);
  else if (!hca->parsed)
    snprintf(why, whySize, "NCCL_IB_HCA=%s cannot be parsed: discovery fails (see its WARN)", hca->spec);
  else if (no & RAILNET_IB_PORT_HCA)
    snprintf(why, whySize, "NCCL_IB_HCA=%s %s it", hca->spec, hca->list.exclude ? "excludes" : "does not name");
  else if (!hcaSet)
    snprintf(why, whySize, "ACTIVE %s port; no NCCL_IB_HCA: every active port is used", NCCL_IB_LLSTR(linkLayer));
  else
    snprintf(why, whySize, "ACTIVE %s port; NCCL_IB_HCA=%s %s it", NCCL_IB_LLSTR(linkLayer), hca->spec,
             hca->list.exclude ? "does not exclude" : "selects");
  return no;
}

/* ------------------------------------------------------------------ discovery */

void railnetIbCloseDevicesLocked(void) {
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
  railnetIbGdrForget();
}

/* Adds the usable ports of one HCA. */
static ncclResult_t ibAddDevice(struct ibv_device* device, int index, const struct railnetIbHca* hca) {
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
    char why[192];
    unsigned notUsed = railnetIbPortWanted(name, port, portAttr.state, portAttr.link_layer, hca, why, sizeof(why));
    if (notUsed == RAILNET_IB_PORT_HCA) {
      TRACE(NCCL_NET, "NET/IB : %s:%d skipped: %s", name, port, why);
      continue;
    }
    if (notUsed != 0) {
      INFO(NCCL_NET, "NET/IB : %s:%d skipped: %s", name, port, why);
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
    uint64_t qSpeed = 0;
    dev->speed = wrap_ibv_query_port_speed(context, (uint8_t)port, &qSpeed) == ncclSuccess && qSpeed > 0
                     ? (int)(qSpeed * 100)
                     : railnetIbPortSpeed(portAttr.active_speed, 0, portAttr.active_width);
    dev->context = context;
    dev->ownsContext = nPorts == 0;
    snprintf(dev->devName, sizeof(dev->devName), "%s", name);
    ibGetPciPath(dev->devName, &dev->pciPath, dev->fullPciPath);
    dev->maxQp = devAttr.max_qp;
    dev->maxRdAtom = devAttr.max_qp_rd_atom;
    dev->maxInitRdAtom = devAttr.max_qp_init_rd_atom;
    dev->maxCqe = devAttr.max_cqe;
    dev->physPorts = devAttr.phys_port_cnt;
    dev->railId = NCCL_NET_ID_UNDEF;
    dev->planeId = NCCL_NET_ID_UNDEF;
    dev->gidIndex = -1;
    /* adaptive routing: on by default on InfiniBand only */
    dev->ar = portAttr.link_layer == IBV_LINK_LAYER_INFINIBAND;
    int64_t ar = railnetParamInt(&ibDiscoveryParams[P_ADAPTIVE_ROUTING]);
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
    railnetIbAsyncStart(context, name);
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

ncclResult_t railnetIbDiscoverLocked(void) {
  ncclResult_t res = ncclSuccess;
  static int shownHca = 0;
  struct ibv_device** devices = NULL;
  int nDevices = 0;
  wrap_ibv_fork_init();

  int nIfs = 0;
  NCCLCHECK(railnetFindInterfaces(ncclIbIfName, &ncclIbIfAddr, MAX_IF_NAME_SIZE, 1, &nIfs, NULL));
  if (nIfs != 1) {
    if (railnetIfacesSaidNoMatch()) INFO(NCCL_NET | NCCL_INIT, "NET/IB : No IP interface found.");
    else WARN("NET/IB : No IP interface found.");
    return ncclInternalError;
  }

  struct railnetIbHca hca;
  ncclResult_t hcaRes = railnetIbHcaRead(&hca);
  if (hca.spec != NULL && shownHca++ == 0) INFO(NCCL_NET | NCCL_ENV, "NCCL_IB_HCA set to %s", hca.spec);
  NCCLCHECK(hcaRes);

  ncclNIbDevs = 0;
  ncclNMergedIbDevs = 0;
  NCCLCHECKGOTO(wrap_ibv_get_device_list(&devices, &nDevices), res, fail);
  for (int d = 0; d < nDevices && ncclNIbDevs < MAX_IB_DEVS; d++)
    NCCLCHECKGOTO(ibAddDevice(devices[d], d, &hca), res, fail);
  if (devices) wrap_ibv_free_device_list(devices);
  devices = NULL;

  if (ncclNIbDevs == 0) INFO(NCCL_INIT | NCCL_NET, "NET/IB : No device found.");

  int roMode = (int)railnetParamInt(&ibDiscoveryParams[P_RELAXED_ORDERING]);
  ncclIbRelaxedOrderingEnabled =
      (roMode == 1 || roMode == 2) && wrap_ibv_reg_mr_iova2(NULL, NULL, NULL, 0, 0, 0) != ncclInternalError;
  ncclIbArThreshold = railnetParamInt(&ibDiscoveryParams[P_AR_THRESHOLD]);

  if (railnetParamInt(&ibDiscoveryParams[P_PCI_ORDER])) ibSortDevs(ncclIbDevs, ncclNIbDevs);
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
    NCCLCHECKGOTO(railnetIbMakeVDeviceLocked(&vDev, &vProps), res, fail);
  }
  for (int d = 0; d < ncclNIbDevs; d++) ibLogGid(&ncclIbDevs[d]);
  if (ncclNIbDevs > 0) railnetIbMatchingReport();
  railnetIbReportProviderCaps();
  if (ncclNIbDevs > 0) {
    char addr[SOCKET_NAME_MAXLEN + 1];
    INFO(NCCL_INIT | NCCL_NET, "NET/IB : Using%s %s; OOB %s:%s", line, ncclIbRelaxedOrderingEnabled ? "[RO]" : "",
         ncclIbIfName, ncclSocketToString(&ncclIbIfAddr, addr, 1));
  }
  return ncclSuccess;
fail:
  if (devices) wrap_ibv_free_device_list(devices);
  railnetIbAsyncStopAll();
  railnetIbCloseDevicesLocked();
  return res;
}
