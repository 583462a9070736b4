// Set-up shared by the soft-RoCE fixtures that move data between two RDMA devices.
// Include after test_util.h, ibvwrap.h, net_ib/init.h and testing.h.
#pragma once
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>

// Forgets earlier discovery, checks that libibverbs lists two devices and clears the IB
// variables a test may have set; returns "" or why the test must be skipped.
inline std::string ibTwoDevicesOrWhy(ScopedEnv& env) {
  railnetIbResetDevices();
  if (wrap_ibv_symbols() != ncclSuccess) return "libibverbs is not installed";
  struct ibv_device** list = nullptr;
  int n = 0;
  bool two = wrap_ibv_get_device_list(&list, &n) == ncclSuccess && list != nullptr && n >= 2;
  if (list) wrap_ibv_free_device_list(list);
  if (!two) return "needs two RDMA devices (soft-RoCE rxe0/rxe1 run in the tier's VM)";
  for (const char* v : {"NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_IB_QPS_PER_CONNECTION",
                        "NCCL_IB_SPLIT_DATA_ON_QPS", "NCCL_IB_DISABLE", "SYSFS_PATH", "NCCL_IB_USE_INLINE"})
    env.unset(v);
  return "";
}

// Runs cmd through the shell with its output discarded: true when it exits 0.
inline bool shQuiet(const std::string& cmd) { return system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

// Port 1 of the RDMA device dev is ACTIVE (its state in sysfs).
inline bool ibPortActive(const char* dev) {
  return readFile(std::string("/sys/class/infiniband/") + dev + "/ports/1/state").find("ACTIVE") != std::string::npos;
}

// makeVDevice of devices 0 and 1 (the tier's rxe0 and rxe1): the fused device's index in *d.
inline ncclResult_t ibFuseFirstTwoDevices(int* d) {
  ncclNetVDeviceProps_t vp;
  memset(&vp, 0, sizeof(vp));
  vp.ndevs = 2;
  vp.devs[0] = 0;
  vp.devs[1] = 1;
  return railnetNetIb.makeVDevice(d, &vp);
}

// Brings a netdev of the tier's veth pair back up and restores what the kernel dropped
// with the link: the per-address routes of table 100 and the static neighbours that make
// 198.18.0.1 <-> 198.18.0.2 cross the veth pair (test/softroce/guest.sh sets them up).
// Without them, TCP between the two addresses falls back to lo after a link flap.
// Returns the exit status of the last command (0: all done).
inline int softroceLinkUp(const std::string& netdev) {
  int rc = system(("ip link set " + netdev + " up").c_str());
  const char* nd = getenv("SOFTROCE_NETDEVS");
  const char* ad = getenv("SOFTROCE_ADDRS");
  if (nd == nullptr || ad == nullptr) return rc;
  char n0[64], n1[64], a0[64], a1[64];
  if (sscanf(nd, "%63s %63s", n0, n1) != 2 || sscanf(ad, "%63s %63s", a0, a1) != 2) return rc;
  auto mac = [](const char* dev) {
    std::string m = readFile(std::string("/sys/class/net/") + dev + "/address");
    while (!m.empty() && (m.back() == '\n' || m.back() == ' ')) m.pop_back();
    return m;
  };
  std::string m0 = mac(n0), m1 = mac(n1);
  std::string cmd = std::string("ip route replace ") + a1 + "/32 dev " + n0 + " src " + a0 + " table 100 && " +
                    "ip route replace " + a0 + "/32 dev " + n1 + " src " + a1 + " table 100 && " +
                    "ip neigh replace " + a1 + " lladdr " + m1 + " dev " + n0 + " nud permanent && " +
                    "ip neigh replace " + a0 + " lladdr " + m0 + " dev " + n1 + " nud permanent";
  return rc != 0 ? rc : system(cmd.c_str());
}

// The tier's simulated hosts as test/softroce/run-vm.sh describes them (one entry per RDMA
// device): load() returns "" or why they are not there (the test then skips).
struct SoftRoceHosts {
  std::vector<std::string> devs, netdevs, addrs, gidIdx;
  std::string load() {
    devs = envWords("SOFTROCE_DEVS");
    netdevs = envWords("SOFTROCE_NETDEVS");
    addrs = envWords("SOFTROCE_ADDRS");
    gidIdx = envWords("SOFTROCE_GID_INDEXES");
    if (devs.size() < 2 || netdevs.size() != devs.size() || addrs.size() != devs.size() || gidIdx.size() != devs.size())
      return "SOFTROCE_DEVS/NETDEVS/ADDRS/GID_INDEXES are not set: run through test/softroce/run-vm.sh";
    return "";
  }
};

// Fixture of the tools' tests on the tier's hosts: skips without the two devices or without
// what run-vm.sh says of them; hosts and its fields name them.
class SoftRoceHostsTest : public ::testing::Test {
 protected:
  ScopedEnv env;
  SoftRoceHosts hosts;
  std::vector<std::string>& devs = hosts.devs;
  std::vector<std::string>& netdevs = hosts.netdevs;
  std::vector<std::string>& addrs = hosts.addrs;
  std::vector<std::string>& gidIdx = hosts.gidIdx;
  void SetUp() override {
    std::string why = ibTwoDevicesOrWhy(env);
    if (!why.empty()) RAILNET_SKIP(why);
    std::string missing = hosts.load();
    if (!missing.empty()) RAILNET_SKIP(missing);
    for (const char* v : {"NCCL_NET_PLUGIN", "NCCL_SOCKET_IFNAME", "NCCL_DEBUG", "NCCL_CONF_FILE", "RAILNET_TRANSPORT"})
      env.unset(v);
  }
};

// The logger of a forked child: its WARNs on stderr, which the parent collects from a pipe.
inline void ibChildLogger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt,
                          ...) {
  (void)flags;
  (void)file;
  (void)line;
  if (level != NCCL_LOG_WARN) return;
  va_list ap;
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
}

// Fixture of the tests that move data between the tier's two RDMA devices: skips without
// them, and finalizes the context and forgets every device after each test.
class IbTwoDevicesTest : public ::testing::Test {
 protected:
  ScopedEnv env;
  void* ctx = nullptr;
  void SetUp() override {
    std::string why = ibTwoDevicesOrWhy(env);
    if (!why.empty()) RAILNET_SKIP(why);
    railnetParamReset();
  }
  // init() of the IB transport into ctx, with at least the tier's two devices.
  void initTwoDevices() {
    ASSERT_EQ(railnetNetIb.init(&ctx, 0, nullptr, nullptr, nullptr), ncclSuccess);
    int ndev = 0;
    ASSERT_EQ(railnetNetIb.devices(&ndev), ncclSuccess);
    ASSERT_GE(ndev, 2);
  }
  void TearDown() override {
    if (ctx) railnetNetIb.finalize(ctx);
    ctx = nullptr;
    railnetIbResetDevices();
    railnetParamReset();
  }
};
