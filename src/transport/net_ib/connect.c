/*
 * IB connection setup. This part: which GID index a QP uses (NCCL's ncclIbGetGidIndex).
 *
 * RoCE: NCCL_IB_GID_INDEX when set; otherwise the port's GID table is scanned from index 1
 * with index 0 as the first choice, and a candidate replaces the current choice when
 *   - its address family differs from the current one's, is the wanted one
 *     (NCCL_IB_ADDR_FAMILY, default AF_INET; IPv4-mapped GIDs are AF_INET) and it lies in
 *     NCCL_IB_ADDR_RANGE; or
 *   - it is of the wanted family, configured, not link-local, in range, of the wanted RoCE
 *     version (NCCL_IB_ROCE_VERSION_NUM, default 2), and the current one is of another
 *     version or is itself not a valid (configured, non-link-local) GID.
 * The types come from ibv_query_gid_table where rdma-core and the kernel have it (one call;
 * empty slots are simply absent), else from gid_attrs/types/<i> under $SYSFS_PATH, read only
 * for candidates that passed every other test (an empty slot's type cannot be read, and
 * reading all 1024 of rxe costs seconds under emulation).
 * InfiniBand: index 0, or NCCL_IB_ROUTABLE_FLID_GID_INDEX when that GID carries a FLID.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common.h"
#include "conn_stage.h"
#include "gdr.h"
#include "ibvwrap.h"
#include "param.h"

enum { P_GID_INDEX, P_FLID_GID_INDEX, P_ROCE_VERSION, P_ADDR_FAMILY, P_ADDR_RANGE };
static railnetParam connectParams[] = {
    [P_GID_INDEX] = RAILNET_PARAM_INT_DEF("NCCL_IB_GID_INDEX", -1, -1, 65535,
                                          "RoCE GID index to use (-1: choose automatically from the GID table)"),
    [P_FLID_GID_INDEX] = RAILNET_PARAM_INT_DEF("NCCL_IB_ROUTABLE_FLID_GID_INDEX", 1, 0, 65535,
                                               "InfiniBand: GID index used when its GID has a routable FLID"),
    [P_ROCE_VERSION] = RAILNET_PARAM_INT_DEF("NCCL_IB_ROCE_VERSION_NUM", 2, 1, 2,
                                             "RoCE version the automatic GID choice prefers (1 or 2)"),
    [P_ADDR_FAMILY] = RAILNET_PARAM_STR_DEF("NCCL_IB_ADDR_FAMILY", "AF_INET",
                                            "Address family of the RoCE GID to choose: AF_INET or AF_INET6"),
    [P_ADDR_RANGE] = RAILNET_PARAM_STR_DEF("NCCL_IB_ADDR_RANGE", NULL,
                                           "Only RoCE GIDs inside this CIDR range (e.g. 10.0.0.0/8, fd00::/8) are chosen"),
};
RAILNET_PARAM_TABLE("net_ib/connect", connectParams);

/* ------------------------------------------------------------------ GID classification */

static uint32_t gidWord(const union ibv_gid* gid, int i) {
  uint32_t w;
  memcpy(&w, gid->raw + 4 * i, sizeof(w));
  return w; /* network order */
}

sa_family_t railnetIbGidFamily(const union ibv_gid* gid) {
  uint32_t w0 = gidWord(gid, 0), w1 = gidWord(gid, 1), w2 = gidWord(gid, 2);
  int v4Mapped = (w0 | w1) == 0 && w2 == htonl(0x0000ffff);
  int v4MappedMulticast = w0 == htonl(0xff0e0000) && w1 == 0 && w2 == htonl(0x0000ffff);
  return (v4Mapped || v4MappedMulticast) ? AF_INET : AF_INET6;
}

/* Not all zero, and not a bare fe80:: without interface id. */
static int gidConfigured(const union ibv_gid* gid) {
  uint32_t rest = gidWord(gid, 1) | gidWord(gid, 2) | gidWord(gid, 3);
  uint32_t w0 = gidWord(gid, 0);
  if ((w0 | rest) == 0) return 0;
  if (w0 == htonl(0xfe800000) && rest == 0) return 0;
  return 1;
}

static int gidLinkLocal(const union ibv_gid* gid) {
  return gidWord(gid, 0) == htonl(0xfe800000) && gidWord(gid, 1) == 0;
}

static int gidValid(const union ibv_gid* gid) { return gidConfigured(gid) && !gidLinkLocal(gid); }

/* Big-endian mask of the first `bits` (0..32) bits of a 32-bit word. */
static uint32_t netmask32(int bits) {
  if (bits <= 0) return 0;
  if (bits >= 32) return 0xffffffffu;
  return htonl(0xffffffffu << (32 - bits));
}

/* Is the GID inside prefix/prefixLen? AF_INET compares the GID's last 32 bits. */
static int gidInRange(sa_family_t af, const void* prefix, int prefixLen, const union ibv_gid* gid) {
  if (prefix == NULL || prefixLen <= 0) return 1;
  if (af == AF_INET) {
    uint32_t base;
    memcpy(&base, prefix, sizeof(base));
    uint32_t m = netmask32(prefixLen);
    return (base & m) == (gidWord(gid, 3) & m);
  }
  const uint8_t* p = (const uint8_t*)prefix;
  for (int i = 0; i < 4 && prefixLen > 0; i++, prefixLen -= 32) {
    uint32_t base;
    memcpy(&base, p + 4 * i, sizeof(base));
    uint32_t m = netmask32(prefixLen);
    if ((base & m) != (gidWord(gid, i) & m)) return 0;
  }
  return 1;
}

/* ------------------------------------------------------------------ user settings */

struct gidPrefs {
  sa_family_t af;
  int roceVersion;
  int hasRange;
  int prefixLen;
  uint8_t prefix[16];
  char rangeText[64];
};

static void readPrefs(struct gidPrefs* p) {
  memset(p, 0, sizeof(*p));
  p->af = AF_INET;
  const char* fam = railnetParamStr(&connectParams[P_ADDR_FAMILY]);
  if (fam != NULL && fam[0] != '\0') {
    if (railnetParamSourceOf(&connectParams[P_ADDR_FAMILY]) != RAILNET_SRC_DEFAULT)
      INFO(NCCL_ENV, "NCCL_IB_ADDR_FAMILY set by environment to %s", fam);
    if (strcmp(fam, "AF_INET6") == 0) {
      p->af = AF_INET6;
    } else if (strcmp(fam, "AF_INET") != 0) {
      WARN("NET/IB : NCCL_IB_ADDR_FAMILY=%s is neither AF_INET nor AF_INET6; using AF_INET", fam);
    }
  }
  p->roceVersion = (int)railnetParamInt(&connectParams[P_ROCE_VERSION]);

  const char* range = railnetParamStr(&connectParams[P_ADDR_RANGE]);
  if (range == NULL || range[0] == '\0') return;
  INFO(NCCL_ENV, "NCCL_IB_ADDR_RANGE set by environment to %s", range);
  char buf[128];
  snprintf(buf, sizeof(buf), "%s", range);
  char* slash = strchr(buf, '/');
  if (slash == NULL) {
    WARN("NET/IB : NCCL_IB_ADDR_RANGE=%s has no /prefix length (e.g. 10.0.0.0/8); ignoring it", range);
    return;
  }
  *slash = '\0';
  const char* famName = p->af == AF_INET ? "AF_INET" : "AF_INET6";
  if (inet_pton(p->af, buf, p->prefix) != 1) {
    INFO(NCCL_INIT | NCCL_NET, "NET/IB: Ip address '%s' is invalid for family %s, ignoring address", buf, famName);
    return;
  }
  char* end = NULL;
  long len = strtol(slash + 1, &end, 10);
  int maxLen = p->af == AF_INET ? 32 : 128;
  if (end == slash + 1 || *end != '\0' || len < 0 || len > maxLen) {
    INFO(NCCL_INIT | NCCL_NET, "NET/IB: Ip address mask '%s' is invalid for family %s, ignoring mask", slash + 1,
         famName);
    return;
  }
  p->hasRange = 1;
  p->prefixLen = (int)len;
  snprintf(p->rangeText, sizeof(p->rangeText), "%s", range);
}

