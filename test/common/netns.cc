// Network namespace helpers for the netns tier: see netns.h.
#include "netns.h"
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <atomic>
#include <vector>

namespace {

int64_t nowMs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void writeAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= (size_t)w;
  }
}

// Fork a child that enters nsPath (when not empty) and runs fn; its NetNsIo writes to a
// pipe whose read end is returned in *fd. Returns the pid, or -1 (with *err set).
pid_t spawnIn(const std::string& nsPath, const std::function<int(NetNsIo&)>& fn, int* fd, std::string* err) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) {
    *err = std::string("pipe: ") + strerror(errno);
    return -1;
  }
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) {
    *err = std::string("fork: ") + strerror(errno);
    close(p[0]);
    close(p[1]);
    return -1;
  }
  if (pid == 0) {
    close(p[0]);
    // Die with the test process: a child must never outlive a killed test run.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    NetNsIo io;
    io.fd = p[1];
    if (!nsPath.empty()) {
      int nfd = open(nsPath.c_str(), O_RDONLY | O_CLOEXEC);
      if (nfd < 0 || setns(nfd, CLONE_NEWNET) != 0) {
        io.say("netns: cannot enter " + nsPath + ": " + strerror(errno));
        _exit(126);
      }
      close(nfd);
    }
    int rc = 125;
    try {
      rc = fn(io);
    } catch (const std::exception& e) {
      io.say(std::string("netns: exception in child: ") + e.what());
    } catch (...) {
      io.say("netns: unknown exception in child");
    }
    fflush(stdout);
    fflush(stderr);
    _exit(rc & 0xff);
  }
  close(p[1]);
  *fd = p[0];
  return pid;
}

// Wait for child pid (SIGKILL after timeoutMs), collecting its output from *fd (closed
// here). A grandchild may keep the pipe open after the child ended, so the end of the
// child, not the end of the output, ends the wait.
NetNsResult waitChild(pid_t pid, int* fd, int timeoutMs) {
  NetNsResult res;
  res.started = true;
  int64_t deadline = nowMs() + timeoutMs;
  int status = 0;
  bool reaped = false;
  for (;;) {
    if (*fd >= 0) {
      struct pollfd pfd = {*fd, POLLIN, 0};
      int n = poll(&pfd, 1, reaped ? 0 : 20);
      if (n > 0) {
        char tmp[4096];
        ssize_t r = read(*fd, tmp, sizeof(tmp));
        if (r > 0) {
          res.out.append(tmp, (size_t)r);
          continue;
        }
        if (r == 0 || errno != EINTR) {
          close(*fd);
          *fd = -1;
        }
        continue;
      }
    } else if (!reaped) {
      usleep(20000);
    }
    if (reaped) break;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      reaped = true;
      continue;  // drain what is left, without blocking
    }
    if (nowMs() >= deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      res.timedOut = true;
      reaped = true;
    }
  }
  if (*fd >= 0) {
    close(*fd);
    *fd = -1;
  }
  if (WIFEXITED(status)) {
    res.exited = true;
    res.exitCode = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    res.signal = WTERMSIG(status);
  }
  return res;
}

std::string uniqueName(const std::string& tag) {
  static std::atomic<int> counter{0};
  return "rnt-" + std::to_string(getpid()) + "-" + tag + "-" + std::to_string(counter++);
}

// Quote for /bin/sh.
std::string q(const std::string& s) {
  std::string r = "'";
  for (char c : s) {
    if (c == '\'') r += "'\\''";
    else r += c;
  }
  return r + "'";
}

}  // namespace

void NetNsIo::say(const std::string& line) const {
  std::string l = line + "\n";
  writeAll(fd, l.data(), l.size());
}

std::string NetNsResult::describe() const {
  std::string s;
  if (!started) s = "not started";
  else if (timedOut) s = "killed after timeout";
  else if (exited) s = "exit " + std::to_string(exitCode);
  else s = "signal " + std::to_string(signal);
  if (!out.empty()) s += "; output:\n" + out;
  return s;
}

// ---------------------------------------------------------------- NetNsChild

NetNsChild::NetNsChild(const NetNs& ns, const std::function<int(NetNsIo&)>& fn) {
  std::string err;
  pid_ = spawnIn(ns.path(), fn, &fd_, &err);
  if (pid_ < 0) res_.out = err;
}

