// railnet-diag --cluster among six network namespaces on one bridge (198.18.40.0/24), each a
// node started the way torchrun starts ranks (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT):
//  - all healthy: every rank exits 0, rank 0's verdict is empty, 15 links all working, each
//    measured both ways;
//  - an nftables rule on node 2 against node 4: exactly that pair in broken_links;
//  - node 3's transmit side shaped to 50 Mbit/s (tc on its own eth0) and, on node 1, the
//    traffic to node 5 alone (an htb class for that destination): 3 and only 3 in
//    slow_senders and slow_ranks, 1 -> 5 and only that in slow_links;
//  - node 4's receive side shaped (tc on the bridge's port towards it): 4 and only 4 in
//    slow_receivers and slow_ranks;
//  - node 5 never started: it is in dead_ranks, found within the join bound;
//  - --rank/--size/--rendezvous instead of the launcher's variables, and the usage errors;
//  - Open MPI's mpirun starting the six ranks, each entering its namespace (Debian's
//    openmpi-bin; SKIP without it).
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <chrono>
#include <fstream>
#include <sstream>
#include <set>
#include "netns.h"
#include "pairprobe.h"
#include "plugin_loader.h"

namespace {

const int kRanks = 6;
const char* kClean = "unset NCCL_SOCKET_IFNAME NCCL_IB_HCA NCCL_IB_GID_INDEX NCCL_CONF_FILE NCCL_DEBUG RANK WORLD_SIZE "
                     "MASTER_ADDR MASTER_PORT OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE "
                     "SLURM_PROCID SLURM_NTASKS NCCL_COMM_ID SLURM_JOB_ID OMPI_MCA_ess_base_jobid TORCHELASTIC_RUN_ID; ";

double nowS() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string hostName() {
  char h[256] = "";
  gethostname(h, sizeof(h) - 1);
  return h;
}

std::string addrOf(int i) { return "198.18.40." + std::to_string(i + 1); }

size_t occurrences(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = 0; (p = s.find(what, p)) != std::string::npos; p += what.size()) n++;
  return n;
}

class ClusterNetns : public ::testing::Test {
 protected:
  std::unique_ptr<NetNs> sw;
  std::vector<std::unique_ptr<NetNs>> nodes;
  TempDir d;
  void SetUp() override {
    RAILNET_REQUIRE_NETNS();
    sw.reset(new NetNs("csw"));
    ASSERT_TRUE(sw->ok() && sw->sh("ip link add br0 type bridge && ip link set br0 up"));
    for (int i = 0; i < kRanks; i++) {
      nodes.emplace_back(new NetNs("c" + std::to_string(i)));
      NetNs& n = *nodes.back();
      std::string port = "p" + std::to_string(i);
      ASSERT_TRUE(n.ok() && NetNs::veth(n, "eth0", *sw, port));
      ASSERT_TRUE(n.noLinkLocal("eth0") && n.addAddr("eth0", addrOf(i) + "/24") && n.up("eth0") && n.up("lo"));
      ASSERT_TRUE(sw->sh("ip link set " + port + " master br0 && ip link set " + port + " up"));
    }
    for (auto& n : nodes) ASSERT_TRUE(n->waitRunning("eth0"));
  }
  std::string env() const { return std::string(kClean) + "HOME=" + d.path() + " SYSFS_PATH=" + d.path() + " "; }
  std::string torchrun(int rank) const {
    return "RANK=" + std::to_string(rank) + " WORLD_SIZE=" + std::to_string(kRanks) + " MASTER_ADDR=" + addrOf(0) +
           " MASTER_PORT=29500 ";
  }
  // Every rank but those in skip, each in its namespace with launch(rank) before the
  // command and "%RANK%" in args replaced by its rank; the exit status of each (-1: not
  // started), rank 0's stdout and stderr, and the time it all took.
  std::vector<std::unique_ptr<NetNsChild>> start(const std::function<std::string(int)>& launch, const std::string& args,
                                                 const std::set<int>& skip) {
    std::vector<std::unique_ptr<NetNsChild>> kids(kRanks);
    for (int i = 0; i < kRanks; i++) {
      if (skip.count(i)) continue;
      std::string a = args, r = std::to_string(i);
      for (size_t p; (p = a.find("%RANK%")) != std::string::npos;) a.replace(p, 6, r);
      // the shell becomes railnet-diag (exec): its pid in pid<rank>
      std::string cmd = "echo $$ >" + d.path() + "/pid" + r + "; " + env() + launch(i) + "exec " +
                        buildTool("railnet-diag") + " --cluster " + a + " >" + d.path() + "/out" + r + " 2>" + d.path() +
                        "/err" + r;
      kids[i].reset(new NetNsChild(*nodes[i], [cmd](NetNsIo&) {
        int st = system(cmd.c_str());
        return WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : 99;
      }));
    }
    return kids;
  }
  std::vector<int> run(const std::function<std::string(int)>& launch, const std::string& args,
                       const std::set<int>& skip, std::string* out0, std::string* err0, double* took) {
    double t0 = nowS();
    std::vector<std::unique_ptr<NetNsChild>> kids = start(launch, args, skip);
    return finish(kids, t0, out0, err0, took);
  }
  std::vector<int> finish(std::vector<std::unique_ptr<NetNsChild>>& kids, double t0, std::string* out0,
                          std::string* err0, double* took) {
    std::vector<int> rc(kRanks, -1);
    for (int i = 0; i < kRanks; i++)
      if (kids[i]) {
        NetNsResult r = kids[i]->wait(400000);
        rc[i] = r.exited ? r.exitCode : 98;
      }
    *took = nowS() - t0;
    *out0 = readFile(d.path() + "/out0");
    *err0 = readFile(d.path() + "/err0");
    return rc;
  }
};

