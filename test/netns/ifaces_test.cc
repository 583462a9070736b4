// Interface selection (src/misc/ifaces.c) on real interfaces: each test builds a fresh
// namespace whose interfaces (veth ends named ib0, eth0, docker0, virbr0, plus lo) are
// up or down, with or without carrier and addresses, and runs railnetFindInterfaces
// inside it in a forked child.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <map>
#include <memory>
#include <sstream>
#include "netns.h"

extern "C" {
#include "socket.h"
}

namespace {

// One interface of the namespace under test; its veth peer lives in a second namespace.
struct If {
  std::string name;
  bool up = true;
  bool carrier = true;                // peer end up: the interface becomes RUNNING
  std::vector<std::string> addrs;     // CIDRs, 198.18.0.0/15 and 2001:db8::/32 only
  bool linkLocal = false;             // keep the kernel's automatic fe80:: address
};

If ifc(const std::string& name, std::vector<std::string> addrs, bool up = true, bool carrier = true) {
  If i;
  i.name = name;
  i.addrs = std::move(addrs);
  i.up = up;
  i.carrier = carrier;
  return i;
}

struct Found {
  bool ran = false;
  std::string raw;  // child output, for failure messages
  int res = -1;
  int n = -1;
  int step = -1;
  std::vector<std::string> names;
  std::vector<std::string> addrs;      // ncclSocketToString form, "198.18.1.1<0>"
  std::vector<unsigned> scopeIds;
  std::vector<std::pair<int, std::string>> log;  // level, message
  bool logHas(const std::string& needle, int level = -1) const {
    for (auto& l : log)
      if ((level < 0 || l.first == level) && l.second.find(needle) != std::string::npos) return true;
    return false;
  }
};

std::ostream& operator<<(std::ostream& os, const Found& f) { return os << "child output:\n" << f.raw; }

std::string oneLine(std::string s) {
  for (auto& c : s)
    if (c == '\n') c = ' ';
  return s;
}

bool hasLinkLocal(const std::string& name) {
  struct ifaddrs* all;
  if (getifaddrs(&all) != 0) return false;
  bool found = false;
  for (struct ifaddrs* a = all; a; a = a->ifa_next) {
    if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET6 || name != a->ifa_name) continue;
    if (IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6*)a->ifa_addr)->sin6_addr)) found = true;
  }
  freeifaddrs(all);
  return found;
}

class IfacesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    RAILNET_REQUIRE_NETNS();
    host_.reset(new NetNs("ifh"));
    peer_.reset(new NetNs("ifp"));
    ASSERT_TRUE(host_->ok() && peer_->ok());
  }
  void TearDown() override {
    host_.reset();
    peer_.reset();
  }

  // Creates the interfaces in order (getifaddrs lists them in creation order).
  void build(const std::vector<If>& ifs, bool loUp = true) {
    std::string script = "set -e\n";
    for (size_t k = 0; k < ifs.size(); k++) {
      const If& i = ifs[k];
      std::string p = "p" + std::to_string(k);
      script += "ip link add " + i.name + " type veth peer name " + p + " netns " + peer_->name() + "\n";
      if (!i.linkLocal) script += "ip link set dev " + i.name + " addrgenmode none\n";
      for (auto& a : i.addrs)
        script += "ip addr add " + a + " dev " + i.name + (a.find(':') != std::string::npos ? " nodad" : "") + "\n";
      if (i.carrier) script += "ip -n " + peer_->name() + " link set dev " + p + " up\n";
      if (i.up) script += "ip link set dev " + i.name + " up\n";
    }
    if (loUp) script += "ip link set dev lo up\n";
    ASSERT_TRUE(host_->sh(script));
    ifs_ = ifs;
    loUp_ = loUp;
  }

  // railnetFindInterfaces inside the namespace, with exactly these NCCL_* variables set
  // (conf files disabled so that no ~/.nccl.conf or /etc/nccl.conf leaks in).
  Found find(const std::map<std::string, std::string>& env = {}, int maxIfs = MAX_IFS) {
    std::vector<If> ifs = ifs_;
    NetNsResult r = host_->run([&](NetNsIo& io) {
      // The kernel sets IFF_RUNNING and the link-local addresses asynchronously.
      for (auto& i : ifs) {
        if (!(i.up && i.carrier)) continue;
        for (int t = 0; t < 500; t++) {
          struct ifreq ifr;
          memset(&ifr, 0, sizeof(ifr));
          snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", i.name.c_str());
          int fd = socket(AF_INET, SOCK_DGRAM, 0);
          // Only interfaces that are up now (a test may have taken one down since).
          int ok = ioctl(fd, SIOCGIFFLAGS, &ifr) == 0 && (!(ifr.ifr_flags & IFF_UP) || (ifr.ifr_flags & IFF_RUNNING));
          close(fd);
          if (ok && (!i.linkLocal || hasLinkLocal(i.name))) break;
          usleep(10000);
        }
      }
      for (const char* v : {"NCCL_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY", "NCCL_COMM_ID", "NCCL_DEBUG",
                            "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"})
        unsetenv(v);
      setenv("NCCL_CONF_FILE", "/dev/null", 1);
      setenv("RAILNET_SYSTEM_CONF", "/dev/null", 1);
      for (auto& kv : env) setenv(kv.first.c_str(), kv.second.c_str(), 1);
      railnetParamReset();
      railnetDebugReset();
      LogCapture capture;
      std::vector<char> names((size_t)maxIfs * MAX_IF_NAME_SIZE, 0);
      std::vector<union ncclSocketAddress> addrs((size_t)maxIfs);
      int n = -1;
      railnetIfStep step = RAILNET_IF_NONE;
      ncclResult_t res = railnetFindInterfaces(names.data(), addrs.data(), MAX_IF_NAME_SIZE, maxIfs, &n, &step);
      io.say("res " + std::to_string((int)res));
      io.say("n " + std::to_string(n));
      io.say("step " + std::to_string((int)step));
      for (int k = 0; k < n; k++) {
        char line[SOCKET_NAME_MAXLEN + 1];
        unsigned scope = addrs[k].sa.sa_family == AF_INET6 ? addrs[k].sin6.sin6_scope_id : 0;
        io.say("if " + std::string(&names[(size_t)k * MAX_IF_NAME_SIZE]) + " " +
               ncclSocketToString(&addrs[k], line, 1) + " " + std::to_string(scope));
      }
      for (auto& l : LogCapture::lines()) io.say("log " + std::to_string(l.level) + " " + oneLine(l.msg));
      return 0;
    });
    Found f;
    f.raw = r.out;
    f.ran = r.success();
    std::istringstream in(r.out);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string key;
      ls >> key;
      if (key == "res") ls >> f.res;
      else if (key == "n") ls >> f.n;
      else if (key == "step") ls >> f.step;
      else if (key == "if") {
        std::string name, addr;
        unsigned scope = 0;
        ls >> name >> addr >> scope;
        f.names.push_back(name);
        f.addrs.push_back(addr);
        f.scopeIds.push_back(scope);
      } else if (key == "log") {
        int level = -1;
        ls >> level;
        std::string msg;
        std::getline(ls, msg);
        f.log.push_back({level, msg.size() > 0 ? msg.substr(1) : msg});
      }
    }
    return f;
  }

  std::unique_ptr<NetNs> host_, peer_;
  std::vector<If> ifs_;
  bool loUp_ = true;
};

using V = std::vector<std::string>;

// The usual mix: every kind of name, all up with IPv4 addresses.
std::vector<If> allKinds() {
  return {ifc("ib0", {"198.18.1.1/24"}), ifc("eth0", {"198.18.2.1/24"}), ifc("docker0", {"198.18.3.1/24"}),
          ifc("virbr0", {"198.18.4.1/24"})};
}

}  // namespace

// ------------------------------------------------------------------ automatic chain