/* ------------------------------------------------------------------ the port's GID table */

enum { VER_UNREAD = -2, VER_UNKNOWN = -1 };

struct gidView {
  const char* devName;
  int port;
  int len;
  union ibv_gid* gids; /* len entries; an empty slot is all zero */
  int8_t* ver;         /* len entries: VER_UNREAD (sysfs, not read yet), VER_UNKNOWN, 0, 1, 2 */
  enum railnetIbGidSource source;
};

int railnetIbSysfsRoceVersion(const char* devName, int portNum, int gidIndex) {
  char path[PATH_MAX];
  if (snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/%d/gid_attrs/types/%d", railnetIbSysfsRoot(),
               devName, portNum, gidIndex) >= (int)sizeof(path))
    return VER_UNKNOWN;
  int fd = open(path, O_RDONLY);
  if (fd < 0) {
    TRACE(NCCL_NET, "NET/IB : cannot open %s: %s", path, strerror(errno));
    return VER_UNKNOWN;
  }
  char text[32] = {0};
  ssize_t n = read(fd, text, sizeof(text) - 1);
  int err = errno;
  close(fd);
  if (n <= 0) {
    /* an empty slot's type reads as EINVAL; containers may not map every slot either */
    TRACE(NCCL_NET, "NET/IB : cannot read %s: %s", path, n < 0 ? strerror(err) : "empty");
    return VER_UNKNOWN;
  }
  if (strncmp(text, "IB/RoCE v1", 10) == 0 || strncmp(text, "RoCE v1", 7) == 0) return 1;
  if (strncmp(text, "RoCE v2", 7) == 0) return 2;
  return VER_UNKNOWN;
}

static int viewVersion(struct gidView* v, int i) {
  if (v->ver[i] == VER_UNREAD) v->ver[i] = (int8_t)railnetIbSysfsRoceVersion(v->devName, v->port, i);
  return v->ver[i];
}

static int gidTypeVersion(uint32_t type) {
  switch (type) {
    case IBV_GID_TYPE_IB: return 0;
    case IBV_GID_TYPE_ROCE_V1: return 1;
    case IBV_GID_TYPE_ROCE_V2: return 2;
    default: return VER_UNKNOWN;
  }
}

/* One ibv_query_gid_table call. *ok = 0 when the verb is absent or fails (caller falls back). */
static ncclResult_t viewFromTable(struct ibv_context* ctx, struct gidView* v, int* ok) {
  *ok = 0;
  if (railnetIbv.query_gid_table == NULL) return ncclSuccess;
  /* The kernel wants room for every valid entry of every port. */
  struct ibv_device_attr devAttr;
  memset(&devAttr, 0, sizeof(devAttr));
  int nPorts = 1;
  if (railnetIbv.query_device && railnetIbv.query_device(ctx, &devAttr) == 0 && devAttr.phys_port_cnt > 0)
    nPorts = devAttr.phys_port_cnt;
  size_t max = (size_t)v->len * (size_t)nPorts;
  if (max == 0) return ncclSuccess;
  struct ibv_gid_entry* entries = calloc(max, sizeof(*entries));
  if (entries == NULL) return ncclSuccess;
  ssize_t count = 0;
  int supported = 0;
  ncclResult_t res = wrap_ibv_query_gid_table(ctx, entries, max, &count, &supported);
  if (res == ncclSuccess && supported) {
    for (int i = 0; i < v->len; i++) v->ver[i] = VER_UNKNOWN;
    for (ssize_t e = 0; e < count; e++) {
      if ((int)entries[e].port_num != v->port || entries[e].gid_index >= (uint32_t)v->len) continue;
      v->gids[entries[e].gid_index] = entries[e].gid;
      v->ver[entries[e].gid_index] = (int8_t)gidTypeVersion(entries[e].gid_type);
    }
    v->source = RAILNET_GID_SRC_TABLE;
    *ok = 1;
  } else if (res != ncclSuccess) {
    INFO(NCCL_NET, "NET/IB : %s:%d: ibv_query_gid_table failed; reading the GID types from sysfs instead", v->devName,
         v->port);
  }
  free(entries);
  return ncclSuccess;
}

/* ibv_query_gid per slot; types read later from sysfs, only where needed. */
static void viewFromSlots(struct ibv_context* ctx, struct gidView* v) {
  for (int i = 0; i < v->len; i++) {
    v->ver[i] = VER_UNREAD;
    /* rdma-core answers an empty slot with the zero GID; a failure is an empty slot too */
    if (railnetIbv.query_gid == NULL || railnetIbv.query_gid(ctx, (uint8_t)v->port, i, &v->gids[i]) != 0) {
      memset(&v->gids[i], 0, sizeof(v->gids[i]));
      v->ver[i] = VER_UNKNOWN;
    }
  }
  v->source = RAILNET_GID_SRC_SYSFS;
}

/* NCCL's rule for one candidate c against the current choice *cur. */
static void considerCandidate(struct gidView* v, const struct gidPrefs* p, int c, int* cur) {
  const union ibv_gid* gc = &v->gids[c];
  const union ibv_gid* gcur = &v->gids[*cur];
  sa_family_t famC = railnetIbGidFamily(gc), famCur = railnetIbGidFamily(gcur);
  int inRange = gidInRange(p->af, p->hasRange ? p->prefix : NULL, p->prefixLen, gc);
  if (famC != famCur && famC == p->af && inRange) {
    *cur = c;
    return;
  }
  if (famC != p->af || !gidValid(gc) || !inRange) return;
  int verCur = viewVersion(v, *cur), verC = viewVersion(v, c);
  if ((verCur != verC || !gidValid(gcur)) && verC == p->roceVersion) *cur = c;
}

static const char* famName(sa_family_t af) { return af == AF_INET ? "AF_INET" : "AF_INET6"; }

/* ------------------------------------------------------------------ entry points */