TEST_F(ClusterNetns, HealthyThenABrokenLink) {
  std::string out, err;
  double took;
  auto launch = [this](int r) { return torchrun(r); };
  std::vector<int> rc = run(launch, "--json --timeout 30", {}, &out, &err, &took);
  for (int i = 0; i < kRanks; i++) EXPECT_EQ(rc[i], 0) << "rank " << i << "\n" << out << err << readFile(d.path() + "/err" + std::to_string(i));
  EXPECT_TRUE(has(out, "\"mode\":\"cluster\"")) << out;
  EXPECT_TRUE(has(out, "\"launcher\":\"torchrun\"")) << out;
  EXPECT_TRUE(has(out, "\"slow_ranks\":[],\"broken_links\":[],\"dead_ranks\":[],\"isolated_ranks\":[],"
                      "\"slow_senders\":[],\"slow_receivers\":[],\"slow_links\":[]"))
      << out;
  size_t oks = 0;
  for (size_t p = 0; (p = out.find("\"result\":\"ok\"", p)) != std::string::npos; p++) oks++;
  EXPECT_EQ(oks, (size_t)(kRanks * (kRanks - 1) / 2)) << out;
  // both directions of every link measured, on the path named
  EXPECT_EQ(occurrences(out, "\"path\":\"socket eth0 <-> eth0\""), (size_t)(kRanks * (kRanks - 1) / 2)) << out;
  EXPECT_FALSE(has(out, "_MBps\":0.0")) << out;
  EXPECT_FALSE(has(out, "_usec\":0,")) << out;
  EXPECT_TRUE(has(err, "5 rounds of at most 3 pairs")) << err;
  EXPECT_TRUE(has(err, "round 5/5: 3 pairs")) << err;

  // node 2 drops TCP from node 4: that link alone breaks, and every rank says so (exit 1)
  ASSERT_TRUE(nodes[2]->sh("nft add table inet rnt && nft 'add chain inet rnt in { type filter hook input priority 0; }' "
                           "&& nft add rule inet rnt in ip saddr " + addrOf(4) + " meta l4proto tcp drop"));
  rc = run(launch, "--json --timeout 30", {}, &out, &err, &took);
  for (int i = 0; i < kRanks; i++) EXPECT_EQ(rc[i], 1) << "rank " << i << "\n" << out;
  EXPECT_TRUE(has(out, "\"slow_ranks\":[],\"broken_links\":[[2,4]],\"dead_ranks\":[]")) << out;
  EXPECT_TRUE(has(out, "the link between rank 2 (")) << out;
  // rank 2 checks rank 4: its control connection is the first TCP that fails; the fix names
  // the ports a firewall must pass (its listener's port is an ephemeral one, as NCCL's are)
  EXPECT_TRUE(has(out, "cannot connect to " + addrOf(4) + " port ")) << out;
  EXPECT_TRUE(has(out, "check that rank 4's railnet-diag runs and that a firewall passes TCP to it on the ephemeral "
                       "ports (")) << out;
}

