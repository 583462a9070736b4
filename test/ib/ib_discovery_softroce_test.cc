// IB discovery, properties and the automatic GID index against real devices (soft-RoCE in
// the tier's VM: rxe0/rxe1 on a veth pair). Skips when libibverbs lists no device.
//  - discovery finds every device of SOFTROCE_DEVS as RoCE, with the rate ibv_devinfo shows,
//    a NULL pciPath (rxe has no PCI device) and NCCL's "NET/IB : Using" line;
//  - the automatic GID index is the RoCE v2 IPv4 entry (SOFTROCE_GID_INDEXES), the same
//    through ibv_query_gid_table and through sysfs, and its INFO line names it;
//  - NCCL_IB_HCA=rxe1 / =rxe0 / ^rxe0 select what they should.
#include "test_util.h"
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <algorithm>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
#include "core.h"
#include "ibvwrap.h"
#include "../../src/transport/net_ib/devices.h"
#include "../../src/transport/net_ib/gid.h"
#include "../../src/transport/net_ib/init.h"
#include "testing.h"
}
#include "ib_test_env.h"

namespace {

// ibv_devinfo's rate for dev port 1 in Mbps ("active_width: 1X", "active_speed: 10.0 Gbps"); -1 unknown.
int devinfoMbps(const std::string& dev) {
  std::string cmd = "ibv_devinfo -v -d " + dev + " -i 1 2>/dev/null";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return -1;
  char line[512];
  int width = -1;
  double gbps = -1;
  while (fgets(line, sizeof(line), p)) {
    const char* s;
    if ((s = strstr(line, "active_width:"))) sscanf(s, "active_width: %dX", &width);
    if ((s = strstr(line, "active_speed:"))) sscanf(s, "active_speed: %lf Gbps", &gbps);
  }
  pclose(p);
  if (width <= 0 || gbps <= 0) return -1;
  return (int)(gbps * 1000 + 0.5) * width;
}

class IbDiscoveryTest : public ::testing::Test {
 protected:
  ScopedEnv env;
  std::vector<void*> ctxs;
  int nDevices = 0;