TEST_F(IfacesTest, IbInterfacesComeFirst) {
  auto ifs = allKinds();
  ifs.push_back(ifc("ib1", {"198.18.5.1/24"}));
  build(ifs);
  Found f = find();
  ASSERT_TRUE(f.ran) << f;
  EXPECT_EQ(f.res, ncclSuccess) << f;
  EXPECT_EQ(f.names, (V{"ib0", "ib1"})) << f;
  EXPECT_EQ(f.addrs, (V{"198.18.1.1<0>", "198.18.5.1<0>"})) << f;
  EXPECT_EQ(f.step, RAILNET_IF_IB) << f;
  EXPECT_TRUE(f.logHas("chosen by: ib* interfaces", NCCL_LOG_INFO)) << f;
  if (getenv("RAILNET_TEST_VERBOSE")) printf("%s", f.raw.c_str());
}

TEST_F(IfacesTest, IbThatIsDownOrWithoutCarrierOrAddressDoesNotCount) {
  build({ifc("ib0", {"198.18.1.1/24"}, /*up=*/false), ifc("ib1", {"198.18.5.1/24"}, true, /*carrier=*/false),
         ifc("ib2", {}), ifc("eth0", {"198.18.2.1/24"}), ifc("docker0", {"198.18.3.1/24"})});
  Found f = find();
  ASSERT_TRUE(f.ran) << f;
  EXPECT_EQ(f.names, V{"eth0"}) << f;
  EXPECT_EQ(f.step, RAILNET_IF_DEFAULT) << f;
  // The INFO line tells why each one was passed over.
  EXPECT_TRUE(f.logHas("ib0 down")) << f;
  EXPECT_TRUE(f.logHas("ib1 no carrier")) << f;
  EXPECT_TRUE(f.logHas("ib2 no address")) << f;
  EXPECT_TRUE(f.logHas("eth0 198.18.2.1<0>")) << f;
  EXPECT_TRUE(f.logHas("chosen by: any but docker*, lo, virbr*")) << f;
}

TEST_F(IfacesTest, DefaultStepTakesEverythingButDockerLoVirbr) {
  build({ifc("docker0", {"198.18.3.1/24"}), ifc("eth0", {"198.18.2.1/24"}), ifc("virbr0", {"198.18.4.1/24"}),
         ifc("enp1s0", {"198.18.6.1/24"})});
  Found f = find();
  ASSERT_TRUE(f.ran) << f;
  EXPECT_EQ(f.names, (V{"eth0", "enp1s0"})) << f;
  EXPECT_EQ(f.step, RAILNET_IF_DEFAULT) << f;
}

TEST_F(IfacesTest, ThenDockerThenLoThenVirbrThenNothing) {
  build({ifc("docker0", {"198.18.3.1/24"}), ifc("virbr0", {"198.18.4.1/24"}), ifc("eth0", {}, /*up=*/false)});
  Found f = find();
  ASSERT_TRUE(f.ran) << f;
  EXPECT_EQ(f.names, V{"docker0"}) << f;
  EXPECT_EQ(f.step, RAILNET_IF_DOCKER) << f;

  ASSERT_TRUE(host_->down("docker0"));
  f = find();
  EXPECT_EQ(f.names, V{"lo"}) << f;
  EXPECT_EQ(f.addrs, V{"127.0.0.1<0>"}) << f;  // ::1 never counts
  EXPECT_EQ(f.step, RAILNET_IF_LO) << f;

  ASSERT_TRUE(host_->down("lo"));
  f = find();
  EXPECT_EQ(f.names, V{"virbr0"}) << f;
  EXPECT_EQ(f.step, RAILNET_IF_VIRBR) << f;

  ASSERT_TRUE(host_->down("virbr0"));
  f = find();
  EXPECT_EQ(f.res, ncclSuccess) << f;
  EXPECT_EQ(f.n, 0) << f;
  EXPECT_EQ(f.step, RAILNET_IF_NONE) << f;
  EXPECT_TRUE(f.logHas("no usable interface")) << f;
}