// The verdict's array under key in rank 0's JSON ("[3]", "[[1,5]]"), "" when absent.
std::string verdictList(const std::string& out, const std::string& key) {
  size_t at = out.find("\"" + key + "\":[", out.find("\"verdict\":{"));
  if (at == std::string::npos) return "";
  at += key.size() + 3;
  int depth = 0;
  for (size_t e = at; e < out.size(); e++) {
    depth += out[e] == '[' ? 1 : out[e] == ']' ? -1 : 0;
    if (depth == 0) return out.substr(at, e + 1 - at);
  }
  return "";
}

TEST_F(ClusterNetns, SlowSenderSlowLinkSlowReceiverAndDeadNode) {
  // node 3's transmit side at 50 Mbit/s (its own egress: a bad lane, a stuck TX queue); on
  // node 1, its traffic to node 5 alone at 50 Mbit/s (one direction of one pair: a bad path)
  std::string rate = " htb rate 50mbit ceil 50mbit burst 64kb";
  ASSERT_TRUE(nodes[3]->sh("tc qdisc add dev eth0 root tbf rate 50mbit burst 64kb latency 200ms"));
  ASSERT_TRUE(nodes[1]->sh("tc qdisc add dev eth0 root handle 1: htb && tc class add dev eth0 parent 1: classid 1:1" +
                           rate + " && tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst " +
                           addrOf(5) + "/32 flowid 1:1 2>/dev/null"));
  std::string out, err;
  double took;
  auto launch = [this](int r) { return torchrun(r); };
  std::vector<int> rc = run(launch, "--json --timeout 30", {}, &out, &err, &took);
  for (int i = 0; i < kRanks; i++) EXPECT_EQ(rc[i], 1) << "rank " << i << "\n" << out;
  EXPECT_EQ(verdictList(out, "slow_senders"), "[3]") << out;
  EXPECT_EQ(verdictList(out, "slow_receivers"), "[]") << out;
  EXPECT_EQ(verdictList(out, "slow_ranks"), "[3]") << out;
  EXPECT_EQ(verdictList(out, "slow_links"), "[[1,5]]") << out;
  EXPECT_EQ(verdictList(out, "broken_links"), "[]") << out;
  EXPECT_TRUE(has(out, "sends slowly: 5 of the 5 directions out of it below")) << out;
  EXPECT_TRUE(has(out, "interface eth0: ethtool -S eth0 (transmit errors")) << out;
  EXPECT_TRUE(has(out, "the link from rank 1 (")) << out;
  EXPECT_TRUE(has(out, "is slow that way")) << out;
  EXPECT_TRUE(has(out, "\"slow_rule\":\"a direction is slow below the threshold")) << out;
  ASSERT_TRUE(nodes[3]->sh("tc qdisc del dev eth0 root") && nodes[1]->sh("tc qdisc del dev eth0 root"));

  // node 4's receive side at 50 Mbit/s: shaped where the switch sends to it (the bridge
  // port's egress), its own eth0 untouched
  ASSERT_TRUE(sw->sh("tc qdisc add dev p4 root tbf rate 50mbit burst 64kb latency 200ms"));
  rc = run(launch, "--json --timeout 30", {}, &out, &err, &took);
  for (int i = 0; i < kRanks; i++) EXPECT_EQ(rc[i], 1) << "rank " << i << "\n" << out;
  EXPECT_EQ(verdictList(out, "slow_receivers"), "[4]") << out;
  EXPECT_EQ(verdictList(out, "slow_senders"), "[]") << out;
  EXPECT_EQ(verdictList(out, "slow_ranks"), "[4]") << out;
  EXPECT_EQ(verdictList(out, "slow_links"), "[]") << out;
  EXPECT_TRUE(has(out, "receives slowly: 5 of the 5 directions into it below")) << out;
  ASSERT_TRUE(sw->sh("tc qdisc del dev p4 root"));

  // node 5 never starts: dead, found within the join bound; the five others are checked
  rc = run(launch, "--timeout 5", {5}, &out, &err, &took);
  for (int i = 0; i < 5; i++) EXPECT_EQ(rc[i], 1) << "rank " << i << "\n" << out << err;
  EXPECT_TRUE(has(out, "rank 5 never came to the rendezvous")) << out;
  EXPECT_TRUE(has(err, "5 of 6 ranks came; 5 rounds of at most 2 pairs")) << err;
  size_t at = err.find("at most ", err.find("5 of 6 ranks came"));
  ASSERT_NE(at, std::string::npos);
  size_t s = err.find(": at most ", at);
  ASSERT_NE(s, std::string::npos) << err;
  double bound = atof(err.c_str() + s + 10);
  EXPECT_LE(took, 5 + bound + 5) << err;  // the join bound, then the plan's bound
}

