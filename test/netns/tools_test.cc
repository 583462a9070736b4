// railnet-diag and railnet-perf inside network namespaces with known interfaces: the
// interface choice and its chain step as a user would read them, and a perf sweep between
// two namespaces over a veth pair through the Socket transport (TCP handle exchange).
#include <stdlib.h>
#include <unistd.h>
#include <chrono>
#include <sstream>
#include <vector>
#include "json_check.h"
#include "netns.h"
#include "plugin_loader.h"
#include "perf_json.h"

extern "C" {
#include "ethtool.h"
}

namespace {

double nowMs() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
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

  NetNsResult r = a.exec(env + buildTool("railnet-diag"));
  EXPECT_EQ(r.exitCode, 0) << r.out;
  EXPECT_TRUE(has(r.out, "selected: ib0 (198.18.4.1) -- by step: ib* interfaces")) << r.out;
  std::string ib0 = lineStarting(r.out, "  ib0 ");
  EXPECT_TRUE(has(ib0, "up, running") && has(ib0, "198.18.4.1/24") && has(ib0, "<- selected [0]")) << r.out;
  EXPECT_FALSE(has(lineStarting(r.out, "  eth0 "), "selected")) << r.out;

  r = a.exec(env + buildTool("railnet-diag") + " --json");
  EXPECT_EQ(jsonProblem(r.out), "") << r.out;
  EXPECT_EQ(pythonOnJson(r.out, "print(d[\"interfaces\"][\"selected\"][0][\"name\"])"), "ib0\n") << r.out;
  EXPECT_TRUE(has(r.out, "\"selected\":[{\"name\":\"ib0\",\"address\":\"198.18.4.1\"}]")) << r.out;
  EXPECT_TRUE(has(r.out, "\"step\":\"ib* interfaces\"")) << r.out;

  // ib0 goes down: the chain moves on to "any but docker*, lo, virbr*", i.e. eth0.
  ASSERT_TRUE(a.down("ib0"));
  r = a.exec(env + buildTool("railnet-diag"));
  EXPECT_TRUE(has(r.out, "selected: eth0 (198.18.3.1) -- by step: any but docker*, lo, virbr*")) << r.out;
  EXPECT_TRUE(has(lineStarting(r.out, "  ib0 "), " down ")) << r.out;

  // Only docker0 left: a warning with its fix, still exit 0.
  ASSERT_TRUE(a.down("eth0"));
  r = a.exec(env + buildTool("railnet-diag"));
  EXPECT_TRUE(has(r.out, "by step: docker*")) << r.out;
  EXPECT_TRUE(has(r.out, "WARNING: the choice fell back to a bridge (docker*)")) << r.out;

  // A user list naming a down interface: the choice, plus a warning about the one unused.
  ASSERT_TRUE(a.up("eth0") && a.waitRunning("eth0"));
  r = a.exec(env + "NCCL_SOCKET_IFNAME=eth0,ib0 " + buildTool("railnet-diag"));
  EXPECT_TRUE(has(r.out, "selected: eth0 (198.18.3.1) -- by step: NCCL_SOCKET_IFNAME")) << r.out;
  EXPECT_TRUE(has(r.out, "WARNING: NCCL_SOCKET_IFNAME=eth0,ib0 names ib0, which is not used: down")) << r.out;

  // A lowered locked-memory limit is reported (a warning here: no RDMA port in this tree) for
  // a process without CAP_IPC_LOCK (which pins beyond the limit: unit test
  // RailnetDiag.MemlockLimitDoesNotBindAHolderOfCapIpcLock).
  r = a.exec("setpriv --bounding-set -ipc_lock sh -c 'ulimit -l 32 && " + env + buildTool("railnet-diag") + "'");
  EXPECT_TRUE(has(r.out, "the locked-memory limit is 32 KiB")) << r.out;

