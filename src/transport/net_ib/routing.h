/*
 * Which device a connection uses, NCCL 2.30's connect.cc rules beyond the one NCCL asked for:
 *   - subnet-aware routing (NCCL_IB_SUBNET_AWARE_ROUTING): the listener puts the GIDs of its
 *     device's RoCE ports in the handle, the connector its GIDs in the metadata; each side
 *     keeps the device NCCL named when all its RoCE ports share a subnet with the peer's
 *     (NCCL_IB_SUBNET_PREFIX_LEN bits of an IPv4 GID, the 64-bit prefix of an IPv6 one), else
 *     takes the first device whose ports all do;
 *   - the rail-local check (NCCL_IB_WARN_RAIL_LOCAL): an INFO when a fused device meets a
 *     peer whose physical devices are not the same ones.
 */
#ifndef RAILNET_NET_IB_ROUTING_H
#define RAILNET_NET_IB_ROUTING_H
#include "wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The GIDs a listener on vDev puts in its handle (zero when subnet-aware routing is off). */
void railnetIbListenGids(int vDev, union ibv_gid gids[RAILNET_IB_HANDLE_GIDS]);
/* The device to use instead of vDev for a peer with these GIDs (zero GIDs are ignored);
 * vDev itself when routing is off, the peer told none, or no device fits better. */
int railnetIbSubnetRoute(int vDev, const union ibv_gid* remote, int nRemote, const char* peer);
/* The same from a connector's metadata (its RoCE devices' GIDs). */
int railnetIbSubnetRouteMeta(int vDev, const struct ncclIbConnectionMetadata* rem, const char* peer);
/* NCCL_IB_WARN_RAIL_LOCAL=1: one INFO when local's physical devices and the peer's (the
 * physDev of rem's devices, as numbered on the peer) differ. */
void railnetIbCheckRailLocal(const ncclNetVDeviceProps_t* local, const struct ncclIbConnectionMetadata* rem,
                             const char* peer);
/* IPv4-mapped GIDs: the first prefixLen bits of the address; other GIDs: the subnet prefix. */
int railnetIbGidSameSubnet(const union ibv_gid* a, const union ibv_gid* b, int prefixLen);

#ifdef __cplusplus
}
#endif
#endif
