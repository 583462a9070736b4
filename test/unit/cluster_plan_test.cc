// railnet-diag --cluster's plan and verdict (tools/diaglib/cluster_plan.c), and where its ranks
// come from (src/misc/launch.c): rank, size and rendezvous from each launcher's variables.
#include <algorithm>
#include <set>
#include <utility>
#include <vector>
#include "cluster_plan.h"
#include "launch.h"
#include "test_util.h"

namespace {

// Every pair of the ranks exactly once, the pairs of a round disjoint, n / 2 pairs a round.
void expectAllPairsOnce(const std::vector<int>& ranks) {
  int n = (int)ranks.size();
  std::set<std::pair<int, int>> seen;
  int rounds = railnetClusterRounds(n);
  EXPECT_EQ(rounds, n % 2 ? n : n - 1) << n;
  for (int r = 0; r < rounds; r++) {
    int pairs[RAILNET_CLUSTER_MAX_RANKS / 2][2];
    int k = railnetClusterRound(ranks.data(), n, r, pairs, RAILNET_CLUSTER_MAX_RANKS / 2);
    EXPECT_EQ(k, n / 2) << "n " << n << " round " << r;
    std::set<int> busy;
    for (int i = 0; i < k; i++) {
      EXPECT_LT(pairs[i][0], pairs[i][1]);
      EXPECT_TRUE(busy.insert(pairs[i][0]).second && busy.insert(pairs[i][1]).second)
          << "a rank twice in round " << r << " of " << n;
      EXPECT_TRUE(seen.insert({pairs[i][0], pairs[i][1]}).second) << pairs[i][0] << "-" << pairs[i][1] << " twice";
    }
  }
  EXPECT_EQ(seen.size(), (size_t)(n * (n - 1) / 2)) << n;
  for (auto& p : seen) {
    EXPECT_TRUE(std::count(ranks.begin(), ranks.end(), p.first) && std::count(ranks.begin(), ranks.end(), p.second));
  }
}

TEST(ClusterPlan, EveryPairOnceInDisjointRounds) {
  for (int n = 2; n <= 17; n++) {
    std::vector<int> ranks;
    for (int i = 0; i < n; i++) ranks.push_back(i);
    expectAllPairsOnce(ranks);
  }
  expectAllPairsOnce({0, 2, 3, 5, 9});  // the ranks that came, not 0..n-1
  EXPECT_EQ(railnetClusterRounds(1), 0);
  int pairs[4][2];
  int one[1] = {0};
  EXPECT_EQ(railnetClusterRound(one, 1, 0, pairs, 4), 0);
  int four[4] = {0, 1, 2, 3};
  EXPECT_EQ(railnetClusterRound(four, 4, 3, pairs, 4), 0);  // no round 3 among 4 ranks
  EXPECT_EQ(railnetClusterRound(four, 4, 0, pairs, 1), 1);  // never more than max
}

// n ranks, every pair working at mbps both ways, with the changes a test makes.
std::vector<railnetClusterLink> fullMesh(int n, double mbps) {
  std::vector<railnetClusterLink> l;
  for (int a = 0; a < n; a++)
    for (int b = a + 1; b < n; b++) l.push_back({a, b, 1, mbps, 30, mbps, 30});
  return l;
}
railnetClusterLink& link(std::vector<railnetClusterLink>& l, int a, int b) {
  for (auto& x : l)
    if (x.a == a && x.b == b) return x;
  ADD_FAILURE() << "no link " << a << "-" << b;
  return l[0];
}
// The measured rate of one direction, whichever end the link lists first.
void setRate(std::vector<railnetClusterLink>& l, int from, int to, double mbps) {
  for (auto& x : l) {
    if (x.a == from && x.b == to) x.mbps = mbps;
    if (x.a == to && x.b == from) x.mbpsBack = mbps;
  }
}

// railnetClusterJudge's verdict as lists, freed at the end.
struct Judged {
  railnetClusterVerdict v;
  Judged(int n, const std::vector<int>& alive, const std::vector<railnetClusterLink>& l) {
    railnetClusterJudge(n, alive.data(), l.data(), (int)l.size(), 0.5, &v);
  }
  ~Judged() { railnetClusterVerdictFree(&v); }
  static std::vector<int> list(const int* x, int n) { return std::vector<int>(x, x + n); }
  std::vector<int> senders() const { return list(v.slowSenders, v.nSlowSenders); }
  std::vector<int> receivers() const { return list(v.slowReceivers, v.nSlowReceivers); }
  std::vector<int> slow() const { return list(v.slow, v.nSlow); }
  std::vector<std::pair<int, int>> slowLinks() const {
    std::vector<std::pair<int, int>> r;
    for (int i = 0; i < v.nSlowLinks; i++) r.push_back({v.slowLinks[i][0], v.slowLinks[i][1]});
    return r;
  }
  bool empty() const { return v.nSlow + v.nSlowSenders + v.nSlowReceivers + v.nSlowLinks + v.nBroken + v.nDead + v.nIsolated == 0; }
};
using Links = std::vector<std::pair<int, int>>;
using Ranks = std::vector<int>;

TEST(ClusterVerdict, HealthyBrokenDeadIsolated) {
  std::vector<int> alive(6, 1);
  auto l = fullMesh(6, 1000);
  {
    Judged j(6, alive, l);
    EXPECT_TRUE(j.empty());
    EXPECT_DOUBLE_EQ(j.v.median, 1000);
    EXPECT_DOUBLE_EQ(j.v.threshold, 500);
  }
  // 1-3 fails while both work with the others: that link alone is broken
  link(l, 1, 3).ok = 0;
  {
    Judged j(6, alive, l);
    ASSERT_EQ(j.v.nBroken, 1);
    EXPECT_EQ(j.v.broken[0][0], 1);
    EXPECT_EQ(j.v.broken[0][1], 3);
    EXPECT_EQ(j.v.nSlow + j.v.nIsolated + j.v.nSlowLinks, 0);
  }
  // rank 5 never came: dead, and its links are no one's fault; rank 2's every link fails: isolated
  l = fullMesh(5, 1000);
  for (auto& x : l)
    if (x.a == 2 || x.b == 2) x.ok = 0, x.mbps = x.mbpsBack = 0;
  alive[5] = 0;
  {
    Judged j(6, alive, l);
    EXPECT_EQ(Judged::list(j.v.dead, j.v.nDead), Ranks{5});
    EXPECT_EQ(Judged::list(j.v.isolated, j.v.nIsolated), Ranks{2});
    EXPECT_EQ(j.v.nBroken, 0);  // every failing link has rank 2 at one end, which works with nobody
  }
  // two ranks: a slow pair has nobody to compare with
  std::vector<int> two(2, 1);
  auto p = fullMesh(2, 10);
  setRate(p, 1, 0, 1);
  Judged j(2, two, p);
  EXPECT_EQ(j.v.nSlow + j.v.nSlowSenders + j.v.nSlowReceivers + j.v.nSlowLinks, 0);
}

// A rank slow in both directions is a slow sender and a slow receiver; in one direction only,
// only that one (what the rule was written for: a transmit side degraded).
TEST(ClusterVerdict, SlowSenderAndSlowReceiver) {
  std::vector<int> alive(6, 1);
  auto l = fullMesh(6, 1000);
  for (int p = 0; p < 6; p++)
    if (p != 4) setRate(l, 4, p, 100), setRate(l, p, 4, 100);
  {
    Judged j(6, alive, l);
    EXPECT_EQ(j.senders(), Ranks{4});
    EXPECT_EQ(j.receivers(), Ranks{4});
    EXPECT_EQ(j.slow(), Ranks{4});
    EXPECT_EQ(j.slowLinks(), Links{});  // all explained by rank 4
  }
  l = fullMesh(6, 1000);  // rank 3 sends at 2.4 MB/s, receives at full speed
  for (int p = 0; p < 6; p++)
    if (p != 3) setRate(l, 3, p, 2.4);
  {
    Judged j(6, alive, l);
    EXPECT_EQ(j.senders(), Ranks{3});
    EXPECT_EQ(j.receivers(), Ranks{});
    EXPECT_EQ(j.slow(), Ranks{3});
    EXPECT_EQ(j.slowLinks(), Links{});
    EXPECT_DOUBLE_EQ(j.v.median, 1000);  // of the 30 directions, 5 slow
  }
  l = fullMesh(6, 1000);  // rank 1 receives slowly (its switch port's egress)
  for (int p = 0; p < 6; p++)
    if (p != 1) setRate(l, p, 1, 20);
  Judged j(6, alive, l);
  EXPECT_EQ(j.senders(), Ranks{});
  EXPECT_EQ(j.receivers(), Ranks{1});
  EXPECT_EQ(j.slow(), Ranks{1});
  EXPECT_EQ(j.slowLinks(), Links{});
}

// "Mostly": one lucky measurement keeps a slow sender slow, one unlucky one makes no rank slow
// (it is a slow link); at least two slow directions, and a majority of the measured ones.
TEST(ClusterVerdict, MostlyIsRobustToOneMeasurement) {
  std::vector<int> alive(6, 1);
  auto l = fullMesh(6, 1000);
  for (int p = 0; p < 6; p++)
    if (p != 2) setRate(l, 2, p, 10);
  setRate(l, 2, 5, 990);  // lucky: 4 of its 5 outgoing slow
  {
    Judged j(6, alive, l);
    EXPECT_EQ(j.senders(), Ranks{2});
    EXPECT_EQ(j.slow(), Ranks{2});
    EXPECT_EQ(j.slowLinks(), Links{});
  }
  l = fullMesh(6, 1000);
  setRate(l, 4, 0, 30);  // unlucky: one direction of a healthy pair
  {
    Judged j(6, alive, l);
    EXPECT_EQ(j.slow(), Ranks{});
    EXPECT_EQ(j.slowLinks(), (Links{{4, 0}}));
  }
  setRate(l, 4, 1, 30);  // two of rank 4's five: not most of them, two slow links
  {
    Judged j(6, alive, l);
    EXPECT_EQ(j.slow(), Ranks{});
    EXPECT_EQ(j.slowLinks(), (Links{{4, 0}, {4, 1}}));
  }
  setRate(l, 4, 2, 30);  // three of five: a slow sender
  {
    Judged j(6, alive, l);
    EXPECT_EQ(j.senders(), Ranks{4});
    EXPECT_EQ(j.slowLinks(), Links{});
  }
  // three ranks: two outgoing each; one slow is a link, two are the rank (at least 2)
  std::vector<int> three(3, 1);
  auto t = fullMesh(3, 1000);
  setRate(t, 0, 1, 10);
  {
    Judged j(3, three, t);
    EXPECT_EQ(j.slow(), Ranks{});
    EXPECT_EQ(j.slowLinks(), (Links{{0, 1}}));
  }
  setRate(t, 0, 2, 10);
  Judged j(3, three, t);
  EXPECT_EQ(j.senders(), Ranks{0});
  EXPECT_EQ(j.slowLinks(), Links{});
}

// A pair slow one way or both ways, while both ends are fine with the others: slow links, no
// slow rank; beside a slow sender and a slow receiver, whose links they explain.
TEST(ClusterVerdict, SlowLinksBesideSlowRanks) {
  std::vector<int> alive(6, 1);
  auto l = fullMesh(6, 1000);
  setRate(l, 5, 0, 20);
  setRate(l, 0, 5, 20);
  {
    Judged j(6, alive, l);
    EXPECT_EQ(j.slow(), Ranks{});
    EXPECT_EQ(j.slowLinks(), (Links{{0, 5}, {5, 0}}));
  }
  l = fullMesh(6, 1000);  // the netns test's faults at once: 1 sends slowly, 4 receives slowly, 2 -> 5
  for (int p = 0; p < 6; p++)
    if (p != 1) setRate(l, 1, p, 6);
  for (int p = 0; p < 6; p++)
    if (p != 4) setRate(l, p, 4, 6);
  setRate(l, 2, 5, 6);
  setRate(l, 0, 1, 6);  // into the slow sender: its acknowledgements travel its slow side, no slow link
  setRate(l, 4, 3, 6);  // out of the slow receiver: the same
  Judged j(6, alive, l);
  EXPECT_EQ(j.senders(), Ranks{1});
  EXPECT_EQ(j.receivers(), Ranks{4});
  EXPECT_EQ(j.slow(), (Ranks{1, 4}));
  EXPECT_EQ(j.slowLinks(), (Links{{2, 5}}));
}

// Half the ranks receiving slowly makes every other rank's outgoing directions mostly slow:
// the slow receivers explain them (the largest share is judged first), no rank is a sender.
TEST(ClusterVerdict, SlowReceiversExplainTheirSenders) {
  std::vector<int> alive(6, 1);
  auto l = fullMesh(6, 1000);
  for (int r : {1, 2, 3})
    for (int p = 0; p < 6; p++)
      if (p != r) setRate(l, p, r, 50);
  Judged j(6, alive, l);
  EXPECT_EQ(j.receivers(), (Ranks{1, 2, 3}));
  EXPECT_EQ(j.senders(), Ranks{});
  EXPECT_EQ(j.slowLinks(), Links{});
}

// Links not measured (0) in a direction are not judged; a link without a result is nobody's.
TEST(ClusterVerdict, UnmeasuredDirectionsAndNoResult) {
  std::vector<int> alive(4, 1);
  auto l = fullMesh(4, 1000);
  for (auto& x : l) x.mbpsBack = 0;  // one way measured only
  setRate(l, 0, 1, 10);
  setRate(l, 0, 2, 10);
  setRate(l, 0, 3, 10);
  {
    Judged j(4, alive, l);
    EXPECT_EQ(j.senders(), Ranks{0});
    EXPECT_EQ(j.receivers(), Ranks{});  // ranks 1..3 receive one slow direction each
  }
  link(l, 2, 3).ok = -1;
  link(l, 2, 3).mbps = 1;
  Judged j(4, alive, l);
  EXPECT_EQ(j.v.nBroken, 0);
  EXPECT_EQ(j.slowLinks(), Links{});
}

// More broken links than ranks (the verdict's list is as long as the links): 80 ranks whose
// pairs of an odd sum all fail, 1600 of the 3160, each rank working with its own parity.
TEST(ClusterVerdict, MoreBrokenLinksThanRanks) {
  const int n = 80;
  std::vector<int> alive(n, 1);
  auto l = fullMesh(n, 1000);
  for (auto& x : l)
    if ((x.a + x.b) % 2) x.ok = 0, x.mbps = x.mbpsBack = 0;
  Judged j(n, alive, l);
  ASSERT_EQ(j.v.nBroken, 1600);
  std::set<std::pair<int, int>> seen;
  for (int i = 0; i < j.v.nBroken; i++) {
    EXPECT_EQ((j.v.broken[i][0] + j.v.broken[i][1]) % 2, 1);
    seen.insert({j.v.broken[i][0], j.v.broken[i][1]});
  }
  EXPECT_EQ(seen.size(), 1600u);
  EXPECT_EQ(j.v.nIsolated + j.v.nSlow + j.v.nSlowLinks, 0);
}

TEST(Launcher, RankSizeAndRendezvousFromEachLauncher) {
  ScopedEnv env;
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "PMI_RANK", "PMI_SIZE", "SLURM_PROCID",
                        "SLURM_NTASKS", "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "NCCL_COMM_ID"})
    env.unset(v);
  char buf[300];
  EXPECT_EQ(railnetLauncherRank(), -1);
  EXPECT_EQ(railnetLauncherSize(), -1);
  EXPECT_EQ(railnetLauncherName(), nullptr);
  EXPECT_EQ(railnetLauncherRendezvous(buf, sizeof(buf)), 0);
  EXPECT_STREQ(buf, "");

  env.set("RANK", "3");  // torchrun
  env.set("WORLD_SIZE", "8");
  env.set("MASTER_ADDR", "node0");
  env.set("MASTER_PORT", "29500");
  EXPECT_EQ(railnetLauncherRank(), 3);
  EXPECT_EQ(railnetLauncherSize(), 8);
  EXPECT_STREQ(railnetLauncherName(), "torchrun");
  EXPECT_EQ(railnetLauncherRendezvous(buf, sizeof(buf)), 1);
  EXPECT_STREQ(buf, "node0:29500");
  env.set("MASTER_ADDR", "fd00::1");
  EXPECT_EQ(railnetLauncherRendezvous(buf, sizeof(buf)), 1);
  EXPECT_STREQ(buf, "[fd00::1]:29500");

  env.set("SLURM_PROCID", "5");  // srun inside: its rank and its size go together
  env.set("SLURM_NTASKS", "16");
  EXPECT_EQ(railnetLauncherRank(), 5);
  EXPECT_EQ(railnetLauncherSize(), 16);
  EXPECT_STREQ(railnetLauncherName(), "Slurm");

  env.set("OMPI_COMM_WORLD_RANK", "1");
  env.set("OMPI_COMM_WORLD_SIZE", "2");
  EXPECT_EQ(railnetLauncherRank(), 1);
  EXPECT_EQ(railnetLauncherSize(), 2);
  EXPECT_STREQ(railnetLauncherName(), "Open MPI");

  env.unset("MASTER_ADDR");
  env.set("NCCL_COMM_ID", "10.0.0.1:4000");
  EXPECT_EQ(railnetLauncherRendezvous(buf, sizeof(buf)), 2);
  EXPECT_STREQ(buf, "10.0.0.1:4000");
}

TEST(Launcher, JobIdFromEachLauncherSlurmFirst) {
  ScopedEnv env;
  for (const char* v : {"SLURM_JOB_ID", "OMPI_MCA_ess_base_jobid", "TORCHELASTIC_RUN_ID"}) env.unset(v);
  char buf[64] = "x";
  EXPECT_EQ(railnetLauncherJobId(buf, sizeof(buf)), nullptr);
  EXPECT_STREQ(buf, "");
  env.set("TORCHELASTIC_RUN_ID", "");  // set but empty: none
  EXPECT_EQ(railnetLauncherJobId(buf, sizeof(buf)), nullptr);
  env.set("TORCHELASTIC_RUN_ID", "run-7");
  EXPECT_STREQ(railnetLauncherJobId(buf, sizeof(buf)), "TORCHELASTIC_RUN_ID");
  EXPECT_STREQ(buf, "run-7");
  env.set("OMPI_MCA_ess_base_jobid", "1234567");
  EXPECT_STREQ(railnetLauncherJobId(buf, sizeof(buf)), "OMPI_MCA_ess_base_jobid");
  EXPECT_STREQ(buf, "1234567");
  env.set("SLURM_JOB_ID", "88");  // srun under mpirun or torchrun: the allocation's job
  EXPECT_STREQ(railnetLauncherJobId(buf, sizeof(buf)), "SLURM_JOB_ID");
  EXPECT_STREQ(buf, "88");
}

}  // namespace