  void SetUp() override {
    railnetIbResetDevices();
    if (wrap_ibv_symbols() != ncclSuccess) RAILNET_SKIP("libibverbs is not installed");
    struct ibv_device** list = nullptr;
    if (wrap_ibv_get_device_list(&list, &nDevices) != ncclSuccess || list == nullptr || nDevices == 0)
      RAILNET_SKIP("no RDMA device (soft-RoCE runs in the tier's VM)");
    wrap_ibv_free_device_list(list);
    for (const char* v : {"NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_IB_ADDR_FAMILY", "NCCL_IB_ADDR_RANGE",
                          "NCCL_IB_ROCE_VERSION_NUM", "NCCL_IB_DISABLE", "SYSFS_PATH"})
      env.unset(v);
  }
  void TearDown() override {
    finalizeAll();
    railnetIbResetDevices();
  }
  void finalizeAll() {
    for (void* c : ctxs) railnetNetIb.finalize(c);
    ctxs.clear();
  }
  ncclResult_t init() {
    void* ctx = nullptr;
    ncclResult_t r = railnetNetIb.init(&ctx, 0, nullptr, nullptr, nullptr);
    if (r == ncclSuccess) ctxs.push_back(ctx);
    return r;
  }
  std::vector<std::string> names() {
    std::vector<std::string> out;
    int n = 0;
    EXPECT_EQ(railnetNetIb.devices(&n), ncclSuccess);
    for (int d = 0; d < n; d++) {
      ncclNetProperties_t p;
      EXPECT_EQ(railnetNetIb.getProperties(d, &p), ncclSuccess);
      out.push_back(p.name);
    }
    return out;
  }
  std::vector<std::string> withHca(const char* spec) {
    finalizeAll();
    env.set("NCCL_IB_HCA", spec);
    EXPECT_EQ(init(), ncclSuccess);
    return names();
  }
};

TEST_F(IbDiscoveryTest, FindsTheRxeDevicesWithTheirRateAndNoPciPath) {
  LogCapture log;
  uint64_t t0 = railnetClockNs();
  ASSERT_EQ(init(), ncclSuccess) << LogCapture::all();
  printf("discovery took %.1f ms\n", (railnetClockNs() - t0) / 1e6);
  auto devs = envWords("SOFTROCE_DEVS");
  auto found = names();
  for (auto& d : devs) EXPECT_NE(std::find(found.begin(), found.end(), d), found.end()) << d << " not found";
  for (auto& l : LogCapture::lines())
    if (l.msg.find("NET/IB") != std::string::npos) printf("  %s\n", l.msg.c_str());
  if (devs.size() == 2 && found.size() == 2) {
    EXPECT_TRUE(LogCapture::contains("NET/IB : Using [0]" + devs[0] + ":1/RoCE [1]" + devs[1] + ":1/RoCE"))
        << LogCapture::all();
  }
  EXPECT_TRUE(LogCapture::contains("; OOB ")) << LogCapture::all();
  for (int d = 0; d < (int)found.size(); d++) {
    ncclNetProperties_t p;
    ASSERT_EQ(railnetNetIb.getProperties(d, &p), ncclSuccess);
    int mbps = devinfoMbps(p.name);
    printf("%s: speed %d Mbps (ibv_devinfo: %d), port %d, guid 0x%llx, maxComms %d, ptrSupport 0x%x, pciPath %s\n",
           p.name, p.speed, mbps, p.port, (unsigned long long)p.guid, p.maxComms, p.ptrSupport,
           p.pciPath ? p.pciPath : "NULL");
    if (mbps > 0) {
      EXPECT_EQ(p.speed, mbps) << p.name;
    }
    EXPECT_EQ(ncclIbDevs[d].link, IBV_LINK_LAYER_ETHERNET);
    EXPECT_EQ(p.port, 1);
    EXPECT_EQ(p.maxRecvs, 8);
    EXPECT_EQ(p.regIsGlobal, 1);
    EXPECT_TRUE(p.ptrSupport & NCCL_PTR_HOST);
    EXPECT_GT(p.maxComms, 0);
    if (std::string(p.name).rfind("rxe", 0) == 0) {
      EXPECT_EQ(p.pciPath, nullptr) << p.name;
    }
  }
  EXPECT_EQ(LogCapture::contains("", NCCL_LOG_WARN), false) << LogCapture::all();
}

TEST_F(IbDiscoveryTest, AutomaticGidIndexIsTheRoceV2Ipv4EntryOnBothPaths) {
  LogCapture log;
  ASSERT_EQ(init(), ncclSuccess);
  auto devs = envWords("SOFTROCE_DEVS");
  auto want = envWords("SOFTROCE_GID_INDEXES");
  struct railnetIbvSymbols real = railnetIbv;
  for (int d = 0; d < ncclNIbDevs; d++) {
    struct ncclIbDev* dev = &ncclIbDevs[d];
    struct railnetIbGidChoice viaTable, viaSysfs;
    uint64_t t0 = railnetClockNs();
    ASSERT_EQ(railnetIbChooseGid(dev->context, dev->devName, dev->portNum, &dev->portAttr, &viaTable), ncclSuccess);
    uint64_t t1 = railnetClockNs();
    struct railnetIbvSymbols noTable = real;
    noTable.query_gid_table = nullptr;  // force ibv_query_gid per slot + sysfs types
    railnetIbvSetSymbols(&noTable);
    ncclResult_t r = railnetIbChooseGid(dev->context, dev->devName, dev->portNum, &dev->portAttr, &viaSysfs);
    uint64_t t2 = railnetClockNs();
    railnetIbvSetSymbols(&real);
    ASSERT_EQ(r, ncclSuccess);
    char g[64] = "?";
    ibvGetGidStr(&viaTable.gid, g, sizeof(g));
    printf("%s:%d gid_tbl_len %d: index %d %s RoCE v%d; table: %s (%.1f ms, source %d), sysfs: index %d (%.1f ms, "
           "source %d)\n",
           dev->devName, dev->portNum, dev->portAttr.gid_tbl_len, viaTable.index, g, viaTable.roceVersion, viaTable.why,
           (t1 - t0) / 1e6, viaTable.source, viaSysfs.index, (t2 - t1) / 1e6, viaSysfs.source);
    EXPECT_EQ(viaTable.index, viaSysfs.index) << dev->devName;
    EXPECT_EQ(viaTable.roceVersion, viaSysfs.roceVersion) << dev->devName;
    EXPECT_EQ(viaSysfs.source, RAILNET_GID_SRC_SYSFS);
    EXPECT_EQ(dev->gidIndex, viaTable.index);
    EXPECT_EQ(viaTable.roceVersion, 2) << dev->devName;
    EXPECT_EQ(railnetIbGidFamily(&viaTable.gid), AF_INET) << dev->devName;
    for (size_t i = 0; i < devs.size() && i < want.size(); i++)
      if (devs[i] == dev->devName) {
        EXPECT_EQ(std::to_string(viaTable.index), want[i]) << dev->devName;
      }
    EXPECT_TRUE(LogCapture::contains(std::string("NET/IB : ") + dev->devName + ":1 GID index " +
                                     std::to_string(viaTable.index) + " " + g + " (RoCE v2, IPv4)"))
        << LogCapture::all();
    int idx = -1;
    EXPECT_EQ(ncclIbGetGidIndex(dev->context, dev->portNum, &dev->portAttr, &idx), ncclSuccess);
    EXPECT_EQ(idx, viaTable.index);
  }
}

TEST_F(IbDiscoveryTest, IbHcaSelectsDevices) {
  auto devs = envWords("SOFTROCE_DEVS");
  if (devs.size() != 2 || devs[0] != "rxe0" || devs[1] != "rxe1") RAILNET_SKIP("needs the tier's rxe0 and rxe1");
  EXPECT_EQ(withHca("rxe1"), std::vector<std::string>({"rxe1"}));
  EXPECT_EQ(withHca("=rxe0"), std::vector<std::string>({"rxe0"}));
  EXPECT_EQ(withHca("^rxe0"), std::vector<std::string>({"rxe1"}));
  EXPECT_EQ(withHca("rxe0:1,rxe1:1"), std::vector<std::string>({"rxe0", "rxe1"}));
  EXPECT_EQ(withHca("rxe0:2"), std::vector<std::string>());
  EXPECT_EQ(withHca("=rxe"), std::vector<std::string>());
}

TEST_F(IbDiscoveryTest, FusedRxeDevice) {
  ASSERT_EQ(init(), ncclSuccess);
  if (ncclNIbDevs < 2) RAILNET_SKIP("needs two devices");
  int d = -1;
  ASSERT_EQ(ibFuseFirstTwoDevices(&d), ncclSuccess);
  ncclNetProperties_t p, p0, p1;
  ASSERT_EQ(railnetNetIb.getProperties(d, &p), ncclSuccess);
  ASSERT_EQ(railnetNetIb.getProperties(0, &p0), ncclSuccess);
  ASSERT_EQ(railnetNetIb.getProperties(1, &p1), ncclSuccess);
  EXPECT_EQ(std::string(p.name), std::string(p0.name) + "+" + p1.name);
  EXPECT_EQ(p.speed, p0.speed + p1.speed);
  EXPECT_EQ(p.vProps.ndevs, 2);
}

}  // namespace