TEST_F(ClusterNetns, RankSizeRendezvousOptionsAndUsageErrors) {
  std::string out, err;
  double took;
  std::string args = "--rendezvous " + addrOf(0) + ":29600 --size " + std::to_string(kRanks) + " --timeout 30 --rank %RANK%";
  std::vector<int> rc = run([](int) { return std::string(); }, args, {}, &out, &err, &took);
  for (int i = 0; i < kRanks; i++) EXPECT_EQ(rc[i], 0) << "rank " << i << "\n" << out << err;
  EXPECT_TRUE(has(out, "== Cluster check")) << out;
  EXPECT_TRUE(has(out, "0 problem(s)")) << out;
  // the text matrix: a figure from every rank to every other, each direction its own
  size_t at = out.find("MB/s from the row's rank to the column's");
  ASSERT_NE(at, std::string::npos) << out;
  std::istringstream rows(out.substr(out.find('\n', out.find("from\\to", at)) + 1));
  for (int r = 0; r < kRanks; r++) {
    std::string line;
    ASSERT_TRUE((bool)std::getline(rows, line)) << out;
    std::istringstream cells(line);
    int rank = -1, figures = 0;
    cells >> rank;
    EXPECT_EQ(rank, r) << line;
    for (double mbps; cells >> mbps;) figures += mbps > 0;
    EXPECT_EQ(figures, kRanks - 1) << line;
  }
  EXPECT_TRUE(has(out, "slow: below ")) << out;
  NetNsResult u = nodes[1]->exec(env() + buildTool("railnet-diag") + " --cluster 2>&1");
  EXPECT_EQ(u.exitCode, 2) << u.describe();
  EXPECT_TRUE(has(u.out, "--cluster needs its rank and the number of ranks")) << u.out;
  u = nodes[1]->exec(env() + "RANK=1 WORLD_SIZE=2 " + buildTool("railnet-diag") + " --cluster 2>&1");
  EXPECT_EQ(u.exitCode, 2) << u.describe();
  EXPECT_TRUE(has(u.out, "--cluster needs a rendezvous HOST:PORT")) << u.out;
  u = nodes[1]->exec(env() + buildTool("railnet-diag") + " --cluster --pair x 2>&1");
  EXPECT_EQ(u.exitCode, 2) << u.describe();
}

