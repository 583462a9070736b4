// ncclIbGetGidIndex: NCCL's GID choice on GID tables made by the test. Every RoCE case runs
// twice: types from ibv_query_gid_table (one call) and types from the sysfs tree
// ($SYSFS_PATH/class/infiniband/<dev>/ports/<port>/gid_attrs/types/<i>), and both must agree.
#include "test_util.h"
#include <sys/stat.h>
#include "ib_fake_verbs.h"

extern "C" {
#include "../../src/transport/net_ib/gid.h"
}

namespace {

class IbGidTest : public ::testing::TestWithParam<bool> {
 protected:
  ScopedEnv env;
  TempDir sysfs;
  FakeWorld w;
  FakeHca* hca = nullptr;
  struct railnetIbvSymbols table;

  void SetUp() override {
    world = &w;
    table = fakeVerbs(useTable());
    railnetIbvSetSymbols(&table);
    for (const char* v : {"NCCL_IB_GID_INDEX", "NCCL_IB_ADDR_FAMILY", "NCCL_IB_ADDR_RANGE", "NCCL_IB_ROCE_VERSION_NUM",
                          "NCCL_IB_ROUTABLE_FLID_GID_INDEX"})
      env.unset(v);
    env.set("SYSFS_PATH", sysfs.path().c_str());
    hca = &addHca("roce0", 1, IBV_LINK_LAYER_ETHERNET);
  }
  void TearDown() override {
    railnetIbvSetSymbols(nullptr);
    world = nullptr;
  }
  bool useTable() const { return GetParam(); }

  // Slot i gets text and version; the type file is written too (the sysfs path reads it).
  void gid(int i, const std::string& text, int version) {
    auto& p = hca->ports[0];
    if (i >= (int)p.gids.size()) p.gids.resize(i + 1);
    p.gids[i] = {text, version};
    std::string type = version == 1 ? "IB/RoCE v1\n" : version == 2 ? "RoCE v2\n" : "IB\n";
    sysfs.write("class/infiniband/roce0/ports/1/gid_attrs/types/" + std::to_string(i), type);
  }
  void tableLen(int n) {
    hca->ports[0].attr.gid_tbl_len = n;
    if ((int)hca->ports[0].gids.size() < n) hca->ports[0].gids.resize(n);
  }

  struct railnetIbGidChoice choose() {
    struct railnetIbGidChoice ch;
    memset(&ch, 0, sizeof(ch));
    EXPECT_EQ(railnetIbChooseGid(&hca->ctx, "roce0", 1, &hca->ports[0].attr, &ch), ncclSuccess);
    if (hca->ports[0].attr.link_layer == IBV_LINK_LAYER_ETHERNET && ch.source != RAILNET_GID_SRC_NONE) {
      EXPECT_EQ(ch.source, useTable() ? RAILNET_GID_SRC_TABLE : RAILNET_GID_SRC_SYSFS);
    }
    // NCCL's entry point answers the same
    int idx = -1;
    EXPECT_EQ(ncclIbGetGidIndex(&hca->ctx, 1, &hca->ports[0].attr, &idx), ncclSuccess);
    EXPECT_EQ(idx, ch.index);
    return ch;
  }
  int pick() { return choose().index; }

  // The usual mlx5 RoCE table: link-local v1/v2, IPv4 v1/v2, IPv6 v1/v2.
  void mlx5Table() {
    gid(0, "fe80::ba59:9fff:fe1f:2a3c", 1);
    gid(1, "fe80::ba59:9fff:fe1f:2a3c", 2);
    gid(2, "::ffff:10.1.1.1", 1);
    gid(3, "::ffff:10.1.1.1", 2);
    gid(4, "2001:db8::1", 1);
    gid(5, "2001:db8::1", 2);
  }
};

INSTANTIATE_TEST_SUITE_P(Source, IbGidTest, ::testing::Values(true, false),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "GidTable" : "Sysfs"; });

TEST_P(IbGidTest, RxeLayoutPicksTheIpv4RoceV2Entry) {
  gid(0, "fe80::c6:12ff:fe00:1", 2);
  gid(1, "::ffff:198.18.0.1", 2);
  tableLen(1024);
  auto ch = choose();
  EXPECT_EQ(ch.index, 1);
  EXPECT_EQ(ch.roceVersion, 2);
  EXPECT_EQ(railnetIbGidFamily(&ch.gid), AF_INET);
  EXPECT_EQ(ch.scanned, 2);
  EXPECT_NE(std::string(ch.why).find("best of 2 of 1024 entries"), std::string::npos) << ch.why;
  EXPECT_NE(std::string(ch.why).find("AF_INET, RoCE v2"), std::string::npos) << ch.why;
  EXPECT_EQ(w.gidTableCalls, useTable() ? 2 : 0);  // one per call (choose + ncclIbGetGidIndex)
}

