// railnet-diag and railnet-perf, run as a user runs them: a fake sysfs tree under $SYSFS_PATH
// for the RDMA sections, conf files for --params, a lowered RLIMIT_MEMLOCK in a child shell,
// and a loopback sweep over the Socket transport. Assertions are on the output and the exit
// status, never on speed.
#include <sys/wait.h>
#include <unistd.h>
#include <map>
#include <sstream>
#include <string>
#include <vector>
#include "json_check.h"
#include "plugin_loader.h"
#include "railnet.h"
#include "test_util.h"

namespace {

// shellRun(cmd) with every variable cleared first that could leak in from the caller's
// environment and change the tools' answers.
ToolRun sh(const std::string& cmd) {
  return shellRun(
      "unset NCCL_SOCKET_IFNAME NCCL_IB_HCA NCCL_IB_GID_INDEX NCCL_CONF_FILE NCCL_DEBUG NCCL_NET_PLUGIN "
      "NCCL_IB_ADDR_FAMILY NCCL_IB_ROCE_VERSION_NUM NCCL_IB_ADDR_RANGE SYSFS_PATH; " + cmd);
}

// The same with stdout in out and stderr in err, apart (for --json and usage errors).
ToolRun shSplit(const std::string& cmd, std::string* err) {
  TempDir d;
  // Braces, not a subshell: dash drops the redirection of a subshell that is the last command.
  ToolRun r = sh("{ { " + cmd + "; } 2>" + d.path() + "/err; }");
  *err = readFile(d.path() + "/err");
  return r;
}

// A sysfs tree with four ports: two RoCE (one downshifted), one IB in INIT, one IB active.
struct FakeSysfs {
  TempDir dir;
  void port(const std::string& dev, const std::string& state, const std::string& link, const std::string& rate) {
    std::string p = "class/infiniband/" + dev + "/ports/1/";
    dir.write(p + "state", state + "\n");
    dir.write(p + "phys_state", "5: LinkUp\n");
    dir.write(p + "link_layer", link + "\n");
    dir.write(p + "rate", rate + "\n");
  }
  void gid(const std::string& dev, int idx, const std::string& gid, const std::string& type, const std::string& ndev) {
    std::string p = "class/infiniband/" + dev + "/ports/1/";
    dir.write(p + "gids/" + std::to_string(idx), gid + "\n");
    if (!type.empty()) dir.write(p + "gid_attrs/types/" + std::to_string(idx), type + "\n");
    if (!ndev.empty()) dir.write(p + "gid_attrs/ndevs/" + std::to_string(idx), ndev + "\n");
  }
  // One active RoCE port with the usual four GIDs (link-local v1/v2, IPv4 198.18.0.1 v1/v2).
  void roce(const std::string& dev, const std::string& rate = "200 Gb/sec (4X HDR)") {
    port(dev, "4: ACTIVE", "Ethernet", rate);
    gid(dev, 0, "fe80:0000:0000:0000:0ac0:ebff:fe3d:ca54", "IB/RoCE v1", "eth2");
    gid(dev, 1, "fe80:0000:0000:0000:0ac0:ebff:fe3d:ca54", "RoCE v2", "eth2");
    gid(dev, 2, "0000:0000:0000:0000:0000:ffff:c612:0001", "IB/RoCE v1", "eth2");
    gid(dev, 3, "0000:0000:0000:0000:0000:ffff:c612:0001", "RoCE v2", "eth2");
    gid(dev, 4, "0000:0000:0000:0000:0000:0000:0000:0000", "", "");
  }
  std::string env() const { return "SYSFS_PATH=" + dir.path() + " HOME=" + dir.path() + " "; }
};

std::string diag() { return buildTool("railnet-diag"); }
std::string perf() { return buildTool("railnet-perf"); }

// A shell command that runs diagCmd (a --watch) with its output in dir, makes change once the
// diag has taken its first sample, however late a loaded machine starts it, and ends with the
// diag's output (standard output, then standard error) and exit status. The diag says
// "watching ..." once its first samples are taken (on standard error with --json); after 30 s
// the change is made anyway. (A file's access time is no sign: discovery reads the counters
// too, before the first sample.)
std::string afterFirstSample(const std::string& diagCmd, const std::string& change, const std::string& dir) {
  std::string out = dir + "/watch.out", errf = dir + "/watch.err", rc = dir + "/watch.rc";
  return "(" + diagCmd + " >" + out + " 2>" + errf + "; echo $? >" + rc + ") & " +
         "for i in $(seq 600); do grep -qs watching " + out + " " + errf + " && break; sleep 0.05; done; " + change +
         "; wait; cat " + out + "; cat " + errf + " >&2; exit $(cat " + rc + ")";
}

TEST(RailnetDiag, HelpDescribesEveryOption) {
  ToolRun r = sh(diag() + " --help");
  EXPECT_EQ(r.status, 0) << r.out;
  for (const char* o : {"--json", "--params", "--watch SECONDS", "SYSFS_PATH", "Exit status"}) EXPECT_TRUE(has(r.out, o)) << o;
  EXPECT_EQ(sh(diag() + " --bogus").status, 2);
  EXPECT_EQ(sh(diag() + " --watch 0").status, 2);
}

TEST(RailnetDiag, FlagsDownshiftAndLinkLayerMismatch) {
  FakeSysfs fs;
  fs.roce("mlx5_0");
  fs.roce("mlx5_1", "100 Gb/sec (2X HDR)");
  fs.port("mlx5_2", "4: ACTIVE", "InfiniBand", "400 Gb/sec (4X NDR)");
  fs.gid("mlx5_2", 0, "fe80:0000:0000:0000:0ac0:ebff:fe3d:ca56", "", "");
  ToolRun r = sh(fs.env() + diag());
  EXPECT_EQ(r.status, 1) << r.out;
  auto down = linesWith(r.out, "link downshift");
  ASSERT_EQ(down.size(), 1u) << r.out;
  EXPECT_TRUE(has(down[0], "PROBLEM: mlx5_1:1 runs at 100 Gb/sec (2X HDR), below the 200 Gb/sec")) << down[0];
  EXPECT_TRUE(has(down[0], "Fix: ")) << down[0];
  auto ll = linesWith(r.out, "link layers disagree");
  ASSERT_EQ(ll.size(), 1u) << r.out;
  EXPECT_TRUE(has(ll[0], "Ethernet") && has(ll[0], "InfiniBand") && has(ll[0], "Fix: ") && has(ll[0], "NCCL_IB_HCA"))
      << ll[0];
}

TEST(RailnetDiag, NoRdmaProblemsOnAHealthyTree) {
  FakeSysfs fs;
  fs.roce("mlx5_0");
  fs.roce("mlx5_1");
  ToolRun r = sh(fs.env() + "NCCL_SOCKET_IFNAME=lo " + diag());
  EXPECT_TRUE(linesWith(r.out, "downshift").empty()) << r.out;
  EXPECT_TRUE(linesWith(r.out, "disagree").empty()) << r.out;
  EXPECT_EQ(linesWith(r.out, "chosen: 3 -- best of 4 of 5 entries (types from sysfs) for AF_INET, RoCE v2").size(), 2u) << r.out;
}

TEST(RailnetDiag, PortNotActiveNamesTheSubnetManager) {
  FakeSysfs fs;
  fs.port("mlx5_0", "2: INIT", "InfiniBand", "400 Gb/sec (4X NDR)");
  ToolRun r = sh(fs.env() + diag());
  EXPECT_EQ(r.status, 1);
  auto l = linesWith(r.out, "PROBLEM: mlx5_0:1 is INIT");
  ASSERT_EQ(l.size(), 1u) << r.out;
  EXPECT_TRUE(has(l[0], "Subnet Manager") && has(l[0], "sminfo")) << l[0];
}

TEST(RailnetDiag, WarnsWhenGidIndexIsForced) {
  FakeSysfs fs;
  fs.roce("mlx5_0");
  ToolRun r = sh(fs.env() + "NCCL_IB_GID_INDEX=2 " + diag());
  auto w = linesWith(r.out, "WARNING: NCCL_IB_GID_INDEX=2 (environment) overrides the automatic GID selection");
  ASSERT_EQ(w.size(), 1u) << r.out;
  EXPECT_TRUE(has(w[0], "Fix: unset NCCL_IB_GID_INDEX")) << w[0];
  EXPECT_EQ(linesWith(r.out, "chosen: 2 -- forced by NCCL_IB_GID_INDEX=2").size(), 1u) << r.out;

  // A malformed index: one answer, the true one. The transport reads the default (-1: the
  // automatic choice), the Settings say so once, and the GID section claims no override.
  r = sh(fs.env() + "NCCL_IB_GID_INDEX=abc " + diag());
  EXPECT_EQ(r.status, 1) << r.out;
  auto all = linesWith(r.out, "NCCL_IB_GID_INDEX");
  std::vector<std::string> findings;
  for (const std::string& x : all)
    if (has(x, "PROBLEM") || has(x, "WARNING")) findings.push_back(x);
  ASSERT_EQ(findings.size(), 1u) << r.out;
  EXPECT_TRUE(has(findings[0], "PROBLEM: NCCL_IB_GID_INDEX='abc' (environment) is not an integer in [-1, 65535]: the "
                               "default -1 is used instead"))
      << findings[0];
  EXPECT_TRUE(linesWith(r.out, "overrides").empty()) << r.out;
  EXPECT_EQ(linesWith(r.out, "chosen: 3 -- best of 4 of 5 entries").size(), 1u) << r.out;

  // An index that names an empty GID is a problem, also when it comes from a conf file.
  fs.dir.write("nccl.conf", "NCCL_IB_GID_INDEX=4\n");
  r = sh(fs.env() + "NCCL_CONF_FILE=" + fs.dir.path() + "/nccl.conf " + diag());
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(linesWith(r.out, "PROBLEM: NCCL_IB_GID_INDEX=4 (user conf file) names an empty GID").size(), 1u) << r.out;
}

TEST(RailnetDiag, NoRoutableGidIsAProblem) {
  FakeSysfs fs;
  fs.port("mlx5_0", "4: ACTIVE", "Ethernet", "100 Gb/sec (4X EDR)");
  fs.gid("mlx5_0", 0, "fe80:0000:0000:0000:0ac0:ebff:fe3d:ca54", "IB/RoCE v1", "eth2");
  fs.gid("mlx5_0", 1, "fe80:0000:0000:0000:0ac0:ebff:fe3d:ca54", "RoCE v2", "eth2");
  ToolRun r = sh(fs.env() + diag());
  auto l = linesWith(r.out, "has no routable GID");
  ASSERT_EQ(l.size(), 1u) << r.out;
  EXPECT_TRUE(has(l[0], "assign an IP address to eth2")) << l[0];
}

// Does this process hold CAP_IPC_LOCK (effective)?
bool holdsIpcLock() {
  std::string st = readFile("/proc/self/status");
  size_t at = st.find("CapEff:");
  return at != std::string::npos && ((strtoull(st.c_str() + at + 7, nullptr, 16) >> 14) & 1);
}

// cmd in a shell without CAP_IPC_LOCK: as root, setpriv drops it from the bounding set, so the
// shell's exec leaves it out; "" where that cannot be done.
std::string withoutIpcLock(const std::string& cmd) {
  if (!holdsIpcLock()) return "sh -c '" + cmd + "'";
  if (shellRun("setpriv --bounding-set -ipc_lock true").status != 0) return "";
  return "setpriv --bounding-set -ipc_lock sh -c '" + cmd + "'";
}

TEST(RailnetDiag, LoweredMemlockIsAProblemWithTheLimitsConfFix) {
  FakeSysfs fs;
  fs.roce("mlx5_0");
  std::string cmd = withoutIpcLock("ulimit -l 64 && " + fs.env() + diag());
  if (cmd.empty()) RAILNET_SKIP("cannot drop CAP_IPC_LOCK here (setpriv --bounding-set fails)");
  ToolRun r = sh(cmd);
  EXPECT_EQ(r.status, 1) << r.out;
  auto l = linesWith(r.out, "PROBLEM: the locked-memory limit is 64 KiB");
  ASSERT_EQ(l.size(), 1u) << r.out;
  EXPECT_TRUE(has(l[0], "memlock unlimited") && has(l[0], "/etc/security/limits.conf")) << l[0];
  // both fixes of a container: the capability, or the limit
  // the cause: no CAP_IPC_LOCK (in a plain build diag also saw an mlock past the limit fail; under
  // AddressSanitizer mlock is a no-op, so only the capability says it)
  EXPECT_TRUE(has(l[0], "could not pin 1 MiB beyond it (no CAP_IPC_LOCK)") || has(l[0], "lacks CAP_IPC_LOCK")) << l[0];
  EXPECT_TRUE(has(l[0], "securityContext.capabilities.add: [IPC_LOCK]") && has(l[0], "--cap-add IPC_LOCK") &&
              has(l[0], "--ulimit memlock=-1"))
      << l[0];

  // Without RDMA ports the same limit only warns (the Socket transport pins nothing).
  TempDir empty;
  r = sh(withoutIpcLock("ulimit -l 64 && SYSFS_PATH=" + empty.path() + " HOME=" + empty.path() + " " + diag()));
  EXPECT_EQ(linesWith(r.out, "WARNING: the locked-memory limit is 64 KiB").size(), 1u) << r.out;

  // Unlimited is fine (only where this process may raise its hard limit).
  r = sh("ulimit -l unlimited 2>/dev/null || exit 77; " + fs.env() + diag());
  if (r.status != 77) {
    EXPECT_TRUE(linesWith(r.out, "locked-memory limit").empty()) << r.out;
  }
}

// A process holding CAP_IPC_LOCK pins beyond RLIMIT_MEMLOCK: diag tries it (mlock 1 MiB past
// the limit) and reports no problem, in text and JSON.
TEST(RailnetDiag, MemlockLimitDoesNotBindAHolderOfCapIpcLock) {
  if (!holdsIpcLock()) RAILNET_SKIP("this process does not hold CAP_IPC_LOCK");
  FakeSysfs fs;
  fs.roce("mlx5_0");
  ToolRun r = sh("ulimit -l 64 && " + fs.env() + "NCCL_SOCKET_IFNAME=lo " + diag());
  EXPECT_TRUE(linesWith(r.out, "locked-memory limit is").empty()) << r.out;
  EXPECT_TRUE(has(r.out, "  soft 64 KiB, hard ")) << r.out;
  EXPECT_TRUE(has(r.out, "this process holds CAP_IPC_LOCK and pinned 1 MiB beyond the limit")) << r.out;
  std::string err;
  r = shSplit("ulimit -l 64 && " + fs.env() + "NCCL_SOCKET_IFNAME=lo " + diag() + " --json", &err);
  EXPECT_EQ(pythonOnJson(r.out, "m = d['memlock']\nprint(m['ok'], m['CAP_IPC_LOCK'], m['pinned_beyond_limit'])"),
            "True True True\n")
      << r.out;
}

// Every variable is judged by the module's own parser, range and check (railnetParamJudge):
// a value the plugin refuses or cuts is a PROBLEM saying what the plugin does; the JSON
// carries the verdict.
TEST(RailnetDiag, SettingsThePluginRefusesOrCutsAreProblems) {
  TempDir d;
  std::string env = "SYSFS_PATH=" + d.path() + " HOME=" + d.path() + " NCCL_SOCKET_IFNAME=lo ";
  ToolRun r = sh(env + "RAILNET_TRANSPORT=rdma " + diag());
  EXPECT_EQ(r.status, 1) << r.out;
  auto l = linesWith(r.out, "PROBLEM: invalid RAILNET_TRANSPORT=rdma: the plugin's init fails");
  ASSERT_EQ(l.size(), 1u) << r.out;
  EXPECT_TRUE(has(l[0], "use auto, ib or socket")) << l[0];
  r = sh(env + "RAILNET_TRANSPORT=Socket " + diag());
  EXPECT_TRUE(linesWith(r.out, "RAILNET_TRANSPORT=Socket:").empty() && linesWith(r.out, "PROBLEM").empty()) << r.out;

  r = sh(env + "NCCL_SOCKET_NTHREADS=99 " + diag());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(linesWith(r.out, "PROBLEM: NCCL_SOCKET_NTHREADS=99 is above the maximum 16: the Socket transport uses 16 "
                             "helper threads per comm").size(),
            1u)
      << r.out;
  r = sh(env + "NCCL_SOCKET_NTHREADS=8 NCCL_NSOCKS_PERTHREAD=16 " + diag());
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(linesWith(r.out, "PROBLEM: NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD = 8 x 16 is above 64 sockets: the "
                             "Socket transport uses 8 sockets per thread").size(),
            1u)
      << r.out;
  r = sh(env + "NCCL_SOCKET_NTHREADS=16 NCCL_NSOCKS_PERTHREAD=4 " + diag());
  EXPECT_EQ(r.status, 0) << r.out;

  std::string err;
  r = shSplit(env + "RAILNET_TRANSPORT=rdma NCCL_SOCKET_NTHREADS=4 " + diag() + " --json", &err);
  EXPECT_EQ(pythonOnJson(r.out, "v = {p['name']: p['verdict'] for p in d['params']['params']}\n"
                                "print(v['RAILNET_TRANSPORT'], v['NCCL_SOCKET_NTHREADS'])"),
            "refused taken\n")
      << r.out;
}

// HOME at the passwd entry's home is where ~/.nccl.conf is looked for anyway: not a setting.
TEST(RailnetDiag, HomeAtThePasswdHomeIsNotASetting) {
  TempDir d;
  ToolRun r = sh("HOME=$(getent passwd $(id -u) | cut -d: -f6) SYSFS_PATH=" + d.path() + " NCCL_SOCKET_IFNAME=lo " +
                 diag());
  EXPECT_TRUE(has(r.out, "== Settings")) << r.out;
  EXPECT_TRUE(linesWith(r.out, "  HOME=").empty()) << r.out;
  r = sh("HOME=" + d.path() + " SYSFS_PATH=" + d.path() + " NCCL_SOCKET_IFNAME=lo " + diag());
  EXPECT_EQ(linesWith(r.out, "  HOME=" + d.path() + " (environment").size(), 1u) << r.out;
}

TEST(RailnetDiag, ParamsShowValueAndSource) {
  TempDir d;
  d.write("user.conf", "NCCL_SOCKET_NTHREADS=4\n");
  d.write("system.conf", "NCCL_NSOCKS_PERTHREAD=2\nNCCL_SOCKET_NTHREADS=8\n");
  ToolRun r = sh("HOME=" + d.path() + " NCCL_CONF_FILE=" + d.path() + "/user.conf RAILNET_SYSTEM_CONF=" + d.path() +
             "/system.conf NCCL_SOCKET_INLINE=64 " + diag() + " --params");
  EXPECT_EQ(r.status, 0) << r.out;
  auto l = linesWith(r.out, "NCCL_SOCKET_NTHREADS ");
  ASSERT_EQ(l.size(), 1u) << r.out;
  EXPECT_TRUE(has(l[0], " 4 ") && has(l[0], "(user conf file; default -2)")) << l[0];
  l = linesWith(r.out, "NCCL_NSOCKS_PERTHREAD ");
  ASSERT_EQ(l.size(), 1u);
  EXPECT_TRUE(has(l[0], " 2 ") && has(l[0], "(system conf file; default -2)")) << l[0];
  l = linesWith(r.out, "NCCL_SOCKET_INLINE ");
  ASSERT_EQ(l.size(), 1u);
  EXPECT_TRUE(has(l[0], " 64 ") && has(l[0], "(environment; default 128)")) << l[0];
  l = linesWith(r.out, "NCCL_SOCKET_RETRY_CNT ");
  ASSERT_EQ(l.size(), 1u);
  EXPECT_TRUE(has(l[0], "(default)")) << l[0];
  // Every registered param is listed, each with its doc line.
  int total = 0;
  for (int t = 0; t < railnetParamTableCount(); t++)
    for (int i = 0; i < railnetParamTableAt(t)->count; i++) {
      total++;
      EXPECT_GE(linesWith(r.out, std::string(railnetParamTableAt(t)->params[i].name) + " ").size(), 1u)
          << railnetParamTableAt(t)->params[i].name;
    }
  EXPECT_GT(total, 10);
  // ... and among them every variable of NCCL 2.30's two transports (test/data/nccl-env-vars.txt).
  std::string list = readFile("test/data/nccl-env-vars.txt");
  if (list.empty()) list = readFile(buildLibDir() + "/../../test/data/nccl-env-vars.txt");
  ASSERT_FALSE(list.empty()) << "test/data/nccl-env-vars.txt not found (run from the repository root)";
  std::istringstream names(list);
  std::string name;
  int listed = 0, wanted = 0;
  while (std::getline(names, name)) {
    if (name.empty() || name[0] == '#') continue;
    wanted++;
    bool found = !linesWith(r.out, "  " + name + " ").empty();
    listed += found;
    EXPECT_TRUE(found) << name << " is not in railnet-diag --params";
  }
  EXPECT_EQ(wanted, 60);
  EXPECT_EQ(listed, wanted) << listed << "/" << wanted << " NCCL transport variables listed";

  // A malformed value is a problem with its fix.
  r = sh("HOME=" + d.path() + " NCCL_SOCKET_NTHREADS=lots " + diag() + " --params");
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(linesWith(r.out, "PROBLEM: NCCL_SOCKET_NTHREADS='lots' (environment) is not an integer in [-2, 1024]: "
                             "the default -2 is used instead").size(),
            1u)
      << r.out;
}

TEST(RailnetDiag, InterfacesFollowNcclSocketIfname) {
  TempDir empty;
  ToolRun r = sh("SYSFS_PATH=" + empty.path() + " HOME=" + empty.path() + " NCCL_SOCKET_IFNAME==lo " + diag());
  EXPECT_TRUE(has(r.out, "NCCL_SOCKET_IFNAME==lo (environment) bypasses the automatic chain")) << r.out;
  EXPECT_TRUE(has(r.out, "selected: lo (127.0.0.1) -- by step: NCCL_SOCKET_IFNAME")) << r.out;
  r = sh("SYSFS_PATH=" + empty.path() + " HOME=" + empty.path() + " NCCL_SOCKET_IFNAME==nosuchif0 " + diag());
  EXPECT_EQ(r.status, 1);
  auto l = linesWith(r.out, "PROBLEM: NCCL_SOCKET_IFNAME==nosuchif0 (environment) selects no interface");
  ASSERT_EQ(l.size(), 1u) << r.out;
  EXPECT_TRUE(has(l[0], "Fix: ")) << l[0];
  EXPECT_TRUE(has(r.out, "ip_local_port_range = ")) << r.out;

  // Set but naming no interface: ignored with a warning, the automatic chain decides.
  for (const char* spec : {"", "=", "^", ",", "^=", " , "}) {
    r = sh("SYSFS_PATH=" + empty.path() + " HOME=" + empty.path() + " NCCL_SOCKET_IFNAME='" + spec + "' " + diag());
    auto w = linesWith(r.out, std::string("WARNING: NCCL_SOCKET_IFNAME=\"") + spec +
                                  "\" (environment) names no interface: it is ignored and the automatic choice is used");
    ASSERT_EQ(w.size(), 1u) << "[" << spec << "]\n" << r.out;
    EXPECT_TRUE(has(w[0], "Fix: name the interfaces (e.g. NCCL_SOCKET_IFNAME=eth0 or =eth0,eth1) or unset")) << w[0];
    EXPECT_TRUE(has(r.out, "automatic chain: ib* >")) << r.out;
    EXPECT_FALSE(has(r.out, "bypasses the automatic chain")) << r.out;
  }
  r = sh("SYSFS_PATH=" + empty.path() + " HOME=" + empty.path() + " NCCL_SOCKET_IFNAME=e " + diag());
  EXPECT_FALSE(has(r.out, "names no interface")) << r.out;  // one character: NCCL's own "too short" rule
}

TEST(RailnetDiag, JsonHoldsTheSameFacts) {
  FakeSysfs fs;
  fs.roce("mlx5_0");
  fs.roce("mlx5_1", "100 Gb/sec (2X HDR)");
  ToolRun r = sh(fs.env() + "NCCL_SOCKET_IFNAME==lo " + diag() + " --json");
  EXPECT_EQ(r.status, 1);
  ASSERT_FALSE(r.out.empty());
  EXPECT_EQ(r.out.substr(r.out.size() - 2), "}\n") << r.out;
  EXPECT_EQ(jsonProblem(r.out), "") << r.out;
  EXPECT_TRUE(has(r.out, "\"chosen\":3")) << r.out;
  EXPECT_TRUE(has(r.out, "\"step\":\"NCCL_SOCKET_IFNAME\"")) << r.out;
  EXPECT_TRUE(has(r.out, "link downshift")) << r.out;
  EXPECT_TRUE(has(r.out, "\"severity\":\"problem\"")) << r.out;
}

TEST(RailnetDiag, WatchPrintsCounterGrowth) {
  FakeSysfs fs;
  fs.roce("mlx5_0");
  std::string ctr = fs.dir.write("class/infiniband/mlx5_0/ports/1/hw_counters/packet_seq_err", "7\n");
  fs.dir.write("class/infiniband/mlx5_0/ports/1/counters/symbol_error", "0\n");
  ToolRun r = sh(afterFirstSample(fs.env() + diag() + " --watch 3", "echo 12 > " + ctr, fs.dir.path()));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_TRUE(has(r.out, "mlx5_0:1 packet_seq_err +5 (now 12)")) << r.out;
  auto l = linesWith(r.out, "PROBLEM: mlx5_0:1 packet_seq_err grew by 5 in 3 s");
  ASSERT_EQ(l.size(), 1u) << r.out;
  EXPECT_TRUE(has(l[0], "Fix: ")) << l[0];
  EXPECT_TRUE(linesWith(r.out, "symbol_error +").empty()) << r.out;
}

TEST(RailnetPerf, HelpAndUsageErrors) {
  ToolRun r = sh(perf() + " --help");
  EXPECT_EQ(r.status, 0);
  for (const char* o : {"--server", "--client HOST", "--loopback", "--plugin", "--dev", "--handle-file", "-a, --all",
                        "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK"})
    EXPECT_TRUE(has(r.out, o)) << o;
  r = sh(perf());
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(has(r.out, "choose one of --server, --client HOST, --loopback")) << r.out;
  r = sh(perf() + " --loopback --plugin /nonexistent/libnccl-net-x.so");
  EXPECT_NE(r.status, 0);
  EXPECT_TRUE(has(r.out, "cannot load net plugin")) << r.out;
}

// Every size of the sweep has a row in both tables, and the receiver counted the right bytes.
void expectSweep(const std::string& out, const std::vector<size_t>& sizes, int iters, int warmup) {
  EXPECT_TRUE(has(out, "#bytes     #iterations   BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]")) << out;
  EXPECT_TRUE(has(out, "t_min[usec]") && has(out, "t_max[usec]") && has(out, "t_typical[usec]") &&
              has(out, "t_avg[usec]") && has(out, "99% percentile[usec]"))
      << out;
  for (size_t s : sizes) {
    int rows = 0;
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream f(line);
      size_t bytes = 0;
      int it = 0;
      if ((f >> bytes >> it) && bytes == s && it == iters) rows++;
    }
    EXPECT_EQ(rows, 2) << "size " << s << " in the bw and the lat table\n" << out;
    std::string recv = " receiver: " + std::to_string(s) + " ";
    auto l = linesWith(out, recv);
    ASSERT_EQ(l.size(), 2u) << out;
    for (auto& x : l) {
      std::istringstream f(x.substr(recv.size()));
      int n = 0;
      long long bytes = 0;
      std::string check;
      f >> n >> bytes >> check;
      EXPECT_EQ(n, iters + warmup) << x;
      EXPECT_EQ(bytes, (long long)s * (iters + warmup)) << x;
      EXPECT_EQ(check, "ok") << x;
    }
  }
}