TEST_F(ClusterNetns, OpenMpiLaunchesTheRanks) {
  std::string out;
  if (NetNs::hostSh("command -v mpirun", &out) != 0) RAILNET_SKIP("no mpirun (apt-get install openmpi-bin)");
  std::string map = d.path() + "/namespaces";  // line r + 1: the namespace of rank r
  {
    std::ofstream f(map);
    for (auto& n : nodes) f << n->name() << "\n";
  }
  std::string cmd = env() + "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpirun --oversubscribe -np " +
                    std::to_string(kRanks) + " sh -c 'exec ip netns exec $(sed -n $((OMPI_COMM_WORLD_RANK + 1))p " +
                    map + ") " +
                    buildTool("railnet-diag") + " --cluster --rendezvous " + addrOf(0) +
                    ":29700 --timeout 30 --json' 2>" + d.path() + "/mpi.err";
  int rc = NetNs::hostSh(cmd, &out);
  std::string err = readFile(d.path() + "/mpi.err");
  EXPECT_EQ(rc, 0) << out << err;
  EXPECT_TRUE(has(out, "\"launcher\":\"Open MPI\"")) << out;
  EXPECT_TRUE(has(out, "\"size\":6")) << out;
  EXPECT_TRUE(has(out, "\"slow_ranks\":[],\"broken_links\":[],\"dead_ranks\":[]")) << out << err;
  EXPECT_TRUE(has(out, "\"slow_senders\":[],\"slow_receivers\":[],\"slow_links\":[]")) << out << err;
  EXPECT_TRUE(has(err, "round 5/5: 3 pairs")) << err;
}

// A rank killed after the first round: reported as gone, its links without result, the
// rounds go on without waiting for it.
TEST_F(ClusterNetns, RankThatDiesMidRunIsReportedNotWaitedFor) {
  double t0 = nowS();
  auto kids = start([this](int r) { return torchrun(r); }, "--timeout 30", {});
  std::string err0;
  for (int i = 0; i < 600 && !has(err0, "round 1/5"); i++) {
    usleep(100000);
    err0 = readFile(d.path() + "/err0");
  }
  ASSERT_TRUE(has(err0, "round 1/5")) << err0;
  int pid = atoi(readFile(d.path() + "/pid4").c_str());
  ASSERT_GT(pid, 0);
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  std::string out, err;
  double took;
  std::vector<int> rc = finish(kids, t0, &out, &err, &took);
  EXPECT_EQ(rc[4], 128 + SIGKILL);
  for (int i : {0, 1, 2, 3, 5}) EXPECT_EQ(rc[i], 1) << "rank " << i << "\n" << out << err;
  EXPECT_TRUE(has(out, "rank 4 (")) << out;
  EXPECT_TRUE(has(out, "went away during the check")) << out;
  EXPECT_FALSE(has(out, "the link between")) << out;  // its links are nobody's fault
  EXPECT_TRUE(has(err, "round 5/5")) << err;
  EXPECT_LT(took, 120) << err;  // far below one check's bound per round: nobody waited for rank 4
}

// Node 3's firewall drops TCP to port 32768, the low end of its ip_local_port_range, and
// passes the rest: its pair listener (the kernel binds odd ports first) answers, the probes
// of its ephemeral ports from its lower ranks (0, 1 and 2 are the clients of their pairs
// with it) reach 32768 and fail, so those three links break with the cause and the fix;
// node 3's own checks of 4 and 5 work.
TEST_F(ClusterNetns, FirewallDroppingPartOfTheEphemeralRange) {
  ASSERT_TRUE(nodes[3]->sh("sysctl -qw net.ipv4.ip_local_port_range='32768 60999'"));
  ASSERT_TRUE(nodes[3]->sh("nft add table inet rnt && nft 'add chain inet rnt in { type filter hook input priority 0; }' "
                           "&& nft add rule inet rnt in ct state established,related accept "
                           "&& nft add rule inet rnt in tcp dport 32768 drop"));
  std::string out, err;
  double took;
  std::vector<int> rc = run([this](int r) { return torchrun(r); }, "--json --timeout 30", {}, &out, &err, &took);
  for (int i = 0; i < kRanks; i++) EXPECT_EQ(rc[i], 1) << "rank " << i << "\n" << out << err;
  std::string broken = verdictList(out, "broken_links");  // in the order the rounds found them
  EXPECT_TRUE(broken.size() == 19 && has(broken, "[0,3]") && has(broken, "[1,3]") && has(broken, "[2,3]")) << out;
  // each link's entry and its finding
  EXPECT_EQ(occurrences(out, "but not on its ephemeral port(s) 32768 (range 32768-60999): Connection timed out"),
            (size_t)6) << out;
  EXPECT_EQ(occurrences(out, "open TCP 32768-60999 inbound on rank 3"), (size_t)6) << out;
  EXPECT_FALSE(has(out, "the link between rank 3 (" + hostName() + ") and rank 4")) << out;
}

