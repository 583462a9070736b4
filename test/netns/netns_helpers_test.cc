// The namespace helpers themselves (test/common/netns.*): the other netns tests rely on
// them for isolation and cleanup.
#include <net/if.h>
#include <unistd.h>
#include "netns.h"

static bool nsExists(const std::string& name) { return access(("/run/netns/" + name).c_str(), F_OK) == 0; }

TEST(NetNsHelpers, CreateAndDeleteNamespace) {
  RAILNET_REQUIRE_NETNS();
  std::string name;
  {
    NetNs a("h");
    ASSERT_TRUE(a.ok());
    name = a.name();
    EXPECT_NE(name.find("rnt-" + std::to_string(getpid()) + "-h-"), std::string::npos);
    EXPECT_TRUE(nsExists(name));
  }
  EXPECT_FALSE(nsExists(name));
}

TEST(NetNsHelpers, VethAcrossNamespacesWithChosenNames) {
  RAILNET_REQUIRE_NETNS();
  NetNs a("a"), b("b");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(NetNs::veth(a, "eth0", b, "eth0"));  // same name on both sides
  ASSERT_TRUE(a.addAddr("eth0", "198.18.7.1/24"));
  ASSERT_TRUE(b.addAddr("eth0", "198.18.7.2/24"));
  ASSERT_TRUE(a.up("eth0") && b.up("eth0") && a.up("lo"));
  NetNsResult r = a.exec("ip -o -4 addr show dev eth0");
  ASSERT_TRUE(r.success()) << r.describe();
  EXPECT_NE(r.out.find("198.18.7.1/24"), std::string::npos) << r.out;
  r = a.exec("ping -c 1 -W 5 198.18.7.2 >/dev/null 2>&1 || ip neigh");
  EXPECT_TRUE(r.success()) << r.describe();
  // The test process stays in its own namespace: no eth0 with our address here.
  std::string out;
  NetNs::hostSh("ip -o addr", &out);
  EXPECT_EQ(out.find("198.18.7.1"), std::string::npos);
}

TEST(NetNsHelpers, RunFunctionInsideReportsStatusAndOutput) {
  RAILNET_REQUIRE_NETNS();
  NetNs a("r");
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(NetNs::veth(a, "ib0", a, "peer0"));
  NetNsResult r = a.run([](NetNsIo& io) {
    io.say(if_nametoindex("ib0") ? "ib0 here" : "no ib0");
    return 3;
  });
  EXPECT_TRUE(r.started && r.exited);
  EXPECT_EQ(r.exitCode, 3);
  EXPECT_EQ(r.out, "ib0 here\n");
  EXPECT_EQ(if_nametoindex("peer0"), 0u);  // not in the test's namespace
}

TEST(NetNsHelpers, TimeoutKillsTheChild) {
  RAILNET_REQUIRE_NETNS();
  NetNs a("t");
  ASSERT_TRUE(a.ok());
  NetNsResult r = a.exec("sleep 30", 300);
  EXPECT_TRUE(r.timedOut);
  EXPECT_FALSE(r.success());
}

TEST(NetNsHelpers, ConcurrentChildrenTalkToTheParent) {
  RAILNET_REQUIRE_NETNS();
  NetNs a("c");
  ASSERT_TRUE(a.ok());
  NetNsChild c(a, [](NetNsIo& io) {
    io.say("ready");
    usleep(100000);
    io.say("done");
    return 0;
  });
  ASSERT_TRUE(c.started());
  std::string line;
  ASSERT_TRUE(c.readLine(&line));
  EXPECT_EQ(line, "ready");
  NetNsResult r = c.wait();
  EXPECT_TRUE(r.success()) << r.describe();
  EXPECT_EQ(r.out, "done\n");
}

TEST(NetNsHelpers, WaitRunningFollowsTheCarrier) {
  RAILNET_REQUIRE_NETNS();
  NetNs a("w"), b("w");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(NetNs::veth(a, "eth0", b, "peer0"));
  ASSERT_TRUE(a.up("eth0"));
  EXPECT_FALSE(a.waitRunning("eth0", true, 200)) << "no carrier while the peer end is down";
  ASSERT_TRUE(b.up("peer0"));
  EXPECT_TRUE(a.waitRunning("eth0"));
  ASSERT_TRUE(b.down("peer0"));
  EXPECT_TRUE(a.waitRunning("eth0", false));
}