  // NCCL_SOCKET_IFNAME set but naming no interface: ignored with a warning; the chain decides
  // (ib0 is still down: eth0).
  for (const char* spec : {"", "=", "^", ",", "^="}) {
    r = a.exec(env + "NCCL_SOCKET_IFNAME='" + spec + "' " + buildTool("railnet-diag"));
    EXPECT_TRUE(has(r.out, "selected: eth0 (198.18.3.1) -- by step: any but docker*, lo, virbr*")) << spec << "\n"
                                                                                                 << r.out;
    EXPECT_TRUE(has(r.out, std::string("WARNING: NCCL_SOCKET_IFNAME=\"") + spec +
                               "\" (environment) names no interface: it is ignored and the automatic choice is used "
                               "instead (eth0 (198.18.3.1))"))
        << spec << "\n" << r.out;
  }
}

// NCCL_SOCKET_IFNAME settings that NCCL's job fails with although railnet's own parse of them
// works: the guide's "^docker" (and "^ib") select lo first, because a '^' list replaces the
// automatic chain; a space in the list is trimmed by railnet but not by NCCL's bootstrap.
// Each is a PROBLEM with its fix (exit 1); the fixed settings pass.
TEST(ToolsNetns, DiagFlagsSettingsThatNcclsJobFailsWith) {
  RAILNET_REQUIRE_NETNS();
  NetNs a("diag"), peer("peer");
  ASSERT_TRUE(a.ok() && peer.ok());
  ASSERT_TRUE(NetNs::veth(a, "eth0", peer, "p0") && NetNs::veth(a, "ib0", peer, "p1"));
  ASSERT_TRUE(a.noLinkLocal("eth0") && a.noLinkLocal("ib0"));
  ASSERT_TRUE(a.addAddr("eth0", "198.18.3.1/24") && a.addAddr("ib0", "198.18.4.1/24"));
  for (const char* i : {"eth0", "ib0", "lo"}) ASSERT_TRUE(a.up(i));
  for (const char* i : {"p0", "p1"}) ASSERT_TRUE(peer.up(i));
  ASSERT_TRUE(a.waitRunning("ib0") && a.waitRunning("eth0"));
  TempDir d;
  std::string env = std::string(kClean) + "SYSFS_PATH=" + d.path() + " HOME=" + d.path() + " ";

  for (const char* spec : {"^docker", "^ib"}) {
    NetNsResult r = a.exec(env + "NCCL_SOCKET_IFNAME=" + spec + " " + buildTool("railnet-diag"));
    EXPECT_EQ(r.exitCode, 1) << spec << "\n" << r.out;
    EXPECT_TRUE(has(lineStarting(r.out, "  lo "), "<- selected [0]")) << r.out;
    EXPECT_TRUE(has(r.out, std::string("PROBLEM: NCCL_SOCKET_IFNAME=") + spec +
                               " selects lo (127.0.0.1, loopback) as device [0], which other hosts cannot reach: a "
                               "'^' list replaces NCCL's automatic chain, so lo is no longer left out"))
        << r.out;
    EXPECT_TRUE(has(r.out, std::string("Fix: exclude it too: NCCL_SOCKET_IFNAME=") + spec + ",lo, or name the NIC"))
        << r.out;
    r = a.exec(env + "NCCL_SOCKET_IFNAME=" + spec + ",lo " + buildTool("railnet-diag"));
    EXPECT_EQ(r.exitCode, 0) << spec << "\n" << r.out;
    EXPECT_FALSE(has(lineStarting(r.out, "  lo "), "selected")) << r.out;
  }

  for (const char* spec : {" eth0", "eth0 ", "=eth0, ib0"}) {
    NetNsResult r = a.exec(env + "NCCL_SOCKET_IFNAME='" + spec + "' " + buildTool("railnet-diag") + " --json");
    EXPECT_EQ(r.exitCode, 1) << spec << "\n" << r.out;
    EXPECT_EQ(jsonProblem(r.out), "") << r.out;
    EXPECT_TRUE(has(r.out, std::string("\"severity\":\"problem\",\"cause\":\"NCCL_SOCKET_IFNAME=\\\"") + spec +
                               "\\\" (environment) has a space: railnet trims it, but NCCL's own bootstrap reads the list "
                               "as it is"))
        << spec << "\n" << r.out;
  }
  NetNsResult r = a.exec(env + "NCCL_SOCKET_IFNAME=' eth0' " + buildTool("railnet-diag"));
  EXPECT_TRUE(has(r.out, "Fix: remove the spaces: NCCL_SOCKET_IFNAME=eth0\n")) << r.out;
  r = a.exec(env + "NCCL_SOCKET_IFNAME=eth0 " + buildTool("railnet-diag"));
  EXPECT_EQ(r.exitCode, 0) << r.out;
}

