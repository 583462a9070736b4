// railnet-diag and railnet-perf inside network namespaces with known interfaces: the
// interface choice and its chain step as a user would read them, and a perf sweep between
// two namespaces over a veth pair through the Socket transport (TCP handle exchange).
#include <stdlib.h>
#include <unistd.h>
#include <sstream>
#include "netns.h"
#include "plugin_loader.h"

namespace {

std::string bin(const std::string& tool) {
  std::string lib = buildLibDir();
  return lib.substr(0, lib.rfind('/')) + "/bin/" + tool;
}

bool has(const std::string& s, const std::string& needle) { return s.find(needle) != std::string::npos; }

// The first line of s that starts with prefix ("" if none).
std::string lineStarting(const std::string& s, const std::string& prefix) {
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(prefix, 0) == 0) return line;
  return "";
}

// Variables of the caller that would change the tools' answers.
const char* kClean =
    "unset NCCL_SOCKET_IFNAME NCCL_IB_HCA NCCL_IB_GID_INDEX NCCL_CONF_FILE NCCL_DEBUG NCCL_NET_PLUGIN NCCL_COMM_ID; ";

TEST(ToolsNetns, DiagReportsTheChoiceAndItsStep) {
  RAILNET_REQUIRE_NETNS();
  NetNs a("diag"), peer("peer");
  ASSERT_TRUE(a.ok() && peer.ok());
  ASSERT_TRUE(NetNs::veth(a, "eth0", peer, "p0") && NetNs::veth(a, "ib0", peer, "p1") &&
              NetNs::veth(a, "docker0", peer, "p2"));
  ASSERT_TRUE(a.addAddr("eth0", "198.18.3.1/24") && a.addAddr("ib0", "198.18.4.1/24") &&
              a.addAddr("docker0", "198.18.5.1/24"));
  for (const char* i : {"eth0", "ib0", "docker0", "lo"}) ASSERT_TRUE(a.up(i));
  for (const char* i : {"p0", "p1", "p2"}) ASSERT_TRUE(peer.up(i));
  ASSERT_TRUE(a.waitRunning("ib0") && a.waitRunning("eth0"));
  TempDir d;
  std::string env = std::string(kClean) + "SYSFS_PATH=" + d.path() + " HOME=" + d.path() + " ";

  NetNsResult r = a.exec(env + bin("railnet-diag"));
  EXPECT_EQ(r.exitCode, 0) << r.out;
  EXPECT_TRUE(has(r.out, "selected: ib0 (198.18.4.1) -- by step: ib* interfaces")) << r.out;
  std::string ib0 = lineStarting(r.out, "  ib0 ");
  EXPECT_TRUE(has(ib0, "up, running") && has(ib0, "198.18.4.1/24") && has(ib0, "<- selected [0]")) << r.out;
  EXPECT_FALSE(has(lineStarting(r.out, "  eth0 "), "selected")) << r.out;

  r = a.exec(env + bin("railnet-diag") + " --json");
  EXPECT_TRUE(has(r.out, "\"selected\":[{\"name\":\"ib0\",\"address\":\"198.18.4.1\"}]")) << r.out;
  EXPECT_TRUE(has(r.out, "\"step\":\"ib* interfaces\"")) << r.out;

  // ib0 goes down: the chain moves on to "any but docker*, lo, virbr*", i.e. eth0.
  ASSERT_TRUE(a.down("ib0"));
  r = a.exec(env + bin("railnet-diag"));
  EXPECT_TRUE(has(r.out, "selected: eth0 (198.18.3.1) -- by step: any but docker*, lo, virbr*")) << r.out;
  EXPECT_TRUE(has(lineStarting(r.out, "  ib0 "), " down ")) << r.out;

  // Only docker0 left: a warning with its fix, still exit 0.
  ASSERT_TRUE(a.down("eth0"));
  r = a.exec(env + bin("railnet-diag"));
  EXPECT_TRUE(has(r.out, "by step: docker*")) << r.out;
  EXPECT_TRUE(has(r.out, "WARNING: the choice fell back to a bridge (docker*)")) << r.out;

  // A user list naming a down interface: the choice, plus a warning about the one unused.
  ASSERT_TRUE(a.up("eth0") && a.waitRunning("eth0"));
  r = a.exec(env + "NCCL_SOCKET_IFNAME=eth0,ib0 " + bin("railnet-diag"));
  EXPECT_TRUE(has(r.out, "selected: eth0 (198.18.3.1) -- by step: NCCL_SOCKET_IFNAME")) << r.out;
  EXPECT_TRUE(has(r.out, "WARNING: NCCL_SOCKET_IFNAME=eth0,ib0 names ib0, which is not used: down")) << r.out;

  // A lowered locked-memory limit is reported (a warning here: no RDMA port in this tree).
  r = a.exec("ulimit -l 32 && " + env + bin("railnet-diag"));
  EXPECT_TRUE(has(r.out, "the locked-memory limit is 32 KiB")) << r.out;
}