namespace {

std::string readSys(const std::string& path) {
  std::string s = readFile(path);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

bool waitFor(const std::function<bool()>& cond, int ms) {
  for (int t = 0; t < ms / 50; t++) {
    if (cond()) return true;
    usleep(50000);
  }
  return cond();
}

// A port whose netdev goes down: the async event thread logs the port event with the
// device name, and a new discovery skips the port. The link comes back for later tests.
TEST_F(IbDiscoveryTest, PortWhoseNetdevGoesDownIsLoggedAndSkipped) {
  std::vector<std::string> devs = envWords("SOFTROCE_DEVS");
  if (devs.size() != 2 || getuid() != 0) RAILNET_SKIP("needs the tier's rxe0/rxe1 and root");
  const std::string dev = devs[1];
  const std::string sys = "/sys/class/infiniband/" + dev + "/ports/1/";
  std::string netdev = readSys(sys + "gid_attrs/ndevs/0");
  if (netdev.empty()) RAILNET_SKIP("cannot tell " + dev + "'s netdev");
  auto active = [&](const std::string& d) {
    return readSys("/sys/class/infiniband/" + d + "/ports/1/state").find("ACTIVE") != std::string::npos;
  };
  LogCapture log;
  ASSERT_EQ(init(), ncclSuccess) << LogCapture::all();
  ASSERT_TRUE(active(dev));
  ASSERT_EQ(system(("ip link set " + netdev + " down").c_str()), 0);
  bool wentDown = waitFor([&] { return !active(dev); }, 10000);
  bool logged = waitFor([&] { return LogCapture::contains(dev + ":1 Got non-fatal async event", NCCL_LOG_WARN); }, 5000);
  finalizeAll();
  railnetIbResetDevices();
  void* ctx = nullptr;
  ncclResult_t r = railnetNetIb.init(&ctx, 0, nullptr, nullptr, nullptr);
  std::vector<std::string> after;
  if (r == ncclSuccess) {
    ctxs.push_back(ctx);
    after = names();
  }
  // bring it back whatever happened, and wait for both ports, or later tests would fail
  int upRc = softroceLinkUp(netdev);
  bool back = waitFor([&] { return active(devs[0]) && active(devs[1]); }, 20000);
  EXPECT_TRUE(wentDown) << dev << " stayed ACTIVE with " << netdev << " down";
  EXPECT_TRUE(logged) << LogCapture::all();
  EXPECT_EQ(std::count(after.begin(), after.end(), dev), 0) << dev << " was not skipped";
  EXPECT_EQ(upRc, 0);
  ASSERT_TRUE(back) << "the ports did not come back ACTIVE";
}

}  // namespace
