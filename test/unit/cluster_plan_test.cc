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

// n ranks, every pair working at mbps, with the changes a test makes.
std::vector<railnetClusterLink> fullMesh(int n, double mbps) {
  std::vector<railnetClusterLink> l;
  for (int a = 0; a < n; a++)
    for (int b = a + 1; b < n; b++) l.push_back({a, b, 1, mbps, 30});
  return l;
}
railnetClusterLink& link(std::vector<railnetClusterLink>& l, int a, int b) {
  for (auto& x : l)
    if (x.a == a && x.b == b) return x;
  return l[0];
}

TEST(ClusterVerdict, HealthySlowBrokenDeadIsolated) {
  std::vector<int> alive(6, 1);
  auto l = fullMesh(6, 1000);
  railnetClusterVerdict v;
  railnetClusterJudge(6, alive.data(), l.data(), (int)l.size(), 0.5, &v);
  EXPECT_EQ(v.nSlow + v.nBroken + v.nDead + v.nIsolated, 0);
  EXPECT_DOUBLE_EQ(v.median, 1000);
  EXPECT_DOUBLE_EQ(v.threshold, 500);

  // rank 4's every link at a tenth: it alone is slow (its peers have one slow link each)
  for (auto& x : l)
    if (x.a == 4 || x.b == 4) x.mbps = 100;
  railnetClusterJudge(6, alive.data(), l.data(), (int)l.size(), 0.5, &v);
  ASSERT_EQ(v.nSlow, 1);
  EXPECT_EQ(v.slow[0], 4);
  EXPECT_EQ(v.nBroken, 0);

  // 1-3 fails while both work with the others: that link alone is broken
  l = fullMesh(6, 1000);
  link(l, 1, 3).ok = 0;
  railnetClusterJudge(6, alive.data(), l.data(), (int)l.size(), 0.5, &v);
  ASSERT_EQ(v.nBroken, 1);
  EXPECT_EQ(v.broken[0][0], 1);
  EXPECT_EQ(v.broken[0][1], 3);
  EXPECT_EQ(v.nSlow + v.nIsolated, 0);

  // rank 5 never came: dead, and its links are no one's fault; rank 2's every link fails: isolated
  l.clear();
  for (auto& x : fullMesh(5, 1000)) l.push_back(x);
  for (auto& x : l)
    if (x.a == 2 || x.b == 2) x.ok = 0, x.mbps = 0;
  alive[5] = 0;
  railnetClusterJudge(6, alive.data(), l.data(), (int)l.size(), 0.5, &v);
  ASSERT_EQ(v.nDead, 1);
  EXPECT_EQ(v.dead[0], 5);
  ASSERT_EQ(v.nIsolated, 1);
  EXPECT_EQ(v.isolated[0], 2);
  EXPECT_EQ(v.nBroken, 0);  // every failing link has rank 2 at one end, which works with nobody

  // two ranks: a slow pair has nobody to compare with
  std::vector<int> two(2, 1);
  auto p = fullMesh(2, 10);
  railnetClusterJudge(2, two.data(), p.data(), 1, 0.5, &v);
  EXPECT_EQ(v.nSlow, 0);
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

}  // namespace
