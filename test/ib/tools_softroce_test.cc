// railnet-diag and railnet-perf against soft-RoCE, run as a user runs them on a RoCE host
// (the tier's VM: rxe0/rxe1 on a veth pair, 198.18.0.1/.2). Skips without two RDMA devices.
//  - railnet-diag (text and --json) lists both devices as ACTIVE Ethernet ports on their
//    netdevs, prints their GID tables as sysfs has them, the chosen index the tier expects
//    (SOFTROCE_GID_INDEXES: the RoCE v2 IPv4 entry), the error counters rxe exposes and, in
//    the congestion section, the ethtool statistics of each device's veth (none flagged);
//  - railnet-perf through the plugin (RAILNET_TRANSPORT=ib) between a server on one device
//    and a client on the other: a sweep to 1 MiB, and multi-receive over several comm pairs
//    (--recvs/--comms), with the bytes test() reported on both sides checked per size.
// Volumes stay small: the VM is emulated (TCG).
#include "test_util.h"
#include "perf_json.h"
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
#include "core.h"
#include "ibvwrap.h"
#include "../../src/transport/net_ib/init.h"
#include "testing.h"
}
#include "ib_test_env.h"
#include "plugin_loader.h"

namespace {

std::string pluginLib() { return buildLibDir() + "/libnccl-net-railnet.so"; }

std::string firstLine(const std::string& path) {
  std::string s = readFile(path);
  return s.substr(0, s.find('\n'));
}

// The error counters railnet-diag reads, where rdma_rxe keeps them (its port has no counters/).
const char* kRxeCounters[] = {"link_downed",        "rcvd_seq_err",           "completer_retry_err",
                              "retry_exceeded_err", "retry_rnr_exceeded_err", "send_err"};

class ToolsSoftRoce : public SoftRoceHostsTest {
 protected:
  std::string sysPort(size_t i) const { return "/sys/class/infiniband/" + devs[i] + "/ports/1/"; }

