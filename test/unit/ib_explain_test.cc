// The IB transport's explain API (ib_explain.h) on sysfs trees made by the test: every port
// with discovery's verdict (and the proof that discovery, run on the same ports through fake
// verbs, takes exactly those), the GID index through libibverbs or, where it cannot open the
// device, on the GIDs in sysfs (with the process-wide verbs table left alone), the GID table
// as the selection classifies it, and the GPUDirect answers.
#include "test_util.h"
#include <algorithm>
#include "ib_fake_verbs.h"

extern "C" {
#include "ib_explain.h"
#include "../../src/transport/net_ib/devices.h"
#include "../../src/transport/net_ib/init.h"
#include "testing.h"
}

namespace {

class IbExplainTest : public ::testing::Test {
 protected:
  ScopedEnv env;
  TempDir sysfs;
  FakeWorld w;
  struct railnetIbvSymbols table;

  void SetUp() override {
    world = &w;
    table = fakeVerbs(false);
    railnetIbvSetSymbols(&table);
    env.set("SYSFS_PATH", sysfs.path().c_str());
    env.set("NCCL_SOCKET_IFNAME", "lo");
    for (const char* v : {"NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_IB_ADDR_FAMILY", "NCCL_IB_ADDR_RANGE",
                          "NCCL_IB_ROCE_VERSION_NUM", "NCCL_IB_ROUTABLE_FLID_GID_INDEX", "NCCL_IB_DISABLE"})
      env.unset(v);
    railnetIbResetDevices();
    railnetIbGdrReset();
  }
  void TearDown() override {
    railnetIbResetDevices();
    railnetIbGdrReset();
    railnetIbvSetSymbols(nullptr);
    world = nullptr;
  }

  std::string portDir(const std::string& dev, int port) {
    return "class/infiniband/" + dev + "/ports/" + std::to_string(port) + "/";
  }
  // A port in sysfs: state "4: ACTIVE", link layer ("" leaves the file out), rate.
  void port(const std::string& dev, int port, const std::string& state, const std::string& link,
            const std::string& rate = "100 Gb/sec (4X EDR)") {
    sysfs.write(portDir(dev, port) + "state", state + "\n");
    sysfs.write(portDir(dev, port) + "phys_state", "5: LinkUp\n");
    if (!link.empty()) sysfs.write(portDir(dev, port) + "link_layer", link + "\n");
    sysfs.write(portDir(dev, port) + "rate", rate + "\n");
  }
  void gid(const std::string& dev, int port, int idx, const std::string& gid, const std::string& type = "",
           const std::string& ndev = "") {
    sysfs.write(portDir(dev, port) + "gids/" + std::to_string(idx), gid + "\n");
    if (!type.empty()) sysfs.write(portDir(dev, port) + "gid_attrs/types/" + std::to_string(idx), type + "\n");
    if (!ndev.empty()) sysfs.write(portDir(dev, port) + "gid_attrs/ndevs/" + std::to_string(idx), ndev + "\n");
  }
  // mlx5's usual RoCE table: link-local v1/v2, 198.18.0.1 v1/v2, an empty slot.
  void roceGids(const std::string& dev, const std::string& ndev = "eth2") {
    gid(dev, 1, 0, "fe80:0000:0000:0000:0ac0:ebff:fe3d:ca54", "IB/RoCE v1", ndev);
    gid(dev, 1, 1, "fe80:0000:0000:0000:0ac0:ebff:fe3d:ca54", "RoCE v2", ndev);
    gid(dev, 1, 2, "0000:0000:0000:0000:0000:ffff:c612:0001", "IB/RoCE v1", ndev);
    gid(dev, 1, 3, "0000:0000:0000:0000:0000:ffff:c612:0001", "RoCE v2", ndev);
    gid(dev, 1, 4, "0000:0000:0000:0000:0000:0000:0000:0000");
  }

