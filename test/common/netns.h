// Network namespaces for the netns test tier (root only).
//
// The test process itself never leaves its own namespace: everything that must run
// inside a test namespace runs in a forked child that calls setns() and then either a
// function (NetNs::run / NetNsChild) or /bin/sh -c (NetNs::exec). Namespaces, and with
// them every interface inside, are removed by the destructors, also when a test fails.
// Names carry the pid ("rnt-<pid>-<tag>-<n>") so that parallel runs never collide and
// NetNs::cleanupStale() can remove what a killed run left behind.
//
// Typical use:
//   NetNs a("a"), b("b");
//   ASSERT_TRUE(a.ok() && b.ok());
//   ASSERT_TRUE(NetNs::veth(a, "eth0", b, "peer0"));
//   ASSERT_TRUE(a.addAddr("eth0", "198.18.0.1/24") && a.up("eth0") && b.up("peer0"));
//   NetNsResult r = a.run([](NetNsIo& io) { io.say("hello"); return 0; });
//   EXPECT_EQ(r.exitCode, 0); EXPECT_EQ(r.out, "hello\n");
//
// Only addresses from 198.18.0.0/15 and 2001:db8::/32 belong in these namespaces.
#pragma once
#include <sys/types.h>
#include <functional>
#include <string>
#include "test_util.h"

// Skip the current test (RAILNET_SKIP, with the reason) unless the netns tier can run;
// the check is made once per process. Also removes namespaces left by killed runs.
#define RAILNET_REQUIRE_NETNS()                          \
  do {                                                   \
    std::string why_;                                    \
    if (!NetNs::availableCached(&why_)) RAILNET_SKIP(why_); \
  } while (0)

// What a child running inside a namespace reports to the parent.
struct NetNsIo {
  int fd = -1;  // write end of the pipe to the parent
  // Send text to the parent (a newline is appended; NetNsChild::readLine reads it).
  void say(const std::string& line) const;
};

struct NetNsResult {
  bool started = false;   // fork/setns worked
  bool exited = false;    // ended by exit (else by a signal or killed on timeout)
  int exitCode = -1;      // exit status when exited
  int signal = 0;         // terminating signal otherwise
  bool timedOut = false;  // killed because it ran past the timeout
  std::string out;        // everything the child sent (NetNsIo::say, or stdout+stderr of exec)
  bool success() const { return started && exited && exitCode == 0 && !timedOut; }
  std::string describe() const;  // "exit 0", "signal 9 (timeout)", ... plus the output
};

class NetNs;

// A child process inside a namespace, running a function; killed and reaped by the
// destructor if still running. Use it for two concurrent peers (listener / connector).
class NetNsChild {
 public:
  NetNsChild() = default;
  NetNsChild(const NetNs& ns, const std::function<int(NetNsIo&)>& fn);
  ~NetNsChild();
  NetNsChild(const NetNsChild&) = delete;
  NetNsChild& operator=(const NetNsChild&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // Next line the child said (without the newline); false on timeout or end of output.
  bool readLine(std::string* line, int timeoutMs = 10000);
  // Wait for the end (killing the child with SIGKILL after timeoutMs); collects the
  // output not yet read with readLine.
  NetNsResult wait(int timeoutMs = 30000);
  void kill(int sig = 9);

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string buf_;
  bool done_ = false;
  NetNsResult res_;
};

class NetNs {
 public:
  // Is the tier possible here? On false, *why says why (for RAILNET_SKIP).
  static bool available(std::string* why);
  // available(), probed once per process (the first call also runs cleanupStale()).
  static bool availableCached(std::string* why);
  // Remove namespaces "rnt-<pid>-*" whose process is gone (a run killed mid-test).
  static void cleanupStale();
  // Run a shell command in the test's own namespace; returns its exit status (-1 if it
  // could not run) and its stdout+stderr in *out.
  static int hostSh(const std::string& cmd, std::string* out = nullptr);

  explicit NetNs(const std::string& tag);
  ~NetNs();
  NetNs(const NetNs&) = delete;
  NetNs& operator=(const NetNs&) = delete;

  bool ok() const { return ok_; }
  const std::string& name() const { return name_; }  // as in `ip netns list`
  std::string path() const { return "/run/netns/" + name_; }

  // Run fn in a forked child inside this namespace; returns its status and output.
  NetNsResult run(const std::function<int(NetNsIo&)>& fn, int timeoutMs = 30000) const;
  // /bin/sh -c cmd inside this namespace (stdout+stderr in out).
  NetNsResult exec(const std::string& cmd, int timeoutMs = 30000) const;
  // exec() that reports a failure (command, status, output) on stderr; true on success.
  bool sh(const std::string& cmd, int timeoutMs = 30000) const;

  // A veth pair: end nameA in a, end nameB in b (b may be a itself).
  static bool veth(const NetNs& a, const std::string& nameA, const NetNs& b, const std::string& nameB);
  bool up(const std::string& ifname) const;
  bool down(const std::string& ifname) const;
  // "198.18.0.1/24" or "2001:db8::1/64" (IPv6 added with nodad: usable at once).
  bool addAddr(const std::string& ifname, const std::string& cidr) const;
  // No automatic IPv6 link-local address (call before up()).
  bool noLinkLocal(const std::string& ifname) const;
  bool deleteLink(const std::string& ifname) const;
  // Wait until ifname has IFF_RUNNING (up, with carrier: the kernel sets it
  // asynchronously after `up`) or, with running=false, until it lost it.
  bool waitRunning(const std::string& ifname, bool running = true, int timeoutMs = 5000) const;

 private:
  std::string name_;
  bool ok_ = false;
};
