/*
 * IB GID selection: which GID index a QP uses (NCCL's ncclIbGetGidIndex).
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
 * The GIDs are read through a reader (gid.h): libibverbs for the transport, sysfs for the
 * explain API where libibverbs cannot open the device.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gid.h"
#include "devices.h"
#include "ibvwrap.h"
#include "param.h"

enum { P_GID_INDEX, P_FLID_GID_INDEX, P_ROCE_VERSION, P_ADDR_FAMILY, P_ADDR_RANGE };
static const railnetParam gidParams[] = {
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
RAILNET_PARAM_TABLE("net_ib/gid", gidParams);

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

int railnetIbGidConfigured(const union ibv_gid* gid) {
  uint32_t rest = gidWord(gid, 1) | gidWord(gid, 2) | gidWord(gid, 3);
  uint32_t w0 = gidWord(gid, 0);
  if ((w0 | rest) == 0) return 0;
  if (w0 == htonl(0xfe800000) && rest == 0) return 0;
  return 1;
}

int railnetIbGidLinkLocal(const union ibv_gid* gid) {
  return gidWord(gid, 0) == htonl(0xfe800000) && gidWord(gid, 1) == 0;
}

int railnetIbGidRoutable(const union ibv_gid* gid) { return railnetIbGidConfigured(gid) && !railnetIbGidLinkLocal(gid); }

int railnetIbGidTypeVersion(const char* text) {
  if (text == NULL) return -1;
  if (strncmp(text, "IB/RoCE v1", 10) == 0 || strncmp(text, "RoCE v1", 7) == 0) return 1;
  if (strncmp(text, "RoCE v2", 7) == 0) return 2;
  return -1;
}

int railnetIbGidParse(const char* text, union ibv_gid* gid) {
  unsigned v[8];
  memset(gid, 0, sizeof(*gid));
  if (text == NULL || sscanf(text, "%x:%x:%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6],
                             &v[7]) != 8)
    return 0;
  for (int k = 0; k < 8; k++) {
    gid->raw[2 * k] = (uint8_t)(v[k] >> 8);
    gid->raw[2 * k + 1] = (uint8_t)v[k];
  }
  return 1;
}

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
  const char* fam = railnetParamStr(&gidParams[P_ADDR_FAMILY]);
  if (fam != NULL && fam[0] != '\0') {
    if (railnetParamSourceOf(&gidParams[P_ADDR_FAMILY]) != RAILNET_SRC_DEFAULT)
      INFO(NCCL_ENV, "NCCL_IB_ADDR_FAMILY set by environment to %s", fam);
    if (strcmp(fam, "AF_INET6") == 0) {
      p->af = AF_INET6;
    } else if (strcmp(fam, "AF_INET") != 0) {
      WARN("NET/IB : NCCL_IB_ADDR_FAMILY=%s is neither AF_INET nor AF_INET6; using AF_INET", fam);
    }
  }
  p->roceVersion = (int)railnetParamInt(&gidParams[P_ROCE_VERSION]);

  const char* range = railnetParamStr(&gidParams[P_ADDR_RANGE]);
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
  return railnetIbGidTypeVersion(text);
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
static ncclResult_t viewFromTable(struct ibv_context* ctx, int physPorts, struct gidView* v, int* ok) {
  *ok = 0;
  if (ctx == NULL || railnetIbv.query_gid_table == NULL) return ncclSuccess;
  /* The kernel wants room for every valid entry of every port. */
  int nPorts = physPorts;
  if (nPorts <= 0) {
    struct ibv_device_attr devAttr;
    memset(&devAttr, 0, sizeof(devAttr));
    nPorts = 1;
    if (railnetIbv.query_device && railnetIbv.query_device(ctx, &devAttr) == 0 && devAttr.phys_port_cnt > 0)
      nPorts = devAttr.phys_port_cnt;
  }
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