std::string plugin() { return " --plugin " + buildLibDir() + "/libnccl-net-railnet.so "; }

TEST(RailnetPerf, LoopbackSweepOverSocket) {
  ToolRun r = sh("NCCL_SOCKET_IFNAME=lo RAILNET_TRANSPORT=socket " + perf() + plugin() +
             "--loopback -a --min-size 1 --max-size 64K -n 20 --warmup 3 --timeout 30");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "railnet-perf: RailSocket through")) << r.out;
  EXPECT_TRUE(has(r.out, "Device: [0] lo")) << r.out;
  std::vector<size_t> sizes;
  for (size_t s = 1; s <= 65536; s *= 2) sizes.push_back(s);
  expectSweep(r.out, sizes, 20, 3);
}

TEST(RailnetPerf, EveryPluginAbiVersion) {
  for (int v = 8; v <= 12; v++) {
    ToolRun r = sh("NCCL_SOCKET_IFNAME=lo RAILNET_TRANSPORT=socket " + perf() + plugin() + "--abi " + std::to_string(v) +
                   " --loopback -a --min-size 1K --max-size 4K -n 5 --warmup 1 --timeout 30");
    EXPECT_EQ(r.status, 0) << r.out;
    EXPECT_TRUE(has(r.out, "(ncclNet v" + std::to_string(v) + ")")) << r.out;
    expectSweep(r.out, {1024, 2048, 4096}, 5, 1);
  }
}