// Two namespaces joined by a veth pair, eth0 at 198.18.<net>.1 (a) and .2 (b).
bool vethPair(NetNs& a, NetNs& b, int net) {
  std::string pre = "198.18." + std::to_string(net) + ".";
  return a.ok() && b.ok() && NetNs::veth(a, "eth0", b, "eth0") && a.addAddr("eth0", pre + "1/24") &&
         b.addAddr("eth0", pre + "2/24") && a.up("eth0") && b.up("eth0") && a.up("lo") && b.up("lo") &&
         a.waitRunning("eth0") && b.waitRunning("eth0");
}

const char* kPerfEnv = "NCCL_SOCKET_IFNAME==eth0 RAILNET_TRANSPORT=socket ";
std::string perfCmd() { return buildTool("railnet-perf") + " --plugin " + buildLibDir() + "/libnccl-net-railnet.so "; }

// railnet-perf --server in a (its output in *srv), the client in b with clientArgs.
NetNsResult perfPair(NetNs& a, NetNs& b, int net, const std::string& serverArgs, const std::string& clientArgs,
                     std::string* srv, NetNsResult* server) {
  TempDir d;
  std::string env = std::string(kClean) + kPerfEnv;
  std::string serverOut = d.path() + "/server.out";
  std::string serverCmd =
      env + perfCmd() + "--server --port 18515 --timeout 30 " + serverArgs + " >" + serverOut + " 2>&1";
  NetNsChild child(a, [&](NetNsIo&) { return system(serverCmd.c_str()) == 0 ? 0 : 1; });
  NetNsResult c = b.exec(env + perfCmd() + "--client 198.18." + std::to_string(net) + ".1 --port 18515 --timeout 30 " +
                             clientArgs,
                         60000);
  *server = child.wait(30000);
  *srv = readFile(serverOut);
  return c;
}

TEST(ToolsNetns, PerfSweepBetweenTwoNamespaces) {
  RAILNET_REQUIRE_NETNS();
  NetNs a("srv"), b("cli");
  ASSERT_TRUE(vethPair(a, b, 6));
  std::string srv;
  NetNsResult s;
  NetNsResult c = perfPair(a, b, 6, "", "-a --min-size 16 --max-size 1M -n 10 --warmup 2", &srv, &s);
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

// The lines of out that contain what.
int countLines(const std::string& out, const std::string& what) {
  int n = 0;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) n += has(line, what);
  return n;
}

// One cause, one WARN: NCCL_SOCKET_IFNAME naming an interface this host lacks makes both
// transports fail their init (IB and Socket, RAILNET_TRANSPORT=auto on a host without RDMA):
// the interface WARN once, then the plugin's verdict; railnet-perf's own line in words, no
// source expression.
TEST(ToolsNetns, PerfInitFailureSaysItsCauseOnce) {
  RAILNET_REQUIRE_NETNS();
  NetNs a("srv"), b("cli");
  ASSERT_TRUE(vethPair(a, b, 10));
  TempDir d;
  std::string env = std::string(kClean) + "SYSFS_PATH=" + d.path() + " HOME=" + d.path() +
                    " NCCL_SOCKET_IFNAME=eth1 RAILNET_TRANSPORT=auto ";
  NetNsResult r = b.exec(env + perfCmd() + "--loopback -s 4K -n 10 --timeout 20", 30000);
  EXPECT_EQ(r.exitCode, 1) << r.describe();
  EXPECT_EQ(countLines(r.out, "NCCL WARN"), 2) << r.out;
  EXPECT_EQ(countLines(r.out, "NCCL_SOCKET_IFNAME=eth1 selects no interface that is up and running"), 1) << r.out;
  EXPECT_EQ(countLines(r.out, "No IP interface found"), 0) << r.out;
  EXPECT_EQ(countLines(r.out, "no usable network interface found"), 0) << r.out;
  EXPECT_TRUE(has(r.out, "railnet found no usable transport (tried RailIB, RailSocket; the WARN above says why)"))
      << r.out;
  EXPECT_TRUE(has(r.out, "railnet-perf: RailSocket: init failed: an internal error of the plugin (ncclInternalError)"))
      << r.out;
  EXPECT_FALSE(has(r.out, "failed with result") || has(r.out, "netInit(")) << r.out;
}