  std::vector<railnetIbPortExplain> explain(unsigned flags = 0) {
    std::vector<railnetIbPortExplain> v(16);
    int n = railnetIbExplainPorts(v.data(), (int)v.size(), flags);
    v.resize(n);
    return v;
  }
  // "dev:port" of the ports explain says discovery takes, sorted.
  std::vector<std::string> explainedSelected() {
    std::vector<std::string> out;
    for (auto& p : explain())
      if (p.selected) out.push_back(std::string(p.dev) + ":" + std::to_string(p.port));
    std::sort(out.begin(), out.end());
    return out;
  }
  // "dev:port" of the ports discovery took (through the fake verbs), sorted.
  std::vector<std::string> discovered() {
    railnetIbResetDevices();
    void* ctx = nullptr;
    std::vector<std::string> out;
    if (railnetNetIb.init(&ctx, 0, nullptr, nullptr, nullptr) != ncclSuccess) return {"<init failed>"};
    int n = 0;
    EXPECT_EQ(railnetNetIb.devices(&n), ncclSuccess);
    for (int d = 0; d < n; d++) {
      ncclNetProperties_t p;
      EXPECT_EQ(railnetNetIb.getProperties(d, &p), ncclSuccess);
      out.push_back(std::string(p.name) + ":" + std::to_string(p.port));
    }
    railnetNetIb.finalize(ctx);
    railnetIbResetDevices();
    std::sort(out.begin(), out.end());
    return out;
  }
};

TEST_F(IbExplainTest, EveryPortWithWhatSysfsSaysInNameOrder) {
  port("mlx5_1", 1, "4: ACTIVE", "Ethernet", "200 Gb/sec (4X HDR)");
  roceGids("mlx5_1");
  sysfs.write("class/net/eth2/mtu", "9000\n");
  port("mlx5_0", 1, "4: ACTIVE", "InfiniBand", "400 Gb/sec (4X NDR)");
  port("mlx5_0", 2, "1: DOWN", "InfiniBand", "10 Gb/sec (4X SDR)");
  port("mlx5_0", 10, "2: INIT", "");  // no link_layer file: InfiniBand, as the kernel says
  sysfs.write("class/infiniband/bnxt_re0/device/net/ens1f0/ifindex", "3\n");  // netdev from device/net
  sysfs.write("class/net/ens1f0/mtu", "1500\n");
  port("bnxt_re0", 1, "4: ACTIVE", "Ethernet", "25 Gb/sec (1X EDR)");
  port("iw0", 1, "4: ACTIVE", "Unknown");
  auto v = explain();
  ASSERT_EQ(v.size(), 6u);
  std::vector<std::string> order;
  for (auto& p : v) order.push_back(std::string(p.dev) + ":" + std::to_string(p.port));
  EXPECT_EQ(order, std::vector<std::string>({"bnxt_re0:1", "iw0:1", "mlx5_0:1", "mlx5_0:2", "mlx5_0:10", "mlx5_1:1"}));

  const railnetIbPortExplain& roce = v[5];
  EXPECT_EQ(roce.state, 4);
  EXPECT_STREQ(roce.stateName, "ACTIVE");
  EXPECT_STREQ(roce.physState, "LinkUp");
  EXPECT_STREQ(roce.link, "Ethernet");
  EXPECT_EQ(roce.linkLayer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_STREQ(roce.rate, "200 Gb/sec (4X HDR)");
  EXPECT_DOUBLE_EQ(roce.gbps, 200);
  EXPECT_STREQ(roce.width, "4X");
  EXPECT_STREQ(roce.netdev, "eth2");
  EXPECT_EQ(roce.mtu, 9000);
  EXPECT_EQ(roce.notUsed, 0u);
  EXPECT_EQ(roce.selected, 1);
  EXPECT_STREQ(roce.why, "ACTIVE RoCE port; no NCCL_IB_HCA: every active port is used");
  EXPECT_EQ(roce.gid.index, -1);  // not asked for

  EXPECT_STREQ(v[0].netdev, "ens1f0");
  EXPECT_EQ(v[0].mtu, 1500);
  EXPECT_STREQ(v[0].width, "1X");
  EXPECT_EQ(v[1].notUsed, (unsigned)RAILNET_IB_PORT_LINK_LAYER);
  EXPECT_STREQ(v[1].why, "link layer 0 is neither InfiniBand nor Ethernet");
  EXPECT_EQ(v[2].linkLayer, IBV_LINK_LAYER_INFINIBAND);
  EXPECT_STREQ(v[2].why, "ACTIVE IB port; no NCCL_IB_HCA: every active port is used");
  EXPECT_EQ(v[3].notUsed, (unsigned)RAILNET_IB_PORT_NOT_ACTIVE);
  EXPECT_STREQ(v[3].why, "port state DOWN, not ACTIVE");
  EXPECT_STREQ(v[3].netdev, "");
  EXPECT_EQ(v[3].mtu, 0);
  EXPECT_STREQ(v[4].link, "InfiniBand");
  EXPECT_STREQ(v[4].why, "port state INIT, not ACTIVE");

  // max bounds the answer
  std::vector<railnetIbPortExplain> two(2);
  EXPECT_EQ(railnetIbExplainPorts(two.data(), 2, 0), 2);
  EXPECT_STREQ(two[1].dev, "iw0");
}

TEST_F(IbExplainTest, NoInfinibandClassMeansNoPorts) {
  EXPECT_TRUE(explain().empty());
  sysfs.write("class/infiniband/mlx5_0/node_type", "1: CA\n");  // a device without ports/
  EXPECT_TRUE(explain().empty());
}

TEST_F(IbExplainTest, NcclIbHcaVerdicts) {
  port("mlx5_0", 1, "4: ACTIVE", "Ethernet");
  port("mlx5_1", 1, "4: ACTIVE", "Ethernet");
  port("mlx5_1", 2, "1: DOWN", "Ethernet");
  env.set("NCCL_IB_HCA", "^mlx5_1");
  auto v = explain();
  ASSERT_EQ(v.size(), 3u);
  EXPECT_STREQ(v[0].why, "ACTIVE RoCE port; NCCL_IB_HCA=^mlx5_1 does not exclude it");
  EXPECT_EQ(v[1].notUsed, (unsigned)RAILNET_IB_PORT_HCA);
  EXPECT_STREQ(v[1].why, "NCCL_IB_HCA=^mlx5_1 excludes it");
  EXPECT_EQ(v[2].notUsed, (unsigned)(RAILNET_IB_PORT_HCA | RAILNET_IB_PORT_NOT_ACTIVE));
  EXPECT_STREQ(v[2].why, "port state DOWN, not ACTIVE");  // discovery's order: the state first

  env.set("NCCL_IB_HCA", "=mlx5_1:1");
  v = explain();
  EXPECT_STREQ(v[0].why, "NCCL_IB_HCA==mlx5_1:1 does not name it");
  EXPECT_STREQ(v[1].why, "ACTIVE RoCE port; NCCL_IB_HCA==mlx5_1:1 selects it");
  EXPECT_EQ(v[1].selected, 1);

  env.set("NCCL_IB_HCA", "");  // set but empty: every port, as discovery
  for (auto& p : explain()) EXPECT_EQ(p.notUsed & RAILNET_IB_PORT_HCA, 0u) << p.dev << ":" << p.port;

  env.set("NCCL_IB_HCA", "mlx5_0:x");  // discovery fails on it: no port is used
  v = explain();
  for (auto& p : v) EXPECT_NE(p.notUsed & RAILNET_IB_PORT_HCA, 0u) << p.dev << ":" << p.port;
  EXPECT_STREQ(v[0].why, "NCCL_IB_HCA=mlx5_0:x cannot be parsed: discovery fails (see its WARN)");
}

// The same ports in sysfs and behind the fake verbs: explain's selection is discovery's.
TEST_F(IbExplainTest, SelectedIsWhatDiscoveryTakes) {
  struct Spec {
    const char* dev;
    int nPorts;
    uint8_t link;
    const char* linkText;
  } specs[] = {{"mlx5_0", 2, IBV_LINK_LAYER_INFINIBAND, "InfiniBand"},
               {"mlx5_1", 1, IBV_LINK_LAYER_ETHERNET, "Ethernet"},
               {"mlx5_2", 2, IBV_LINK_LAYER_ETHERNET, "Ethernet"},
               {"iw0", 1, 0, "Unknown"}};
  for (auto& s : specs) {
    FakeHca& h = addHca(s.dev, s.nPorts, s.link);
    for (int p = 1; p <= s.nPorts; p++) {
      bool down = (std::string(s.dev) == "mlx5_0" && p == 2) || (std::string(s.dev) == "mlx5_2" && p == 1);
      if (down) h.ports[p - 1].attr.state = IBV_PORT_DOWN;
      port(s.dev, p, down ? "1: DOWN" : "4: ACTIVE", s.linkText);
    }
  }
  for (const char* hca : {"", "mlx5", "^mlx5_1", "=mlx5_2:2,mlx5_0:1", "mlx5_0:2", "^=mlx5_0", "nosuch"}) {
    if (hca[0]) env.set("NCCL_IB_HCA", hca);
    else env.unset("NCCL_IB_HCA");
    auto got = discovered();
    EXPECT_EQ(explainedSelected(), got == std::vector<std::string>({"<init failed>"}) ? std::vector<std::string>()
                                                                                       : got)
        << "NCCL_IB_HCA=" << hca;
  }
  env.unset("NCCL_IB_HCA");
  EXPECT_EQ(explainedSelected(), std::vector<std::string>({"mlx5_0:1", "mlx5_1:1", "mlx5_2:2"}));
}

// libibverbs cannot open the device (here: it does not list it): the selection runs on the
// GIDs in sysfs, and the process-wide verbs table stays the one the process has.
TEST_F(IbExplainTest, GidFromSysfsWhereLibibverbsCannotOpenTheDevice) {
  port("mlx5_0", 1, "4: ACTIVE", "Ethernet");
  roceGids("mlx5_0");
  auto v = explain(RAILNET_IB_EXPLAIN_GIDS);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].gid.index, 3);
  EXPECT_EQ(v[0].gid.roceVersion, 2);
  EXPECT_EQ(v[0].gid.tableLen, 5);
  EXPECT_STREQ(v[0].gid.via, "sysfs");
  EXPECT_STREQ(v[0].gid.why, "best of 4 of 5 entries (types from sysfs) for AF_INET, RoCE v2");
  EXPECT_TRUE(railnetIbv.query_gid == table.query_gid && railnetIbv.get_device_list == table.get_device_list);
  EXPECT_EQ(railnetIbv.query_gid_table, nullptr);