ncclResult_t railnetIbChooseGid(struct ibv_context* context, const char* devName, uint8_t portNum,
                                const struct ibv_port_attr* portAttr, struct railnetIbGidChoice* ch) {
  memset(ch, 0, sizeof(*ch));
  ch->roceVersion = VER_UNKNOWN;
  int tblLen = portAttr->gid_tbl_len;
  if (devName == NULL) devName = "N/A";

  if (portAttr->link_layer == IBV_LINK_LAYER_INFINIBAND) {
    int routable = (int)railnetParamInt(&connectParams[P_FLID_GID_INDEX]);
    ch->roceVersion = 0;
    if (routable < tblLen) {
      union ibv_gid gid;
      NCCLCHECK(wrap_ibv_query_gid(context, portNum, routable, &gid));
      uint16_t flid = (uint16_t)((gid.raw[4] << 8) | gid.raw[5]);
      if (flid != 0) {
        ch->index = routable;
        ch->gid = gid;
        snprintf(ch->why, sizeof(ch->why), "InfiniBand, routable FLID 0x%x (NCCL_IB_ROUTABLE_FLID_GID_INDEX=%d)",
                 flid, routable);
        return ncclSuccess;
      }
    }
    ch->index = 0;
    if (tblLen > 0) NCCLCHECK(wrap_ibv_query_gid(context, portNum, 0, &ch->gid));
    snprintf(ch->why, sizeof(ch->why), "InfiniBand (no routable FLID at index %d)", routable);
    return ncclSuccess;
  }

  int forced = (int)railnetParamInt(&connectParams[P_GID_INDEX]);
  if (forced >= 0) {
    ch->index = forced;
    snprintf(ch->why, sizeof(ch->why), "forced by NCCL_IB_GID_INDEX=%d", forced);
    if (forced >= tblLen) {
      WARN("NET/IB : NCCL_IB_GID_INDEX=%d but %s:%d has only %d GID entries; connections will fail. "
           "Unset NCCL_IB_GID_INDEX to choose automatically",
           forced, devName, portNum, tblLen);
      return ncclSuccess;
    }
    if (railnetIbv.query_gid && railnetIbv.query_gid(context, portNum, forced, &ch->gid) == 0 &&
        !gidConfigured(&ch->gid)) {
      WARN("NET/IB : NCCL_IB_GID_INDEX=%d is an empty GID slot on %s:%d; connections will fail "
           "(ibv_modify_qp: EINVAL/ENODATA). Unset NCCL_IB_GID_INDEX to choose automatically",
           forced, devName, portNum);
    }
    ch->roceVersion = railnetIbSysfsRoceVersion(devName, portNum, forced);
    return ncclSuccess;
  }

  struct gidPrefs prefs;
  readPrefs(&prefs);
  ch->index = 0;
  if (tblLen <= 0) {
    snprintf(ch->why, sizeof(ch->why), "the port reports an empty GID table");
    return ncclSuccess;
  }
  struct gidView v = {devName, portNum, tblLen, NULL, NULL, RAILNET_GID_SRC_NONE};
  v.gids = calloc((size_t)tblLen, sizeof(*v.gids));
  v.ver = calloc((size_t)tblLen, sizeof(*v.ver));
  if (v.gids == NULL || v.ver == NULL) {
    free(v.gids);
    free(v.ver);
    WARN("NET/IB : out of memory for the GID table of %s:%d (%d entries)", devName, portNum, tblLen);
    return ncclSystemError;
  }
  int fromTable = 0;
  NCCLCHECK(viewFromTable(context, &v, &fromTable));
  if (!fromTable) viewFromSlots(context, &v);

  int cur = 0;
  for (int c = 1; c < tblLen; c++) considerCandidate(&v, &prefs, c, &cur);
  for (int i = 0; i < tblLen; i++) ch->scanned += gidConfigured(&v.gids[i]);

  ch->index = cur;
  ch->gid = v.gids[cur];
  ch->roceVersion = viewVersion(&v, cur);
  ch->source = v.source;
  char range[96] = "";
  if (prefs.hasRange) snprintf(range, sizeof(range), ", NCCL_IB_ADDR_RANGE=%s", prefs.rangeText);
  const char* src = v.source == RAILNET_GID_SRC_TABLE ? "ibv_query_gid_table" : "sysfs";
  char head[96];
  snprintf(head, sizeof(head), "%d of %d entries (types from %s)", ch->scanned, tblLen, src);
  char wish[128];
  snprintf(wish, sizeof(wish), "%s, RoCE v%d%s", famName(prefs.af), prefs.roceVersion, range);
  int match = gidValid(&ch->gid) && railnetIbGidFamily(&ch->gid) == prefs.af && ch->roceVersion == prefs.roceVersion &&
              gidInRange(prefs.af, prefs.hasRange ? prefs.prefix : NULL, prefs.prefixLen, &ch->gid);
  if (match) snprintf(ch->why, sizeof(ch->why), "best of %s for %s", head, wish);
  else snprintf(ch->why, sizeof(ch->why), "no entry matches %s; NCCL's rules pick it among %s", wish, head);
  free(v.gids);
  free(v.ver);
  return ncclSuccess;
}

ncclResult_t ncclIbGetGidIndex(struct ibv_context* context, uint8_t portNum, struct ibv_port_attr* portAttr,
                               int* gidIndex) {
  struct railnetIbGidChoice ch;
  const char* name = context && context->device ? wrap_ibv_get_device_name(context->device) : NULL;
  NCCLCHECK(railnetIbChooseGid(context, name, portNum, portAttr, &ch));
  *gidIndex = ch.index;
  return ncclSuccess;
}

/* ====================================================================================
 * Connection setup (NCCL's ncclIbListen / ncclIbConnect / ncclIbAccept).
 *
 * listen: an ncclSocket on the OOB interface; the handle carries its address and magic.
 * connect and accept are non-blocking: each call advances a small state machine and returns
 * with a NULL comm until the comm is ready.
 *   connector: socket connect -> create CQ/QPs (INIT), register the fifo -> send metadata
 *              -> receive the acceptor's metadata, check it, QPs to RTR/RTS -> send "ready".
 *   acceptor:  socket accept -> receive the connector's metadata, check it -> create its QPs
 *              and take them to RTS -> send metadata -> receive "ready".
 * QP i of one side is connected to QP i of the other; QP i lives on device i % ndevs of
 * its side's vDevice. A peer whose metadata fails the checks is refused with a WARN naming
 * it; the listener keeps working.
 * ==================================================================================== */

enum {
  P_TIMEOUT, P_RETRY_CNT, P_SL, P_TC, P_FIFO_TC, P_PKEY, P_QPS_PER_CONN, P_USE_INLINE, P_ECE, P_SPLIT,
  P_GDR_FLUSH_DISABLE
};
static railnetParam qpParams[] = {
    [P_TIMEOUT] = RAILNET_PARAM_INT_DEF("NCCL_IB_TIMEOUT", 20, 1, 31,
                                        "QP ACK timeout: 4.096 us x 2^value (ibv_qp_attr.timeout)"),
    [P_RETRY_CNT] = RAILNET_PARAM_INT_DEF("NCCL_IB_RETRY_CNT", 7, 0, 7, "QP transport retry count"),
    [P_SL] = RAILNET_PARAM_INT_DEF("NCCL_IB_SL", -1, -1, 15,
                                   "InfiniBand service level (-1: 0; the comm's traffic class never sets it)"),
    [P_TC] = RAILNET_PARAM_INT_DEF("NCCL_IB_TC", -1, -1, 255,
                                   "RoCE traffic class of the data (-1: the comm's traffic class, else 0)"),
    [P_FIFO_TC] = RAILNET_PARAM_INT_DEF("NCCL_IB_FIFO_TC", -1, -1, 255,
                                        "RoCE traffic class of the receiver's clear-to-send writes (-1: NCCL_IB_TC)"),
    [P_PKEY] = RAILNET_PARAM_INT_DEF("NCCL_IB_PKEY", 0, 0, 65535, "Partition key index of the QPs"),
    [P_QPS_PER_CONN] = RAILNET_PARAM_INT_DEF("NCCL_IB_QPS_PER_CONNECTION", 1, 1, NCCL_IB_MAX_QPS,
                                             "Queue pairs per connection and device"),
    [P_USE_INLINE] = RAILNET_PARAM_INT_DEF("NCCL_IB_USE_INLINE", 0, 0, 1,
                                           "Send the clear-to-send entries inline in the work request"),
    [P_ECE] = RAILNET_PARAM_INT_DEF("NCCL_IB_ECE_ENABLE", 1, 0, 1,
                                    "Exchange Enhanced Connection Establishment options where the NIC has them"),
    [P_SPLIT] = RAILNET_PARAM_INT_DEF("NCCL_IB_SPLIT_DATA_ON_QPS", 0, 0, 1,
                                      "1: split every message across all QPs; 0: one QP per message, round robin"),
    [P_GDR_FLUSH_DISABLE] = RAILNET_PARAM_INT_DEF("NCCL_GDR_FLUSH_DISABLE", 0, 0, 1,
                                                  "Do not flush GPUDirect receives with an RDMA read"),
};
RAILNET_PARAM_TABLE("net_ib/qp", qpParams);