TEST(RailnetPerf, ServerAndClientThroughAHandleFileAndTcp) {
  TempDir d;
  std::string env = "NCCL_SOCKET_IFNAME=lo RAILNET_TRANSPORT=socket ";
  std::string f = d.path() + "/handle";
  ToolRun r = sh(env + perf() + plugin() + "--server --handle-file " + f + " --timeout 30 > " + d.path() + "/server.out & " +
             env + perf() + plugin() + "--handle-file " + f + " --client '' -s 4096 -n 10 --warmup 2 --timeout 30; rc=$?; " +
             "wait $! || rc=9; cat " + d.path() + "/server.out; exit $rc");
  EXPECT_EQ(r.status, 0) << r.out;
  expectSweep(r.out, {4096}, 10, 2);

  int port = 20000 + getpid() % 20000;
  r = sh(env + perf() + plugin() + "--server --port " + std::to_string(port) + " --timeout 30 > " + d.path() +
         "/server2.out & " + env + perf() + plugin() + "--client 127.0.0.1 --port " + std::to_string(port) +
         " -s 1000 -n 10 --warmup 2 --timeout 30 --csv; rc=$?; wait $! || rc=9; cat " + d.path() + "/server2.out; exit $rc");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "bw,1000,10,")) << r.out;
  EXPECT_TRUE(has(r.out, "lat,1000,10,")) << r.out;
  EXPECT_TRUE(has(r.out, "Waiting for the client on TCP port " + std::to_string(port))) << r.out;
}

