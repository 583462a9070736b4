/*
 * NCCL_IB_ADDR_RANGE (with NCCL_IB_ADDR_FAMILY and NCCL_IB_ROCE_VERSION_NUM) through the
 * GID selection that reads it, railnetIbChooseGid, on a RoCE port whose GID table also
 * comes from the input (served by a fake ibv_query_gid_table). The chosen index must lie
 * in the table.
 * Input: byte 0: bit 0 AF_INET6, bit 1 RoCE v1; byte 1: n = entries (mod 17);
 *        n x (16 bytes GID, 1 byte type); the rest: the NCCL_IB_ADDR_RANGE text.
 */
#include "fuzz_common.h"
#include "ibvwrap.h"
#include "../src/transport/net_ib/gid.h"

#define MAX_GIDS 16
static struct ibv_gid_entry gids[MAX_GIDS];
static int nGids;
static struct ibv_context fakeCtx;
static char envRange[600] = "NCCL_IB_ADDR_RANGE=";
static char envFamily[64] = "NCCL_IB_ADDR_FAMILY=AF_INET";
static char envVersion[64] = "NCCL_IB_ROCE_VERSION_NUM=2";

static int fakeQueryDevice(struct ibv_context* c, struct ibv_device_attr* a) {
  (void)c;
  memset(a, 0, sizeof(*a));
  a->phys_port_cnt = 1;
  return 0;
}

static ssize_t fakeQueryGidTable(struct ibv_context* c, struct ibv_gid_entry* entries, size_t max, uint32_t flags,
                                 size_t entrySize) {
  (void)c;
  (void)flags;
  if (entrySize != sizeof(struct ibv_gid_entry)) return -EINVAL;
  size_t n = 0;
  for (int i = 0; i < nGids && n < max; i++) entries[n++] = gids[i];
  return (ssize_t)n;
}

static int fakeQueryGid(struct ibv_context* c, uint8_t port, int index, union ibv_gid* gid) {
  (void)c;
  (void)port;
  if (index < 0 || index >= nGids) return EINVAL;
  *gid = gids[index].gid;
  return 0;
}

int LLVMFuzzerInitialize(int* argc, char*** argv) {
  (void)argc;
  (void)argv;
  fuzzSetup();
  static struct railnetIbvSymbols table;
  memset(&table, 0, sizeof(table));
  table.query_device = fakeQueryDevice;
  table.query_gid_table = fakeQueryGidTable;
  table.query_gid = fakeQueryGid;
  railnetIbvSetSymbols(&table);
  setenv("SYSFS_PATH", "/nonexistent-railnet-fuzz", 1);
  unsetenv("NCCL_IB_GID_INDEX");
  putenv(envRange);
  putenv(envFamily);
  putenv(envVersion);
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  int v6 = data[0] & 1, v1 = (data[0] >> 1) & 1;
  int n = data[1] % (MAX_GIDS + 1);
  const uint8_t* p = data + 2;
  if (size - 2 < (size_t)n * 17) return 0;
  static const uint32_t types[] = {IBV_GID_TYPE_IB, IBV_GID_TYPE_ROCE_V1, IBV_GID_TYPE_ROCE_V2, 7};
  for (int i = 0; i < n; i++, p += 17) {
    memset(&gids[i], 0, sizeof(gids[i]));
    memcpy(gids[i].gid.raw, p, 16);
    gids[i].gid_index = (uint32_t)i;
    gids[i].port_num = 1;
    gids[i].gid_type = types[p[16] & 3];
  }
  nGids = n;
  size_t rangeLen = (size_t)(data + size - p);
  size_t room = sizeof(envRange) - strlen("NCCL_IB_ADDR_RANGE=") - 1;
  if (rangeLen > room) rangeLen = room;
  char* r = envRange + strlen("NCCL_IB_ADDR_RANGE=");
  memcpy(r, p, rangeLen);
  r[rangeLen] = '\0';
  snprintf(envFamily, sizeof(envFamily), "NCCL_IB_ADDR_FAMILY=%s", v6 ? "AF_INET6" : "AF_INET");
  snprintf(envVersion, sizeof(envVersion), "NCCL_IB_ROCE_VERSION_NUM=%d", v1 ? 1 : 2);
  railnetParamReset();

  struct ibv_port_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.link_layer = IBV_LINK_LAYER_ETHERNET;
  attr.gid_tbl_len = n;
  attr.state = IBV_PORT_ACTIVE;
  struct railnetIbGidChoice ch;
  ncclResult_t res = railnetIbChooseGid(&fakeCtx, "fuzz0", 1, &attr, &ch);
  FUZZ_CHECK(res == ncclSuccess, "railnetIbChooseGid gave %d", (int)res);
  FUZZ_CHECK(ch.index == 0 || (ch.index > 0 && ch.index < n), "index %d of %d entries", ch.index, n);
  FUZZ_CHECK(memchr(ch.why, '\0', sizeof(ch.why)) != NULL, "why not terminated");
  return 0;
}