// A firewall that passes railnet-perf's handle exchange (port 18515) but drops the plugin's
// data connection: the plugin's connect gives up after its retry budget with its WARN
// (interface, attempts, the NCCL_SOCKET_IFNAME fix), which reaches the user because
// railnet-perf's default timeout is derived from that budget (--help states it: 110 s at
// NCCL's defaults); the failure is said in words. NCCL_DEBUG=INFO shows the plugin's INFO
// lines (the retries), as in NCCL.
TEST(ToolsNetns, PerfWaitsForThePluginsConnectVerdict) {
  RAILNET_REQUIRE_NETNS();
  std::string out;
  ASSERT_EQ(NetNs::hostSh(std::string(kClean) + "unset NCCL_SOCKET_RETRY_CNT NCCL_SOCKET_RETRY_SLEEP_MSEC; " +
                              perfCmd() + "--help", &out),
            0);
  EXPECT_TRUE(has(out, "(here and now: 110 s)")) << out;
  ASSERT_EQ(NetNs::hostSh(std::string(kClean) + "NCCL_SOCKET_RETRY_CNT=1000 " + perfCmd() + "--help", &out), 0);
  EXPECT_FALSE(has(out, "(here and now: 110 s)")) << out;

  NetNs a("srv"), b("cli");
  ASSERT_TRUE(vethPair(a, b, 11));
  ASSERT_TRUE(a.sh("nft add table inet rnt && nft 'add chain inet rnt in { type filter hook input priority 0; }' && "
                   "nft add rule inet rnt in iifname eth0 tcp dport != 18515 drop"));
  TempDir d;
  // a retry budget of 3.3 s (2 retries) keeps the run short; the default timeout follows it
  std::string env = std::string(kClean) + kPerfEnv + "NCCL_SOCKET_RETRY_CNT=2 ";
  std::string serverOut = d.path() + "/server.out";
  std::string serverCmd = env + perfCmd() + "--server --port 18515 --timeout 10 >" + serverOut + " 2>&1";
  NetNsChild child(a, [&](NetNsIo&) { return system(serverCmd.c_str()) == 0 ? 0 : 1; });
  NetNsResult c = b.exec(env + "NCCL_DEBUG=INFO " + perfCmd() + "--client 198.18.11.1 --port 18515 -s 4K -n 10", 60000);
  NetNsResult s = child.wait(40000);
  EXPECT_EQ(c.exitCode, 1) << c.describe();
  EXPECT_TRUE(has(c.out, "NCCL WARN") && has(c.out, "via interface eth0") &&
              has(c.out, "failed with Connection timed out after 3 attempts") && has(c.out, "NCCL_SOCKET_IFNAME="))
      << c.out;
  EXPECT_TRUE(has(c.out, "NCCL INFO") && has(c.out, "retrying (1/2)")) << c.out;
  EXPECT_TRUE(has(c.out, "railnet-perf: RailSocket: connect failed: the peer cannot be reached or failed "
                         "(ncclRemoteError); the plugin's WARN above says why"))
      << c.out;
  EXPECT_FALSE(has(c.out, "did not complete within")) << c.out;
  EXPECT_FALSE(has(c.out, "failed with result") || has(c.out, "netConnect(")) << c.out;
  a.sh("nft delete table inet rnt");
}