TEST(RailnetPerf, RolesFromLauncherRank) {
  TempDir d;
  std::string env = "NCCL_SOCKET_IFNAME=lo RAILNET_TRANSPORT=socket ";
  std::string args = plugin() + "--handle-file " + d.path() + "/h -s 512 -n 5 --warmup 1 --timeout 30 --json";
  ToolRun r = sh(env + "OMPI_COMM_WORLD_RANK=0 " + perf() + args + " > " + d.path() + "/r0.out & " + env + "SLURM_PROCID=1 " +
             perf() + args + "; rc=$?; wait $! || rc=9; exit $rc");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "\"test\":\"bw\",\"bytes\":512,\"iterations\":5")) << r.out;
  EXPECT_TRUE(has(r.out, "\"test\":\"lat\",\"bytes\":512,\"iterations\":5")) << r.out;
  EXPECT_EQ(access((d.path() + "/h.0").c_str(), F_OK), 0);
  EXPECT_EQ(jsonProblem(r.out), "") << r.out;  // the client's document
  std::string srv = sh("cat " + d.path() + "/r0.out").out;
  EXPECT_EQ(jsonProblem(srv), "") << srv;       // the server's
  EXPECT_EQ(pythonOnJson(srv, "print(d[\"role\"], len(d[\"received\"]))"), "receiver 2\n") << srv;
}

