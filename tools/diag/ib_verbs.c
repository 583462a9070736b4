/* libibverbs access for railnet-diag: the GID index the IB transport would choose
 * (railnetIbChooseGid, through libibverbs, or from sysfs through a swapped verbs table where
 * the device cannot be opened) and the transport's DMA-BUF probe. The one place that
 * reaches into the transport's internals (net_ib/common.h, gdr.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "../transport/net_ib/gid.h"    /* railnetIbChooseGid */
#include "../transport/net_ib/gdr.h"    /* railnetIbDmaBufProbe */
#include "diag.h"
#include "ibvwrap.h"

/* libibverbs' device list, loaded once (1 listed, -1 failed with the reason in verbsFailure). */
static int verbsState;
static struct ibv_device** verbsList;
static int verbsCount;
static char verbsFailure[96];

/* An open context of dev, or NULL with *why set. */
static struct ibv_context* verbsOpen(const char* dev, char* why, size_t size) {
  if (verbsState == 0) {
    verbsState = -1;
    if (wrap_ibv_symbols() != ncclSuccess) sfmt(verbsFailure, sizeof(verbsFailure), "libibverbs not found (install rdma-core)");
    else if (wrap_ibv_get_device_list(&verbsList, &verbsCount) != ncclSuccess || verbsList == NULL)
      sfmt(verbsFailure, sizeof(verbsFailure), "ibv_get_device_list failed: no RDMA support in this kernel/container?");
    else verbsState = 1;
  }
  if (verbsState < 0) {
    sfmt(why, size, "%s", verbsFailure);
    return NULL;
  }
  for (int i = 0; i < verbsCount; i++) {
    if (strcmp(wrap_ibv_get_device_name(verbsList[i]), dev) != 0) continue;
    struct ibv_context* ctx = NULL;
    if (wrap_ibv_open_device(&ctx, verbsList[i]) != ncclSuccess || ctx == NULL) {
      sfmt(why, size, "cannot open %s (permissions on /dev/infiniband?)", dev);
      return NULL;
    }
    return ctx;
  }
  sfmt(why, size, "libibverbs does not list %s (no uverbs device?)", dev);
  return NULL;
}

/* ibv_query_gid answered from <sysfs>/class/infiniband/<dev>/ports/<port>/gids/<index>: lets
 * the IB transport's own GID selection run where libibverbs cannot open the device. */
static int sysfsQueryGid(struct ibv_context* ctx, uint8_t port, int index, union ibv_gid* gid) {
  char buf[64];
  unsigned v[8];
  memset(gid, 0, sizeof(*gid));
  if (readSys(buf, sizeof(buf), "class/infiniband/%s/ports/%d/gids/%d", ctx->device->name, port, index) != 0 ||
      sscanf(buf, "%x:%x:%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) != 8)
    return EINVAL;
  for (int k = 0; k < 8; k++) {
    gid->raw[2 * k] = (uint8_t)(v[k] >> 8);
    gid->raw[2 * k + 1] = (uint8_t)v[k];
  }
  return 0;
}

/* The GID index railnet's IB transport uses for this port, by its own rules
 * (railnetIbChooseGid): through libibverbs when it can open the device, else from sysfs. */
int chooseGid(const portInfo* p, int tblLen, char* why, size_t whySize, const char** via) {
  struct railnetIbGidChoice ch;
  char reason[160];
  struct ibv_context* ctx = verbsOpen(p->dev, reason, sizeof(reason));
  int ok;
  if (ctx) {
    struct ibv_port_attr attr;
    memset(&attr, 0, sizeof(attr));
    ok = wrap_ibv_query_port(ctx, (uint8_t)p->port, &attr) == ncclSuccess &&
         railnetIbChooseGid(ctx, p->dev, (uint8_t)p->port, &attr, &ch) == ncclSuccess;
    wrap_ibv_close_device(ctx);
    *via = "libibverbs";
  } else {
    struct ibv_device dev;
    struct ibv_context fake;
    memset(&dev, 0, sizeof(dev));
    memset(&fake, 0, sizeof(fake));
    sfmt(dev.name, sizeof(dev.name), "%s", p->dev);
    fake.device = &dev;
    struct ibv_port_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.link_layer = strcmp(p->link, "Ethernet") == 0 ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
    attr.gid_tbl_len = tblLen;
    struct railnetIbvSymbols saved = railnetIbv, sysfs;
    memset(&sysfs, 0, sizeof(sysfs));
    sysfs.query_gid = sysfsQueryGid;
    railnetIbvSetSymbols(&sysfs);
    ok = railnetIbChooseGid(&fake, p->dev, (uint8_t)p->port, &attr, &ch) == ncclSuccess;
    railnetIbvSetSymbols(saved.get_device_list ? &saved : NULL);
    *via = "sysfs";
  }
  if (!ok) {
    sfmt(why, whySize, "the GID selection failed (run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET)");
    return -1;
  }
  sfmt(why, whySize, "%s", ch.why);
  return ch.index;
}

/* DMA-BUF per device, with the IB transport's own probe: 1 yes, 0 no, -1 not probed (why). */
int dmaBufOf(const char* dev, char* why, size_t size) {
  struct ibv_context* ctx = verbsOpen(dev, why, size);
  if (ctx == NULL) return -1;
  int err = 0;
  int res = railnetIbDmaBufProbe(ctx, &err);
  sfmt(why, size, "ibv_reg_dmabuf_mr probe: %s", res < 0 ? "no protection domain" : err ? strerror(err) : "registered");
  wrap_ibv_close_device(ctx);
  return res;
}