TEST_F(IfacesTest, EachInterfaceOnceWithItsFirstAddress) {
  build({ifc("eth0", {"198.18.2.1/24", "198.18.2.2/24", "2001:db8:2::1/64"})});
  Found f = find();
  ASSERT_TRUE(f.ran) << f;
  EXPECT_EQ(f.names, V{"eth0"}) << f;
  EXPECT_EQ(f.addrs, V{"198.18.2.1<0>"}) << f;
}

TEST_F(IfacesTest, MaxIfsBoundsTheResult) {
  build({ifc("eth0", {"198.18.2.1/24"}), ifc("eth1", {"198.18.6.1/24"}), ifc("eth2", {"198.18.7.1/24"})});
  Found f = find({}, 2);
  ASSERT_TRUE(f.ran) << f;
  EXPECT_EQ(f.names, (V{"eth0", "eth1"})) << f;
}

// ------------------------------------------------------------------ IPv6

TEST_F(IfacesTest, Ipv6OnlyInterfacesCountAndIpv4ComesFirst) {
  // getifaddrs lists every IPv4 address before the IPv6 ones, so an IPv6-only eth0
  // comes after an IPv4 eth1, as in NCCL.
  build({ifc("eth0", {"2001:db8:2::1/64"}), ifc("eth1", {"198.18.6.1/24"})});
  Found f = find();
  ASSERT_TRUE(f.ran) << f;
  EXPECT_EQ(f.names, (V{"eth1", "eth0"})) << f;
  EXPECT_EQ(f.addrs, (V{"198.18.6.1<0>", "2001:db8:2::1<0>"})) << f;
}

TEST_F(IfacesTest, Ipv6LinkLocalCountsWithItsScopeAsInNccl) {
  If ib = ifc("ib0", {});
  ib.linkLocal = true;
  build({ib, ifc("eth0", {"198.18.2.1/24"})});
  Found f = find();
  ASSERT_TRUE(f.ran) << f;
  ASSERT_EQ(f.names, V{"ib0"}) << f;
  EXPECT_EQ(f.addrs[0].rfind("fe80::", 0), 0u) << f;
  EXPECT_NE(f.scopeIds[0], 0u) << "a link-local address needs its interface index to be usable\n" << f;
  // A global address on the same interface is preferred (the kernel lists it first).
  ASSERT_TRUE(host_->addAddr("ib0", "2001:db8:1::1/64"));
  f = find();
  EXPECT_EQ(f.addrs, V{"2001:db8:1::1<0>"}) << f;
}

TEST_F(IfacesTest, SocketFamilyRestrictsTheAddresses) {
  build({ifc("ib0", {"2001:db8:1::1/64"}), ifc("eth0", {"198.18.2.1/24", "2001:db8:2::1/64"})});
  Found f = find();
  ASSERT_TRUE(f.ran) << f;
  EXPECT_EQ(f.names, V{"ib0"}) << f;

  f = find({{"NCCL_SOCKET_FAMILY", "AF_INET"}});
  EXPECT_EQ(f.names, V{"eth0"}) << f;
  EXPECT_EQ(f.addrs, V{"198.18.2.1<0>"}) << f;
  EXPECT_TRUE(f.logHas("NCCL_SOCKET_FAMILY set by environment to AF_INET", NCCL_LOG_INFO)) << f;
  EXPECT_TRUE(f.logHas("ib0 no IPv4 address")) << f;

  f = find({{"NCCL_SOCKET_FAMILY", "AF_INET6"}, {"NCCL_SOCKET_IFNAME", "eth"}});
  EXPECT_EQ(f.names, V{"eth0"}) << f;
  EXPECT_EQ(f.addrs, V{"2001:db8:2::1<0>"}) << f;

  f = find({{"NCCL_SOCKET_FAMILY", "AF_BOGUS"}});
  EXPECT_EQ(f.res, ncclSuccess) << f;
  EXPECT_EQ(f.names, V{"ib0"}) << f;
  EXPECT_TRUE(f.logHas("NCCL_SOCKET_FAMILY=AF_BOGUS", NCCL_LOG_WARN)) << f;
}

