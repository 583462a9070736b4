// examples/ring_allreduce: a collective written against include/railnet.h only, run as
// 4 ranks on loopback the way mpirun would start them (rank/size in the environment).
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <string>
#include <vector>
#include "net_pair.h"
#include "plugin_loader.h"
#include "test_util.h"

namespace {

struct Rank {
  pid_t pid = -1;
  int out = -1;
  std::string text;
  int status = -1;
};

// Starts `n` ranks of the example with a launcher-style environment; returns their outcome.
std::vector<Rank> runRanks(int n, const std::string& rankVar, const std::string& sizeVar, const char* count) {
  std::string exe = buildLibDir() + "/../examples/ring_allreduce";
  // below the kernel's ephemeral range (32768+), where this process's other tests listen
  static int calls;
  std::string rdv = "127.0.0.1:" + std::to_string(20000 + (getpid() * 7 + calls++ * 101) % 12000);
  std::vector<Rank> ranks(n);
  for (int r = 0; r < n; r++) {
    int p[2];
    if (pipe(p) != 0) return ranks;
    pid_t pid = fork();
    if (pid == 0) {
      dup2(p[1], 1);
      dup2(p[1], 2);
      close(p[0]);
      setenv(rankVar.c_str(), std::to_string(r).c_str(), 1);
      setenv(sizeVar.c_str(), std::to_string(n).c_str(), 1);
      setenv("RAILNET_RENDEZVOUS", rdv.c_str(), 1);
      setenv("NCCL_SOCKET_IFNAME", "lo", 1);
      execl(exe.c_str(), exe.c_str(), "--count", count, "--iters", "2", (char*)nullptr);
      _exit(127);
    }
    close(p[1]);
    ranks[r].pid = pid;
    ranks[r].out = p[0];
  }
  long long deadline = netNowNs() + 90000000000LL;
  for (auto& r : ranks) {
    while (waitpid(r.pid, &r.status, WNOHANG) == 0) {
      if (netNowNs() > deadline) {
        kill(r.pid, SIGKILL);
        waitpid(r.pid, &r.status, 0);
        break;
      }
      usleep(10000);
    }
    char buf[4096];
    fcntl(r.out, F_SETFL, O_NONBLOCK);
    ssize_t k;
    while ((k = read(r.out, buf, sizeof(buf))) > 0) r.text.append(buf, k);
    close(r.out);
  }
  return ranks;
}

TEST(RingAllreduce, FourRanksUnderMpirunEnvironment) {
  auto ranks = runRanks(4, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "1000003");
  for (size_t r = 0; r < ranks.size(); r++) {
    EXPECT_TRUE(WIFEXITED(ranks[r].status) && WEXITSTATUS(ranks[r].status) == 0) << "rank " << r << ": " << ranks[r].text;
    EXPECT_NE(ranks[r].text.find("rank " + std::to_string(r) + "/4: all-reduce of 1000000 floats over RailSocket verified"),
              std::string::npos)
        << ranks[r].text;
  }
}

TEST(RingAllreduce, ThreeRanksUnderSrunEnvironment) {
  auto ranks = runRanks(3, "SLURM_PROCID", "SLURM_NTASKS", "999");
  for (size_t r = 0; r < ranks.size(); r++)
    EXPECT_NE(ranks[r].text.find("all-reduce of 999 floats over RailSocket verified"), std::string::npos)
        << "rank " << r << ": " << ranks[r].text;
}

TEST(RingAllreduce, NoLauncherEnvironmentIsAClearError) {
  std::string exe = buildLibDir() + "/../examples/ring_allreduce";
  std::string cmd = "env -u OMPI_COMM_WORLD_RANK -u PMI_RANK -u SLURM_PROCID " + exe + " 2>&1";
  FILE* f = popen(cmd.c_str(), "r");
  ASSERT_NE(f, nullptr);
  char buf[1024] = {0};
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  int st = pclose(f);
  EXPECT_NE(WEXITSTATUS(st), 0);
  EXPECT_NE(std::string(buf, n).find("no rank/size from the launcher"), std::string::npos) << buf;
}

}  // namespace