// ---------------------------------------------------------------- RoCE congestion counters
// An mlx5-style RoCE port: hw_counters/ with the congestion counters (and two error counters),
// its netdev a name that exists nowhere (no ethtool statistics: the fake tree has no NIC).
struct CongestionTree : FakeSysfs {
  std::string hw = "class/infiniband/mlx5_0/ports/1/hw_counters/";
  explicit CongestionTree(std::map<std::string, int> values = {}) {
    port("mlx5_0", "4: ACTIVE", "Ethernet", "200 Gb/sec (4X HDR)");
    gid("mlx5_0", 0, "0000:0000:0000:0000:0000:ffff:c612:0001", "RoCE v2", "rnt-nodev0");
    std::map<std::string, int> all = {{"np_cnp_sent", 0},     {"np_ecn_marked_roce_packets", 0},
                                      {"rp_cnp_handled", 0},  {"rp_cnp_ignored", 0},
                                      {"out_of_buffer", 0},   {"roce_adp_retrans", 0},
                                      {"roce_slow_restart", 0}, {"packet_seq_err", 0},
                                      {"out_of_sequence", 0}};
    for (auto& kv : values) all[kv.first] = kv.second;
    for (auto& kv : all) set(kv.first, kv.second);
  }
  std::string set(const std::string& counter, int v) { return dir.write(hw + counter, std::to_string(v) + "\n"); }
  // A shell command that sets the counters to these values.
  std::string change(const std::map<std::string, int>& values) {
    std::string cmd = "true";
    for (auto& kv : values) cmd += "; echo " + std::to_string(kv.second) + " > " + dir.path() + "/" + hw + kv.first;
    return cmd;
  }
};