NetNsChild::~NetNsChild() {
  if (pid_ > 0 && !done_) {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (fd_ >= 0) close(fd_);
}

void NetNsChild::kill(int sig) {
  if (pid_ > 0 && !done_) ::kill(pid_, sig);
}

bool NetNsChild::readLine(std::string* line, int timeoutMs) {
  int64_t deadline = nowMs() + timeoutMs;
  for (;;) {
    size_t nl = buf_.find('\n');
    if (nl != std::string::npos) {
      *line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return true;
    }
    if (fd_ < 0) return false;
    int left = (int)(deadline - nowMs());
    if (left <= 0) return false;
    struct pollfd pfd = {fd_, POLLIN, 0};
    int n = poll(&pfd, 1, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    char tmp[4096];
    ssize_t r = read(fd_, tmp, sizeof(tmp));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      close(fd_);
      fd_ = -1;
      continue;
    }
    buf_.append(tmp, (size_t)r);
  }
}

NetNsResult NetNsChild::wait(int timeoutMs) {
  if (done_ || pid_ <= 0) return res_;
  res_ = waitChild(pid_, &fd_, timeoutMs);
  res_.out = buf_ + res_.out;
  buf_.clear();
  done_ = true;
  return res_;
}

// ---------------------------------------------------------------- NetNs

static NetNsResult runIn(const std::string& nsPath, const std::function<int(NetNsIo&)>& fn, int timeoutMs) {
  int fd = -1;
  std::string err;
  pid_t pid = spawnIn(nsPath, fn, &fd, &err);
  if (pid < 0) {
    NetNsResult res;
    res.out = err;
    return res;
  }
  return waitChild(pid, &fd, timeoutMs);
}

static std::function<int(NetNsIo&)> shellFn(const std::string& cmd) {
  return [cmd](NetNsIo& io) -> int {
    dup2(io.fd, 1);
    dup2(io.fd, 2);
    execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
    _exit(127);
  };
}

int NetNs::hostSh(const std::string& cmd, std::string* out) {
  NetNsResult r = runIn("", shellFn(cmd), 60000);
  if (out) *out = r.out;
  return r.started && r.exited ? r.exitCode : -1;
}

bool NetNs::available(std::string* why) {
  if (geteuid() != 0) {
    *why = "netns tests need root (network namespaces, veth pairs)";
    return false;
  }
  std::string out;
  if (hostSh("command -v ip", &out) != 0) {
    *why = "netns tests need iproute2's ip command";
    return false;
  }
  NetNs probe("probe");
  if (!probe.ok()) {
    *why = "'ip netns add' failed on this machine";
    return false;
  }
  if (!veth(probe, "probe0", probe, "probe1")) {
    *why = "cannot create a veth pair inside a network namespace";
    return false;
  }
  return true;
}

bool NetNs::availableCached(std::string* why) {
  static int state = -1;  // -1 unknown, 0 no, 1 yes
  static std::string reason;
  if (state < 0) {
    state = available(&reason) ? 1 : 0;
    if (state == 1) cleanupStale();
  }
  *why = reason;
  return state == 1;
}

void NetNs::cleanupStale() {
  DIR* d = opendir("/run/netns");
  if (!d) return;
  std::vector<std::string> stale;
  while (struct dirent* e = readdir(d)) {
    int pid = 0;
    if (sscanf(e->d_name, "rnt-%d-", &pid) != 1 || pid <= 0) continue;
    if (pid == getpid()) continue;
    if (kill(pid, 0) != 0 && errno == ESRCH) stale.push_back(e->d_name);
  }
  closedir(d);
  for (auto& n : stale) hostSh("ip netns del " + q(n));
}

NetNs::NetNs(const std::string& tag) : name_(uniqueName(tag)) {
  std::string out;
  int rc = hostSh("ip netns add " + q(name_), &out);
  ok_ = rc == 0;
  if (!ok_) fprintf(stderr, "netns: 'ip netns add %s' failed (%d): %s\n", name_.c_str(), rc, out.c_str());
}

NetNs::~NetNs() {
  if (!ok_) return;
  std::string out;
  int rc = hostSh("ip netns del " + q(name_), &out);
  if (rc != 0) fprintf(stderr, "netns: 'ip netns del %s' failed (%d): %s\n", name_.c_str(), rc, out.c_str());
}

NetNsResult NetNs::run(const std::function<int(NetNsIo&)>& fn, int timeoutMs) const {
  return runIn(path(), fn, timeoutMs);
}

NetNsResult NetNs::exec(const std::string& cmd, int timeoutMs) const { return runIn(path(), shellFn(cmd), timeoutMs); }

bool NetNs::sh(const std::string& cmd, int timeoutMs) const {
  NetNsResult r = exec(cmd, timeoutMs);
  if (!r.success()) fprintf(stderr, "netns %s: '%s' failed: %s\n", name_.c_str(), cmd.c_str(), r.describe().c_str());
  return r.success();
}

bool NetNs::veth(const NetNs& a, const std::string& nameA, const NetNs& b, const std::string& nameB) {
  std::string cmd = "ip link add " + q(nameA) + " type veth peer name " + q(nameB);
  if (&a != &b) cmd += " netns " + q(b.name());
  return a.sh(cmd);
}

bool NetNs::up(const std::string& ifname) const { return sh("ip link set dev " + q(ifname) + " up"); }
bool NetNs::down(const std::string& ifname) const { return sh("ip link set dev " + q(ifname) + " down"); }

bool NetNs::addAddr(const std::string& ifname, const std::string& cidr) const {
  std::string cmd = "ip addr add " + q(cidr) + " dev " + q(ifname);
  if (cidr.find(':') != std::string::npos) cmd += " nodad";
  return sh(cmd);
}

bool NetNs::noLinkLocal(const std::string& ifname) const {
  return sh("ip link set dev " + q(ifname) + " addrgenmode none");
}

bool NetNs::deleteLink(const std::string& ifname) const { return sh("ip link del dev " + q(ifname)); }

bool NetNs::waitRunning(const std::string& ifname, bool running, int timeoutMs) const {
  NetNsResult r = run(
      [&](NetNsIo& io) {
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return 2;
        int64_t deadline = nowMs() + timeoutMs;
        for (;;) {
          struct ifreq ifr;
          memset(&ifr, 0, sizeof(ifr));
          snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", ifname.c_str());
          if (ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
            io.say("SIOCGIFFLAGS " + ifname + ": " + strerror(errno));
            return 3;
          }
          if (((ifr.ifr_flags & IFF_RUNNING) != 0) == running) return 0;
          if (nowMs() >= deadline) return 1;
          usleep(10000);
        }
      },
      timeoutMs + 5000);
  if (!r.success())
    fprintf(stderr, "netns %s: %s did not become %s: %s\n", name_.c_str(), ifname.c_str(),
            running ? "running" : "not running", r.describe().c_str());
  return r.success();
}