/* The reader per slot (ibv_query_gid, or sysfs); types read later from sysfs, only where needed. */
static void viewFromSlots(const struct railnetIbGidReader* r, struct gidView* v) {
  for (int i = 0; i < v->len; i++) {
    v->ver[i] = VER_UNREAD;
    /* rdma-core answers an empty slot with the zero GID; a failure is an empty slot too */
    if (r->queryGid(r->arg, (uint8_t)v->port, i, &v->gids[i]) != 0) {
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
  if (famC != p->af || !railnetIbGidRoutable(gc) || !inRange) return;
  int verCur = viewVersion(v, *cur), verC = viewVersion(v, c);
  if ((verCur != verC || !railnetIbGidRoutable(gcur)) && verC == p->roceVersion) *cur = c;
}

static const char* famName(sa_family_t af) { return af == AF_INET ? "AF_INET" : "AF_INET6"; }

/* ------------------------------------------------------------------ readers */

/* ibv_query_gid on the context in arg: 0, or the errno value of the failure. */
static int verbsQueryGid(void* arg, uint8_t port, int index, union ibv_gid* gid) {
  if (railnetIbv.query_gid == NULL) return ENOSYS;
  errno = 0;
  int ret = railnetIbv.query_gid((struct ibv_context*)arg, port, index, gid);
  if (ret == 0) return 0;
  if (ret == -1 && errno != 0) return errno;
  return ret < 0 ? -ret : ret;
}

struct railnetIbGidReader railnetIbGidReaderVerbs(struct ibv_context* context) {
  struct railnetIbGidReader r = {verbsQueryGid, context, context, 0};
  return r;
}

int railnetIbSysfsGid(const char* devName, int portNum, int gidIndex, union ibv_gid* gid) {
  char text[64];
  memset(gid, 0, sizeof(*gid));
  int err = railnetIbSysfsLine(text, sizeof(text), "class/infiniband/%s/ports/%d/gids/%d", devName, portNum, gidIndex);
  if (err != 0) return err;
  return railnetIbGidParse(text, gid) ? 0 : EINVAL;
}

/* <sysfs>/class/infiniband/<arg>/ports/<port>/gids/<index>. */
static int sysfsQueryGid(void* arg, uint8_t port, int index, union ibv_gid* gid) {
  return railnetIbSysfsGid((const char*)arg, port, index, gid);
}

struct railnetIbGidReader railnetIbGidReaderSysfs(const char* devName) {
  struct railnetIbGidReader r = {sysfsQueryGid, (void*)devName, NULL, 0};
  return r;
}

/* One GID through the reader; a failure is a WARN naming the port (InfiniBand needs it). */
static ncclResult_t readerGid(const struct railnetIbGidReader* r, const char* devName, uint8_t portNum, int index,
                              union ibv_gid* gid) {
  int err = r->queryGid(r->arg, portNum, index, gid);
  if (err == 0) return ncclSuccess;
  WARN("NET/IB : Call to ibv_query_gid failed with error %s errno %d (%s:%d, GID index %d)", strerror(err), err,
       devName, portNum, index);
  return ncclSystemError;
}

/* ------------------------------------------------------------------ the three rules */

/* InfiniBand: NCCL_IB_ROUTABLE_FLID_GID_INDEX when its GID carries a FLID, else 0. */
static ncclResult_t chooseIb(const struct railnetIbGidReader* r, const char* devName, uint8_t portNum, int tblLen,
                             struct railnetIbGidChoice* ch) {
  int routable = (int)railnetParamInt(&gidParams[P_FLID_GID_INDEX]);
  ch->roceVersion = 0;
  if (routable < tblLen) {
    union ibv_gid gid;
    NCCLCHECK(readerGid(r, devName, portNum, routable, &gid));
    uint16_t flid = (uint16_t)((gid.raw[4] << 8) | gid.raw[5]);
    if (flid != 0) {
      ch->index = routable;
      ch->gid = gid;
      snprintf(ch->why, sizeof(ch->why), "InfiniBand, routable FLID 0x%x (NCCL_IB_ROUTABLE_FLID_GID_INDEX=%d)", flid,
               routable);
      return ncclSuccess;
    }
  }
  ch->index = 0;
  if (tblLen > 0) NCCLCHECK(readerGid(r, devName, portNum, 0, &ch->gid));
  snprintf(ch->why, sizeof(ch->why), "InfiniBand (no routable FLID at index %d)", routable);
  return ncclSuccess;
}

/* RoCE with NCCL_IB_GID_INDEX = forced (>= 0): that index, with a WARN when it cannot work. */
static void chooseForced(const struct railnetIbGidReader* r, const char* devName, uint8_t portNum, int tblLen,
                         int forced, struct railnetIbGidChoice* ch) {
  ch->index = forced;
  snprintf(ch->why, sizeof(ch->why), "forced by NCCL_IB_GID_INDEX=%d", forced);
  if (forced >= tblLen) {
    WARN("NET/IB : NCCL_IB_GID_INDEX=%d but %s:%d has only %d GID entries; connections will fail. "
         "Unset NCCL_IB_GID_INDEX to choose automatically",
         forced, devName, portNum, tblLen);
    return;
  }
  if (r->queryGid(r->arg, portNum, forced, &ch->gid) == 0 && !railnetIbGidConfigured(&ch->gid)) {
    WARN("NET/IB : NCCL_IB_GID_INDEX=%d is an empty GID slot on %s:%d; connections will fail "
         "(ibv_modify_qp: EINVAL/ENODATA). Unset NCCL_IB_GID_INDEX to choose automatically",
         forced, devName, portNum);
  }
  ch->roceVersion = railnetIbSysfsRoceVersion(devName, portNum, forced);
}

/* The sentence for a scan's choice: what was wanted and whether the choice is such an entry. */
static void scanWhy(const struct gidPrefs* prefs, int tblLen, struct railnetIbGidChoice* ch) {
  char range[96] = "";
  if (prefs->hasRange) snprintf(range, sizeof(range), ", NCCL_IB_ADDR_RANGE=%s", prefs->rangeText);
  const char* src = ch->source == RAILNET_GID_SRC_TABLE ? "ibv_query_gid_table" : "sysfs";
  char head[96];
  snprintf(head, sizeof(head), "%d of %d entries (types from %s)", ch->scanned, tblLen, src);
  char wish[128];
  snprintf(wish, sizeof(wish), "%s, RoCE v%d%s", famName(prefs->af), prefs->roceVersion, range);
  int match = railnetIbGidRoutable(&ch->gid) && railnetIbGidFamily(&ch->gid) == prefs->af &&
              ch->roceVersion == prefs->roceVersion &&
              gidInRange(prefs->af, prefs->hasRange ? prefs->prefix : NULL, prefs->prefixLen, &ch->gid);
  if (match) snprintf(ch->why, sizeof(ch->why), "best of %s for %s", head, wish);
  else snprintf(ch->why, sizeof(ch->why), "no entry matches %s; NCCL's rules pick it among %s", wish, head);
}

/* RoCE without NCCL_IB_GID_INDEX: NCCL's scan of the table. */
static ncclResult_t chooseScan(const struct railnetIbGidReader* r, const char* devName, uint8_t portNum, int tblLen,
                               struct railnetIbGidChoice* ch) {
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
  (void)viewFromTable(r->context, r->physPorts, &v, &fromTable); /* never fails: a failure falls back to the slots */
  if (!fromTable) viewFromSlots(r, &v);

  int cur = 0;
  for (int c = 1; c < tblLen; c++) considerCandidate(&v, &prefs, c, &cur);
  for (int i = 0; i < tblLen; i++) ch->scanned += railnetIbGidConfigured(&v.gids[i]);
  ch->index = cur;
  ch->gid = v.gids[cur];
  ch->roceVersion = viewVersion(&v, cur);
  ch->source = v.source;
  scanWhy(&prefs, tblLen, ch);
  free(v.gids);
  free(v.ver);
  return ncclSuccess;
}

/* ------------------------------------------------------------------ entry points */

ncclResult_t railnetIbChooseGidFrom(const struct railnetIbGidReader* reader, const char* devName, uint8_t portNum,
                                    const struct ibv_port_attr* portAttr, struct railnetIbGidChoice* ch) {
  memset(ch, 0, sizeof(*ch));
  ch->roceVersion = VER_UNKNOWN;
  int tblLen = portAttr->gid_tbl_len;
  if (devName == NULL) devName = "N/A";
  if (portAttr->link_layer == IBV_LINK_LAYER_INFINIBAND) return chooseIb(reader, devName, portNum, tblLen, ch);
  int forced = (int)railnetParamInt(&gidParams[P_GID_INDEX]);
  if (forced >= 0) {
    chooseForced(reader, devName, portNum, tblLen, forced, ch);
    return ncclSuccess;
  }
  return chooseScan(reader, devName, portNum, tblLen, ch);
}

ncclResult_t railnetIbChooseGid(struct ibv_context* context, const char* devName, uint8_t portNum,
                                const struct ibv_port_attr* portAttr, struct railnetIbGidChoice* ch) {
  struct railnetIbGidReader verbs = railnetIbGidReaderVerbs(context);
  return railnetIbChooseGidFrom(&verbs, devName, portNum, portAttr, ch);
}

ncclResult_t ncclIbGetGidIndex(struct ibv_context* context, uint8_t portNum, struct ibv_port_attr* portAttr,
                               int* gidIndex) {
  struct railnetIbGidChoice ch;
  const char* name = context && context->device ? wrap_ibv_get_device_name(context->device) : NULL;
  NCCLCHECK(railnetIbChooseGid(context, name, portNum, portAttr, &ch));
  *gidIndex = ch.index;
  return ncclSuccess;
}
