/* The interfaces section: every interface with its state and addresses, the ones
 * ncclFindInterfaces picks, the step of the fallback chain that picked them, and what
 * NCCL_SOCKET_IFNAME matched. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include "diag.h"
#include "param.h"
#include "socket.h"

static int prefixLen(const struct sockaddr* mask) {
  if (mask == NULL) return -1;
  const unsigned char* b;
  int n;
  if (mask->sa_family == AF_INET) {
    b = (const unsigned char*)&((const struct sockaddr_in*)mask)->sin_addr;
    n = 4;
  } else if (mask->sa_family == AF_INET6) {
    b = ((const struct sockaddr_in6*)mask)->sin6_addr.s6_addr;
    n = 16;
  } else {
    return -1;
  }
  int len = 0;
  for (int i = 0; i < n; i++) len += __builtin_popcount(b[i]);
  return len;
}

static const char* ipString(const struct sockaddr* sa, char* buf, size_t size) {
  const void* a = sa->sa_family == AF_INET ? (const void*)&((const struct sockaddr_in*)sa)->sin_addr
                                          : (const void*)&((const struct sockaddr_in6*)sa)->sin6_addr;
  if (inet_ntop(sa->sa_family, a, buf, (socklen_t)size) == NULL) sfmt(buf, size, "?");
  return buf;
}

/* The IPv4/IPv6 addresses of ifa's interface (its entries from ifa on): one JSON array, and
 * "addr/len addr/len ..." in addrText. */
static void interfaceAddresses(struct ifaddrs* ifa, char* addrText, size_t size) {
  size_t len = 0;
  jOpen("addresses", '[');
  for (struct ifaddrs* e = ifa; e; e = e->ifa_next) {
    if (e->ifa_name == NULL || strcmp(e->ifa_name, ifa->ifa_name) || e->ifa_addr == NULL) continue;
    if (e->ifa_addr->sa_family != AF_INET && e->ifa_addr->sa_family != AF_INET6) continue;
    char ip[INET6_ADDRSTRLEN], one[INET6_ADDRSTRLEN + 8];
    sfmt(one, sizeof(one), "%s/%d", ipString(e->ifa_addr, ip, sizeof(ip)), prefixLen(e->ifa_netmask));
    jStr(NULL, one);
    if (len < size) len += (size_t)sfmt(addrText + len, size - len, "%s%s", len ? " " : "", one);
  }
  jClose(']');
}

/* One row of the table for the interface of ifa (its first entry). match: the parsed
 * NCCL_SOCKET_IFNAME (user), or NULL when it is unset or unparsable. */
static void interfaceRow(struct ifaddrs* ifa, const char* names, int n, const char* user, const railnetIfList* match) {
  const char* state = !(ifa->ifa_flags & IFF_UP) ? "down" : !(ifa->ifa_flags & IFF_RUNNING) ? "up, no carrier" : "up, running";
  int chosen = -1;
  for (int i = 0; i < n; i++)
    if (strncmp(names + i * MAX_IF_NAME_SIZE, ifa->ifa_name, MAX_IF_NAME_SIZE) == 0) chosen = i;
  char addrText[1024] = "";
  jOpen(NULL, '{');
  jStr("name", ifa->ifa_name);
  jStr("state", state);
  jBool("up", (ifa->ifa_flags & IFF_UP) != 0);
  jBool("running", (ifa->ifa_flags & IFF_RUNNING) != 0);
  interfaceAddresses(ifa, addrText, sizeof(addrText));
  jBool("selected", chosen >= 0);
  if (match) jBool("matches_NCCL_SOCKET_IFNAME", railnetIfListSelects(match, ifa->ifa_name, -1));
  jClose('}');
  char mark[64] = "";
  if (chosen >= 0) sfmt(mark, sizeof(mark), "   <- selected [%d]", chosen);
  text("  %-16s %-18s %s%s\n", ifa->ifa_name, state, addrText[0] ? addrText : "-", mark);
  if (match && chosen < 0 && railnetIfListSelects(match, ifa->ifa_name, -1) && !match->exclude)
    WARNING("bring it up (ip link set <if> up), give it an address, or drop it from NCCL_SOCKET_IFNAME",
            "NCCL_SOCKET_IFNAME=%s names %s, which is not used: %s%s", user, ifa->ifa_name, state,
            addrText[0] ? "" : ", no address");
}

/* The table of every interface; -1 (a problem) when the list cannot be read. */
static int listInterfaces(const char* names, int n, const char* user, const railnetIfList* match) {
  struct ifaddrs* all = NULL;
  if (getifaddrs(&all) != 0) {
    PROBLEM("check that /proc and netlink are available to this process", "getifaddrs failed: %s", strerror(errno));
    return -1;
  }
  jOpen("interfaces", '[');
  text("  %-16s %-18s %s\n", "name", "state", "addresses");
  for (struct ifaddrs* ifa = all; ifa; ifa = ifa->ifa_next) {
    if (ifa->ifa_name == NULL) continue;
    int seen = 0;
    for (struct ifaddrs* p = all; p != ifa && !seen; p = p->ifa_next) seen = p->ifa_name && !strcmp(p->ifa_name, ifa->ifa_name);
    if (seen) continue;
    interfaceRow(ifa, names, n, user, match);
  }
  jClose(']');
  freeifaddrs(all);
  return 0;
}