  env.set("NCCL_IB_ROCE_VERSION_NUM", "1");
  ASSERT_EQ(railnetIbExplainGid(&v[0]), ncclSuccess);
  EXPECT_EQ(v[0].gid.index, 2);
  env.set("NCCL_IB_GID_INDEX", "1");
  ASSERT_EQ(railnetIbExplainGid(&v[0]), ncclSuccess);
  EXPECT_EQ(v[0].gid.index, 1);
  EXPECT_STREQ(v[0].gid.why, "forced by NCCL_IB_GID_INDEX=1");
  EXPECT_EQ(v[0].gid.roceVersion, 2);

  // the device is listed but cannot be opened: sysfs too
  env.unset("NCCL_IB_GID_INDEX");
  env.unset("NCCL_IB_ROCE_VERSION_NUM");
  addHca("mlx5_0", 1, IBV_LINK_LAYER_ETHERNET).openFails = true;
  ASSERT_EQ(railnetIbExplainGid(&v[0]), ncclSuccess);
  EXPECT_STREQ(v[0].gid.via, "sysfs");
  EXPECT_EQ(v[0].gid.index, 3);
}

TEST_F(IbExplainTest, InfinibandGidFromSysfsHonoursTheRoutableFlid) {
  port("mlx5_0", 1, "4: ACTIVE", "InfiniBand");
  gid("mlx5_0", 1, 0, "fe80:0000:0000:0000:0011:7500:0070:1234");
  gid("mlx5_0", 1, 1, "fe80:0000:0000:0000:0011:7500:0070:1234");
  auto v = explain(RAILNET_IB_EXPLAIN_GIDS);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].gid.index, 0);
  EXPECT_STREQ(v[0].gid.why, "InfiniBand (no routable FLID at index 1)");
  gid("mlx5_0", 1, 1, "fec0:0000:00a5:0000:0011:7500:0070:1234");  // FLID 0x00a5
  ASSERT_EQ(railnetIbExplainGid(&v[0]), ncclSuccess);
  EXPECT_EQ(v[0].gid.index, 1);
  EXPECT_STREQ(v[0].gid.why, "InfiniBand, routable FLID 0xa5 (NCCL_IB_ROUTABLE_FLID_GID_INDEX=1)");
  EXPECT_EQ(v[0].gid.roceVersion, 0);
}