TEST(ToolsNetns, PerfSweepBetweenTwoNamespaces) {
  RAILNET_REQUIRE_NETNS();
  NetNs a("srv"), b("cli");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(NetNs::veth(a, "eth0", b, "eth0"));
  ASSERT_TRUE(a.addAddr("eth0", "198.18.6.1/24") && b.addAddr("eth0", "198.18.6.2/24"));
  ASSERT_TRUE(a.up("eth0") && b.up("eth0") && a.up("lo") && b.up("lo"));
  ASSERT_TRUE(a.waitRunning("eth0") && b.waitRunning("eth0"));
  TempDir d;
  std::string env = std::string(kClean) + "NCCL_SOCKET_IFNAME==eth0 RAILNET_TRANSPORT=socket ";
  std::string plugin = " --plugin " + buildLibDir() + "/libnccl-net-railnet.so ";
  std::string serverOut = d.path() + "/server.out";
  std::string serverCmd = env + bin("railnet-perf") + plugin + "--server --port 18515 --timeout 30 >" + serverOut + " 2>&1";
  NetNsChild server(a, [&](NetNsIo&) { return system(serverCmd.c_str()) == 0 ? 0 : 1; });
  ASSERT_TRUE(server.started());
  NetNsResult c = b.exec(env + bin("railnet-perf") + plugin +
                         "--client 198.18.6.1 --port 18515 -a --min-size 16 --max-size 1M -n 10 --warmup 2 --timeout 30",
                         60000);
  NetNsResult s = server.wait(30000);
  std::string srv;
  FILE* f = fopen(serverOut.c_str(), "r");
  if (f) {
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) srv.append(buf, n);
    fclose(f);
  }
  ASSERT_TRUE(c.success()) << c.describe() << "\nserver:\n" << srv;
  EXPECT_TRUE(s.success()) << s.describe() << srv;
  EXPECT_TRUE(has(c.out, "Device: [0] eth0")) << c.out;
  EXPECT_TRUE(has(srv, "Device: [0] eth0")) << srv;
  for (size_t size = 16; size <= (1u << 20); size *= 2) {
    int rows = 0;
    std::istringstream in(c.out);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream fl(line);
      size_t bytes = 0;
      int iters = 0;
      if ((fl >> bytes >> iters) && bytes == size && iters == 10) rows++;
    }
    EXPECT_EQ(rows, 2) << size << "\n" << c.out;
    for (const char* test : {"bw", "lat"}) {
      std::ostringstream want;
      want << " receiver: " << size;
      bool found = false;
      std::istringstream in2(srv);
      while (std::getline(in2, line)) {
        if (line.rfind(want.str() + " ", 0) != 0 || !has(line, std::string("(") + test + ")")) continue;
        std::istringstream fl(line.substr(want.str().size()));
        int n = 0;
        long long bytes = 0;
        std::string check;
        fl >> n >> bytes >> check;
        EXPECT_EQ(n, 12) << line;
        EXPECT_EQ(bytes, (long long)size * 12) << line;
        EXPECT_EQ(check, "ok") << line;
        found = true;
      }
      EXPECT_TRUE(found) << size << " " << test << "\n" << srv;
    }
  }
}

}  // namespace
