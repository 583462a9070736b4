/*
 * Device choice by subnet and the rail-local check (routing.h); NCCL 2.30's
 * ncclIbFindDevBySubnet and ncclIbCheckVProps, in railnet's own words.
 */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include "routing.h"
#include "devices.h"
#include "gid.h"
#include "param.h"

enum { P_SUBNET_ROUTING, P_SUBNET_PREFIX_LEN, P_WARN_RAIL_LOCAL };
static const railnetParam routingParams[] = {
    [P_SUBNET_ROUTING] = RAILNET_PARAM_INT_DEF("NCCL_IB_SUBNET_AWARE_ROUTING", 0, 0, 1,
                                               "1: each side switches to a device whose RoCE ports share a subnet "
                                               "with the peer's when the one asked for cannot reach it"),
    [P_SUBNET_PREFIX_LEN] = RAILNET_PARAM_INT_DEF("NCCL_IB_SUBNET_PREFIX_LEN", 24, 1, 32,
                                                  "Bits of an IPv4 RoCE GID that name its subnet (subnet-aware "
                                                  "routing; IPv6 GIDs compare their 64-bit prefix)"),
    [P_WARN_RAIL_LOCAL] = RAILNET_PARAM_INT_DEF("NCCL_IB_WARN_RAIL_LOCAL", 0, 0, 1,
                                                "1: INFO when a fused device's peer uses other physical devices "
                                                "(a connection that is not rail-local)"),
};
RAILNET_PARAM_TABLE("net_ib/routing", routingParams);

static int gidSet(const union ibv_gid* g) {
  static const union ibv_gid zero;
  return memcmp(g, &zero, sizeof(zero)) != 0;
}

int railnetIbGidSameSubnet(const union ibv_gid* a, const union ibv_gid* b, int prefixLen) {
  sa_family_t fa = railnetIbGidFamily(a);
  if (fa != railnetIbGidFamily(b)) return 0;
  if (fa != AF_INET) return memcmp(a->raw, b->raw, 8) == 0;
  if (prefixLen < 1) prefixLen = 1;
  if (prefixLen > 32) prefixLen = 32;
  uint32_t ia, ib;
  memcpy(&ia, a->raw + 12, 4);
  memcpy(&ib, b->raw + 12, 4);
  uint32_t mask = prefixLen == 32 ? 0xffffffffu : ~(0xffffffffu >> prefixLen);
  return (ntohl(ia) & mask) == (ntohl(ib) & mask);
}

/* Every RoCE port of vDev has a GID on a subnet of one of the peer's (and there is one). */
static int vDevReaches(int vDev, const union ibv_gid* remote, int nRemote, int prefixLen) {
  const struct ncclIbMergedDev* m = &ncclIbMergedDevs[vDev];
  int checked = 0, matched = 0;
  for (int i = 0; i < m->vProps.ndevs; i++) {
    const struct ncclIbDev* dev = &ncclIbDevs[m->vProps.devs[i]];
    if (dev->link != IBV_LINK_LAYER_ETHERNET || dev->gidIndex < 0) continue;
    checked++;
    for (int r = 0; r < nRemote; r++) {
      if (gidSet(&remote[r]) && railnetIbGidSameSubnet(&dev->gid, &remote[r], prefixLen)) {
        matched++;
        break;
      }
    }
  }
  return checked > 0 && matched == checked;
}

void railnetIbListenGids(int vDev, union ibv_gid gids[RAILNET_IB_HANDLE_GIDS]) {
  memset(gids, 0, sizeof(union ibv_gid) * RAILNET_IB_HANDLE_GIDS);
  if (!railnetParamInt(&routingParams[P_SUBNET_ROUTING]) || vDev < 0 || vDev >= ncclNMergedIbDevs) return;
  const struct ncclIbMergedDev* m = &ncclIbMergedDevs[vDev];
  int n = 0;
  for (int i = 0; i < m->vProps.ndevs && n < RAILNET_IB_HANDLE_GIDS; i++) {
    const struct ncclIbDev* dev = &ncclIbDevs[m->vProps.devs[i]];
    if (dev->link == IBV_LINK_LAYER_ETHERNET && dev->gidIndex >= 0) gids[n++] = dev->gid;
  }
}

int railnetIbSubnetRoute(int vDev, const union ibv_gid* remote, int nRemote, const char* peer) {
  if (!railnetParamInt(&routingParams[P_SUBNET_ROUTING]) || vDev < 0 || vDev >= ncclNMergedIbDevs) return vDev;
  int any = 0;
  for (int r = 0; r < nRemote; r++) any |= gidSet(&remote[r]);
  if (!any) return vDev;
  int prefixLen = (int)railnetParamInt(&routingParams[P_SUBNET_PREFIX_LEN]);
  if (vDevReaches(vDev, remote, nRemote, prefixLen)) return vDev;
  for (int d = 0; d < ncclNMergedIbDevs; d++) {
    if (d == vDev || !vDevReaches(d, remote, nRemote, prefixLen)) continue;
    INFO(NCCL_NET, "NET/IB: Subnet-aware routing: overriding dev %d (%s) with dev %d (%s) for peer %s", vDev,
         ncclIbMergedDevs[vDev].devName, d, ncclIbMergedDevs[d].devName, peer);
    return d;
  }
  INFO(NCCL_NET, "NET/IB: Subnet-aware routing: no device shares a /%d subnet with peer %s; keeping dev %d (%s)",
       prefixLen, peer, vDev, ncclIbMergedDevs[vDev].devName);
  return vDev;
}

int railnetIbSubnetRouteMeta(int vDev, const struct ncclIbConnectionMetadata* rem, const char* peer) {
  union ibv_gid gids[NCCL_IB_MAX_DEVS_PER_NIC];
  int n = 0;
  for (int i = 0; i < rem->ndevs && i < NCCL_IB_MAX_DEVS_PER_NIC; i++)
    if (rem->devs[i].linkLayer == IBV_LINK_LAYER_ETHERNET) gids[n++] = rem->devs[i].gid;
  return railnetIbSubnetRoute(vDev, gids, n, peer);
}

static void devList(char* buf, size_t len, const int* devs, int n) {
  buf[0] = '\0';
  for (int i = 0; i < n; i++) {
    size_t l = strlen(buf);
    snprintf(buf + l, len - l, "%s%d", i ? "," : "", devs[i]);
  }
}

void railnetIbCheckRailLocal(const ncclNetVDeviceProps_t* local, const struct ncclIbConnectionMetadata* rem,
                             const char* peer) {
  if (!railnetParamInt(&routingParams[P_WARN_RAIL_LOCAL])) return;
  int remote[NCCL_IB_MAX_DEVS_PER_NIC], nRemote = 0;
  for (int i = 0; i < rem->ndevs && i < NCCL_IB_MAX_DEVS_PER_NIC; i++) {
    if (rem->devs[i].physDev == 0) return; /* a peer that does not say */
    remote[nRemote++] = (int)rem->devs[i].physDev - 1;
  }
  int common = 0;
  for (int i = 0; i < local->ndevs; i++)
    for (int j = 0; j < nRemote; j++) common += local->devs[i] == remote[j];
  int most = local->ndevs > nRemote ? local->ndevs : nRemote;
  if (common >= most) return;
  char l[128], r[128];
  devList(l, sizeof(l), local->devs, local->ndevs);
  devList(r, sizeof(r), remote, nRemote);
  INFO(NCCL_NET, "NET/IB : There are mismatched physical devices between local (%s) and remote (%s, peer %s). To "
       "disable this warning, set NCCL_IB_WARN_RAIL_LOCAL=0", l, r, peer);
}