// libibverbs opens the device: the GIDs it answers win over sysfs (here they differ).
TEST_F(IbExplainTest, GidThroughLibibverbsWhenItOpensTheDevice) {
  port("roce0", 1, "4: ACTIVE", "Ethernet");
  roceGids("roce0");
  FakeHca& h = addHca("roce0", 1, IBV_LINK_LAYER_ETHERNET);
  h.ports[0].gids[0] = {"fe80::1", 2};
  h.ports[0].gids[1] = {"::ffff:198.18.0.9", 2};
  sysfs.write(portDir("roce0", 1) + "gid_attrs/types/1", "RoCE v2\n");
  auto v = explain(RAILNET_IB_EXPLAIN_GIDS);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_STREQ(v[0].gid.via, "libibverbs");
  EXPECT_EQ(v[0].gid.index, 1);
  EXPECT_EQ(v[0].gid.tableLen, 16);
  EXPECT_EQ(h.opens, h.closes);
  EXPECT_GT(w.queryGidCalls, 0);
  EXPECT_EQ(railnetIbExplainGidIndex(&h.ctx, "roce0", 1, &h.ports[0].attr), 1);  // on a context of the caller's

  table.query_gid_table = fkQueryGidTable;  // types in one call where libibverbs has it
  railnetIbvSetSymbols(&table);
  ASSERT_EQ(railnetIbExplainGid(&v[0]), ncclSuccess);
  EXPECT_EQ(v[0].gid.index, 1);
  EXPECT_NE(std::string(v[0].gid.why).find("types from ibv_query_gid_table"), std::string::npos) << v[0].gid.why;
}