TEST_P(IbGidTest, RoceV1V2MixPrefersV2) {
  mlx5Table();
  EXPECT_EQ(pick(), 3);
}

TEST_P(IbGidTest, RoceVersionNum1PicksTheV1Entry) {
  mlx5Table();
  env.set("NCCL_IB_ROCE_VERSION_NUM", "1");
  EXPECT_EQ(pick(), 2);
}

TEST_P(IbGidTest, AddrFamilyInet6PicksTheGlobalIpv6Entry) {
  mlx5Table();
  env.set("NCCL_IB_ADDR_FAMILY", "AF_INET6");
  auto ch = choose();
  EXPECT_EQ(ch.index, 5);
  EXPECT_EQ(railnetIbGidFamily(&ch.gid), AF_INET6);
  env.set("NCCL_IB_ROCE_VERSION_NUM", "1");
  EXPECT_EQ(pick(), 4);
}

TEST_P(IbGidTest, Ipv4MappedGidsCountAsIpv4) {
  gid(0, "2001:db8::7", 2);
  gid(1, "::ffff:10.9.9.9", 2);
  EXPECT_EQ(pick(), 1);
  env.set("NCCL_IB_ADDR_FAMILY", "AF_INET6");
  EXPECT_EQ(pick(), 0);
}

TEST_P(IbGidTest, LinkLocalIsNeverPreferred) {
  // only link-local IPv6 entries and a global one: the global one wins for AF_INET6
  gid(0, "fe80::1", 2);
  gid(1, "fe80::2", 2);
  gid(2, "2001:db8::5", 2);
  gid(3, "fe80::3", 2);
  env.set("NCCL_IB_ADDR_FAMILY", "AF_INET6");
  EXPECT_EQ(pick(), 2);
}

TEST_P(IbGidTest, OnlyLinkLocalEntriesKeepIndexZero) {
  gid(0, "fe80::1", 2);
  gid(1, "fe80::2", 2);
  auto ch = choose();
  EXPECT_EQ(ch.index, 0);
  EXPECT_NE(std::string(ch.why).find("no entry matches AF_INET, RoCE v2"), std::string::npos) << ch.why;
}

TEST_P(IbGidTest, AddrRangeSelectsInsideAndIgnoresOutside) {
  gid(0, "fe80::1", 2);
  gid(1, "::ffff:10.1.1.1", 2);
  gid(2, "::ffff:192.168.7.5", 2);
  EXPECT_EQ(pick(), 1);  // no range: the first IPv4 v2 entry
  env.set("NCCL_IB_ADDR_RANGE", "192.168.0.0/16");
  auto ch = choose();
  EXPECT_EQ(ch.index, 2);
  EXPECT_NE(std::string(ch.why).find("NCCL_IB_ADDR_RANGE=192.168.0.0/16"), std::string::npos) << ch.why;
  env.set("NCCL_IB_ADDR_RANGE", "10.1.1.1/32");
  EXPECT_EQ(pick(), 1);
  env.set("NCCL_IB_ADDR_RANGE", "172.16.0.0/12");  // nothing inside: index 0 stays
  EXPECT_EQ(pick(), 0);
}

TEST_P(IbGidTest, Ipv6AddrRange) {
  gid(0, "fe80::1", 2);
  gid(1, "2001:db8::1", 2);
  gid(2, "fd00:1::5", 2);
  env.set("NCCL_IB_ADDR_FAMILY", "AF_INET6");
  EXPECT_EQ(pick(), 1);
  env.set("NCCL_IB_ADDR_RANGE", "fd00::/8");
  EXPECT_EQ(pick(), 2);
  env.set("NCCL_IB_ADDR_RANGE", "2001:db8::/64");
  EXPECT_EQ(pick(), 1);
}

TEST_P(IbGidTest, MalformedAddrRangeIsIgnored) {
  gid(0, "fe80::1", 2);
  gid(1, "::ffff:10.1.1.1", 2);
  gid(2, "::ffff:192.168.7.5", 2);
  {
    LogCapture log;
    env.set("NCCL_IB_ADDR_RANGE", "192.168.0.0");  // no /len
    EXPECT_EQ(pick(), 1);
    EXPECT_TRUE(LogCapture::contains("NCCL_IB_ADDR_RANGE=192.168.0.0 has no /prefix length", NCCL_LOG_WARN))
        << LogCapture::all();
  }
  {
    LogCapture log;
    env.set("NCCL_IB_ADDR_RANGE", "192.168.0.0/40");
    EXPECT_EQ(pick(), 1);
    EXPECT_TRUE(LogCapture::contains("Ip address mask '40' is invalid for family AF_INET, ignoring mask"))
        << LogCapture::all();
  }
  {
    LogCapture log;
    env.set("NCCL_IB_ADDR_RANGE", "fd00::/8");  // an IPv6 range while AF_INET is wanted
    EXPECT_EQ(pick(), 1);
    EXPECT_TRUE(LogCapture::contains("Ip address 'fd00::' is invalid for family AF_INET, ignoring address"))
        << LogCapture::all();
  }
}

