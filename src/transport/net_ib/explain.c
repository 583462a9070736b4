/*
 * The IB transport explains itself (ib_explain.h): the ports under the sysfs root with
 * discovery's verdict (railnetIbPortWanted), the GID index by the transport's selection
 * (railnetIbChooseGid, or railnetIbChooseGidFrom on the GIDs in sysfs), the GID table as the
 * selection classifies it, and the GPUDirect answers of gdr.c.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ib_explain.h"
#include "devices.h"
#include "discovery.h"
#include "gdr.h"
#include "gid.h"
#include "ibvwrap.h"

/* src into dst, cut to fit (names longer than the fields are cut, never overflow). */
static void copyStr(char* dst, size_t size, const char* src) {
  size_t n = strnlen(src, size - 1);
  memcpy(dst, src, n);
  dst[n] = '\0';
}

/* ------------------------------------------------------------------ libibverbs */

/* dev opened through libibverbs (*list to free after closing), or NULL with why set. */
static struct ibv_context* verbsOpen(const char* dev, struct ibv_device*** list, char* why, size_t size) {
  *list = NULL;
  int n = 0;
  if (wrap_ibv_symbols() != ncclSuccess) {
    snprintf(why, size, "libibverbs not found (install rdma-core)");
    return NULL;
  }
  if (wrap_ibv_get_device_list(list, &n) != ncclSuccess || *list == NULL) {
    *list = NULL;
    snprintf(why, size, "ibv_get_device_list failed: no RDMA support in this kernel/container?");
    return NULL;
  }
  for (int i = 0; i < n; i++) {
    if (strcmp(wrap_ibv_get_device_name((*list)[i]), dev) != 0) continue;
    struct ibv_context* ctx = NULL;
    if (wrap_ibv_open_device(&ctx, (*list)[i]) == ncclSuccess && ctx != NULL) return ctx;
    snprintf(why, size, "cannot open %s (permissions on /dev/infiniband?)", dev);
    return NULL;
  }
  snprintf(why, size, "libibverbs does not list %s (no uverbs device?)", dev);
  return NULL;
}

static void verbsClose(struct ibv_context* ctx, struct ibv_device** list) {
  if (ctx) (void)wrap_ibv_close_device(ctx);
  if (list) (void)wrap_ibv_free_device_list(list);
}

/* ------------------------------------------------------------------ the port scan */

/* "4: ACTIVE" -> 4 and "ACTIVE" (the whole text when it has no colon); -1 without a number. */
static int parseNumName(const char* s, char* name, size_t size) {
  int v = -1;
  const char* colon = strchr(s, ':');
  if (sscanf(s, "%d", &v) != 1) v = -1;
  copyStr(name, size, colon ? colon + 1 + strspn(colon + 1, " ") : s);
  return v;
}

static int notDot(const struct dirent* e) { return e->d_name[0] != '.'; }
static int byName(const struct dirent** a, const struct dirent** b) { return strcmp((*a)->d_name, (*b)->d_name); }
static int byNumber(const struct dirent** a, const struct dirent** b) {
  long x = strtol((*a)->d_name, NULL, 10), y = strtol((*b)->d_name, NULL, 10);
  return x < y ? -1 : x > y;
}

/* The entries of <sysfs>/<rel> sorted by cmp (*names to free with freeNames, also when 0); -1 when none. */
static int listDir(const char* rel, int (*cmp)(const struct dirent**, const struct dirent**),
                   struct dirent*** names) {
  char path[PATH_MAX * 2];
  snprintf(path, sizeof(path), "%s/%s", railnetIbSysfsRoot(), rel);
  return scandir(path, names, notDot, cmp);
}
static void freeNames(struct dirent** names, int n) {
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
}

/* The netdev behind a port (its first GID's), else the device's first net/ entry; its MTU. */
static void portNetdev(struct railnetIbPortExplain* p) {
  p->netdev[0] = '\0';
  if (railnetIbSysfsLine(p->netdev, sizeof(p->netdev), "class/infiniband/%s/ports/%d/gid_attrs/ndevs/0", p->dev,
                         p->port) != 0) {
    char path[PATH_MAX * 2];
    snprintf(path, sizeof(path), "%s/class/infiniband/%s/device/net", railnetIbSysfsRoot(), p->dev);
    DIR* d = opendir(path);
    struct dirent* e;
    while (d != NULL && (e = readdir(d)) != NULL)
      if (e->d_name[0] != '.') {
        copyStr(p->netdev, sizeof(p->netdev), e->d_name);
        break;
      }
    if (d != NULL) closedir(d);
  }
  char mtu[32];
  p->mtu = 0;
  if (p->netdev[0] && railnetIbSysfsLine(mtu, sizeof(mtu), "class/net/%s/mtu", p->netdev) == 0) p->mtu = atoi(mtu);
}