TEST_F(IbExplainTest, GidTableAsTheSelectionClassifiesIt) {
  port("mlx5_0", 1, "4: ACTIVE", "Ethernet");
  roceGids("mlx5_0");
  gid("mlx5_0", 1, 5, "2001:0db8:0000:0000:0000:0000:0000:0001", "RoCE v2", "eth3");
  gid("mlx5_0", 1, 6, "fe80:0000:0000:0000:0000:0000:0000:0000", "weird type");
  gid("mlx5_0", 1, 7, "not a gid");
  gid("mlx5_0", 1, 9, "0000:0000:0000:0000:0000:ffff:c612:0009");  // after a gap: not read
  std::vector<railnetIbGidEntry> g(RAILNET_IB_EXPLAIN_MAX_GIDS);
  int n = railnetIbExplainGidTable("mlx5_0", 1, g.data(), (int)g.size());
  ASSERT_EQ(n, 8);
  struct Want {
    int configured, linkLocal, routable, ipv4;
    const char* v4;
    const char* type;
    int ver;
    const char* ndev;
  } want[] = {{1, 1, 0, 0, "", "IB/RoCE v1", 1, "eth2"},         {1, 1, 0, 0, "", "RoCE v2", 2, "eth2"},
              {1, 0, 1, 1, "198.18.0.1", "IB/RoCE v1", 1, "eth2"}, {1, 0, 1, 1, "198.18.0.1", "RoCE v2", 2, "eth2"},
              {0, 0, 0, 0, "", "", -1, ""},                       {1, 0, 1, 0, "", "RoCE v2", 2, "eth3"},
              {0, 1, 0, 0, "", "weird type", -1, ""},             {0, 0, 0, 0, "", "", -1, ""}};
  for (int i = 0; i < n; i++) {
    SCOPED_TRACE(i);
    EXPECT_EQ(g[i].index, i);
    EXPECT_EQ(g[i].configured, want[i].configured);
    EXPECT_EQ(g[i].linkLocal, want[i].linkLocal);
    EXPECT_EQ(g[i].routable, want[i].routable);
    EXPECT_EQ(g[i].ipv4, want[i].ipv4);
    EXPECT_STREQ(g[i].ipv4Text, want[i].v4);
    EXPECT_STREQ(g[i].type, want[i].type);
    EXPECT_EQ(g[i].roceVersion, want[i].ver);
    EXPECT_STREQ(g[i].netdev, want[i].ndev);
  }
  EXPECT_STREQ(g[3].text, "0000:0000:0000:0000:0000:ffff:c612:0001");
  EXPECT_EQ(g[3].raw[15], 1);
  EXPECT_STREQ(g[7].text, "not a gid");
  EXPECT_EQ(railnetIbExplainGidTable("mlx5_0", 1, g.data(), 3), 3);
  EXPECT_EQ(railnetIbExplainGidTable("mlx5_0", 2, g.data(), 3), 0);
}