// A rank that joins as rank 1 and overruns the first pair check it is given: it sends that
// LINK only in its next round, before the LINK of that round (with invented figures: 3 MB/s
// late, 777 MB/s on time), and so on for every round it checks a pair. Rank 0 reports the
// first pair as "no result within the round's bound" (not left out), drops each late LINK
// (and says so), and files only the LINK of the round it runs.
int lateLinkRank(NetNsIo& io, uint16_t rendezvousPort) {
  uint8_t a0[4] = {198, 18, 40, 1};
  uint64_t dl = railnetClockNs() + 400000000000ull;
  int fd = -1;
  for (int i = 0; i < 100 && railnetPairConnectFrom(nullptr, 4, a0, rendezvousPort, railnetClockNs() + 1000000000ull, &fd);
       i++)
    usleep(100000);
  if (fd < 0) return 10;
  railnetClusterJoinMsg j = {};
  j.rank = 1, j.size = kRanks, j.listenPort = 9, j.listenToken = 1;  // nothing listens on port 9
  snprintf(j.host, sizeof(j.host), "late");
  if (railnetPairSend(fd, RAILNET_CLUSTER_JOIN, &j, 1, dl)) return 11;
  int checks = 0;
  railnetClusterLinkMsg held = {};
  for (;;) {
    railnetPairMsg m;
    char why[128] = "";
    if (railnetPairRecv(fd, &m, dl, why)) return 12;
    if (m.type == RAILNET_CLUSTER_DONE) break;
    if (m.type == RAILNET_CLUSTER_ROUND && m.u.round->partner >= 0 && m.u.round->client) {
      railnetClusterLinkMsg l = {};
      l.round = m.u.round->round, l.ok = 1, l.kbps = l.kbpsBack = 777000, l.usec = l.usecBack = 100;
      snprintf(l.net, sizeof(l.net), "socket");
      if (checks++ == 0) {
        held = l, held.kbps = held.kbpsBack = 3000;  // overran: sent next time
      } else {
        if (railnetPairSend(fd, RAILNET_CLUSTER_LINK, &held, 1, dl)) return 13;
        if (railnetPairSend(fd, RAILNET_CLUSTER_LINK, &l, 1, dl)) return 14;
        held = l, held.kbps = held.kbpsBack = 3000;
      }
    }
    railnetPairFree(&m);
  }
  io.say("checks " + std::to_string(checks));
  close(fd);
  return 0;
}

TEST_F(ClusterNetns, RankThatOverrunsItsRoundIsReportedAndItsLateLinkDropped) {
  double t0 = nowS();
  auto kids = start([this](int r) { return torchrun(r); }, "--json --timeout 30", {1});
  NetNsChild late(*nodes[1], [](NetNsIo& io) { return lateLinkRank(io, 29500); });
  std::string out, err;
  double took;
  finish(kids, t0, &out, &err, &took);
  NetNsResult f = late.wait(60000);
  ASSERT_TRUE(f.success()) << f.describe() << err;
  int checks = 0;
  ASSERT_EQ(sscanf(f.out.c_str() + f.out.find("checks "), "checks %d", &checks), 1) << f.out;
  EXPECT_GE(checks, 4) << f.out;  // rank 1 checks ranks 2 to 5
  EXPECT_EQ(occurrences(err, "rank 1 (late) sent no LINK in round"), (size_t)1) << err;
  EXPECT_EQ(occurrences(err, "rank 1 (late) sent the LINK of round "), (size_t)(checks - 1)) << err;
  EXPECT_EQ(occurrences(err, "dropped (its check overran)"), (size_t)(checks - 1)) << err;
  EXPECT_FALSE(has(out, "\"a_to_b_MBps\":3.0")) << out;  // the late LINKs' figures are nowhere
  for (int b = 2; b < kRanks; b++) EXPECT_TRUE(has(out, "{\"a\":1,\"b\":" + std::to_string(b) + ",")) << out;
  EXPECT_EQ(occurrences(out, "\"a_to_b_MBps\":777.0"), (size_t)3) << out;
  EXPECT_EQ(occurrences(out, "rank 1 sent no result within the round's bound (95 s)"), (size_t)2) << out;  // link, finding
}