TEST_P(IbGidTest, UnknownAddrFamilyWarnsAndUsesInet) {
  mlx5Table();
  LogCapture log;
  env.set("NCCL_IB_ADDR_FAMILY", "AF_UNIX");
  EXPECT_EQ(pick(), 3);
  EXPECT_TRUE(LogCapture::contains("NCCL_IB_ADDR_FAMILY=AF_UNIX is neither AF_INET nor AF_INET6; using AF_INET",
                                   NCCL_LOG_WARN))
      << LogCapture::all();
}

TEST_P(IbGidTest, HolesAndEmptySlotsAreSkipped) {
  tableLen(1024);
  gid(0, "fe80::1", 2);
  gid(7, "::ffff:10.2.2.2", 1);
  gid(300, "::ffff:10.2.2.2", 2);
  auto ch = choose();
  EXPECT_EQ(ch.index, 300);
  EXPECT_EQ(ch.scanned, 3);
}

TEST_P(IbGidTest, EntriesBeyondGidTblLenAreNotLookedAt) {
  gid(0, "fe80::1", 2);
  gid(1, "::ffff:10.2.2.2", 1);
  gid(20, "::ffff:10.2.2.2", 2);  // the fake keeps it, but the port says 16 slots
  EXPECT_EQ(pick(), 1);
}

TEST_P(IbGidTest, ForcedGidIndexWins) {
  mlx5Table();
  env.set("NCCL_IB_GID_INDEX", "4");
  auto ch = choose();
  EXPECT_EQ(ch.index, 4);
  EXPECT_NE(std::string(ch.why).find("forced by NCCL_IB_GID_INDEX=4"), std::string::npos) << ch.why;
  EXPECT_EQ(ch.roceVersion, 1);
  env.set("NCCL_IB_GID_INDEX", "-1");
  EXPECT_EQ(pick(), 3);
}

TEST_P(IbGidTest, ForcedEmptyOrOutOfRangeIndexWarns) {
  mlx5Table();
  {
    LogCapture log;
    env.set("NCCL_IB_GID_INDEX", "7");
    EXPECT_EQ(pick(), 7);  // NCCL's behaviour: the user's index is used
    EXPECT_TRUE(LogCapture::contains("NCCL_IB_GID_INDEX=7 is an empty GID slot on roce0:1", NCCL_LOG_WARN))
        << LogCapture::all();
  }
  {
    LogCapture log;
    env.set("NCCL_IB_GID_INDEX", "16");
    EXPECT_EQ(pick(), 16);
    EXPECT_TRUE(LogCapture::contains("NCCL_IB_GID_INDEX=16 but roce0:1 has only 16 GID entries", NCCL_LOG_WARN))
        << LogCapture::all();
  }
}

TEST_P(IbGidTest, EmptyGidTableKeepsIndexZero) {
  tableLen(0);
  EXPECT_EQ(pick(), 0);
}

TEST_P(IbGidTest, InfiniBandUsesIndexZeroWithoutRoutableFlid) {
  hca->ports[0].attr.link_layer = IBV_LINK_LAYER_INFINIBAND;
  gid(0, "fe80::2:c903:a:b0c1", 0);
  gid(1, "fe80::2:c903:a:b0c2", 0);  // FLID bytes 4-5 are zero
  mlx5Table();                        // RoCE-style entries must not matter on IB
  hca->ports[0].gids[1] = {"fe80::2:c903:a:b0c2", 0};
  env.set("NCCL_IB_GID_INDEX", "3");  // RoCE only
  auto ch = choose();
  EXPECT_EQ(ch.index, 0);
  EXPECT_NE(std::string(ch.why).find("InfiniBand"), std::string::npos) << ch.why;
  EXPECT_EQ(w.gidTableCalls, 0);
}