// --comms 3: three comm pairs over the one veth, messages round-robin; every --json row of
// the client carries the bytes it sent and what the receiver counted, the server's too.
TEST(ToolsNetns, PerfThreeCommPairsJson) {
  RAILNET_REQUIRE_NETNS();
  NetNs a("srv"), b("cli");
  ASSERT_TRUE(vethPair(a, b, 7));
  std::string srv;
  NetNsResult s;
  NetNsResult c =
      perfPair(a, b, 7, "--json", "--comms 3 -a --min-size 16 --max-size 1M -n 10 --warmup 2 --json", &srv, &s);
  ASSERT_TRUE(c.success()) << c.describe() << "\nserver:\n" << srv;
  EXPECT_TRUE(s.success()) << s.describe() << srv;
  EXPECT_TRUE(has(c.out, "\"net\":\"RailSocket\",\"abi\":12,\"dev\":0,\"device\":\"eth0\",\"recvs\":1,\"comms\":3,"
                         "\"memory\":\"host\",\"gpu\":-1"))
      << c.out;
  EXPECT_TRUE(has(srv, "\"role\":\"receiver\"") &&
              has(srv, "\"dev\":0,\"device\":\"eth0\",\"recvs\":1,\"comms\":3,\"memory\":\"host\""))
      << srv;
  EXPECT_EQ(jsonProblem(c.out), "") << c.out;
  EXPECT_EQ(jsonProblem(srv), "") << srv;
  EXPECT_EQ(pythonOnJson(c.out, "print(len(d[\"results\"]), d[\"device\"])"), "34 eth0\n") << c.out;
  std::vector<std::string> rows = jsonRows(c.out), received = jsonRows(srv);
  ASSERT_EQ(rows.size(), 2u * 17) << c.out;  // 16 B .. 1 MiB, bw and lat
  ASSERT_EQ(received.size(), rows.size()) << srv;
  for (size_t i = 0; i < rows.size(); i++) {
    const std::string& r = rows[i];
    long long size = 16LL << (i % 17);
    EXPECT_EQ(jsonStr(r, "test"), i < 17 ? "bw" : "lat") << r;
    EXPECT_EQ(jsonNum(r, "bytes"), size) << r;
    EXPECT_EQ(jsonNum(r, "iterations"), 10) << r;
    if (i < 17) {
      EXPECT_EQ(jsonNum(r, "bytes_sent"), size * 10) << r;  // the timed messages, as test() reported
    }
    EXPECT_EQ(jsonNum(r, "recv_messages"), 12) << r;                  // warmup + timed, over the 3 comms
    EXPECT_EQ(jsonNum(r, "recv_buffers"), 12) << r;
    EXPECT_EQ(jsonNum(r, "recv_bytes"), size * 12) << r;
    EXPECT_EQ(jsonStr(r, "recv_check"), "ok") << r;
    const std::string& v = received[i];
    EXPECT_EQ(jsonStr(v, "test"), jsonStr(r, "test")) << v;
    EXPECT_EQ(jsonNum(v, "bytes"), size) << v;
    EXPECT_EQ(jsonNum(v, "messages"), 12) << v;
    EXPECT_EQ(jsonNum(v, "bytes_received"), size * 12) << v;
    EXPECT_EQ(jsonStr(v, "check"), "ok") << v;
  }
}