/* Everything sysfs says of dev:port, and discovery's verdict on it. 0, or -1 without a state file. */
static int explainPort(const char* dev, int port, const struct railnetIbHca* hca, struct railnetIbPortExplain* p) {
  char buf[128];
  if (railnetIbSysfsLine(buf, sizeof(buf), "class/infiniband/%s/ports/%d/state", dev, port) != 0) return -1;
  memset(p, 0, sizeof(*p));
  copyStr(p->dev, sizeof(p->dev), dev);
  p->port = port;
  p->state = parseNumName(buf, p->stateName, sizeof(p->stateName));
  if (railnetIbSysfsLine(buf, sizeof(buf), "class/infiniband/%s/ports/%d/phys_state", dev, port) == 0)
    parseNumName(buf, p->physState, sizeof(p->physState));
  if (railnetIbSysfsLine(p->link, sizeof(p->link), "class/infiniband/%s/ports/%d/link_layer", dev, port))
    snprintf(p->link, sizeof(p->link), "InfiniBand"); /* the kernel's default */
  p->linkLayer = strcmp(p->link, "InfiniBand") == 0 ? IBV_LINK_LAYER_INFINIBAND
            : strcmp(p->link, "Ethernet") == 0 ? IBV_LINK_LAYER_ETHERNET
                                                    : IBV_LINK_LAYER_UNSPECIFIED;
  if (railnetIbSysfsLine(p->rate, sizeof(p->rate), "class/infiniband/%s/ports/%d/rate", dev, port) == 0) {
    p->gbps = atof(p->rate);
    const char* paren = strchr(p->rate, '(');
    if (paren) sscanf(paren + 1, "%15[0-9xX]", p->width);
  }
  portNetdev(p);
  p->notUsed = railnetIbPortWanted(dev, port, p->state, p->linkLayer, hca, p->why, sizeof(p->why));
  p->selected = p->notUsed == 0;
  p->gid.index = -1;
  p->gid.roceVersion = -1;
  p->gid.via = "";
  return 0;
}

int railnetIbExplainPorts(struct railnetIbPortExplain* ports, int max, unsigned flags) {
  struct railnetIbHca hca;
  (void)railnetIbHcaRead(&hca); /* a malformed NCCL_IB_HCA leaves every port out, as discovery fails */
  struct dirent** devs = NULL;
  int nDevs = listDir("class/infiniband", byName, &devs);
  int n = 0;
  for (int d = 0; d < nDevs && n < max; d++) {
    char rel[PATH_MAX];
    snprintf(rel, sizeof(rel), "class/infiniband/%s/ports", devs[d]->d_name);
    struct dirent** portNames = NULL;
    int nPorts = listDir(rel, byNumber, &portNames);
    for (int i = 0; i < nPorts && n < max; i++) {
      int port = atoi(portNames[i]->d_name);
      if (port <= 0 || explainPort(devs[d]->d_name, port, &hca, &ports[n]) != 0) continue;
      if (flags & RAILNET_IB_EXPLAIN_GIDS) (void)railnetIbExplainGid(&ports[n]);
      n++;
    }
    if (nPorts >= 0) freeNames(portNames, nPorts);
  }
  if (nDevs >= 0) freeNames(devs, nDevs);
  return n;
}

/* ------------------------------------------------------------------ GIDs */

/* Slots 0, 1, ... of dev:port's gids/ that can be read, at most max. */
static int sysfsGidCount(const char* dev, int port, int max) {
  char buf[64];
  int n = 0;
  while (n < max && railnetIbSysfsLine(buf, sizeof(buf), "class/infiniband/%s/ports/%d/gids/%d", dev, port, n) == 0)
    n++;
  return n;
}