TEST_F(IbExplainTest, GpuDirectFacts) {
  struct railnetIbGdrExplain gdr;
  railnetIbExplainGdr(&gdr);
  EXPECT_EQ(gdr.nvidiaDriver + gdr.nvidiaPeermem + gdr.nvPeerMem, 0);
  sysfs.write("module/nvidia/version", "550.54\n");
  sysfs.write("kernel/mm/memory_peers/nv_mem/version", "1.3\n");
  railnetIbGdrReset();
  railnetIbExplainGdr(&gdr);
  EXPECT_EQ(gdr.nvidiaDriver, 1);
  EXPECT_EQ(gdr.nvidiaPeermem, 0);
  EXPECT_EQ(gdr.nvPeerMem, 1);
  sysfs.write("module/nvidia_peermem/version", "550.54\n");
  railnetIbGdrReset();
  railnetIbExplainGdr(&gdr);
  EXPECT_EQ(gdr.nvidiaPeermem, 1);
  EXPECT_EQ(gdr.nvPeerMem, 0);  // only when nvidia_peermem is not there
}

TEST_F(IbExplainTest, DmaBufProbeOrWhyNot) {
  char why[160];
  EXPECT_EQ(railnetIbExplainDmaBuf("mlx5_0", why, sizeof(why)), -1);
  EXPECT_STREQ(why, "libibverbs does not list mlx5_0 (no uverbs device?)");
  FakeHca& h = addHca("mlx5_0", 1, IBV_LINK_LAYER_ETHERNET);
  h.openFails = true;
  EXPECT_EQ(railnetIbExplainDmaBuf("mlx5_0", why, sizeof(why)), -1);
  EXPECT_STREQ(why, "cannot open mlx5_0 (permissions on /dev/infiniband?)");
  h.openFails = false;
  // this libibverbs has no ibv_reg_dmabuf_mr: the transport's probe says unsupported
  EXPECT_EQ(railnetIbExplainDmaBuf("mlx5_0", why, sizeof(why)), 0);
  EXPECT_EQ(std::string(why).rfind("ibv_reg_dmabuf_mr probe: ", 0), 0u) << why;
  EXPECT_EQ(h.opens, h.closes);
}

TEST(IbSysfsLineTest, FirstLineOrAnErrno) {
  ScopedEnv env;
  TempDir sysfs;
  env.set("SYSFS_PATH", (sysfs.path() + "//").c_str());
  sysfs.write("a/b", "first\nsecond\n");
  sysfs.write("a/empty", "");
  char buf[8];
  EXPECT_EQ(railnetIbSysfsLine(buf, sizeof(buf), "a/b"), 0);
  EXPECT_STREQ(buf, "first");
  EXPECT_EQ(railnetIbSysfsLine(buf, 4, "a/b"), 0);
  EXPECT_STREQ(buf, "fir");
  EXPECT_EQ(railnetIbSysfsLine(buf, sizeof(buf), "a/none"), ENOENT);
  EXPECT_STREQ(buf, "");
  EXPECT_EQ(railnetIbSysfsLine(buf, sizeof(buf), "a/empty"), EINVAL);
}

}  // namespace
