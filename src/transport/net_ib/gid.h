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

/* Where the selection reads a port's GIDs: the transport reads them through libibverbs
 * (railnetIbGidReaderVerbs); railnet-diag's explain API from sysfs where libibverbs cannot
 * open the device (railnetIbGidReaderSysfs). Nothing process-wide is swapped for it. */
struct railnetIbGidReader {
  /* GID index of port into *gid: 0, or an errno value (an empty or unreadable slot) */
  int (*queryGid)(void* arg, uint8_t port, int index, union ibv_gid* gid);
  void* arg;
  /* the device for ibv_query_gid_table (every GID and type in one call); NULL: slot by slot
   * through queryGid, the types from sysfs */
  struct ibv_context* context;
  int physPorts;                       /* its ports, which the table call needs room for (0: asked) */
};
/* ibv_query_gid (and ibv_query_gid_table) on context. */
struct railnetIbGidReader railnetIbGidReaderVerbs(struct ibv_context* context);
/* <sysfs>/class/infiniband/<devName>/ports/<port>/gids/<index>; devName must outlive the reader. */
struct railnetIbGidReader railnetIbGidReaderSysfs(const char* devName);

/* NCCL's ncclIbGetGidIndex. InfiniBand: NCCL_IB_ROUTABLE_FLID_GID_INDEX when that GID has
 * a routable FLID, else 0. RoCE: NCCL_IB_GID_INDEX when >= 0, else the table scan with
 * NCCL's preference rules (NCCL_IB_ADDR_FAMILY, NCCL_IB_ADDR_RANGE, NCCL_IB_ROCE_VERSION_NUM;
 * link-local and empty entries lose). */
ncclResult_t ncclIbGetGidIndex(struct ibv_context* context, uint8_t portNum, struct ibv_port_attr* portAttr,
                               int* gidIndex);
/* The same with the GID, its type, the source and a sentence saying why (for INFO/diag). */
ncclResult_t railnetIbChooseGid(struct ibv_context* context, const char* devName, uint8_t portNum,
                                const struct ibv_port_attr* portAttr, struct railnetIbGidChoice* choice);
/* railnetIbChooseGid with the GIDs read through reader (railnetIbChooseGid: the verbs one). Of
 * portAttr only link_layer and gid_tbl_len are read. */
ncclResult_t railnetIbChooseGidFrom(const struct railnetIbGidReader* reader, const char* devName, uint8_t portNum,
                                    const struct ibv_port_attr* portAttr, struct railnetIbGidChoice* choice);

/* ---- the classifier the selection uses (railnet-diag shows it through ib_explain.h) */
/* Not all zero, and not a bare fe80:: without interface id. */
int railnetIbGidConfigured(const union ibv_gid* gid);
/* In fe80::/64. */
int railnetIbGidLinkLocal(const union ibv_gid* gid);
/* Configured and not link-local: what the selection prefers ("valid" in NCCL). */
int railnetIbGidRoutable(const union ibv_gid* gid);
/* The RoCE version a gid_attrs/types text names: 1 ("IB/RoCE v1", "RoCE v1"), 2 ("RoCE v2"),
 * -1 else. */
int railnetIbGidTypeVersion(const char* text);
/* A GID as sysfs writes it (eight groups of hex digits, "fe80:0000:...:ca54") into *gid: 1,
 * or 0 (and *gid zero) when text is not one. */
int railnetIbGidParse(const char* text, union ibv_gid* gid);
/* <sysfs>/class/infiniband/<dev>/ports/<port>/gids/<index> into *gid: 0, or an errno value
 * (unreadable: ENOENT, ...; not a GID: EINVAL), *gid zero then. */
int railnetIbSysfsGid(const char* devName, int portNum, int gidIndex, union ibv_gid* gid);
/* The RoCE version in <sysfs>/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<index>:
 * 1 ("IB/RoCE v1", "RoCE v1"), 2 ("RoCE v2"), -1 unreadable (empty slot) or unknown text. */
int railnetIbSysfsRoceVersion(const char* devName, int portNum, int gidIndex);
/* Address family of a GID (IPv4-mapped, unicast or multicast, is AF_INET). */
sa_family_t railnetIbGidFamily(const union ibv_gid* gid);

#ifdef __cplusplus
}
#endif
#endif