/* The selected interfaces: a JSON array, and "name (addr), ..." in chosenText. */
static void listSelected(const char* names, const union ncclSocketAddress* addrs, int n, char* chosenText, size_t size) {
  size_t len = 0;
  jOpen("selected", '[');
  for (int i = 0; i < n; i++) {
    char a[INET6_ADDRSTRLEN];
    ipString(&addrs[i].sa, a, sizeof(a));
    jOpen(NULL, '{');
    jStr("name", names + i * MAX_IF_NAME_SIZE);
    jStr("address", a);
    jClose('}');
    if (len < size)
      len += (size_t)sfmt(chosenText + len, size - len, "%s%s (%s)", i ? ", " : "", names + i * MAX_IF_NAME_SIZE, a);
  }
  jClose(']');
}

/* Does NCCL_SOCKET_IFNAME replace the automatic chain? Not when unset, one character long
 * (NCCL ignores those), or naming no interface ("", "^", "=", ",", "^=", ...: railnet ignores
 * those with a WARN, as railnetFindInterfaces does). */
static int userListApplies(const char* user) {
  return user && strlen(user) > 1 && !railnetIfListNamesNothing(user);
}

/* Is the address one other hosts cannot reach: loopback (127/8, ::1) or link-local
 * (169.254/16, fe80::/10)? "loopback" / "link-local", else NULL. */
static const char* localOnlyKind(const struct sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    uint32_t a = ntohl(((const struct sockaddr_in*)sa)->sin_addr.s_addr);
    if ((a >> 24) == 127) return "loopback";
    if ((a >> 16) == 0xa9fe) return "link-local";
  } else if (sa->sa_family == AF_INET6) {
    const struct in6_addr* a = &((const struct sockaddr_in6*)sa)->sin6_addr;
    if (IN6_IS_ADDR_LOOPBACK(a)) return "loopback";
    if (IN6_IS_ADDR_LINKLOCAL(a)) return "link-local";
  }
  return NULL;
}

/* A user list that selects an interface other hosts cannot reach (lo, a link-local-only
 * one): NCCL's bootstrap may advertise it, and a multi-node job cannot connect. A '^' list
 * replaces the automatic chain, so it no longer leaves lo out (the guide's ^docker example). */
static void judgeLocalOnly(const char* names, const union ncclSocketAddress* addrs, int n, const char* user) {
  char bad[256] = "", good[128] = "";
  size_t len = 0;
  const char* kind = NULL;
  for (int i = 0; i < n; i++) {
    const char* name = names + i * MAX_IF_NAME_SIZE;
    char a[INET6_ADDRSTRLEN];
    const char* k = localOnlyKind(&addrs[i].sa);
    if (k == NULL) {
      if (good[0] == '\0') sfmt(good, sizeof(good), "%s", name);
      continue;
    }
    if (kind == NULL) kind = k;
    if (len < sizeof(bad))
      len += (size_t)sfmt(bad + len, sizeof(bad) - len, "%s%s (%s, %s) as device [%d]", len ? ", " : "", name,
                          ipString(&addrs[i].sa, a, sizeof(a)), k, i);
  }
  if (kind == NULL) return;
  char fix[512];
  if (user[0] == '^')
    sfmt(fix, sizeof(fix), "exclude it too: NCCL_SOCKET_IFNAME=%s,lo%s, or name the NIC: NCCL_SOCKET_IFNAME==%s "
         "(a single-host run may ignore this)", user, strcmp(kind, "loopback") ? ",<the link-local interface>" : "",
         good[0] ? good : "<nic>");
  else
    sfmt(fix, sizeof(fix), "name the NIC that reaches the other nodes: NCCL_SOCKET_IFNAME==%s (a single-host run "
         "may ignore this)", good[0] ? good : "<nic>");
  /* a list that names it (=lo) asks for it: fine on one host, a warning; a '^' list picks it unasked */
  finding(user[0] == '^', fix, "NCCL_SOCKET_IFNAME=%s selects %s, which other hosts cannot reach: %sNCCL's "
          "bootstrap and the Socket transport may use that address and the ranks on other nodes cannot connect (the "
          "job hangs)", user, bad,
          user[0] == '^' ? "a '^' list replaces NCCL's automatic chain, so lo is no longer left out (the "
                           "troubleshooting guide's NCCL_SOCKET_IFNAME=^docker example leads here: add ',lo'); "
                         : "");
}

/* NCCL's own parser of NCCL_SOCKET_IFNAME (which NCCL's bootstrap uses, whatever the plugin
 * does) keeps spaces: ' eth0' names no interface there, though railnet trims it. */
