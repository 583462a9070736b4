// railnet-diag --serve / --pair against soft-RoCE, as two nodes would run it: the server
// owns rxe0 (NCCL_IB_HCA==rxe0, NCCL_SOCKET_IFNAME==veth0), the client rxe1 on veth1 (the
// tier's VM, test/softroce/guest.sh). Skips without two RDMA devices.
//  - the automatic GID works on both sides and is recommended (no NCCL_IB_GID_INDEX), exit 0;
//  - NCCL_IB_GID_INDEX naming an empty slot: that path fails at QP setup with the GID hint,
//    another index works and is named in the verdict, exit 1;
//  - RoCE v2 dropped by nftables (UDP 4791) while TCP passes: RDMA fails at the write with
//    the firewall/ACL hint, TCP between the chosen interfaces works, exit 1;
//  - --bw gives a figure per working path through railnet's IB and Socket transports;
//  - --cluster of two ranks, one per device: RDMA checked and measured, empty verdict.
// Each test prints the report (railnet-diag(1) quotes them).
#include "test_util.h"
#include "json_check.h"
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

extern "C" {
#include "core.h"
#include "ibvwrap.h"
#include "../../src/transport/net_ib/init.h"
}
#include "ib_test_env.h"
#include "plugin_loader.h"

namespace {

std::string diag() { return buildTool("railnet-diag"); }
ToolRun sh(const std::string& cmd) { return shellRun(cmd); }

class PairSoftRoce : public SoftRoceHostsTest {
 protected:
  // --serve on devs[0] in the background, --pair from devs[1]; the server's log in *srv.
  ToolRun pair(const std::string& clientEnv, const std::string& clientArgs, std::string* srv) {
    TempDir d;
    std::string port = "18600";
    std::string serve = "NCCL_IB_HCA==" + devs[0] + " NCCL_SOCKET_IFNAME==" + netdevs[0] + " timeout 170 " + diag() +
                        " --serve --port " + port + " --timeout 150 >" + d.path() + "/srv 2>&1 & ";
    std::string wait = "for i in $(seq 100); do ss -ltn | grep -q ':" + port + " ' && break; sleep 0.2; done; ";
    std::string client = "NCCL_IB_HCA==" + devs[1] + " NCCL_SOCKET_IFNAME==" + netdevs[1] + " " + clientEnv +
                         " timeout 170 " + diag() + " --pair " + addrs[0] + ":" + port + " " + clientArgs +
                         " 2>/dev/null; rc=$?; wait; exit $rc";
    ToolRun r = sh(serve + wait + client);
    ToolRun s = sh("cat " + d.path() + "/srv");
    *srv = s.out;
    return r;
  }
  std::string chosenRow(const std::string& out) const {
    return lineWith(out, devs[1] + ":1 gid " + gidIdx[1] + " v2 " + addrs[1] + " *", devs[0] + ":1 gid " + gidIdx[0]);
  }
};

TEST_F(PairSoftRoce, AutomaticGidWorksAndIsRecommended) {
  std::string srv;
  ToolRun r = pair("", "--bw", &srv);
  EXPECT_EQ(r.status, 0) << r.out << "\nserver:\n" << srv;
  printf("%s", r.out.c_str());  // the real run railnet-diag(1) quotes
  EXPECT_TRUE(has(srv, "session with " + addrs[1])) << srv;
  EXPECT_TRUE(has(r.out, "device 0: " + netdevs[1] + " here <-> " + netdevs[0] + " on the peer: works")) << r.out;
  std::string row = chosenRow(r.out);
  EXPECT_TRUE(has(row, " ok (")) << r.out;
  EXPECT_TRUE(has(r.out, "rail: " + devs[1] + ":1 here reaches " + devs[0] + ":1")) << r.out;
  EXPECT_TRUE(has(r.out, "NCCL_IB_HCA==" + devs[1] + ":1")) << r.out;
  EXPECT_TRUE(has(r.out, "NCCL_IB_HCA==" + devs[0] + ":1")) << r.out;
  EXPECT_FALSE(has(r.out, "NCCL_IB_GID_INDEX=")) << r.out;
  EXPECT_TRUE(has(r.out, "the chosen paths: TCP works, RDMA works")) << r.out;
  // --bw: a figure through railnet's IB transport between the two ports, and through Socket
  EXPECT_TRUE(has(lineWith(r.out, "ib      " + devs[1] + ":1", "-> " + devs[0] + ":1"), " MB/s"))
      << r.out << "\nserver:\n" << srv;
  EXPECT_TRUE(has(lineWith(r.out, "socket  " + netdevs[1], "-> " + netdevs[0]), " MB/s")) << r.out << "\nserver:\n"
                                                                                          << srv;
  // --json: every RDMA probe of the chosen path (the small and the 1 MiB write + read from
  // here, the peer's own), read with a real JSON parser
  ToolRun j = pair("", "--json", &srv);
  EXPECT_EQ(j.status, 0) << j.out << "\nserver:\n" << srv;
  std::string py = pythonOnJson(j.out,
                                "ps = [p for r in d['pair_rdma']['paths'] if r['chosen'] for p in r['probes']]\n"
                                "print(sorted((p['direction'], p['bytes'], p['ok']) for p in ps))");
  EXPECT_TRUE(has(py, "[('here_to_peer', 4096, True), ('here_to_peer', 1048576, True), ('peer_to_here', 1048576, True)]"))
      << py << "\n" << j.out;
}

TEST_F(PairSoftRoce, EmptyGidIndexFailsWithTheGidHint) {
  std::string srv;
  ToolRun r = pair("NCCL_IB_GID_INDEX=7", "", &srv);
  EXPECT_EQ(r.status, 1) << r.out << "\nserver:\n" << srv;
  printf("%s", r.out.c_str());
  std::string row = lineWith(r.out, devs[1] + ":1 gid 7 empty *forced", "FAIL QP to RTR");
  EXPECT_FALSE(row.empty()) << r.out;
  EXPECT_TRUE(has(row, "No data available") || has(row, "Invalid argument")) << row;
  EXPECT_TRUE(has(lineAfter(r.out, devs[1] + ":1 gid 7 empty", "FAIL"), "hint: GID: the GID index names an empty"))
      << r.out;
  EXPECT_TRUE(has(r.out, "PROBLEM: RDMA from " + devs[1] + ":1 here (GID index 7, the one railnet uses, forced by "
                         "NCCL_IB_GID_INDEX) reaches no port of the peer"))
      << r.out;
  // the automatic index (the tier's RoCE v2 IPv4 entry) works, and the verdict names it
  EXPECT_TRUE(has(r.out, "NCCL_IB_GID_INDEX=" + gidIdx[1])) << r.out;
  EXPECT_TRUE(has(r.out, "the chosen paths: TCP works, RDMA FAILS")) << r.out;
}

TEST_F(PairSoftRoce, RoceDroppedByFirewallWhileTcpPasses) {
  ToolRun nft = sh("nft add table inet rnt_pair && nft 'add chain inet rnt_pair in { type filter hook input priority 0; }' "
               "&& nft add rule inet rnt_pair in udp dport 4791 drop");
  ASSERT_EQ(nft.status, 0) << "nftables in the VM (nf_tables module): " << nft.out;
  std::string srv;
  ToolRun r = pair("", "", &srv);
  ToolRun counters = sh("nft list table inet rnt_pair; nft delete table inet rnt_pair");
  printf("%s", r.out.c_str());
  EXPECT_EQ(r.status, 1) << r.out << "\nserver:\n" << srv;
  EXPECT_TRUE(has(r.out, "device 0: " + netdevs[1] + " here <-> " + netdevs[0] + " on the peer: works")) << r.out;
  std::string row = chosenRow(r.out);
  EXPECT_TRUE(has(row, "FAIL RDMA write here -> peer")) << r.out;
  EXPECT_TRUE(has(lineAfter(r.out, devs[1] + ":1 gid " + gidIdx[1] + " v2", "FAIL"), "hint: firewall/ACL")) << r.out;
  EXPECT_TRUE(has(r.out, "; TCP between the hosts works. Fix: firewall/ACL")) << r.out;
  EXPECT_TRUE(has(r.out, "rail: " + devs[1] + ":1 here reaches no port of the peer")) << r.out;
  EXPECT_TRUE(has(r.out, "the chosen paths: TCP works, RDMA FAILS")) << r.out;
  EXPECT_EQ(counters.status, 0) << counters.out;
}

// railnet-diag --cluster of two ranks, one per rxe device (as two nodes): the link is checked
// through RDMA on the GIDs railnet uses and measured through railnet's IB transport; both
// ranks exit 0 with an empty verdict.
TEST_F(PairSoftRoce, ClusterOfTwoChecksRdmaBetweenTheDevices) {
  TempDir d;
  std::string common = " timeout 170 " + diag() + " --cluster --size 2 --rendezvous " + addrs[0] + ":18700 --timeout 60 ";
  std::string r1 = "NCCL_IB_HCA==" + devs[1] + " NCCL_SOCKET_IFNAME==" + netdevs[1] + common + "--rank 1 >" + d.path() +
                   "/r1 2>&1 & ";
  std::string r0 = "NCCL_IB_HCA==" + devs[0] + " NCCL_SOCKET_IFNAME==" + netdevs[0] + common + "--rank 0 --json 2>" +
                   d.path() + "/e0; rc=$?; wait $!; echo rank1=$?; exit $rc";
  ToolRun r = sh(r1 + r0);
  std::string e0 = sh("cat " + d.path() + "/e0 " + d.path() + "/r1").out;
  EXPECT_EQ(r.status, 0) << r.out << e0;
  EXPECT_TRUE(has(r.out, "rank1=0")) << r.out << e0;
  EXPECT_TRUE(has(r.out, "\"path\":\"ib " + devs[0] + ":1 <-> " + devs[1] + ":1\",\"net\":\"ib\",\"a_dev\":\"" +
                             devs[0] + ":1\",\"b_dev\":\"" + devs[1] + ":1\",\"result\":\"ok\""))
      << r.out << e0;
  // both directions measured through railnet's IB transport
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("\"a_to_b_MBps\":([0-9.]+),\"b_to_a_MBps\":([0-9.]+)"))) << r.out;
  EXPECT_GT(std::stod(m[1].str()), 0.0) << r.out;
  EXPECT_GT(std::stod(m[2].str()), 0.0) << r.out;
  EXPECT_TRUE(has(r.out, "\"slow_ranks\":[],\"broken_links\":[],\"dead_ranks\":[],\"isolated_ranks\":[],"
                         "\"slow_senders\":[],\"slow_receivers\":[],\"slow_links\":[]"))
      << r.out;
  EXPECT_TRUE(has(e0, "round 1/1: 1 pair")) << e0;
}

}  // namespace