TEST_P(IbGidTest, InfiniBandRoutableFlid) {
  hca->ports[0].attr.link_layer = IBV_LINK_LAYER_INFINIBAND;
  gid(0, "fe80::2:c903:a:b0c1", 0);
  gid(1, "fec0:0:0:12:2:c903:a:b0c1", 0);  // bytes 4-5 = 0x0000, then 0x0012 is the subnet: no FLID
  EXPECT_EQ(pick(), 0);
  gid(1, "fec0:0:7:12:2:c903:a:b0c1", 0);  // FLID 7
  auto ch = choose();
  EXPECT_EQ(ch.index, 1);
  EXPECT_NE(std::string(ch.why).find("routable FLID 0x7"), std::string::npos) << ch.why;
  env.set("NCCL_IB_ROUTABLE_FLID_GID_INDEX", "2");  // no FLID there
  EXPECT_EQ(pick(), 0);
  gid(2, "fec0:0:9:12:2:c903:a:b0c1", 0);
  EXPECT_EQ(pick(), 2);
  env.set("NCCL_IB_ROUTABLE_FLID_GID_INDEX", "16");  // beyond the table
  EXPECT_EQ(pick(), 0);
}

// sysfs only: types that cannot be read (an empty slot's type fails; containers may not map
// every slot) are unknown and lose against the wanted version.
TEST(IbGidSysfsTest, UnreadableTypesAreSkipped) {
  ScopedEnv env;
  TempDir sysfs;
  FakeWorld w;
  world = &w;
  auto table = fakeVerbs(false);
  railnetIbvSetSymbols(&table);
  env.set("SYSFS_PATH", sysfs.path().c_str());
  for (const char* v : {"NCCL_IB_GID_INDEX", "NCCL_IB_ADDR_FAMILY", "NCCL_IB_ADDR_RANGE", "NCCL_IB_ROCE_VERSION_NUM"})
    env.unset(v);
  FakeHca& h = addHca("roce0", 1, IBV_LINK_LAYER_ETHERNET);
  h.ports[0].gids[0] = {"fe80::1", 2};
  h.ports[0].gids[1] = {"::ffff:10.0.0.1", 2};
  h.ports[0].gids[2] = {"::ffff:10.0.0.2", 2};
  h.ports[0].gids[3] = {"::ffff:10.0.0.3", 2};
  std::string types = "class/infiniband/roce0/ports/1/gid_attrs/types/";
  sysfs.write(types + "0", "RoCE v2\n");
  // 1: a directory (read fails with EISDIR); 2: absent; 3: readable
  mkdir((sysfs.path() + "/" + types + "1").c_str(), 0755);
  sysfs.write(types + "3", "RoCE v2\n");
  struct railnetIbGidChoice ch;
  ASSERT_EQ(railnetIbChooseGid(&h.ctx, "roce0", 1, &h.ports[0].attr, &ch), ncclSuccess);
  EXPECT_EQ(ch.index, 3);
  EXPECT_EQ(ch.roceVersion, 2);
  EXPECT_EQ(railnetIbSysfsRoceVersion("roce0", 1, 1), -1);
  EXPECT_EQ(railnetIbSysfsRoceVersion("roce0", 1, 2), -1);
  EXPECT_EQ(railnetIbSysfsRoceVersion("roce0", 1, 3), 2);
  railnetIbvSetSymbols(nullptr);
  world = nullptr;
}

TEST(IbGidSysfsTest, TypeTexts) {
  ScopedEnv env;
  TempDir sysfs;
  env.set("SYSFS_PATH", (sysfs.path() + "/").c_str());  // a trailing '/' is fine
  std::string types = "class/infiniband/mlx5_0/ports/1/gid_attrs/types/";
  sysfs.write(types + "0", "IB/RoCE v1\n");
  sysfs.write(types + "1", "RoCE v2\n");
  sysfs.write(types + "2", "RoCE v1\n");
  sysfs.write(types + "3", "something else\n");
  EXPECT_EQ(railnetIbSysfsRoceVersion("mlx5_0", 1, 0), 1);
  EXPECT_EQ(railnetIbSysfsRoceVersion("mlx5_0", 1, 1), 2);
  EXPECT_EQ(railnetIbSysfsRoceVersion("mlx5_0", 1, 2), 1);
  EXPECT_EQ(railnetIbSysfsRoceVersion("mlx5_0", 1, 3), -1);
  EXPECT_EQ(railnetIbSysfsRoceVersion("mlx5_0", 2, 0), -1);
}

TEST(IbGidFamilyTest, Families) {
  auto fam = [](const char* s) {
    union ibv_gid g = gidFromText(s);
    return railnetIbGidFamily(&g);
  };
  EXPECT_EQ(fam("::ffff:10.0.0.1"), AF_INET);
  EXPECT_EQ(fam("ff0e::ffff:239.1.1.1"), AF_INET);  // IPv4-mapped multicast
  EXPECT_EQ(fam("fe80::1"), AF_INET6);
  EXPECT_EQ(fam("2001:db8::1"), AF_INET6);
  EXPECT_EQ(fam("::"), AF_INET6);
}

}  // namespace