static void judgeSpaces(const char* user, railnetParamSource src) {
  const char* sp = NULL;
  for (const char* c = user; *c && sp == NULL; c++)
    if (*c == ' ' || *c == '\t') sp = c;
  if (sp == NULL) return;
  char trimmed[256];
  size_t j = 0;
  for (const char* c = user; *c && j + 1 < sizeof(trimmed); c++)
    if (*c != ' ' && *c != '\t') trimmed[j++] = *c;
  trimmed[j] = '\0';
  char fix[320];
  sfmt(fix, sizeof(fix), "remove the spaces: NCCL_SOCKET_IFNAME=%s", trimmed);
  PROBLEM(fix, "NCCL_SOCKET_IFNAME=\"%s\" (%s) has a space: railnet trims it, but NCCL's own bootstrap reads the "
          "list as it is and finds no interface named that way (NCCL WARN Bootstrap : no socket interface found)",
          user, railnetParamSourceName(src));
}

/* What the choice means: the chain or the override, and the problems with the result. */
static void judgeChoice(ncclResult_t res, const char* names, const union ncclSocketAddress* addrs, int n,
                        railnetIfStep step, const char* user, railnetParamSource src, const char* chosenText) {
  if (userListApplies(user))
    text("  NCCL_SOCKET_IFNAME=%s (%s) bypasses the automatic chain\n", user, railnetParamSourceName(src));
  else
    text("  automatic chain: ib* > subnet of NCCL_COMM_ID > any but docker*,lo,virbr* > docker* > lo > virbr*\n");
  if (railnetIfListNamesNothing(user))
    WARNING("name the interfaces (e.g. NCCL_SOCKET_IFNAME=eth0 or =eth0,eth1) or unset NCCL_SOCKET_IFNAME",
            "NCCL_SOCKET_IFNAME=\"%s\" (%s) names no interface: it is ignored and the automatic choice is used "
            "instead (%s)",
            user, railnetParamSourceName(src), n > 0 ? chosenText : "nothing");
  if (res != ncclSuccess) {
    PROBLEM("fix the syntax: comma-separated prefixes, '=' for exact names, '^' to exclude (e.g. =eth0,eth1)",
            "NCCL_SOCKET_IFNAME=%s cannot be parsed", user ? user : "");
    return;
  }
  if (n == 0) {
    if (userListApplies(user))
      PROBLEM("set NCCL_SOCKET_IFNAME to an interface listed above as 'up, running' with an address",
              "NCCL_SOCKET_IFNAME=%s (%s) selects no interface that is up and running with an address: NCCL init "
              "fails with 'no socket interface found'",
              user, railnetParamSourceName(src));
    else
      PROBLEM("bring up a NIC with an IPv4/IPv6 address (ip link set <if> up; ip addr add ...)",
              "no interface is up and running with an address: NCCL cannot bootstrap");
    return;
  }
  text("  selected: %s -- by step: %s\n", chosenText, railnetIfStepName(step));
  if (step == RAILNET_IF_USER) judgeLocalOnly(names, addrs, n, user);
  if (step == RAILNET_IF_LO)
    PROBLEM("give a NIC an address, or set NCCL_SOCKET_IFNAME=<nic> (single-host runs may ignore this)",
            "only lo is usable: ranks on other hosts cannot connect");
  else if (step == RAILNET_IF_DOCKER || step == RAILNET_IF_VIRBR)
    WARNING("set NCCL_SOCKET_IFNAME to the NIC that reaches the other nodes",
            "the choice fell back to a bridge (%s), which is rarely routable between hosts", railnetIfStepName(step));
  else if (step == RAILNET_IF_DEFAULT && n > 1)
    text("  note: NCCL uses every interface above; one that is up but cannot reach the other nodes makes init hang "
         "-- pin the right ones with NCCL_SOCKET_IFNAME==<if>[,<if>]\n");
}

void sectionInterfaces(void) {
  section("interfaces", "Interfaces (ncclFindInterfaces)");
  char names[MAX_IFS * MAX_IF_NAME_SIZE];
  union ncclSocketAddress addrs[MAX_IFS];
  int n = 0;
  railnetIfStep step = RAILNET_IF_NONE;
  memset(names, 0, sizeof(names));
  ncclResult_t res = railnetFindInterfaces(names, addrs, MAX_IF_NAME_SIZE, MAX_IFS, &n, &step);

  railnetParamSource src;
  const char* user = railnetParamRaw("NCCL_SOCKET_IFNAME", &src);
  railnetIfList userList;
  int userOk = userListApplies(user) && railnetIfListParse(user, 0, &userList) == ncclSuccess;

  if (listInterfaces(names, n, user, userOk ? &userList : NULL) != 0) return;

  char chosenText[512] = "";
  listSelected(names, addrs, n, chosenText, sizeof(chosenText));
  jStr("step", railnetIfStepName(step));
  jStr("NCCL_SOCKET_IFNAME", user);
  if (user) jStr("NCCL_SOCKET_IFNAME_source", railnetParamSourceName(src));
  if (user) judgeSpaces(user, src);
  judgeChoice(res, names, addrs, n, step, user, src, chosenText);
}