  // railnet-perf --server on device index srvDev, the client on cliDev, through a handle file.
  // srvEnv / cliEnv: "VAR=value ..." for that end's process only; srvArgs: more server options
  ToolRun perf(int srvDev, int cliDev, const std::string& clientArgs, std::string* server,
               const std::string& srvEnv = "", const std::string& cliEnv = "", const std::string& srvArgs = "") {
    TempDir d;
    std::string tool = "RAILNET_TRANSPORT=ib timeout 150 " + buildTool("railnet-perf") + " --plugin " + pluginLib() +
                       " --handle-file " + d.path() + "/handle --timeout 120 ";
    ToolRun r = shellRun(srvEnv + " " + tool + "--server --dev " + std::to_string(srvDev) + " " + srvArgs + " >" + d.path() +
                         "/server.out 2>&1 & " + cliEnv + " " + tool + "--client '' --dev " + std::to_string(cliDev) +
                         " " + clientArgs + "; rc=$?; wait $! || rc=$((rc + 100)); exit $rc");
    *server = readFile(d.path() + "/server.out");
    return r;
  }
};

TEST_F(ToolsSoftRoce, DiagListsDevicesGidTablesAndCounters) {
  // What sysfs says, read before railnet-diag runs (counters can only grow meanwhile).
  std::vector<std::vector<long long>> before(devs.size());
  for (size_t i = 0; i < devs.size(); i++)
    for (const char* c : kRxeCounters) {
      std::string v = firstLine(sysPort(i) + "hw_counters/" + c);
      before[i].push_back(v.empty() ? -1 : atoll(v.c_str()));
    }
  ToolRun r = shellRun("timeout 60 " + buildTool("railnet-diag"));
  // 0, or 1 for a problem of the host (the VM's locked-memory limit is 8 MiB): never 2 or a crash.
  EXPECT_TRUE(r.status == 0 || r.status == 1) << r.out;
  for (size_t i = 0; i < devs.size(); i++) {
    SCOPED_TRACE(devs[i]);
    std::string port = lineStarting(r.out, "  " + devs[i] + " ");
    std::istringstream pf(port);
    std::string name, num, state, phys, link;
    pf >> name >> num >> state >> phys >> link;
    EXPECT_EQ(num + " " + state + " " + phys + " " + link, "1 ACTIVE LinkUp Ethernet") << r.out;
    EXPECT_TRUE(has(port, " " + netdevs[i] + " ") && port.substr(port.size() - 3) == "yes") << port;

    // The GID table: every entry sysfs has among the first 8 (rxe fills 0 and 1), the chosen one marked.
    size_t table = r.out.find("  " + devs[i] + " port 1 (Ethernet)\n");
    ASSERT_NE(table, std::string::npos) << r.out;
    std::string tbl = r.out.substr(table, r.out.find("chosen: ", table) - table);
    int valid = 0;
    for (int k = 0; k < 8; k++) {
      std::string gid = firstLine(sysPort(i) + "gids/" + std::to_string(k));
      if (gid.empty() || gid == "0000:0000:0000:0000:0000:0000:0000:0000") continue;
      valid++;
      std::string row = lineStarting(tbl, "    " + std::to_string(k) + " ");
      EXPECT_TRUE(has(row, gid) && has(row, "RoCE v2") && has(row, netdevs[i])) << k << " " << gid << "\n" << tbl;
      EXPECT_EQ(has(row, "<- chosen"), std::to_string(k) == gidIdx[i]) << row;
      if (std::to_string(k) == gidIdx[i]) {
        EXPECT_TRUE(has(row, addrs[i])) << row;
      }
    }
    EXPECT_GE(valid, 2) << tbl;  // the link-local GID and the IPv4 one
    EXPECT_EQ(lineStarting(r.out.substr(table), "    chosen: ").rfind("    chosen: " + gidIdx[i] + " -- ", 0), 0u)
        << r.out;

    // The counters line shows every error counter rxe exposes, with at least sysfs's value.
    std::string ctr = lineStarting(r.out, "  " + devs[i] + ":1");
    int exposed = 0;
    for (size_t c = 0; c < before[i].size(); c++) {
      if (before[i][c] < 0) continue;
      exposed++;
      std::string key = std::string(" ") + kRxeCounters[c] + "=";
      size_t p = ctr.find(key);
      ASSERT_NE(p, std::string::npos) << key << " missing: " << ctr;
      EXPECT_GE(atoll(ctr.c_str() + p + key.size()), before[i][c]) << ctr;
    }
    EXPECT_GT(exposed, 0) << "rxe exposes none of the error counters railnet-diag reads";
    EXPECT_FALSE(has(ctr, "no error counters exposed")) << ctr;

    // The congestion section: rxe has no congestion counters; its veth's ethtool statistics are
    // read through the ioctl and none is about pause, discards or congestion.
    EXPECT_TRUE(has(r.out, "  " + devs[i] + ":1 (netdev " + netdevs[i] + ")\n")) << r.out;
    EXPECT_TRUE(has(r.out, "    ethtool -S " + netdevs[i] + ": ") &&
                has(r.out, " statistics, 0 of them about pause, discards or congestion"))
        << r.out;
  }

  ToolRun j = shellRun("timeout 60 " + buildTool("railnet-diag") + " --json");
  EXPECT_TRUE(j.status == 0 || j.status == 1) << j.out;
  ASSERT_EQ(j.out.rfind("{\"tool\":\"railnet-diag\"", 0), 0u) << j.out;
  for (size_t i = 0; i < devs.size(); i++) {
    SCOPED_TRACE(devs[i]);
    std::string dev = "{\"device\":\"" + devs[i] + "\",\"port\":1,";
    EXPECT_TRUE(has(j.out, dev + "\"state\":\"ACTIVE\",\"phys_state\":\"LinkUp\",\"link_layer\":\"Ethernet\""))
        << j.out;
    size_t g = j.out.find(dev + "\"gids\":[");
    ASSERT_NE(g, std::string::npos) << j.out;
    EXPECT_EQ(std::to_string(jsonNum(j.out, "chosen", g)), gidIdx[i]) << j.out.substr(g, 600);
    std::string chosenGid = firstLine(sysPort(i) + "gids/" + gidIdx[i]);
    EXPECT_TRUE(has(j.out, "{\"index\":" + gidIdx[i] + ",\"gid\":\"" + chosenGid +
                               "\",\"type\":\"RoCE v2\",\"netdev\":\"" + netdevs[i] + "\",\"ipv4\":\"" + addrs[i] + "\"}"))
        << j.out.substr(g, 600);
    size_t c = j.out.find(dev, j.out.find("\"counters\":"));
    ASSERT_NE(c, std::string::npos) << j.out;
    std::string counters = j.out.substr(c, j.out.find('}', c) - c);
    for (size_t k = 0; k < before[i].size(); k++) {
      if (before[i][k] >= 0) {
        EXPECT_GE(jsonNum(counters, kRxeCounters[k]), before[i][k]) << counters;
      }
    }
  }
}

// Device indexes of the plugin follow discovery ("NET/IB : Using [0]rxe0:1/RoCE [1]rxe1:1/RoCE"):
// the server uses device 0, the client device 1, so the data crosses the veth pair.
TEST_F(ToolsSoftRoce, PerfSweepBetweenTheTwoDevices) {
  std::string srv;
  ToolRun c = perf(0, 1, "-a --max-size 1M -n 20 --warmup 2 --json", &srv);
  ASSERT_EQ(c.status, 0) << c.out << "\nserver:\n" << srv;
  std::string srvDev = lineStarting(srv, " Device: [0] ");
  ASSERT_FALSE(srvDev.empty()) << srv;
  std::string srvName = srvDev.substr(13, srvDev.find(',') - 13);
  std::string cliName = jsonStr(c.out, "device");
  EXPECT_TRUE(has(c.out, "\"net\":\"RailIB\",\"abi\":12,\"dev\":1,")) << c.out;
  EXPECT_NE(srvName, cliName);
  for (const std::string& n : {srvName, cliName})
    EXPECT_TRUE(n == devs[0] || n == devs[1]) << n << " is not one of " << devs[0] << " " << devs[1];
  std::vector<std::string> rows = jsonRows(c.out);
  ASSERT_EQ(rows.size(), 2u * 20) << c.out;  // 2 B .. 1 MiB, bw and lat
  for (size_t i = 0; i < rows.size(); i++) {
    const std::string& r = rows[i];
    long long size = 2LL << (i % 20);
    EXPECT_EQ(jsonStr(r, "test"), i < 20 ? "bw" : "lat") << r;
    EXPECT_EQ(jsonNum(r, "bytes"), size) << r;
    if (i < 20) {
      EXPECT_EQ(jsonNum(r, "bytes_sent"), size * 20) << r;
      EXPECT_GT(jsonNum(r, "bw_avg_MBps"), -1) << r;
    }
    EXPECT_EQ(jsonNum(r, "recv_messages"), 22) << r;
    EXPECT_EQ(jsonNum(r, "recv_bytes"), size * 22) << r;
    EXPECT_EQ(jsonStr(r, "recv_check"), "ok") << r;
  }
  // The server's own table: the same counts, and the contents checked.
  for (const char* t : {"(bw)", "(lat)"})
    for (long long size = 2; size <= (1 << 20); size *= 2) {
      std::ostringstream want;
      want << " receiver: " << size;
      std::string line;
      std::istringstream in(srv);
      bool found = false;
      while (std::getline(in, line)) {
        if (line.rfind(want.str() + " ", 0) != 0 || !has(line, t)) continue;
        std::istringstream f(line.substr(want.str().size()));
        long long n = 0, bytes = 0;
        std::string check;
        f >> n >> bytes >> check;
        EXPECT_TRUE(n == 22 && bytes == size * 22 && check == "ok") << line;
        found = true;
      }
      EXPECT_TRUE(found) << size << " " << t << "\n" << srv;
    }
}

// Eager messages asked by one end only (RAILNET_IB_EAGER_SIZE in one process, as when ranks
// run with different settings): that end's send comm says the receiver did not agree, its
// receive comm that the sender does not ask, both directions keep the clear-to-send protocol,
// nothing hangs and every buffer arrives whole (the server checks each; 64 KiB irecvs, 8 B ..
// 64 KiB messages, bandwidth and ping-pong); then both ends set it: eager agreed both ways.
TEST_F(ToolsSoftRoce, PerfEagerAtOneEndOnly) {
  const std::string eager = "RAILNET_IB_EAGER_SIZE=1024 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET";
  const std::string quiet = "RAILNET_IB_EAGER_SIZE=0 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET";
  for (int c = 0; c < 3; c++) {  // 0: the client asks, 1: the server asks, 2: both
    SCOPED_TRACE(c == 0 ? "client only" : c == 1 ? "server only" : "both");
    std::string srv;
    ToolRun r = perf(0, 1, "-v -a --min-size 8 --max-size 64K -n 20 --warmup 2 --recv-size 64K", &srv,
                     c >= 1 ? eager : quiet, c != 1 ? eager : quiet, "-v");
    ASSERT_EQ(r.status, 0) << r.out << "\nserver:\n" << srv;
    int rows = 0;
    std::istringstream in(srv);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string tag, check;
      long long size = 0, n = 0, bytes = 0;
      if (!(f >> tag >> size >> n >> bytes >> check) || tag != "receiver:") continue;
      rows++;
      EXPECT_EQ(bytes, size * 22) << line;
      EXPECT_EQ(check, "ok") << line;
    }
    EXPECT_EQ(rows, 2 * 14) << srv;  // 8 B .. 64 KiB, bw and lat
    const std::string& asker = c == 1 ? srv : r.out;
    const std::string& other = c == 1 ? r.out : srv;
    if (c < 2) {
      EXPECT_TRUE(has(asker, "no eager messages (the receiver did not agree")) << asker;
      EXPECT_TRUE(has(asker, "no eager messages: the sender has them off (RAILNET_IB_EAGER_SIZE=0 there")) << asker;
      EXPECT_FALSE(has(other, "go eagerly")) << other;
    } else {
      for (const std::string* o : {&r.out, &srv}) {
        EXPECT_TRUE(has(*o, "messages up to 1024 bytes go eagerly; larger ones ask for their clear-to-send")) << *o;
        EXPECT_TRUE(has(*o, "messages up to 1024 bytes come eagerly into a ring of 16 slots; no clear-to-send while"))
            << *o;
      }
    }
  }
}