// ------------------------------------------------------------------ NCCL_COMM_ID

TEST_F(IfacesTest, CommIdPicksTheInterfaceInItsSubnet) {
  build({ifc("eth0", {"198.18.2.1/24"}), ifc("eth1", {"198.18.6.1/24"}), ifc("docker0", {"198.18.3.1/24"}),
         ifc("eth2", {"2001:db8:7::1/64"})});
  Found f = find();
  ASSERT_TRUE(f.ran) << f;
  EXPECT_EQ(f.names, (V{"eth0", "eth1", "eth2"})) << f;

  f = find({{"NCCL_COMM_ID", "198.18.6.200:12345"}});
  EXPECT_EQ(f.res, ncclSuccess) << f;
  EXPECT_EQ(f.names, V{"eth1"}) << f;
  EXPECT_EQ(f.step, RAILNET_IF_SUBNET) << f;
  EXPECT_TRUE(f.logHas("chosen by: same subnet as NCCL_COMM_ID")) << f;

  // Even docker0, which the default step would skip.
  f = find({{"NCCL_COMM_ID", "198.18.3.9:12345"}});
  EXPECT_EQ(f.names, V{"docker0"}) << f;

  f = find({{"NCCL_COMM_ID", "[2001:db8:7::99]:12345"}});
  EXPECT_EQ(f.names, V{"eth2"}) << f;
  EXPECT_EQ(f.step, RAILNET_IF_SUBNET) << f;

  // No interface in that subnet: the chain goes on.
  f = find({{"NCCL_COMM_ID", "198.19.9.9:12345"}});
  EXPECT_EQ(f.names, (V{"eth0", "eth1", "eth2"})) << f;
  EXPECT_EQ(f.step, RAILNET_IF_DEFAULT) << f;

  // NCCL_SOCKET_FAMILY=AF_INET6 disregards an IPv4 NCCL_COMM_ID.
  f = find({{"NCCL_COMM_ID", "198.18.6.200:12345"}, {"NCCL_SOCKET_FAMILY", "AF_INET6"}});
  EXPECT_EQ(f.names, V{"eth2"}) << f;
  EXPECT_EQ(f.step, RAILNET_IF_DEFAULT) << f;
}

TEST_F(IfacesTest, CommIdComesAfterIbAndSkipsDownInterfaces) {
  build({ifc("ib0", {"198.18.1.1/24"}), ifc("eth0", {"198.18.2.1/24"}),
         ifc("eth1", {"198.18.6.1/24"}, /*up=*/false)});
  Found f = find({{"NCCL_COMM_ID", "198.18.2.7:12345"}});
  ASSERT_TRUE(f.ran) << f;
  EXPECT_EQ(f.names, V{"ib0"}) << f;
  EXPECT_EQ(f.step, RAILNET_IF_IB) << f;

  ASSERT_TRUE(host_->down("ib0"));
  f = find({{"NCCL_COMM_ID", "198.18.6.7:12345"}});  // only the down eth1 is in that subnet
  EXPECT_EQ(f.names, V{"eth0"}) << f;
  EXPECT_EQ(f.step, RAILNET_IF_DEFAULT) << f;
}

TEST_F(IfacesTest, MalformedCommIdFails) {
  build({ifc("eth0", {"198.18.2.1/24"})});
  Found f = find({{"NCCL_COMM_ID", "[2001:db8::1"}});
  ASSERT_TRUE(f.ran) << f;
  EXPECT_NE(f.res, ncclSuccess) << f;
  EXPECT_EQ(f.n, 0) << f;
}