int railnetIbParamQpsPerConn(void) { return (int)railnetParamInt(&qpParams[P_QPS_PER_CONN]); }
int railnetIbParamSplitDataOnQps(void) { return (int)railnetParamInt(&qpParams[P_SPLIT]); }

enum ibStageState {
  STAGE_START = 0,
  STAGE_CONNECT,     /* connector: socket connecting */
  STAGE_ACCEPT,      /* acceptor: socket accepting */
  STAGE_SEND_META,
  STAGE_RECV_META,
  STAGE_SEND_READY,  /* connector */
  STAGE_RECV_READY   /* acceptor */
};

struct ncclIbCommStage {
  struct railnetConnStage link;        /* connector: in the registry, keyed by the handle; link.state: the step */
  struct ncclIbHandle handle;          /* connector: what the handle held */
  int offset;
  int ready;
  struct ncclIbNetCommBase* comm;
  struct ncclIbConnectionMetadata local, remote;
};

static void commFree(struct ncclIbNetCommBase* base);

static void stageDrop(struct railnetConnStage* s) {
  struct ncclIbCommStage* st = (struct ncclIbCommStage*)s;
  commFree(st->comm);
  free(st);
}

static struct railnetConnStages connectStages = RAILNET_CONN_STAGES_INIT("NET/IB", stageDrop);

void railnetIbDropConnectStages(void) { railnetConnStageDropAll(&connectStages); }

const char* railnetIbPeerStr(struct ncclIbNetCommBase* base, char* buf) {
  return ncclSocketToString(&base->sock.addr, buf, 1);
}

/* ------------------------------------------------------------------ QPs */

static ncclResult_t qpCreate(struct ncclIbNetCommBase* base, int devIndex, int accessFlags, struct ibv_qp** out) {
  struct ncclIbCommDev* cd = &base->devs[devIndex];
  struct ncclIbDev* dev = &ncclIbDevs[cd->ibDevN];
  struct ibv_qp_init_attr init;
  memset(&init, 0, sizeof(init));
  init.send_cq = cd->cq;
  init.recv_cq = cd->cq;
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = 2 * NET_IB_MAX_REQUESTS;
  init.cap.max_recv_wr = NET_IB_MAX_REQUESTS;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  init.cap.max_inline_data = base->useInline ? sizeof(struct ncclIbSendFifo) * NCCL_NET_IB_MAX_RECVS : 0;
  struct ibv_qp* qp = NULL;
  if (wrap_ibv_create_qp(&qp, cd->pd, &init) != ncclSuccess || qp == NULL) {
    WARN("NET/IB : %s:%d: cannot create a queue pair", dev->devName, dev->portNum);
    return ncclSystemError;
  }
  if (base->useInline) {
    if (init.cap.max_inline_data < sizeof(struct ncclIbSendFifo)) base->useInline = 0;
    else if (base->maxInline == 0 || init.cap.max_inline_data < base->maxInline) base->maxInline = init.cap.max_inline_data;
  }
  struct ibv_qp_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = (uint16_t)railnetParamInt(&qpParams[P_PKEY]);
  attr.port_num = dev->portNum;
  attr.qp_access_flags = accessFlags;
  if (wrap_ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) !=
      ncclSuccess) {
    WARN("NET/IB : %s:%d: QP %u RESET->INIT failed (NCCL_IB_PKEY=%d)", dev->devName, dev->portNum, qp->qp_num,
         (int)railnetParamInt(&qpParams[P_PKEY]));
    wrap_ibv_destroy_qp(qp);
    return ncclSystemError;
  }
  *out = qp;
  return ncclSuccess;
}

