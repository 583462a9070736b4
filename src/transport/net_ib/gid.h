/*
 * Which GID index a QP uses: NCCL's ncclIbGetGidIndex, with the reason for the choice
 * (for INFO and railnet-diag). The rules are in gid.c.
 */
#ifndef RAILNET_NET_IB_GID_H
#define RAILNET_NET_IB_GID_H
#include <infiniband/verbs.h>
#include <sys/socket.h>
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

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