// --recvs 4: the Socket transport's irecv takes one buffer (maxRecvs 1, as NCCL's): the
// client refuses at once, exit 2, naming the limit (the IB transport's multi-receive runs
// in the soft-RoCE tier). --recvs 1 states it in the settings.
TEST(ToolsNetns, PerfMultiReceiveNeedsMaxRecvs) {
  RAILNET_REQUIRE_NETNS();
  NetNs a("srv"), b("cli");
  ASSERT_TRUE(vethPair(a, b, 8));
  std::string env = std::string(kClean) + kPerfEnv;
  NetNsResult r = b.exec(env + perfCmd() + "--client 198.18.8.1 --recvs 4 -s 4K -n 10", 20000);
  EXPECT_EQ(r.exitCode, 2) << r.describe();
  EXPECT_TRUE(has(r.out, "railnet-perf: --recvs 4: RailSocket device 0 (eth0) takes at most 1 buffer(s) per irecv "
                         "(its maxRecvs)"))
      << r.out;
  r = b.exec(env + perfCmd() + "--client 198.18.8.1 --recvs 9", 20000);
  EXPECT_EQ(r.exitCode, 2) << r.describe();
  EXPECT_TRUE(has(r.out, "--recvs takes 1 ... 8, not '9'")) << r.out;
  std::string srv;
  NetNsResult s;
  NetNsResult c = perfPair(a, b, 8, "", "--recvs 1 -s 4K -n 10 --warmup 2 --bw", &srv, &s);
  ASSERT_TRUE(c.success()) << c.describe() << "\nserver:\n" << srv;
  EXPECT_TRUE(has(c.out, " Settings: 1 buffer(s) per irecv, 1 comm pair(s), host memory")) << c.out;
  EXPECT_TRUE(has(srv, " Settings (from the client): 1 buffer(s) per irecv, 1 comm pair(s), host memory")) << srv;
  EXPECT_TRUE(has(srv, " receiver: 4096       12           49152            ok (bw)")) << srv;
}

// --use-cuda on a host without an NVIDIA driver or GPU: exit 2 at once with one line that
// says what is missing (a host with a GPU still exits 2 here: the Socket transport takes
// host memory only). No server is needed: the check comes before the handle exchange.
TEST(ToolsNetns, PerfUseCudaSaysWhatIsMissing) {
  RAILNET_REQUIRE_NETNS();
  NetNs b("cli");
  ASSERT_TRUE(b.ok() && b.up("lo"));
  std::string env = std::string(kClean) + "RAILNET_TRANSPORT=socket NCCL_SOCKET_IFNAME=lo ";
  for (const char* opt : {"--use-cuda", "--use-cuda=3"}) {
    for (const char* role : {"--client 127.0.0.1 --port 18517", "--loopback"}) {
      double t0 = nowMs();
      NetNsResult r = b.exec(env + perfCmd() + role + " " + opt + " -s 4K -n 10 --timeout 20", 20000);
      EXPECT_EQ(r.exitCode, 2) << opt << " " << role << ": " << r.describe();
      EXPECT_LT(nowMs() - t0, 5000) << "it waited for a peer";
      int lines = 0;
      std::string err;
      std::istringstream in(r.out);
      std::string line;
      while (std::getline(in, line))
        if (line.rfind("railnet-perf: ", 0) == 0) {
          lines++;
          err = line;
        }
      EXPECT_EQ(lines, 1) << r.out;
      EXPECT_EQ(err.rfind("railnet-perf: --use-cuda", 0), 0u) << r.out;
      bool noDriver = access("/dev/nvidiactl", F_OK) != 0;
      if (noDriver) {
        EXPECT_TRUE(has(err, "libcuda.so.1 not found (no NVIDIA driver on this host)") || has(err, "cuInit") ||
                    has(err, "only 0 GPUs"))
            << err;
      } else {
        EXPECT_TRUE(has(err, "cuDeviceGet(GPU 3)") || has(err, "NCCL_PTR_CUDA") || has(err, "cuInit")) << err;
      }
    }
  }
  NetNsResult r = b.exec(env + perfCmd() + "--loopback --use-cuda=x", 20000);
  EXPECT_EQ(r.exitCode, 2) << r.describe();
  EXPECT_TRUE(has(r.out, "--use-cuda=GPU takes a GPU index, not 'x'")) << r.out;
}