// railnet-diag --watch 3 on t while the counters in grow change after its first sample.
std::string watch(CongestionTree& t, const std::map<std::string, int>& grow, const std::string& env = "",
                  const std::string& args = "") {
  std::string cmd = t.env() + env + diag() + " --watch 3" + args;
  if (grow.empty()) return cmd;
  return afterFirstSample(cmd, t.change(grow), t.dir.path());
}

TEST(RailnetDiag, CongestionSectionShowsTheCountersByKind) {
  CongestionTree t({{"np_ecn_marked_roce_packets", 12}, {"np_cnp_sent", 12}, {"rp_cnp_handled", 3}});
  ToolRun r = sh(t.env() + "NCCL_SOCKET_IFNAME=lo NCCL_IB_TC=106 " + diag());
  EXPECT_TRUE(has(r.out, "== RoCE congestion and lossless fabric")) << r.out;
  EXPECT_TRUE(has(r.out, "  mlx5_0:1 (netdev rnt-nodev0)\n")) << r.out;
  EXPECT_TRUE(has(r.out, "    ECN marked      np_ecn_marked_roce_packets=12\n")) << r.out;
  EXPECT_TRUE(has(r.out, "    CNP sent        np_cnp_sent=12\n")) << r.out;
  EXPECT_TRUE(has(r.out, "    retransmission  roce_adp_retrans=0 roce_slow_restart=0\n")) << r.out;
  EXPECT_TRUE(has(r.out, "    ethtool -S rnt-nodev0: not read: No such device")) << r.out;
  EXPECT_TRUE(has(r.out, "lossless priorities (NCCL's, and those with pause frames): 3 -- NCCL_IB_TC=106 (DSCP 26) "
                         "puts NCCL's traffic on priority 3"))
      << r.out;
  EXPECT_FALSE(has(r.out, "packet_seq_err=0 out_of")) << r.out;  // error counters stay in their section
  EXPECT_TRUE(linesWith(r.out, "CNP since boot").empty()) << r.out;

  std::string err;
  r = shSplit(t.env() + "NCCL_SOCKET_IFNAME=lo " + diag() + " --json", &err);
  ASSERT_EQ(jsonProblem(r.out), "") << r.out;
  EXPECT_EQ(pythonOnJson(r.out, "p = d['congestion']['ports'][0]\n"
                                "print(p['device'], p['netdev'], p['hw_counters']['np_ecn_marked_roce_packets'],\n"
                                "      p['hw_counters']['rp_cnp_handled'], 'packet_seq_err' in p['hw_counters'],\n"
                                "      p['ethtool'], p['ethtool_error'], d['congestion']['nccl_priority'])"),
            "mlx5_0 rnt-nodev0 12 3 False {} No such device -1\n")
      << r.out;
}

TEST(RailnetDiag, CongestionEcnWithoutCnpSinceBootWarns) {
  CongestionTree t({{"np_ecn_marked_roce_packets", 500}});
  ToolRun r = sh(t.env() + "NCCL_SOCKET_IFNAME=lo " + diag());
  auto l = linesWith(r.out, "WARNING: mlx5_0:1 received 500 ECN-marked packets and sent no CNP since boot");
  ASSERT_EQ(l.size(), 1u) << r.out;
  EXPECT_TRUE(has(l[0], "Fix: run railnet-diag --watch 60") && has(l[0], "roce_np/enable")) << l[0];
}

TEST(RailnetDiag, WatchStaticCongestionCountersFlagNothing) {
  CongestionTree t({{"np_ecn_marked_roce_packets", 40}, {"np_cnp_sent", 40}});
  ToolRun r = sh(watch(t, {}, "NCCL_SOCKET_IFNAME=lo "));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "and the congestion counters of 1 RoCE port(s)")) << r.out;
  EXPECT_TRUE(has(r.out, "  none: no congestion counter grew")) << r.out;
  EXPECT_TRUE(has(r.out, "0 problem(s), 0 warning(s)")) << r.out;
}