// Strangers at the rendezvous while the ranks of one job (torchrun's run id job-a) gather: 19
// connections that never say a word, one that sends part of a JOIN and closes, then a process
// of another job (run id job-b: another token) that claims rank 5. It says "refused" once rank 0
// closed its JOIN's connection, and holds the idle ones open until it is killed.
int strangerAtRendezvous(NetNsIo& io, uint16_t port) {
  uint8_t a0[4] = {198, 18, 40, 1};
  std::vector<int> idle;
  while (idle.size() < 21) {
    int fd = -1;
    if (railnetPairConnectFrom(nullptr, 4, a0, port, railnetClockNs() + 1000000000ull, &fd) == 0) idle.push_back(fd);
    else usleep(50000);
  }
  railnetClusterJoinMsg j = {};
  j.rank = 5, j.size = kRanks, j.listenPort = 9, j.listenToken = 1, j.jobToken = 0x6a6f622d62ull;
  snprintf(j.host, sizeof(j.host), "other-job");
  uint8_t* part = nullptr;  // the first 20 bytes of a JOIN, then the connection closes
  size_t partLen = 0;
  if (railnetPairEncode(RAILNET_CLUSTER_JOIN, &j, 1, &part, &partLen) != ncclSuccess || partLen < 20) return 13;
  bool wrote = write(idle[0], part, 20) == 20;
  free(part);
  if (!wrote) return 14;
  close(idle[0]);
  int fd = idle.back();
  if (railnetPairSend(fd, RAILNET_CLUSTER_JOIN, &j, 1, railnetClockNs() + 5000000000ull)) return 10;
  char c;
  struct pollfd p = {fd, POLLIN, 0};
  if (poll(&p, 1, 60000) != 1 || read(fd, &c, 1) != 0) return 11;  // closed without a word
  io.say("refused");
  pause();
  return 0;
}

TEST_F(ClusterNetns, StrangersAtTheRendezvousTakeNoRanksSlot) {
  double t0 = nowS();
  auto launch = [this](int r) { return torchrun(r) + "TORCHELASTIC_RUN_ID=job-a "; };
  auto kids = start(launch, "--json --timeout 30", {5});
  NetNsChild stranger(*nodes[5], [](NetNsIo& io) { return strangerAtRendezvous(io, 29500); });
  std::string line;
  ASSERT_TRUE(stranger.readLine(&line, 60000)) << readFile(d.path() + "/err0");
  EXPECT_EQ(line, "refused");
  auto late = start(launch, "--json --timeout 30", {0, 1, 2, 3, 4});  // the real rank 5, after the stranger
  kids[5] = std::move(late[5]);
  std::string out, err;
  double took;
  std::vector<int> rc = finish(kids, t0, &out, &err, &took);
  stranger.kill();
  for (int i = 0; i < kRanks; i++) EXPECT_EQ(rc[i], 0) << "rank " << i << "\n" << out << err;
  EXPECT_TRUE(has(err, "(job token from TORCHELASTIC_RUN_ID)")) << err;
  EXPECT_TRUE(has(err, "a connection without a JOIN refused: the connection closed after 20 bytes")) << err;
  EXPECT_TRUE(has(err, "JOIN of rank 5 from other-job refused: its job token is not this job's "
                       "(TORCHELASTIC_RUN_ID)")) << err;
  EXPECT_TRUE(has(out, "\"slow_ranks\":[],\"broken_links\":[],\"dead_ranks\":[]")) << out;
  EXPECT_TRUE(has(out, "{\"rank\":5,\"host\":\"" + hostName() + "\"")) << out;  // the real rank's slot
}

