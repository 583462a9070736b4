// railnet-diag --serve out of file descriptors: connections that say nothing fill its
// open-file limit (lowered for the test, as a crowded host or a small container limit does),
// and the next accept fails with EMFILE while the connection stays queued. The server says
// so in words and waits for a free descriptor, instead of retrying at once for ever (a core at
// 100 % until --timeout).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>
#include "net_pair.h"
#include "plugin_loader.h"
#include "test_util.h"

namespace {

// user + system CPU seconds of process pid so far (-1 when unreadable)
double cpuSecs(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return -1;
  size_t at = line.rfind(')');
  if (at == std::string::npos) return -1;
  std::istringstream in(line.substr(at + 2));
  std::string field;
  unsigned long long ut = 0, st = 0;
  for (int i = 3; i <= 15 && in >> field; i++) {
    if (i == 14) ut = std::stoull(field);
    if (i == 15) st = std::stoull(field);
  }
  return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

int connectTo(int port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
  struct sockaddr_in a = {};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, (struct sockaddr*)&a, sizeof(a)) != 0 && errno != EINPROGRESS) {
    close(fd);
    return -1;
  }
  return fd;
}

TEST(RailnetDiagServe, OutOfFileDescriptorsItWaitsAndSaysSo) {
  TempDir d;
  std::string err = d.path() + "/serve.err";
  int port = freeLoopbackPort();
  ASSERT_GT(port, 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    struct rlimit rl = {24, 24};
    setrlimit(RLIMIT_NOFILE, &rl);
    int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    dup2(fd, 1);
    close(fd);
    std::string tool = buildTool("railnet-diag"), p = std::to_string(port);
    execl(tool.c_str(), tool.c_str(), "--serve", "--port", p.c_str(), "--timeout", "30", (char*)nullptr);
    _exit(127);
  }
  long long deadline = netNowNs() + 20000000000LL;
  while (readFile(err).find("listening") == std::string::npos && readFile(err).find("--serve") == std::string::npos &&
         netNowNs() < deadline)
    usleep(20000);
  // more silent connections than 24 descriptors hold: the kernel queues them all
  std::vector<int> fds;
  for (int i = 0; i < 40; i++) {
    int fd = connectTo(port);
    if (fd >= 0) fds.push_back(fd);
  }
  while (readFile(err).find("cannot accept a connection") == std::string::npos && netNowNs() < deadline) usleep(20000);
  std::string log = readFile(err);
  double before = cpuSecs(pid);
  long long t0 = netNowNs();
  usleep(1000000);
  double cpu = cpuSecs(pid) - before, wall = (netNowNs() - t0) / 1e9;
  kill(pid, SIGTERM);
  int st = 0;
  waitpid(pid, &st, 0);
  for (int fd : fds) close(fd);
  EXPECT_NE(log.find("cannot accept a connection: Too many open files (this process's open-file limit)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("ulimit -n"), std::string::npos) << log;
  // waiting, not retrying at once: well under a core while the connections stay queued
  EXPECT_GE(before, 0);
  EXPECT_LT(cpu, wall / 2) << "the server spun: " << cpu << " s of CPU in " << wall << " s\n" << log;
}

}  // namespace