TEST_F(IfacesTest, MatchSubnetDirectly) {
  build({ifc("eth0", {"198.18.2.1/24"}), ifc("eth1", {"198.18.6.1/24"})});
  NetNsResult r = host_->run([](NetNsIo& io) {
    for (int t = 0; t < 500; t++) {
      char name[MAX_IF_NAME_SIZE];
      union ncclSocketAddress local, remote;
      memset(&remote, 0, sizeof(remote));
      remote.sin.sin_family = AF_INET;
      inet_pton(AF_INET, "198.18.6.77", &remote.sin.sin_addr);
      int found = 0;
      if (ncclFindInterfaceMatchSubnet(name, &local, &remote, MAX_IF_NAME_SIZE, &found) != ncclSuccess) return 2;
      if (!found) {
        usleep(10000);  // eth1 not running yet
        continue;
      }
      char line[SOCKET_NAME_MAXLEN + 1];
      io.say(std::string(name) + " " + ncclSocketToString(&local, line, 1));
      inet_pton(AF_INET, "198.18.9.77", &remote.sin.sin_addr);
      if (ncclFindInterfaceMatchSubnet(name, &local, &remote, MAX_IF_NAME_SIZE, &found) != ncclSuccess) return 3;
      io.say("other " + std::to_string(found));
      return 0;
    }
    return 1;
  });
  ASSERT_TRUE(r.success()) << r.describe();
  EXPECT_EQ(r.out, "eth1 198.18.6.1<0>\nother 0\n");
}

// ------------------------------------------------------------------ NCCL_SOCKET_IFNAME

TEST_F(IfacesTest, IfnameInAllItsForms) {
  auto ifs = allKinds();
  ifs.push_back(ifc("eth1", {"198.18.6.1/24"}));
  ifs.push_back(ifc("eth10", {"198.18.7.1/24"}));
  build(ifs);
  struct Case { const char* spec; V want; };
  std::vector<Case> cases = {
      {"eth", {"eth0", "eth1", "eth10"}},
      {"eth1", {"eth1", "eth10"}},
      {"=eth1", {"eth1"}},
      {"=eth1,docker0", {"docker0", "eth1"}},  // in getifaddrs order, not list order
      {"^eth,lo", {"ib0", "docker0", "virbr0"}},
      {"^=eth1,ib0,lo", {"eth0", "docker0", "virbr0", "eth10"}},
      {" = virbr0 , lo ", {"lo", "virbr0"}},  // the user may ask for lo and virbr
  };
  for (auto& c : cases) {
    Found f = find({{"NCCL_SOCKET_IFNAME", c.spec}});
    ASSERT_TRUE(f.ran) << f;
    EXPECT_EQ(f.res, ncclSuccess) << c.spec << "\n" << f;
    EXPECT_EQ(f.names, c.want) << c.spec << "\n" << f;
    EXPECT_EQ(f.step, RAILNET_IF_USER) << c.spec << "\n" << f;
    EXPECT_TRUE(f.logHas(std::string("NCCL_SOCKET_IFNAME set by environment to ") + c.spec, NCCL_LOG_INFO)) << f;
    EXPECT_TRUE(f.logHas("chosen by: NCCL_SOCKET_IFNAME")) << f;
  }
}

TEST_F(IfacesTest, IfnameThatMatchesNothingUsableGivesNothingAndSaysSo) {
  build({ifc("ib0", {"198.18.1.1/24"}), ifc("eth0", {"198.18.2.1/24"}, /*up=*/false), ifc("eth1", {})});
  for (const char* spec : {"=eth9", "eth", "^ib,lo"}) {
    Found f = find({{"NCCL_SOCKET_IFNAME", spec}, {"NCCL_COMM_ID", "198.18.1.3:5000"}});
    ASSERT_TRUE(f.ran) << f;
    EXPECT_EQ(f.res, ncclSuccess) << f;
    EXPECT_EQ(f.n, 0) << spec << ": no fallback to ib0 or the NCCL_COMM_ID subnet\n" << f;
    EXPECT_EQ(f.step, RAILNET_IF_NONE) << f;
    EXPECT_TRUE(f.logHas(std::string("NCCL_SOCKET_IFNAME=") + spec + " selects no interface", NCCL_LOG_WARN)) << f;
    EXPECT_TRUE(f.logHas("ib0 198.18.1.1<0>, eth0 down, eth1 no address", NCCL_LOG_WARN)) << f;
  }
}