// NCCL's multi-receive (one irecv of N buffers, tags 0..N-1) over several comm pairs.
TEST_F(ToolsSoftRoce, PerfMultiReceiveOverCommPairs) {
  std::string srv;
  ToolRun c = perf(0, 1, "--recvs 2 --comms 2 -a --min-size 4K --max-size 256K -n 10 --warmup 2", &srv);
  ASSERT_EQ(c.status, 0) << c.out << "\nserver:\n" << srv;
  EXPECT_TRUE(has(c.out, " Settings: 2 buffer(s) per irecv, 2 comm pair(s), host memory")) << c.out;
  EXPECT_TRUE(has(srv, " Settings (from the client): 2 buffer(s) per irecv, 2 comm pair(s), host memory")) << srv;
  int rows = 0;
  std::istringstream in(srv);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream f(line);
    std::string tag, check, test;
    long long size = 0, n = 0, bytes = 0;
    if (!(f >> tag >> size >> n >> bytes >> check >> test) || tag != "receiver:") continue;
    rows++;
    EXPECT_EQ(n, 12) << line;
    EXPECT_EQ(bytes, size * 2 * 12) << line;  // both buffers of every message
    EXPECT_EQ(check, "ok") << line;
  }
  EXPECT_EQ(rows, 2 * 7) << srv;  // 4 KiB .. 256 KiB, bw and lat

  // NCCL's receive pattern for small messages: buffers of 64 KiB, messages of 8 bytes and
  // 4 KiB (--recv-size), the sizes test() reports are the messages'.
  c = perf(0, 1, "--recvs 2 -a --min-size 8 --max-size 4K -n 10 --warmup 2 --recv-size 64K --json", &srv);
  ASSERT_EQ(c.status, 0) << c.out << "\nserver:\n" << srv;
  EXPECT_TRUE(has(c.out, "\"recv_size\":65536")) << c.out;
  EXPECT_TRUE(has(srv, " Settings (from the client): 2 buffer(s) of 65536 bytes (at least) per irecv")) << srv;
  for (const std::string& row : jsonRows(c.out)) {
    long long size = jsonNum(row, "bytes");
    EXPECT_EQ(jsonNum(row, "recv_bytes"), size * 2 * 12) << row;
    EXPECT_EQ(jsonStr(row, "recv_check"), "ok") << row;
  }
  EXPECT_EQ(jsonRows(c.out).size(), 2u * 10) << c.out;  // 8 B .. 4 KiB, bw and lat

  // ... with eager messages asked at both ends (maxRecvs stays 8): the first multi-receive
  // closes them on each comm, every buffer arrives whole.
  const std::string eager = "RAILNET_IB_EAGER_SIZE=1024 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET";
  c = perf(0, 1, "-v --recvs 2 -a --min-size 8 --max-size 4K -n 10 --warmup 2 --recv-size 64K --json", &srv, eager,
           eager, "-v");
  ASSERT_EQ(c.status, 0) << c.out << "\nserver:\n" << srv;
  for (const std::string& row : jsonRows(c.out)) {
    long long size = jsonNum(row, "bytes");
    EXPECT_EQ(jsonNum(row, "recv_bytes"), size * 2 * 12) << row;
    EXPECT_EQ(jsonStr(row, "recv_check"), "ok") << row;
  }
  EXPECT_EQ(jsonRows(c.out).size(), 2u * 10) << c.out;
  EXPECT_TRUE(has(c.out + srv, "a multi-receive: asking the sender to end its eager messages")) << c.out << srv;
  EXPECT_TRUE(has(c.out + srv, "the receiver posted a multi-receive: no eager messages from fifo position"))
      << c.out << srv;

  // The largest multi-receive, 8 buffers, over 4 pairs, through the oldest ABI (v8: int sizes).
  c = perf(0, 1, "--abi 8 --recvs 8 --comms 4 -s 64K -n 10 --warmup 2 --json", &srv);
  ASSERT_EQ(c.status, 0) << c.out << "\nserver:\n" << srv;
  EXPECT_TRUE(has(c.out, "\"abi\":8,\"dev\":1,")) << c.out;
  EXPECT_TRUE(has(c.out, "\"recvs\":8,\"comms\":4,\"memory\":\"host\"")) << c.out;
  std::vector<std::string> r = jsonRows(c.out);
  ASSERT_EQ(r.size(), 2u) << c.out;
  EXPECT_EQ(jsonNum(r[0], "bytes_sent"), 65536LL * 8 * 10) << r[0];
  for (const std::string& row : r) {
    EXPECT_EQ(jsonNum(row, "recv_messages"), 12) << row;
    EXPECT_EQ(jsonNum(row, "recv_buffers"), 8 * 12) << row;
    EXPECT_EQ(jsonNum(row, "recv_bytes"), 65536LL * 8 * 12) << row;
    EXPECT_EQ(jsonStr(row, "recv_check"), "ok") << row;
  }
}

}  // namespace