// A HELLO to rank 1's pair listener: one with the token rank 1 joined with, one without (0).
// "served" when its HELLO is answered, "refused" when the connection closes without a word.
std::string helloWith(const uint8_t* addr, const railnetClusterJoinMsg& j, uint64_t token) {
  int fd = -1;
  uint64_t dl = railnetClockNs() + 10000000000ull;
  if (railnetPairConnectFrom(nullptr, 4, addr, j.listenPort, dl, &fd)) return "no connection";
  std::string r = "no greeting";
  railnetPairHello h = {};
  snprintf(h.host, sizeof(h.host), "stranger");
  snprintf(h.version, sizeof(h.version), "0");
  h.timeoutMs = 1000, h.jobToken = token;
  railnetPairMsg m;
  char why[128] = "";
  if (railnetPairAwaitGreet(fd, j.listenToken, dl, nullptr) == 0 && railnetPairSend(fd, RAILNET_PAIR_HELLO, &h, 1, dl) == 0) {
    int e = railnetPairExpect(fd, RAILNET_PAIR_HELLO, &m, dl, why);
    r = e == 0 ? "served" : "refused";
    if (e == 0) {
      railnetPairFree(&m);
      railnetPairSend(fd, RAILNET_PAIR_BYE, nullptr, 0, dl);
    }
  }
  close(fd);
  return r;
}

// Rank 0 played by the test: it takes rank 1's JOIN, then knocks on rank 1's pair listener
// with a HELLO of no job and with one of rank 1's job, then ends the run (DONE).
int tokenCheckingRank0(NetNsIo& io, uint16_t port) {
  int lfd = -1, fd = -1;
  uint16_t bound = 0;
  if (railnetPairListen(port, &lfd, &bound)) return 10;
  struct pollfd p = {lfd, POLLIN, 0};
  if (poll(&p, 1, 60000) != 1 || (fd = accept(lfd, nullptr, nullptr)) < 0) return 11;
  railnetPairMsg m;
  char why[128] = "";
  uint64_t dl = railnetClockNs() + 20000000000ull;
  if (railnetPairExpect(fd, RAILNET_CLUSTER_JOIN, &m, dl, why)) return 12;
  railnetClusterJoinMsg j = *m.u.join;
  railnetPairFree(&m);
  uint8_t a1[4] = {198, 18, 40, 2};
  io.say("token " + std::string(j.jobToken ? "set" : "none"));
  io.say("without: " + helloWith(a1, j, 0));
  io.say("another: " + helloWith(a1, j, j.jobToken ^ 0x5a5a));
  io.say("with: " + helloWith(a1, j, j.jobToken));
  railnetClusterDoneMsg d = {0};
  if (railnetPairSend(fd, RAILNET_CLUSTER_DONE, &d, 1, dl)) return 13;
  close(fd);
  close(lfd);
  return 0;
}

TEST_F(ClusterNetns, PairListenerServesOnlyItsJobsToken) {
  NetNsChild rank0(*nodes[0], [](NetNsIo& io) { return tokenCheckingRank0(io, 29800); });
  std::string args = "--rendezvous " + addrOf(0) + ":29800 --size 2 --rank 1 --token our-job --timeout 30";
  NetNsResult r1 = nodes[1]->exec(env() + buildTool("railnet-diag") + " --cluster " + args + " 2>&1");
  NetNsResult f = rank0.wait(60000);
  ASSERT_TRUE(f.success()) << f.describe() << r1.out;
  EXPECT_EQ(r1.exitCode, 0) << r1.describe();
  EXPECT_TRUE(has(f.out, "token set")) << f.out;
  EXPECT_TRUE(has(f.out, "without: refused")) << f.out;
  EXPECT_TRUE(has(f.out, "another: refused")) << f.out;
  EXPECT_TRUE(has(f.out, "with: served")) << f.out;
  EXPECT_EQ(occurrences(r1.out, "(stranger) refused: not this job's token"), (size_t)2) << r1.out;
}

}  // namespace