/* INIT -> RTR -> RTS towards remote QP qpn on the peer's device info rem. */
static ncclResult_t qpConnect(struct ncclIbNetCommBase* base, int devIndex, struct ibv_qp* qp,
                              const struct ncclIbDevInfo* rem, uint32_t qpn, int tc, int sl) {
  struct ncclIbCommDev* cd = &base->devs[devIndex];
  struct ncclIbDev* dev = &ncclIbDevs[cd->ibDevN];
  struct ibv_qp_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.qp_state = IBV_QPS_RTR;
  enum ibv_mtu mtu = dev->portAttr.active_mtu;
  if ((enum ibv_mtu)rem->mtu < mtu) mtu = (enum ibv_mtu)rem->mtu;
  attr.path_mtu = mtu;
  attr.dest_qp_num = qpn;
  attr.rq_psn = 0;
  attr.max_dest_rd_atomic = 1;
  attr.min_rnr_timer = 12;
  if (rem->linkLayer == IBV_LINK_LAYER_ETHERNET) {
    attr.ah_attr.is_global = 1;
    attr.ah_attr.grh.dgid = rem->gid;
    attr.ah_attr.grh.flow_label = 0;
    attr.ah_attr.grh.sgid_index = (uint8_t)cd->gidIndex;
    attr.ah_attr.grh.hop_limit = 255;
    attr.ah_attr.grh.traffic_class = (uint8_t)tc;
  } else {
    attr.ah_attr.is_global = 0;
    attr.ah_attr.dlid = (uint16_t)rem->lid;
  }
  attr.ah_attr.sl = (uint8_t)sl;
  attr.ah_attr.src_path_bits = 0;
  attr.ah_attr.port_num = dev->portNum;
  char g[INET6_ADDRSTRLEN] = "";
  ibvGetGidStr(&rem->gid, g, sizeof(g));
  if (wrap_ibv_modify_qp(qp, &attr,
                         IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                             IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != ncclSuccess) {
    WARN("NET/IB : %s:%d: QP %u INIT->RTR towards QP %u (%s %s, GID index %d here) failed", dev->devName,
         dev->portNum, qp->qp_num, qpn, NCCL_IB_LLSTR(rem->linkLayer), g, cd->gidIndex);
    return ncclSystemError;
  }
  memset(&attr, 0, sizeof(attr));
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = (uint8_t)railnetParamInt(&qpParams[P_TIMEOUT]);
  attr.retry_cnt = (uint8_t)railnetParamInt(&qpParams[P_RETRY_CNT]);
  attr.rnr_retry = 7;
  attr.sq_psn = 0;
  attr.max_rd_atomic = 1;
  if (wrap_ibv_modify_qp(qp, &attr,
                         IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                             IBV_QP_MAX_QP_RD_ATOMIC) != ncclSuccess) {
    WARN("NET/IB : %s:%d: QP %u RTR->RTS failed", dev->devName, dev->portNum, qp->qp_num);
    return ncclSystemError;
  }
  TRACE(NCCL_NET, "NET/IB: %s:%d QP %u connected to QP %u at %s mtu %d tc %d sl %d", dev->devName, dev->portNum,
        qp->qp_num, qpn, g, (int)mtu, tc, sl);
  return ncclSuccess;
}

/* ------------------------------------------------------------------ comm resources */

/* PD, CQ and GID of every device of vDevice vDev. */
static ncclResult_t commDevsInit(struct ncclIbNetCommBase* base, int vDev) {
  struct ncclIbMergedDev* m = &ncclIbMergedDevs[vDev];
  base->vDev = vDev;
  base->vProps = m->vProps;
  for (int i = 0; i < base->vProps.ndevs; i++) {
    struct ncclIbCommDev* cd = &base->devs[i];
    cd->ibDevN = base->vProps.devs[i];
    struct ncclIbDev* dev = &ncclIbDevs[cd->ibDevN];
    NCCLCHECK(railnetIbPdAcquire(cd->ibDevN, &cd->pd));
    NCCLCHECK(wrap_ibv_create_cq(&cd->cq, dev->context, 2 * NET_IB_MAX_REQUESTS * railnetIbParamQpsPerConn(), NULL,
                                 NULL, 0));
    cd->gidIndex = dev->gidIndex;
    if (cd->gidIndex < 0) NCCLCHECK(ncclIbGetGidIndex(dev->context, dev->portNum, &dev->portAttr, &cd->gidIndex));
    if (dev->link == IBV_LINK_LAYER_ETHERNET || cd->gidIndex != 0 || dev->portAttr.gid_tbl_len > 0)
      NCCLCHECK(wrap_ibv_query_gid(dev->context, dev->portNum, cd->gidIndex, &cd->gid));
  }
  return ncclSuccess;
}

static void commFree(struct ncclIbNetCommBase* base) {
  if (base == NULL) return;
  for (int q = 0; q < base->nqps; q++)
    if (base->qps[q].qp) wrap_ibv_destroy_qp(base->qps[q].qp);
  for (int i = 0; i < base->vProps.ndevs; i++) {
    struct ncclIbCommDev* cd = &base->devs[i];
    if (cd->flushQp) wrap_ibv_destroy_qp(cd->flushQp);
    if (cd->flushMr) wrap_ibv_dereg_mr(cd->flushMr);
    if (cd->fifoMr) wrap_ibv_dereg_mr(cd->fifoMr);
    if (cd->localMr) wrap_ibv_dereg_mr(cd->localMr);
    if (cd->cq) wrap_ibv_destroy_cq(cd->cq);
    if (cd->pd) railnetIbPdRelease(cd->ibDevN);
  }
  if (base->sock.fd >= 0) ncclSocketClose(&base->sock);
  free(base);
}

static ncclResult_t allocComm(int isSend, struct ncclIbNetCommBase** out) {
  size_t sz = isSend ? sizeof(struct ncclIbSendComm) : sizeof(struct ncclIbRecvComm);
  void* p = NULL;
  if (posix_memalign(&p, 4096, sz) != 0 || p == NULL) {
    WARN("NET/IB : out of memory for a %s comm (%zu bytes)", isSend ? "send" : "receive", sz);
    return ncclSystemError;
  }
  memset(p, 0, sz);
  struct ncclIbNetCommBase* b = (struct ncclIbNetCommBase*)p;
  b->isSend = isSend;
  b->sock.fd = -1;
  b->sock.acceptFd = -1;
  *out = b;
  return ncclSuccess;
}

static void fillDevInfo(struct ncclIbNetCommBase* base, int i, struct ncclIbDevInfo* d, uint32_t rkey) {
  struct ncclIbCommDev* cd = &base->devs[i];
  struct ncclIbDev* dev = &ncclIbDevs[cd->ibDevN];
  d->lid = dev->portAttr.lid;
  d->ibPort = dev->portNum;
  d->linkLayer = dev->link;
  d->mtu = (uint8_t)dev->portAttr.active_mtu;
  d->gidIndex = cd->gidIndex;
  d->gid = cd->gid;
  d->fifoRkey = rkey;
}

/* Traffic class and service level of a connection (the connector decides). The comm
 * config's trafficClass is a traffic class: it never becomes the 4-bit service level. */
static void connTcSl(void* ctx, int* tc, int* sl) {
  int cfg = ctx ? ((ncclNetCommConfig_t*)ctx)->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
  int64_t envTc = railnetParamInt(&qpParams[P_TC]), envSl = railnetParamInt(&qpParams[P_SL]);
  *tc = envTc != -1 ? (int)envTc : (cfg != NCCL_NET_TRAFFIC_CLASS_UNDEF && cfg >= 0 && cfg <= 255) ? cfg : 0;
  *sl = envSl != -1 ? (int)envSl : 0;
}

ncclResult_t railnetIbCheckMetadata(const struct ncclIbConnectionMetadata* m, const char* peer, int wantNqps) {
  if (m->magic != RAILNET_IB_META_MAGIC || m->version != RAILNET_IB_META_VERSION) {
    WARN("NET/IB : peer %s sent connection metadata that is not railnet's (magic 0x%016llx version %u; expected "
         "0x%016llx version %u): another plugin or version at the other end, or not an NCCL peer",
         peer, (unsigned long long)m->magic, m->version, (unsigned long long)RAILNET_IB_META_MAGIC,
         RAILNET_IB_META_VERSION);
    return ncclRemoteError;
  }
  if (m->ndevs < 1 || m->ndevs > NCCL_IB_MAX_DEVS_PER_NIC || m->nqps < 1 || m->nqps > NCCL_IB_MAX_QPS ||
      (wantNqps > 0 && m->nqps != wantNqps) || (m->splitDataOnQps != 0 && m->splitDataOnQps != 1) || m->tc < 0 ||
      m->tc > 255 || m->sl < 0 || m->sl > 15 || m->fifoAddr == 0) {
    WARN("NET/IB : peer %s sent invalid connection metadata: %d devices (1..%d), %d QPs (1..%d%s), split %d, tc %d, "
         "sl %d, address 0x%llx",
         peer, m->ndevs, NCCL_IB_MAX_DEVS_PER_NIC, m->nqps, NCCL_IB_MAX_QPS, wantNqps > 0 ? ", as many as ours" : "",
         m->splitDataOnQps, m->tc, m->sl, (unsigned long long)m->fifoAddr);
    return ncclRemoteError;
  }
  for (int i = 0; i < m->ndevs; i++) {
    const struct ncclIbDevInfo* d = &m->devs[i];
    if ((d->linkLayer != IBV_LINK_LAYER_INFINIBAND && d->linkLayer != IBV_LINK_LAYER_ETHERNET) ||
        d->mtu < IBV_MTU_256 || d->mtu > IBV_MTU_4096 || d->fifoRkey == 0) {
      WARN("NET/IB : peer %s sent invalid metadata for its device %d: link layer %d, mtu %d, rkey 0x%x", peer, i,
           d->linkLayer, d->mtu, d->fifoRkey);
      return ncclRemoteError;
    }
  }
  for (int q = 0; q < m->nqps; q++) {
    if (m->qpInfo[q].devIndex < 0 || m->qpInfo[q].devIndex >= m->ndevs || m->qpInfo[q].qpn == 0 ||
        m->qpInfo[q].qpn > 0xffffff) {
      WARN("NET/IB : peer %s sent invalid metadata for QP %d: qpn %u on device %d of %d", peer, q, m->qpInfo[q].qpn,
           m->qpInfo[q].devIndex, m->ndevs);
      return ncclRemoteError;
    }
  }
  return ncclSuccess;
}

/* Link layers must match between every QP's two ends. */
static ncclResult_t checkLinkLayers(struct ncclIbNetCommBase* base, const struct ncclIbConnectionMetadata* rem,
                                    const char* peer) {
  for (int q = 0; q < base->nqps; q++) {
    struct ncclIbDev* dev = &ncclIbDevs[base->devs[base->qps[q].devIndex].ibDevN];
    const struct ncclIbDevInfo* rd = &rem->devs[rem->qpInfo[q].devIndex];
    if (rd->linkLayer != dev->link) {
      WARN("NET/IB : peer %s: link layer mismatch on QP %d: %s:%d is %s, the peer's device %d is %s. Select NICs of "
           "one link layer with NCCL_IB_HCA",
           peer, q, dev->devName, dev->portNum, NCCL_IB_LLSTR(dev->link), rem->qpInfo[q].devIndex,
           NCCL_IB_LLSTR(rd->linkLayer));
      return ncclRemoteError;
    }
  }
  return ncclSuccess;
}

/* Create nqps QPs in INIT and describe them in meta. */
static ncclResult_t createQps(struct ncclIbNetCommBase* base, int nqps, struct ncclIbConnectionMetadata* meta) {
  int ece = (int)railnetParamInt(&qpParams[P_ECE]);
  for (int q = 0; q < nqps; q++) {
    struct ncclIbQp* qp = &base->qps[q];
    qp->devIndex = q % base->vProps.ndevs;
    NCCLCHECK(qpCreate(base, qp->devIndex, IBV_ACCESS_REMOTE_WRITE, &qp->qp));
    base->nqps = q + 1;
    meta->qpInfo[q].qpn = qp->qp->qp_num;
    meta->qpInfo[q].devIndex = qp->devIndex;
    if (ece && base->isSend) {
      NCCLCHECK(wrap_ibv_query_ece(qp->qp, &meta->qpInfo[q].ece, &qp->eceSupported));
      meta->qpInfo[q].eceSupported = qp->eceSupported;
    }
  }
  return ncclSuccess;
}

/* Connect every QP to its peer (RTR, RTS), applying the peer's ECE options first. */
static ncclResult_t connectQps(struct ncclIbNetCommBase* base, const struct ncclIbConnectionMetadata* rem, int tc,
                               int ctsTc, int sl, struct ncclIbConnectionMetadata* local) {
  int ece = (int)railnetParamInt(&qpParams[P_ECE]);
  for (int q = 0; q < base->nqps; q++) {
    struct ncclIbQp* qp = &base->qps[q];
    const struct ncclIbQpInfo* ri = &rem->qpInfo[q];
    qp->remDevIndex = ri->devIndex;
    if (ece && ri->eceSupported) {
      struct ibv_ece e = ri->ece;
      NCCLCHECK(wrap_ibv_set_ece(qp->qp, &e, &qp->eceSupported));
      if (!base->isSend && local) {
        /* the acceptor answers with what its QP agreed to */
        NCCLCHECK(wrap_ibv_query_ece(qp->qp, &local->qpInfo[q].ece, &local->qpInfo[q].eceSupported));
      }
    }
    /* the receiver writes the clear-to-send entries: those go with NCCL_IB_FIFO_TC */
    int qtc = base->isSend ? tc : ctsTc;
    NCCLCHECK(qpConnect(base, qp->devIndex, qp->qp, &rem->devs[ri->devIndex], ri->qpn, qtc, sl));
  }
  return ncclSuccess;
}

/* ------------------------------------------------------------------ listen */

ncclResult_t ncclIbListen(void* ctx, int dev, void* opaqueHandle, void** listenComm) {
  (void)ctx;
  if (opaqueHandle == NULL || listenComm == NULL) return ncclInvalidArgument;
  if (dev < 0 || dev >= ncclNMergedIbDevs) {
    WARN("NET/IB : listen on device %d, there are %d", dev, ncclNMergedIbDevs < 0 ? 0 : ncclNMergedIbDevs);
    return ncclInvalidUsage;
  }
  struct ncclIbHandle* handle = (struct ncclIbHandle*)opaqueHandle;
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  struct ncclIbListenComm* lc;
  NCCLCHECK(RAILNET_CALLOC(&lc, 1, "an IB listen comm"));
  lc->dev = dev;
  lc->sock.fd = -1;
  ncclResult_t res = railnetConnListen(&lc->sock, &ncclIbIfAddr, ncclSocketTypeNetIb, &handle->connectAddr);
  if (res != ncclSuccess) {
    free(lc);
    return res;
  }
  handle->handleMagic = RAILNET_IB_HANDLE_MAGIC;
  handle->socketMagic = railnetSocketMagic();
  *listenComm = lc;
  return ncclSuccess;
}

ncclResult_t railnetIbCheckHandle(const struct ncclIbHandle* h) {
  char a[SOCKET_NAME_MAXLEN];
  NCCLCHECK(railnetConnCheckMagic("NET/IB", "IB", h->handleMagic, RAILNET_IB_HANDLE_MAGIC));
  if (!railnetSocketAddrUsable(&h->connectAddr, a)) {
    WARN("NET/IB : connect handle is invalid (address %s)", a);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* ------------------------------------------------------------------ connect */

static ncclResult_t sendCommSetup(void* ctx, struct ncclIbSendComm* comm, struct ncclIbCommStage* st) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct ncclIbConnectionMetadata* meta = &st->local;
  NCCLCHECK(commDevsInit(base, base->vDev));
  base->useInline = (int)railnetParamInt(&qpParams[P_USE_INLINE]);
  base->splitDataOnQps = railnetIbParamSplitDataOnQps();
  int nqps = railnetIbParamQpsPerConn() * base->vProps.ndevs;
  if (nqps > NCCL_IB_MAX_QPS) nqps = NCCL_IB_MAX_QPS;
  NCCLCHECK(createQps(base, nqps, meta));
  for (int i = 0; i < base->vProps.ndevs; i++) {
    struct ncclIbCommDev* cd = &base->devs[i];
    NCCLCHECK(wrap_ibv_reg_mr(&cd->fifoMr, cd->pd, comm->fifo, sizeof(comm->fifo),
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ));
    NCCLCHECK(wrap_ibv_reg_mr(&cd->localMr, cd->pd, comm->sizes, sizeof(comm->sizes), IBV_ACCESS_LOCAL_WRITE));
    fillDevInfo(base, i, &meta->devs[i], cd->fifoMr->rkey);
  }
  comm->ar = ncclIbDevs[base->devs[0].ibDevN].ar;
  meta->magic = RAILNET_IB_META_MAGIC;
  meta->version = RAILNET_IB_META_VERSION;
  meta->ndevs = base->vProps.ndevs;
  meta->nqps = base->nqps;
  meta->splitDataOnQps = base->splitDataOnQps;
  connTcSl(ctx, &meta->tc, &meta->sl);
  meta->fifoAddr = (uint64_t)(uintptr_t)comm->fifo;
  snprintf(meta->devName, sizeof(meta->devName), "%s", ncclIbMergedDevs[base->vDev].devName);
  return ncclSuccess;
}

ncclResult_t ncclIbConnect(void* ctx, int dev, void* opaqueHandle, void** sendComm, ncclNetDeviceHandle_t** sendDevComm) {
  if (opaqueHandle == NULL || sendComm == NULL) return ncclInvalidArgument;
  *sendComm = NULL;
  if (sendDevComm) *sendDevComm = NULL;
  if (dev < 0 || dev >= ncclNMergedIbDevs) {
    WARN("NET/IB : connect on device %d, there are %d", dev, ncclNMergedIbDevs < 0 ? 0 : ncclNMergedIbDevs);
    return ncclInvalidUsage;
  }
  struct ncclIbCommStage* st = (struct ncclIbCommStage*)railnetConnStageFind(&connectStages, opaqueHandle);
  ncclResult_t res = ncclSuccess;
  char peer[SOCKET_NAME_MAXLEN];
  if (st == NULL) {
    /* NCCL's handles are byte arrays: read a copy, never the fields in place */
    struct ncclIbHandle hc;
    memcpy(&hc, opaqueHandle, sizeof(hc));
    NCCLCHECK(railnetIbCheckHandle(&hc));
    NCCLCHECK(RAILNET_CALLOC(&st, 1, "an IB connect state"));
    memcpy(&st->handle, &hc, sizeof(st->handle));
    res = allocComm(1, &st->comm);
    if (res != ncclSuccess) {
      free(st);
      return res;
    }
    st->comm->vDev = dev;
    railnetConnStageAdd(&connectStages, &st->link, opaqueHandle, sizeof(st->handle));
    NCCLCHECKGOTO(ncclSocketInit(&st->comm->sock, &st->handle.connectAddr, st->handle.socketMagic,
                                 ncclSocketTypeNetIb, NULL, 1), res, fail);
    NCCLCHECKGOTO(ncclSocketConnect(&st->comm->sock), res, fail);
    st->link.state = STAGE_CONNECT;
  }
  struct ncclIbSendComm* comm = (struct ncclIbSendComm*)st->comm;
  struct ncclIbNetCommBase* base = &comm->base;
  int closed = 0;
  if (st->link.state == STAGE_CONNECT) {
    int ready = 0;
    NCCLCHECKGOTO(ncclSocketReady(&base->sock, &ready), res, fail);
    if (!ready) return ncclSuccess;
    NCCLCHECKGOTO(sendCommSetup(ctx, comm, st), res, fail);
    st->link.state = STAGE_SEND_META;
    st->offset = 0;
  }
  if (st->link.state == STAGE_SEND_META) {
    NCCLCHECKGOTO(ncclSocketProgress(NCCL_SOCKET_SEND, &base->sock, &st->local, sizeof(st->local), &st->offset,
                                     &closed), res, fail);
    if (closed) goto peerClosed;
    if (st->offset < (int)sizeof(st->local)) return ncclSuccess;
    st->link.state = STAGE_RECV_META;
    st->offset = 0;
  }
  if (st->link.state == STAGE_RECV_META) {
    NCCLCHECKGOTO(ncclSocketProgress(NCCL_SOCKET_RECV, &base->sock, &st->remote, sizeof(st->remote), &st->offset,
                                     &closed), res, fail);
    if (closed) goto peerClosed;
    if (st->offset < (int)sizeof(st->remote)) return ncclSuccess;
    railnetIbPeerStr(base, peer);
    NCCLCHECKGOTO(railnetIbCheckMetadata(&st->remote, peer, base->nqps), res, fail);
    NCCLCHECKGOTO(checkLinkLayers(base, &st->remote, peer), res, fail);
    base->nRemDevs = st->remote.ndevs;
    memcpy(base->remDevs, st->remote.devs, sizeof(base->remDevs));
    snprintf(base->remDevName, sizeof(base->remDevName), "%.*s", (int)sizeof(st->remote.devName) - 1,
             st->remote.devName);
    comm->remSizesAddr = st->remote.fifoAddr;
    for (int i = 0; i < st->remote.ndevs; i++) comm->remSizesRkeys[i] = st->remote.devs[i].fifoRkey;
    NCCLCHECKGOTO(connectQps(base, &st->remote, st->local.tc, st->local.tc, st->local.sl, NULL), res, fail);
    st->link.state = STAGE_SEND_READY;
    st->offset = 0;
    st->ready = 1;
  }
  if (st->link.state == STAGE_SEND_READY) {
    NCCLCHECKGOTO(ncclSocketProgress(NCCL_SOCKET_SEND, &base->sock, &st->ready, sizeof(st->ready), &st->offset,
                                     &closed), res, fail);
    if (closed) goto peerClosed;
    if (st->offset < (int)sizeof(st->ready)) return ncclSuccess;
  }
  base->ready = 1;
  INFO(NCCL_NET, "NET/IB: connected %s to %s (%s) with %d QP%s%s", ncclIbMergedDevs[base->vDev].devName,
       railnetIbPeerStr(base, peer), base->remDevName, base->nqps, base->nqps > 1 ? "s" : "",
       base->splitDataOnQps ? ", data split across QPs" : "");
  *sendComm = comm;
  railnetConnStageRemove(&connectStages, &st->link);
  free(st);
  return ncclSuccess;
peerClosed:
  WARN("NET/IB : peer %s closed the connection during connection setup (state %d)", railnetIbPeerStr(base, peer),
       st->link.state);
  res = ncclRemoteError;
fail:
  commFree(st->comm);
  railnetConnStageRemove(&connectStages, &st->link);
  free(st);
  return res;
}

/* ------------------------------------------------------------------ accept */

static ncclResult_t recvCommSetup(struct ncclIbListenComm* lc, struct ncclIbRecvComm* comm,
                                  struct ncclIbCommStage* st, const char* peer) {
  struct ncclIbNetCommBase* base = &comm->base;
  struct ncclIbConnectionMetadata* rem = &st->remote;
  struct ncclIbConnectionMetadata* meta = &st->local;
  NCCLCHECK(commDevsInit(base, lc->dev));
  base->useInline = (int)railnetParamInt(&qpParams[P_USE_INLINE]);
  base->splitDataOnQps = rem->splitDataOnQps;
  if (rem->nqps != railnetIbParamQpsPerConn() * base->vProps.ndevs || rem->splitDataOnQps != railnetIbParamSplitDataOnQps())
    INFO(NCCL_NET, "NET/IB : peer %s uses %d QPs%s; following it (here NCCL_IB_QPS_PER_CONNECTION=%d x %d devices, "
         "NCCL_IB_SPLIT_DATA_ON_QPS=%d)", peer, rem->nqps, rem->splitDataOnQps ? ", data split across QPs" : "",
         railnetIbParamQpsPerConn(), base->vProps.ndevs, railnetIbParamSplitDataOnQps());
  NCCLCHECK(createQps(base, rem->nqps, meta));
  NCCLCHECK(checkLinkLayers(base, rem, peer));
  int64_t fifoTc = railnetParamInt(&qpParams[P_FIFO_TC]);
  int ctsTc = (ncclIbDevs[base->devs[0].ibDevN].link == IBV_LINK_LAYER_ETHERNET && fifoTc != -1) ? (int)fifoTc
                                                                                                 : rem->tc;
  NCCLCHECK(connectQps(base, rem, rem->tc, ctsTc, rem->sl, meta));
  for (int i = 0; i < base->vProps.ndevs; i++) {
    struct ncclIbCommDev* cd = &base->devs[i];
    NCCLCHECK(wrap_ibv_reg_mr(&cd->fifoMr, cd->pd, comm->sizes, sizeof(comm->sizes),
                              IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE));
    NCCLCHECK(wrap_ibv_reg_mr(&cd->localMr, cd->pd, comm->elems, sizeof(comm->elems), IBV_ACCESS_LOCAL_WRITE));
    fillDevInfo(base, i, &meta->devs[i], cd->fifoMr->rkey);
  }
  base->nRemDevs = rem->ndevs;
  memcpy(base->remDevs, rem->devs, sizeof(base->remDevs));
  snprintf(base->remDevName, sizeof(base->remDevName), "%.*s", (int)sizeof(rem->devName) - 1, rem->devName);
  comm->remFifoAddr = rem->fifoAddr;
  /* GPUDirect receives are flushed with an RDMA read through a QP connected to itself */
  comm->flushEnabled = ncclIbGdrSupport() == ncclSuccess && !railnetParamInt(&qpParams[P_GDR_FLUSH_DISABLE]);
  for (int i = 0; comm->flushEnabled && i < base->vProps.ndevs; i++) {
    struct ncclIbCommDev* cd = &base->devs[i];
    NCCLCHECK(wrap_ibv_reg_mr(&cd->flushMr, cd->pd, comm->flushBuf, sizeof(comm->flushBuf), IBV_ACCESS_LOCAL_WRITE));
    NCCLCHECK(qpCreate(base, i, IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, &cd->flushQp));
    struct ncclIbDevInfo self;
    memset(&self, 0, sizeof(self));
    fillDevInfo(base, i, &self, 1);
    NCCLCHECK(qpConnect(base, i, cd->flushQp, &self, cd->flushQp->qp_num, rem->tc, rem->sl));
  }
  meta->magic = RAILNET_IB_META_MAGIC;
  meta->version = RAILNET_IB_META_VERSION;
  meta->ndevs = base->vProps.ndevs;
  meta->nqps = base->nqps;
  meta->splitDataOnQps = base->splitDataOnQps;
  meta->tc = rem->tc;
  meta->sl = rem->sl;
  meta->fifoAddr = (uint64_t)(uintptr_t)comm->sizes;
  snprintf(meta->devName, sizeof(meta->devName), "%s", ncclIbMergedDevs[base->vDev].devName);
  return ncclSuccess;
}

/* Drop the connection being accepted (bad peer); the listener keeps listening. */
static void acceptDrop(struct ncclIbListenComm* lc) {
  struct ncclIbCommStage* st = lc->stage;
  commFree(st->comm);
  free(st);
  lc->stage = NULL;
}

ncclResult_t ncclIbAccept(void* listenComm, void** recvComm, ncclNetDeviceHandle_t** recvDevComm) {
  struct ncclIbListenComm* lc = (struct ncclIbListenComm*)listenComm;
  if (lc == NULL || recvComm == NULL) return ncclInvalidArgument;
  *recvComm = NULL;
  if (recvDevComm) *recvDevComm = NULL;
  char peer[SOCKET_NAME_MAXLEN];
  for (;;) {
    struct ncclIbCommStage* st = lc->stage;
    if (st == NULL) {
      NCCLCHECK(RAILNET_CALLOC(&st, 1, "an IB accept state"));
      ncclResult_t r = allocComm(0, &st->comm);
      if (r != ncclSuccess) {
        free(st);
        return r;
      }
      st->comm->vDev = lc->dev;
      lc->stage = st;
      st->link.state = STAGE_ACCEPT;
    }
    struct ncclIbRecvComm* comm = (struct ncclIbRecvComm*)st->comm;
    struct ncclIbNetCommBase* base = &comm->base;
    int closed = 0;
    ncclResult_t r;
    if (st->link.state == STAGE_ACCEPT) {
      NCCLCHECK(ncclSocketAccept(&base->sock, &lc->sock));
      int ready = 0;
      if (ncclSocketReady(&base->sock, &ready) != ncclSuccess) {
        INFO(NCCL_NET, "NET/IB : a connection to the listener failed its handshake; dropped it");
        acceptDrop(lc);
        continue;
      }
      if (!ready) return ncclSuccess;
      st->link.state = STAGE_RECV_META;
      st->offset = 0;
    }
    railnetIbPeerStr(base, peer);
    if (st->link.state == STAGE_RECV_META) {
      r = ncclSocketProgress(NCCL_SOCKET_RECV, &base->sock, &st->remote, sizeof(st->remote), &st->offset, &closed);
      if (r != ncclSuccess || closed) {
        WARN("NET/IB : peer %s closed the connection after %d of %zu bytes of connection metadata; refused it", peer,
             st->offset, sizeof(st->remote));
        acceptDrop(lc);
        continue;
      }
      if (st->offset < (int)sizeof(st->remote)) return ncclSuccess;
      if (railnetIbCheckMetadata(&st->remote, peer, 0) != ncclSuccess) {
        WARN("NET/IB : refused the connection from %s; still listening", peer);
        acceptDrop(lc);
        continue;
      }
      r = recvCommSetup(lc, comm, st, peer);
      if (r != ncclSuccess) {
        acceptDrop(lc);
        return r;
      }
      st->link.state = STAGE_SEND_META;
      st->offset = 0;
    }
    if (st->link.state == STAGE_SEND_META) {
      r = ncclSocketProgress(NCCL_SOCKET_SEND, &base->sock, &st->local, sizeof(st->local), &st->offset, &closed);
      if (r != ncclSuccess || closed) {
        WARN("NET/IB : peer %s closed the connection during connection setup; refused it", peer);
        acceptDrop(lc);
        continue;
      }
      if (st->offset < (int)sizeof(st->local)) return ncclSuccess;
      st->link.state = STAGE_RECV_READY;
      st->offset = 0;
    }
    if (st->link.state == STAGE_RECV_READY) {
      r = ncclSocketProgress(NCCL_SOCKET_RECV, &base->sock, &st->ready, sizeof(st->ready), &st->offset, &closed);
      if (r != ncclSuccess || closed) {
        WARN("NET/IB : peer %s closed the connection before it was ready; refused it", peer);
        acceptDrop(lc);
        continue;
      }
      if (st->offset < (int)sizeof(st->ready)) return ncclSuccess;
      if (st->ready != 1) {
        WARN("NET/IB : peer %s sent %d instead of its ready flag; refused it", peer, st->ready);
        acceptDrop(lc);
        continue;
      }
    }
    base->ready = 1;
    INFO(NCCL_NET, "NET/IB: accepted %s (%s) on %s with %d QP%s%s", peer, base->remDevName,
         ncclIbMergedDevs[base->vDev].devName, base->nqps, base->nqps > 1 ? "s" : "",
         comm->flushEnabled ? ", GPUDirect flush" : "");
    *recvComm = comm;
    free(st);
    lc->stage = NULL;
    return ncclSuccess;
  }
}

/* ------------------------------------------------------------------ close */

ncclResult_t ncclIbCloseSend(void* sendComm) {
  commFree((struct ncclIbNetCommBase*)sendComm);
  return ncclSuccess;
}

ncclResult_t ncclIbCloseRecv(void* recvComm) {
  commFree((struct ncclIbNetCommBase*)recvComm);
  return ncclSuccess;
}

ncclResult_t ncclIbCloseListen(void* listenComm) {
  struct ncclIbListenComm* lc = (struct ncclIbListenComm*)listenComm;
  if (lc == NULL) return ncclSuccess;
  if (lc->stage) acceptDrop(lc);
  ncclSocketClose(&lc->sock);
  free(lc);
  return ncclSuccess;
}