ncclResult_t railnetIbExplainGid(struct railnetIbPortExplain* p) {
  struct railnetIbGidExplain* g = &p->gid;
  struct railnetIbGidChoice ch;
  struct ibv_port_attr attr;
  memset(&attr, 0, sizeof(attr));
  struct ibv_device** list = NULL;
  char reason[160];
  ncclResult_t res = ncclSystemError;
  struct ibv_context* ctx = verbsOpen(p->dev, &list, reason, sizeof(reason));
  if (ctx != NULL) {
    res = wrap_ibv_query_port(ctx, (uint8_t)p->port, &attr);
    if (res == ncclSuccess) res = railnetIbChooseGid(ctx, p->dev, (uint8_t)p->port, &attr, &ch);
    g->via = "libibverbs";
  } else {
    /* the same selection on the GIDs sysfs shows, with the link layer sysfs says */
    attr.link_layer = p->linkLayer == IBV_LINK_LAYER_ETHERNET ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
    attr.gid_tbl_len = sysfsGidCount(p->dev, p->port, RAILNET_IB_EXPLAIN_MAX_GIDS);
    struct railnetIbGidReader sysfs = railnetIbGidReaderSysfs(p->dev);
    res = railnetIbChooseGidFrom(&sysfs, p->dev, (uint8_t)p->port, &attr, &ch);
    g->via = "sysfs";
  }
  verbsClose(ctx, list);
  g->tableLen = attr.gid_tbl_len;
  if (res != ncclSuccess) {
    g->index = -1;
    g->roceVersion = -1;
    snprintf(g->why, sizeof(g->why), "the GID selection failed (run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET)");
    return res;
  }
  g->index = ch.index;
  g->roceVersion = ch.roceVersion;
  copyStr(g->why, sizeof(g->why), ch.why);
  return ncclSuccess;
}

int railnetIbExplainGidIndex(struct ibv_context* ctx, const char* dev, int port, const struct ibv_port_attr* attr) {
  struct railnetIbGidChoice ch;
  if (railnetIbChooseGid(ctx, dev, (uint8_t)port, attr, &ch) != ncclSuccess) return -1;
  return ch.index;
}

int railnetIbExplainPortUsed(const char* dev, int port, const struct ibv_port_attr* attr) {
  struct railnetIbHca hca;
  if (railnetIbHcaRead(&hca) != ncclSuccess) return 0; /* discovery fails on it too */
  return railnetIbPortWanted(dev, port, attr->state, attr->link_layer, &hca, NULL, 0) == 0;
}

int railnetIbExplainGidTable(const char* dev, int port, struct railnetIbGidEntry* entries, int max) {
  int n = 0;
  for (int i = 0; i < max; i++) {
    char buf[64];
    if (railnetIbSysfsLine(buf, sizeof(buf), "class/infiniband/%s/ports/%d/gids/%d", dev, port, i) != 0) break;
    struct railnetIbGidEntry* e = &entries[n++];
    memset(e, 0, sizeof(*e));
    e->index = i;
    copyStr(e->text, sizeof(e->text), buf);
    union ibv_gid gid;
    railnetIbGidParse(buf, &gid); /* zero when it is not a GID */
    memcpy(e->raw, gid.raw, sizeof(e->raw));
    e->configured = railnetIbGidConfigured(&gid);
    e->linkLocal = railnetIbGidLinkLocal(&gid);
    e->routable = railnetIbGidRoutable(&gid);
    e->ipv4 = railnetIbGidFamily(&gid) == AF_INET;
    if (e->ipv4) inet_ntop(AF_INET, gid.raw + 12, e->ipv4Text, sizeof(e->ipv4Text));
    e->roceVersion = -1;
    if (railnetIbSysfsLine(e->type, sizeof(e->type), "class/infiniband/%s/ports/%d/gid_attrs/types/%d", dev, port,
                           i) == 0)
      e->roceVersion = railnetIbGidTypeVersion(e->type);
    (void)railnetIbSysfsLine(e->netdev, sizeof(e->netdev), "class/infiniband/%s/ports/%d/gid_attrs/ndevs/%d", dev,
                             port, i);
  }
  return n;
}

/* ------------------------------------------------------------------ GPUDirect */

void railnetIbExplainGdr(struct railnetIbGdrExplain* gdr) {
  char path[PATH_MAX * 2];
  snprintf(path, sizeof(path), "%s/module/nvidia", railnetIbSysfsRoot());
  gdr->nvidiaDriver = access(path, F_OK) == 0;
  gdr->nvidiaPeermem = ncclIbPeerMemSupport() == ncclSuccess;
  gdr->nvPeerMem = !gdr->nvidiaPeermem && ncclIbGdrSupport() == ncclSuccess;
}

int railnetIbExplainDmaBuf(const char* dev, char* why, size_t size) {
  struct ibv_device** list = NULL;
  struct ibv_context* ctx = verbsOpen(dev, &list, why, size);
  if (ctx == NULL) {
    verbsClose(NULL, list);
    return -1;
  }
  int err = 0;
  int res = railnetIbDmaBufProbe(ctx, &err);
  snprintf(why, size, "ibv_reg_dmabuf_mr probe: %s",
           res < 0 ? "no protection domain" : err ? strerror(err) : "registered");
  verbsClose(ctx, list);
  return res;
}