// The ethtool reader on a real veth (railnetEthtoolStats through SIOCETHTOOL): veth's own
// statistics, none of them a congestion counter; railnet-diag on a RoCE port whose netdev is
// that veth reads them and flags nothing, also under --watch while traffic crosses the veth.
TEST(ToolsNetns, EthtoolStatisticsOfAVeth) {
  RAILNET_REQUIRE_NETNS();
  NetNs a("eth"), b("peer");
  ASSERT_TRUE(vethPair(a, b, 9));
  NetNsResult r = a.run([](NetNsIo& io) {
    railnetStats st;
    int err = railnetEthtoolStats("eth0", &st);
    io.say("err " + std::to_string(err) + " count " + std::to_string(st.count));
    int classified = 0;
    for (int i = 0; i < st.count; i++) {
      io.say(std::string("stat ") + st.stats[i].name);
      classified += railnetCounterClassify(st.stats[i].name).kind != RAILNET_CTR_OTHER;
    }
    io.say("classified " + std::to_string(classified));
    railnetStatsFree(&st);
    return 0;
  });
  ASSERT_TRUE(r.success()) << r.describe();
  EXPECT_TRUE(has(r.out, "err 0 count ")) << r.out;
  EXPECT_TRUE(has(r.out, "stat peer_ifindex\n")) << r.out;
  EXPECT_TRUE(has(r.out, "classified 0\n")) << r.out;

  TempDir d;
  std::string port = "class/infiniband/mlx5_0/ports/1/";
  d.write(port + "state", "4: ACTIVE\n");
  d.write(port + "phys_state", "5: LinkUp\n");
  d.write(port + "link_layer", "Ethernet\n");
  d.write(port + "rate", "100 Gb/sec (4X EDR)\n");
  d.write(port + "gids/0", "0000:0000:0000:0000:0000:ffff:c612:0901\n");
  d.write(port + "gid_attrs/types/0", "RoCE v2\n");
  d.write(port + "gid_attrs/ndevs/0", "eth0\n");
  d.write(port + "hw_counters/np_ecn_marked_roce_packets", "0\n");
  d.write(port + "hw_counters/np_cnp_sent", "0\n");
  std::string env = std::string(kClean) + "SYSFS_PATH=" + d.path() + " HOME=" + d.path() + " NCCL_SOCKET_IFNAME==eth0 ";
  r = a.exec(env + buildTool("railnet-diag"));
  EXPECT_TRUE(has(r.out, "  mlx5_0:1 (netdev eth0)\n")) << r.out;
  EXPECT_TRUE(has(r.out, "    ethtool -S eth0: ") && has(r.out, " statistics, 0 of them about pause, discards or congestion"))
      << r.out;
  EXPECT_TRUE(linesWith(r.out, "mlx5_0:1").size() >= 1) << r.out;
  for (const std::string& l : linesWith(r.out, "ARNING")) EXPECT_FALSE(has(l, "mlx5_0:1")) << l;
  for (const std::string& l : linesWith(r.out, "PROBLEM")) EXPECT_FALSE(has(l, "mlx5_0:1")) << l;
  r = a.exec(env + buildTool("railnet-diag") + " --json");
  EXPECT_EQ(jsonProblem(r.out), "") << r.out;
  EXPECT_EQ(pythonOnJson(r.out, "p = d['congestion']['ports'][0]\n"
                                "print(p['netdev'], p['ethtool'], p['ethtool_error'], p['ethtool_statistics'] > 0)"),
            "eth0 {} None True\n")
      << r.out;

  // --watch while UDP datagrams cross the veth: nothing is a congestion finding.
  r = a.exec("python3 -c 'import socket, time\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
             "for i in range(30):\n  s.sendto(bytes(1000), (\"198.18.9.2\", 9)); time.sleep(0.05)' & " +
             env + buildTool("railnet-diag") + " --watch 2; rc=$?; wait; exit $rc");
  EXPECT_EQ(r.exitCode, 0) << r.describe();
  EXPECT_TRUE(has(r.out, "and the congestion counters of 1 RoCE port(s)")) << r.out;
  EXPECT_TRUE(has(r.out, "  none: no congestion counter grew")) << r.out;
  EXPECT_TRUE(has(r.out, "0 problem(s), 0 warning(s)")) << r.out;
}

}  // namespace