TEST(RailnetDiag, WatchEcnAndCnpGrowthIsCongestionThatDcqcnHandles) {
  CongestionTree t({{"np_ecn_marked_roce_packets", 40}, {"np_cnp_sent", 40}, {"rp_cnp_handled", 5}});
  ToolRun r = sh(watch(t, {{"np_ecn_marked_roce_packets", 340}, {"np_cnp_sent", 310}, {"rp_cnp_handled", 65}}));
  EXPECT_EQ(r.status, 0) << r.out;  // a warning: congestion is handled
  EXPECT_TRUE(has(r.out, "mlx5_0:1 np_ecn_marked_roce_packets +300 (")) << r.out;
  EXPECT_TRUE(has(r.out, "/s, now 340)")) << r.out;
  auto l = linesWith(r.out, "WARNING: mlx5_0:1 (rnt-nodev0) congestion in 3 s: ECN-marked packets +300, CNPs sent "
                            "+270, CNPs handled +60: DCQCN is working");
  ASSERT_EQ(l.size(), 1u) << r.out;
  EXPECT_TRUE(has(l[0], "Fix: look for incast") && has(l[0], "NCCL_IB_TC")) << l[0];
  EXPECT_TRUE(linesWith(r.out, "PROBLEM").empty()) << r.out;

}

TEST(RailnetDiag, WatchEcnMarksWithoutCnpsIsCongestionControlDisabled) {
  CongestionTree t;
  ToolRun r = sh(watch(t, {{"np_ecn_marked_roce_packets", 900}}));
  EXPECT_EQ(r.status, 1) << r.out;
  auto l = linesWith(r.out, "PROBLEM: mlx5_0:1 (rnt-nodev0) received 900 ECN-marked packets in 3 s and sent no CNP: "
                            "congestion control (DCQCN) is disabled on this NIC");
  ASSERT_EQ(l.size(), 1u) << r.out;
  EXPECT_TRUE(has(l[0], "Fix: enable RoCE congestion control") && has(l[0], "roce_np/enable")) << l[0];
  EXPECT_TRUE(linesWith(r.out, "DCQCN is working").empty()) << r.out;

  // The reaction point: CNPs arrive and are ignored.
  CongestionTree t2;
  r = sh(watch(t2, {{"rp_cnp_ignored", 25}}));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(linesWith(r.out, "PROBLEM: mlx5_0:1 (rnt-nodev0) ignored 25 CNPs in 3 s and handled none").size(), 1u)
      << r.out;
}

TEST(RailnetDiag, WatchRetransmissionsAndJsonGrowth) {
  CongestionTree t;
  std::string err;
  ToolRun r = shSplit(watch(t, {{"roce_adp_retrans", 6}, {"out_of_buffer", 2}}, "", " --json"), &err);
  ASSERT_EQ(jsonProblem(r.out), "") << r.out;
  EXPECT_EQ(pythonOnJson(r.out, "for g in d['watch']['congestion_growth']:\n"
                                "  print(g['device'], g['port'], g['source'], g['counter'], g['kind'], g['delta'],\n"
                                "        g['per_second'] > 0)\n"
                                "print(sorted(f['severity'] + ' ' + f['cause'].split(' (')[0] for f in d['findings']))"),
            "mlx5_0 1 hw_counters out_of_buffer out of buffer 2 True\n"
            "mlx5_0 1 hw_counters roce_adp_retrans retransmission 6 True\n"
            "['warning mlx5_0:1', 'warning mlx5_0:1']\n")
      << r.out;
}

// Pause and per-priority discard counters, as a driver that puts them in hw_counters/ would
// show them (the classifier takes a counter from either source; mlx5 has them in ethtool -S,
// whose ioctl reading is tested on a veth in the netns tier).
TEST(RailnetDiag, WatchPauseGrowthIsBackPressure) {
  CongestionTree t({{"rx_prio3_pause", 10}, {"tx_prio3_pause", 0}, {"rx_prio0_pause", 0}});
  ToolRun r = sh(watch(t, {{"rx_prio3_pause", 60}}, "NCCL_IB_TC=106 "));
  EXPECT_EQ(r.status, 0) << r.out;
  auto l = linesWith(r.out, "WARNING: mlx5_0:1 (rnt-nodev0) pause frames grew in 3 s (rx_prio3_pause +50; priorities "
                            "with pause frames: 3): the fabric is back-pressuring");
  ASSERT_EQ(l.size(), 1u) << r.out;
  EXPECT_TRUE(has(l[0], "Fix: received pause: a switch downstream") && has(l[0], "NCCL_IB_TC/NCCL_IB_SL") &&
              has(l[0], "buffer and PFC config"))
      << l[0];

  // Pause frames on another priority than NCCL's: the PFC priority and the traffic class disagree.
  r = sh(watch(t, {{"rx_prio0_pause", 70}}, "NCCL_IB_TC=106 "));
  EXPECT_EQ(r.status, 1) << r.out;
  l = linesWith(r.out, "PROBLEM: mlx5_0:1 (rnt-nodev0) pause frames grew in 3 s on priority 0 (rx_prio0_pause +70), but "
                       "NCCL_IB_TC=106 (DSCP 26) puts NCCL's traffic on priority 3: the PFC priority does not match");
  ASSERT_EQ(l.size(), 1u) << r.out;
  EXPECT_TRUE(has(l[0], "Fix: make the PFC priority and NCCL's traffic class agree")) << l[0];
}

TEST(RailnetDiag, WatchDropsOnALosslessPriorityMeanPfcIsNotEndToEnd) {
  CongestionTree t({{"rx_prio3_buf_discard", 0}, {"rx_prio5_buf_discard", 0}, {"rx_prio4_pause", 3}});
  ToolRun r = sh(watch(t, {{"rx_prio3_buf_discard", 9}}, "NCCL_IB_TC=106 "));
  EXPECT_EQ(r.status, 1) << r.out;
  auto l = linesWith(r.out, "PROBLEM: mlx5_0:1 (rnt-nodev0) dropped 9 packets in 3 s on priority 3, which should be "
                            "lossless (NCCL_IB_TC=106 (DSCP 26) puts NCCL's traffic on priority 3): PFC is not enabled on "
                            "that priority end to end");
  ASSERT_EQ(l.size(), 1u) << r.out;
  EXPECT_TRUE(has(l[0], "Fix: enable PFC on that priority") && has(l[0], "every switch port")) << l[0];

  // Priority 4 carries pause frames, so it is meant to be lossless too, NCCL_IB_TC or not.
  r = sh(watch(t, {{"rx_prio4_buf_discard", 2}}));
  EXPECT_EQ(r.status, 0) << r.out;  // rx_prio4_buf_discard did not exist at the start: not compared
  t.set("rx_prio4_buf_discard", 0);
  r = sh(watch(t, {{"rx_prio4_buf_discard", 2}}));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_EQ(linesWith(r.out, "on priority 4, which should be lossless (it carries PFC pause frames)").size(), 1u) << r.out;

  // A priority that nothing makes lossless: a warning naming the counter.
  r = sh(watch(t, {{"rx_prio5_buf_discard", 4}}, "NCCL_IB_TC=106 "));
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(linesWith(r.out, "WARNING: mlx5_0:1 (rnt-nodev0) discarded packets in 3 s (rx_prio5_buf_discard +4)").size(),
            1u)
      << r.out;
}

