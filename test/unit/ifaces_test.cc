// Interface selection pieces that need no namespace (the selection itself is tested on
// real interfaces in test/netns/ifaces_test.cc).
#include <set>
#include "test_util.h"

extern "C" {
#include "socket.h"
}

TEST(Ifaces, EveryStepHasItsOwnReadableName) {
  std::set<std::string> names;
  for (int s = RAILNET_IF_NONE; s <= RAILNET_IF_VIRBR; s++) {
    std::string n = railnetIfStepName((railnetIfStep)s);
    EXPECT_FALSE(n.empty());
    EXPECT_NE(n, "unknown");
    names.insert(n);
  }
  EXPECT_EQ(names.size(), (size_t)(RAILNET_IF_VIRBR + 1));
  EXPECT_STREQ(railnetIfStepName(RAILNET_IF_USER), "NCCL_SOCKET_IFNAME");
  EXPECT_STREQ(railnetIfStepName((railnetIfStep)99), "unknown");
}

TEST(Ifaces, BadArgumentsAreRefused) {
  char names[MAX_IF_NAME_SIZE];
  union ncclSocketAddress addrs[1];
  int n = 7;
  railnetIfStep step = RAILNET_IF_LO;
  EXPECT_EQ(railnetFindInterfaces(nullptr, addrs, MAX_IF_NAME_SIZE, 1, &n, &step), ncclInvalidArgument);
  EXPECT_EQ(n, 0);
  EXPECT_EQ(step, RAILNET_IF_NONE);
  EXPECT_EQ(railnetFindInterfaces(names, addrs, MAX_IF_NAME_SIZE, 0, &n, nullptr), ncclInvalidArgument);
  EXPECT_EQ(railnetFindInterfaces(names, addrs, MAX_IF_NAME_SIZE, 1, nullptr, nullptr), ncclInvalidArgument);

  LogCapture log;
  union ncclSocketAddress remote;
  memset(&remote, 0, sizeof(remote));
  remote.sa.sa_family = AF_UNIX;
  int found = 1;
  EXPECT_EQ(ncclFindInterfaceMatchSubnet(names, addrs, &remote, MAX_IF_NAME_SIZE, &found), ncclInvalidArgument);
  EXPECT_EQ(found, 0);
  EXPECT_TRUE(log.contains("address family", NCCL_LOG_WARN)) << log.all();
}

TEST(Ifaces, MalformedIfnameIsRefusedBeforeLookingAtInterfaces) {
  ScopedEnv env;
  env.set("NCCL_SOCKET_IFNAME", "eth0,eth 1");
  LogCapture log;
  char names[MAX_IFS * MAX_IF_NAME_SIZE];
  union ncclSocketAddress addrs[MAX_IFS];
  int n = -1;
  EXPECT_EQ(railnetFindInterfaces(names, addrs, MAX_IF_NAME_SIZE, MAX_IFS, &n, nullptr), ncclInvalidArgument);
  EXPECT_EQ(n, 0);
  EXPECT_TRUE(log.contains("\"eth0,eth 1\"", NCCL_LOG_WARN)) << log.all();
}

TEST(Ifaces, ParamsAreDeclaredForRailnetDiag) {
  std::set<std::string> declared;
  for (int t = 0; t < railnetParamTableCount(); t++) {
    const railnetParamTable* tab = railnetParamTableAt(t);
    for (int i = 0; i < tab->count; i++) declared.insert(tab->params[i].name);
  }
  for (const char* p : {"NCCL_SOCKET_IFNAME", "NCCL_SOCKET_FAMILY", "NCCL_COMM_ID"}) EXPECT_TRUE(declared.count(p)) << p;
}
