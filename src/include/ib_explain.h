/*
 * The IB transport explains itself: every RDMA port under the sysfs root ($SYSFS_PATH, else
 * /sys) with whether discovery takes it and why, the GID index the transport gives it and
 * why, each port's GID table as the transport classifies it, and the GPUDirect facts.
 * Every answer is computed by the code the transport itself runs (discovery's port
 * predicate, the GID selection, the GDR probes), not by a second reading of the rules:
 * railnet-diag is built on this header and includes nothing of src/transport.
 * The implementation is src/transport/net_ib/explain.c.
 */
#ifndef RAILNET_IB_EXPLAIN_H
#define RAILNET_IB_EXPLAIN_H
#include <stddef.h>
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Why discovery leaves a port out (bits of railnetIbPortExplain.notUsed). */
enum {
  RAILNET_IB_PORT_NOT_ACTIVE = 1 << 0, /* state is not ACTIVE */
  RAILNET_IB_PORT_LINK_LAYER = 1 << 1, /* link layer neither InfiniBand nor Ethernet */
  RAILNET_IB_PORT_HCA = 1 << 2         /* NCCL_IB_HCA leaves it out (or cannot be parsed) */
};

/* GID slots read from sysfs per port (the table, and its length where libibverbs cannot
 * open the device). */
#define RAILNET_IB_EXPLAIN_MAX_GIDS 256

/* The GID index the transport gives a port (railnetIbExplainGid). */
struct railnetIbGidExplain {
  int index;          /* -1: the selection failed */
  int roceVersion;    /* 1, 2; 0 InfiniBand; -1 unknown */
  int tableLen;       /* the gid_tbl_len the selection saw */
  const char* via;    /* how the GIDs were read: "libibverbs", or "sysfs" where it cannot open the device */
  char why[320];      /* the selection's own sentence */
};

struct railnetIbPortExplain {
  char dev[64];
  int port;
  int state;          /* IBV_PORT_* as sysfs numbers it (4 ACTIVE); -1 unreadable */
  char stateName[32]; /* "ACTIVE" */
  char physState[32]; /* "LinkUp"; "" unreadable */
  char link[32];      /* link layer: "InfiniBand" (also when sysfs does not say), "Ethernet" */
  int linkLayer;      /* IBV_LINK_LAYER_*: 1 InfiniBand, 2 Ethernet, 0 neither */
  char rate[64];      /* "200 Gb/sec (4X HDR)"; "" unreadable */
  double gbps;
  char width[16];     /* "4X" */
  char netdev[64];    /* the first GID's netdev, else the device's first net/ entry; "" none */
  int mtu;            /* the netdev's MTU; 0 unknown */
  unsigned notUsed;   /* 0 when discovery takes the port, else RAILNET_IB_PORT_* bits */
  int selected;       /* notUsed == 0 */
  char why[192];      /* discovery's verdict in a sentence */
  struct railnetIbGidExplain gid; /* with RAILNET_IB_EXPLAIN_GIDS, or railnetIbExplainGid */
};

/* Flags of railnetIbExplainPorts. */
#define RAILNET_IB_EXPLAIN_GIDS 1u /* choose each port's GID index too (opens the devices) */

/* Every port under <sysfs>/class/infiniband, devices by name and ports by number, at most
 * max of them into ports; returns how many. Reads sysfs only (and libibverbs for the GIDs
 * with RAILNET_IB_EXPLAIN_GIDS); NCCL_IB_HCA is read as discovery reads it. */
int railnetIbExplainPorts(struct railnetIbPortExplain* ports, int max, unsigned flags);

/* Fills port->gid: the GID selection of the transport (railnetIbChooseGid) through
 * libibverbs when it can open the device, else on the GIDs in sysfs. ncclSuccess, or the
 * selection's failure (port->gid.index is -1 then). */
ncclResult_t railnetIbExplainGid(struct railnetIbPortExplain* port);

/* The GID index the transport gives dev:port on a context the caller opened (railnetIbChooseGid
 * on attr, which ibv_query_port filled); -1 when the selection fails. For tools that hold a
 * context anyway (railnet-diag --pair). */
struct ibv_context;
struct ibv_port_attr;
int railnetIbExplainGidIndex(struct ibv_context* ctx, const char* dev, int port, const struct ibv_port_attr* attr);
/* Would discovery use this port (its state, link layer and NCCL_IB_HCA, as for
 * railnetIbExplainPorts)? 1 yes, 0 no. For callers holding a port's verbs attributes. */
int railnetIbExplainPortUsed(const char* dev, int port, const struct ibv_port_attr* attr);

/* One slot of a port's GID table, as sysfs has it and as the GID selection classifies it. */
struct railnetIbGidEntry {
  int index;
  char text[48];      /* the GID as sysfs writes it */
  unsigned char raw[16]; /* zero when text is not a GID */
  int configured;     /* not empty: neither all zero nor a bare fe80:: */
  int linkLocal;      /* in fe80::/64 */
  int routable;       /* configured and not link-local: what the selection prefers */
  int ipv4;           /* IPv4-mapped: AF_INET to the selection */
  char ipv4Text[16];  /* its IPv4 address; "" when not IPv4-mapped */
  char type[32];      /* gid_attrs/types/<i>: "RoCE v2", "IB/RoCE v1"; "" unreadable */
  int roceVersion;    /* 1, 2 by that text; -1 unknown */
  char netdev[32];    /* gid_attrs/ndevs/<i>; "" none */
};

/* The GID table of dev:port from sysfs: slots 0, 1, ... up to the first that cannot be read,
 * at most max; returns how many. */
int railnetIbExplainGidTable(const char* dev, int port, struct railnetIbGidEntry* entries, int max);

/* GPUDirect RDMA on this host, by the transport's own probes. */
struct railnetIbGdrExplain {
  int nvidiaDriver;   /* the nvidia kernel module (<sysfs>/module/nvidia) */
  int nvidiaPeermem;  /* nvidia_peermem is loaded (ncclIbPeerMemSupport) */
  int nvPeerMem;      /* only the legacy nv_peer_mem is (ncclIbGdrSupport without nvidia_peermem) */
};
void railnetIbExplainGdr(struct railnetIbGdrExplain* gdr);

/* DMA-BUF on dev with the transport's probe (railnetIbDmaBufProbe): 1 supported, 0 not, -1
 * not probed (libibverbs missing, the device not listed or not opened). why says how it
 * went, e.g. "ibv_reg_dmabuf_mr probe: Bad file descriptor". */
int railnetIbExplainDmaBuf(const char* dev, char* why, size_t size);

#ifdef __cplusplus
}
#endif
#endif