TEST(RailnetDiag, DropsOnALosslessPrioritySinceBootWarn) {
  CongestionTree t({{"rx_prio3_buf_discard", 7}});
  ToolRun r = sh(t.env() + "NCCL_SOCKET_IFNAME=lo NCCL_IB_TC=106 " + diag());
  auto l = linesWith(r.out, "WARNING: mlx5_0:1 (rnt-nodev0) dropped 7 packets on priority 3, which should be lossless");
  ASSERT_EQ(l.size(), 1u) << r.out;
  EXPECT_TRUE(has(l[0], "Fix: run railnet-diag --watch 60 during a job")) << l[0];
  r = sh(t.env() + "NCCL_SOCKET_IFNAME=lo " + diag());  // priority 3 is nobody's lossless one here
  EXPECT_TRUE(linesWith(r.out, "should be lossless").empty()) << r.out;
}

// The usage-error shape and --version, the same in all three tools (tools/common/cli.h).
struct ToolCase {
  std::string name;
  std::string missingValue;  // an option that takes a value, given last without one
};
const ToolCase kTools[] = {{"railnet-diag", "--watch"}, {"railnet-perf", "--port"}, {"railnet-demo", "--size"}};

TEST(Tools, VersionOfEachTool) {
  for (const ToolCase& t : kTools) {
    std::string err;
    ToolRun r = shSplit(buildTool(t.name) + " --version", &err);
    EXPECT_EQ(r.status, 0) << t.name << r.out << err;
    EXPECT_EQ(r.out, t.name + " " + railnetVersion() + "\n") << t.name;
    EXPECT_EQ(err, "") << t.name;
  }
}

TEST(Tools, UsageErrorsHaveOneShapeAndExit2) {
  for (const ToolCase& t : kTools) {
    std::string tool = buildTool(t.name), tryHelp = "Try '" + t.name + " --help'.\n";
    const std::pair<std::string, std::string> cases[] = {
        {" --bogus", "unknown option '--bogus'"},
        {" -x", "unknown option '-x'"},
        {" stray", "unexpected argument 'stray'"},
        {" --version=3", "option '--version' takes no value"},
        {" " + t.missingValue, "option '" + t.missingValue + "' needs a value"},
    };
    for (const auto& c : cases) {
      std::string err;
      ToolRun r = shSplit(tool + c.first, &err);
      EXPECT_EQ(r.status, 2) << t.name << c.first;
      EXPECT_EQ(r.out, "") << t.name << c.first;
      EXPECT_EQ(err, t.name + ": " + c.second + "\n" + tryHelp) << t.name << c.first;
    }
    // --help is not an error: the usage text on stdout, exit 0.
    std::string err;
    ToolRun r = shSplit(tool + " --help", &err);
    EXPECT_EQ(r.status, 0) << t.name;
    EXPECT_TRUE(has(r.out, "usage: " + t.name) && has(r.out, "--version")) << r.out;
    EXPECT_EQ(err, "") << t.name;
  }
  // A value the option does not take: the same shape, with what was wrong.
  std::string err;
  EXPECT_EQ(shSplit(diag() + " --watch 0", &err).status, 2);
  EXPECT_EQ(err, "railnet-diag: --watch wants a positive number of seconds, not '0'\nTry 'railnet-diag --help'.\n");
  EXPECT_EQ(shSplit(perf() + " --loopback --abi 7", &err).status, 2);
  EXPECT_EQ(err, "railnet-perf: --abi takes 8 ... 12, not '7'\nTry 'railnet-perf --help'.\n");
  EXPECT_EQ(shSplit(perf(), &err).status, 2);
  EXPECT_EQ(err,
            "railnet-perf: choose one of --server, --client HOST, --loopback (or run under mpirun/srun)\n"
            "Try 'railnet-perf --help'.\n");
}

// Names with a quote and a backslash (a device in sysfs, a plugin path) stay valid JSON and
// come back unchanged from the parser.
TEST(Tools, JsonEscapesQuotesAndBackslashesInNames) {
  FakeSysfs fs;
  const std::string dev = "mlx5_\"q\\x";  // mlx5_"q\x
  fs.roce(dev);
  std::string err;
  ToolRun r = shSplit(fs.env() + "NCCL_SOCKET_IFNAME==lo " + diag() + " --json", &err);
  ASSERT_EQ(jsonProblem(r.out), "") << r.out;
  EXPECT_EQ(pythonOnJson(r.out, "print(d[\"rdma\"][\"ports\"][0][\"device\"])"), dev + "\n") << r.out;
  EXPECT_TRUE(has(r.out, "\"mlx5_\\\"q\\\\x\"")) << r.out;  // written as "mlx5_\"q\\x"

  TempDir d;
  std::string dir = d.path() + "/odd\"dir\\name";
  ASSERT_EQ(sh("mkdir '" + dir + "' && ln -s " + buildLibDir() + "/libnccl-net-railnet.so '" + dir + "/'").status, 0);
  std::string lib = dir + "/libnccl-net-railnet.so";
  r = shSplit("NCCL_SOCKET_IFNAME=lo RAILNET_TRANSPORT=socket " + perf() + " --plugin '" + lib +
                  "' --loopback -s 1K -n 5 --warmup 1 --timeout 30 --json",
              &err);
  EXPECT_EQ(r.status, 0) << r.out << err;
  ASSERT_EQ(jsonProblem(r.out), "") << r.out;
  EXPECT_EQ(pythonOnJson(r.out, "print(d[\"plugin\"])\nprint(len(d[\"results\"]))"), lib + "\n2\n") << r.out;
}

}  // namespace