TEST_F(IfacesTest, MalformedIfnameFailsAndOneCharacterIsIgnoredAsInNccl) {
  build({ifc("ib0", {"198.18.1.1/24"}), ifc("eth0", {"198.18.2.1/24"})});
  Found f = find({{"NCCL_SOCKET_IFNAME", "eth0,eth 1"}});
  ASSERT_TRUE(f.ran) << f;
  EXPECT_EQ(f.res, ncclInvalidArgument) << f;
  EXPECT_EQ(f.n, 0) << f;
  EXPECT_TRUE(f.logHas("\"eth0,eth 1\"", NCCL_LOG_WARN)) << f;

  for (const char* spec : {"e", "^", "="}) {
    f = find({{"NCCL_SOCKET_IFNAME", spec}});
    EXPECT_EQ(f.res, ncclSuccess) << f;
    EXPECT_EQ(f.names, V{"ib0"}) << spec << "\n" << f;
    EXPECT_EQ(f.step, RAILNET_IF_IB) << f;
    EXPECT_TRUE(f.logHas("ignored")) << f;
  }
}

// A list that is set but names no interface is a mistake: a WARN says so and what is used
// instead (the automatic choice), never a silent fallback. One character that is a name
// ("e") is NCCL's "too short" rule: an INFO only.
TEST_F(IfacesTest, IfnameThatNamesNoInterfaceWarnsAndSaysWhatIsUsed) {
  build({ifc("ib0", {"198.18.1.1/24"}), ifc("eth0", {"198.18.2.1/24"})});
  for (const char* spec : {"", "=", "^", ",", "=,", "^=", " , ,"}) {
    Found f = find({{"NCCL_SOCKET_IFNAME", spec}});
    ASSERT_TRUE(f.ran) << f;
    EXPECT_EQ(f.res, ncclSuccess) << f;
    EXPECT_EQ(f.names, V{"ib0"}) << "[" << spec << "]\n" << f;
    EXPECT_EQ(f.step, RAILNET_IF_IB) << f;
    EXPECT_TRUE(f.logHas(std::string("NCCL_SOCKET_IFNAME=\"") + spec + "\" (from environment) names no interface",
                         NCCL_LOG_WARN))
        << "[" << spec << "]\n" << f;
    EXPECT_TRUE(f.logHas("instead: [0]ib0:198.18.1.1<0> (chosen by: ib* interfaces)", NCCL_LOG_WARN)) << f;
  }
  Found f = find({{"NCCL_SOCKET_IFNAME", "e"}});
  EXPECT_FALSE(f.logHas("names no interface")) << f;
}

TEST_F(IfacesTest, NcclFindInterfacesIsTheSameChoice) {
  build({ifc("eth0", {"198.18.2.1/24"}), ifc("ib0", {"198.18.1.1/24"})});
  NetNsResult r = host_->run([](NetNsIo& io) {
    unsetenv("NCCL_SOCKET_IFNAME");
    unsetenv("NCCL_COMM_ID");
    unsetenv("NCCL_SOCKET_FAMILY");
    setenv("NCCL_CONF_FILE", "/dev/null", 1);
    setenv("RAILNET_SYSTEM_CONF", "/dev/null", 1);
    railnetParamReset();
    char names[MAX_IFS * MAX_IF_NAME_SIZE];
    union ncclSocketAddress addrs[MAX_IFS];
    for (int t = 0; t < 500; t++) {
      int n = 0;
      if (ncclFindInterfaces(names, addrs, MAX_IF_NAME_SIZE, MAX_IFS, &n) != ncclSuccess) return 2;
      if (n == 1 && strcmp(names, "ib0") == 0) return 0;
      usleep(10000);
    }
    io.say(names);
    return 1;
  });
  EXPECT_TRUE(r.success()) << r.describe();
}
