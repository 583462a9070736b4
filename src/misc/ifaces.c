/*
 * Interface selection (NCCL's ncclFindInterfaces), on one getifaddrs() snapshot:
 *   NCCL_SOCKET_IFNAME set: exactly what it selects, nothing else (none: WARN).
 *   Else the first step that finds something: ib* ; the interface in NCCL_COMM_ID's
 *   subnet ; anything but docker*, lo, virbr* ; docker* ; lo ; virbr*.
 * An address counts when its interface is UP and RUNNING, it is IPv4 or IPv6 (of
 * NCCL_SOCKET_FAMILY when set) and not ::1. IPv6 link-local addresses count as in NCCL
 * (getifaddrs gives them with their scope id, so they can be connected to); as in NCCL
 * each interface is taken once, with its first such address in getifaddrs order (the
 * kernel lists IPv4 before IPv6, and global IPv6 before link-local).
 * Deliberate difference: the NCCL_COMM_ID subnet step also requires UP and RUNNING
 * (NCCL would take a down interface there, which can reach nothing).
 */
#include <ifaddrs.h>
#include <stdarg.h>
#include <net/if.h>
#include <stdio.h>
#include <pthread.h>
#include <string.h>
#include "core.h"
#include "param.h"
#include "socket.h"

enum { P_IFNAME, P_FAMILY, P_COMM_ID };
static const railnetParam ifaceParams[] = {
    [P_IFNAME] = RAILNET_PARAM_STR_DEF("NCCL_SOCKET_IFNAME", NULL,
                                       "Interfaces for sockets: prefixes, '=' exact names, '^' to exclude "
                                       "(e.g. eth0 / =eth0,eth1 / ^docker,lo)"),
    [P_FAMILY] = RAILNET_PARAM_STR_DEF("NCCL_SOCKET_FAMILY", NULL,
                                       "Restrict interface selection to AF_INET or AF_INET6 addresses"),
    [P_COMM_ID] = RAILNET_PARAM_STR_DEF("NCCL_COMM_ID", NULL,
                                        "ip:port of the bootstrap root; its subnet guides interface selection"),
};
RAILNET_PARAM_TABLE("ifaces", ifaceParams);

const char* railnetIfStepName(railnetIfStep step) {
  switch (step) {
    case RAILNET_IF_NONE: return "none";
    case RAILNET_IF_USER: return "NCCL_SOCKET_IFNAME";
    case RAILNET_IF_IB: return "ib* interfaces";
    case RAILNET_IF_SUBNET: return "same subnet as NCCL_COMM_ID";
    case RAILNET_IF_DEFAULT: return "any but docker*, lo, virbr*";
    case RAILNET_IF_DOCKER: return "docker*";
    case RAILNET_IF_LO: return "lo";
    case RAILNET_IF_VIRBR: return "virbr*";
  }
  return "unknown";
}

static int isUsable(const struct ifaddrs* ifa) {
  return (ifa->ifa_flags & (IFF_UP | IFF_RUNNING)) == (IFF_UP | IFF_RUNNING);
}

static int isIpFamily(int family) { return family == AF_INET || family == AF_INET6; }

static socklen_t addrLen(int family) {
  return family == AF_INET ? (socklen_t)sizeof(struct sockaddr_in) : (socklen_t)sizeof(struct sockaddr_in6);
}

/* Is this getifaddrs entry a candidate address for the wanted family (-1: any)? */
static int isCandidate(const struct ifaddrs* ifa, int family) {
  if (ifa->ifa_addr == NULL || ifa->ifa_name == NULL) return 0;
  int f = ifa->ifa_addr->sa_family;
  if (!isIpFamily(f) || !isUsable(ifa)) return 0;
  if (family != -1 && f != family) return 0;
  if (f == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6*)ifa->ifa_addr)->sin6_addr)) return 0;
  return 1;
}

static int alreadyFound(const char* names, int ifNameMaxSize, int n, const char* name) {
  for (int i = 0; i < n; i++)
    if (strncmp(names + i * ifNameMaxSize, name, (size_t)ifNameMaxSize) == 0) return 1;
  return 0;
}

static void store(char* names, union ncclSocketAddress* addrs, int ifNameMaxSize, int i, const struct ifaddrs* ifa) {
  snprintf(names + i * ifNameMaxSize, (size_t)ifNameMaxSize, "%s", ifa->ifa_name);
  memset(&addrs[i], 0, sizeof(addrs[i]));
  memcpy(&addrs[i], ifa->ifa_addr, addrLen(ifa->ifa_addr->sa_family));
}

/* The interfaces of the snapshot that spec (a list in NCCL_SOCKET_IFNAME syntax) selects. */
static void findMatching(struct ifaddrs* all, const railnetIfList* list, int family, char* names,
                         union ncclSocketAddress* addrs, int ifNameMaxSize, int maxIfs, int* n) {
  *n = 0;
  for (struct ifaddrs* ifa = all; ifa && *n < maxIfs; ifa = ifa->ifa_next) {
    if (!isCandidate(ifa, family)) continue;
    if (!railnetIfListSelects(list, ifa->ifa_name, -1)) continue;
    if (alreadyFound(names, ifNameMaxSize, *n, ifa->ifa_name)) continue;
    store(names, addrs, ifNameMaxSize, *n, ifa);
    (*n)++;
  }
}

static ncclResult_t findPrefix(struct ifaddrs* all, const char* spec, int family, char* names,
                               union ncclSocketAddress* addrs, int ifNameMaxSize, int maxIfs, int* n) {
  railnetIfList list;
  NCCLCHECK(railnetIfListParse(spec, 0, &list));
  findMatching(all, &list, family, names, addrs, ifNameMaxSize, maxIfs, n);
  return ncclSuccess;
}

static int sameSubnet(const struct ifaddrs* ifa, const union ncclSocketAddress* remote) {
  int f = ifa->ifa_addr->sa_family;
  if (f != remote->sa.sa_family || ifa->ifa_netmask == NULL) return 0;
  if (f == AF_INET) {
    uint32_t local = ((const struct sockaddr_in*)ifa->ifa_addr)->sin_addr.s_addr;
    uint32_t mask = ((const struct sockaddr_in*)ifa->ifa_netmask)->sin_addr.s_addr;
    return ((local ^ remote->sin.sin_addr.s_addr) & mask) == 0;
  }
  const struct sockaddr_in6* local6 = (const struct sockaddr_in6*)ifa->ifa_addr;
  const struct sockaddr_in6* mask6 = (const struct sockaddr_in6*)ifa->ifa_netmask;
  for (int i = 0; i < 16; i++) {
    if ((local6->sin6_addr.s6_addr[i] ^ remote->sin6.sin6_addr.s6_addr[i]) & mask6->sin6_addr.s6_addr[i]) return 0;
  }
  /* Link-local prefixes are equal on every link: the scope (interface) must match too. */
  return local6->sin6_scope_id == remote->sin6.sin6_scope_id;
}

static int matchSubnetIn(struct ifaddrs* all, const union ncclSocketAddress* remote, char* ifName,
                         union ncclSocketAddress* localAddr, int ifNameMaxSize) {
  for (struct ifaddrs* ifa = all; ifa; ifa = ifa->ifa_next) {
    if (ifa->ifa_addr == NULL || ifa->ifa_name == NULL) continue;
    if (!isIpFamily(ifa->ifa_addr->sa_family) || !isUsable(ifa)) continue;
    if (!sameSubnet(ifa, remote)) continue;
    snprintf(ifName, (size_t)ifNameMaxSize, "%s", ifa->ifa_name);
    memset(localAddr, 0, sizeof(*localAddr));
    memcpy(localAddr, ifa->ifa_addr, addrLen(ifa->ifa_addr->sa_family));
    return 1;
  }
  return 0;
}

ncclResult_t ncclFindInterfaceMatchSubnet(char* ifName, union ncclSocketAddress* localAddr,
                                          const union ncclSocketAddress* remoteAddr, int ifNameMaxSize, int* found) {
  *found = 0;
  if (ifName == NULL || localAddr == NULL || remoteAddr == NULL || ifNameMaxSize <= 0) return ncclInvalidArgument;
  if (!isIpFamily(remoteAddr->sa.sa_family)) {
    WARN("NET : cannot match a subnet for address family %d", remoteAddr->sa.sa_family);
    return ncclInvalidArgument;
  }
  struct ifaddrs* all;
  if (getifaddrs(&all) != 0) {
    WARN("NET : getifaddrs failed: %s", strerror(errno));
    return ncclSystemError;
  }
  *found = matchSubnetIn(all, remoteAddr, ifName, localAddr, ifNameMaxSize);
  freeifaddrs(all);
  return ncclSuccess;
}

/* ------------------------------------------------------------- reporting */

static void appendf(char* buf, size_t size, size_t* len, const char* fmt, ...) __attribute__((format(printf, 4, 5)));
static void appendf(char* buf, size_t size, size_t* len, const char* fmt, ...) {
  if (*len >= size) return;
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + *len, size - *len, fmt, ap);
  va_end(ap);
  if (w > 0) *len += (size_t)w;
  if (*len >= size) {
    *len = size - 1;
    if (size > 4) memcpy(buf + size - 4, "...", 4);
  }
}

/* Every interface of the snapshot with what makes it (un)usable, e.g.
 * "eth0 198.18.0.1, ib0 down, docker0 no carrier, virbr0 no address, lo 127.0.0.1". */
static void describeAll(struct ifaddrs* all, int family, char* buf, size_t size) {
  size_t len = 0;
  buf[0] = '\0';
  for (struct ifaddrs* ifa = all; ifa; ifa = ifa->ifa_next) {
    if (ifa->ifa_name == NULL) continue;
    int seen = 0;
    for (struct ifaddrs* prev = all; prev != ifa && !seen; prev = prev->ifa_next)
      seen = prev->ifa_name && strcmp(prev->ifa_name, ifa->ifa_name) == 0;
    if (seen) continue;
    const struct ifaddrs* first = NULL;
    int anyIp = 0;
    for (struct ifaddrs* e = ifa; e; e = e->ifa_next) {
      if (e->ifa_name == NULL || strcmp(e->ifa_name, ifa->ifa_name) != 0 || e->ifa_addr == NULL) continue;
      if (isIpFamily(e->ifa_addr->sa_family)) anyIp = 1;
      if (first == NULL && isCandidate(e, family)) first = e;
    }
    appendf(buf, size, &len, "%s%s ", len ? ", " : "", ifa->ifa_name);
    if (first) {
      char line[SOCKET_NAME_MAXLEN + 1];
      union ncclSocketAddress a;
      memset(&a, 0, sizeof(a));
      memcpy(&a, first->ifa_addr, addrLen(first->ifa_addr->sa_family));
      appendf(buf, size, &len, "%s", ncclSocketToString(&a, line, 1));
    } else if (!(ifa->ifa_flags & IFF_UP)) {
      appendf(buf, size, &len, "down");
    } else if (!(ifa->ifa_flags & IFF_RUNNING)) {
      appendf(buf, size, &len, "no carrier");
    } else if (!anyIp) {
      appendf(buf, size, &len, "no address");
    } else {
      appendf(buf, size, &len, "no %s address", family == AF_INET ? "IPv4" : family == AF_INET6 ? "IPv6" : "usable");
    }
  }
  if (len == 0) appendf(buf, size, &len, "none");
}

static void describeChosen(const char* names, const union ncclSocketAddress* addrs, int ifNameMaxSize, int n,
                           char* buf, size_t size) {
  size_t len = 0;
  buf[0] = '\0';
  for (int i = 0; i < n; i++) {
    char line[SOCKET_NAME_MAXLEN + 1];
    appendf(buf, size, &len, "%s[%d]%.*s:%s", i ? " " : "", i, ifNameMaxSize, names + i * ifNameMaxSize,
            ncclSocketToString(&addrs[i], line, 1));
  }
}

/* ------------------------------------------------------------- selection */

static int socketFamily(void) {
  const char* env = railnetParamStr(&ifaceParams[P_FAMILY]);
  if (env == NULL) return -1;
  INFO(NCCL_ENV, "NCCL_SOCKET_FAMILY set by %s to %s", railnetParamSourceName(railnetParamSourceOf(&ifaceParams[P_FAMILY])),
       env);
  if (strcmp(env, "AF_INET") == 0) return AF_INET;
  if (strcmp(env, "AF_INET6") == 0) return AF_INET6;
  WARN("NET : NCCL_SOCKET_FAMILY=%s is neither AF_INET nor AF_INET6; using addresses of any family", env);
  return -1;
}

/* The automatic chain; the first step that finds something wins. */
static ncclResult_t findAuto(struct ifaddrs* all, int family, char* names, union ncclSocketAddress* addrs,
                             int ifNameMaxSize, int maxIfs, int* n, railnetIfStep* step) {
  static const struct { railnetIfStep step; const char* spec; } chain[] = {
      {RAILNET_IF_IB, "ib"},        {RAILNET_IF_SUBNET, NULL}, {RAILNET_IF_DEFAULT, "^docker,lo,virbr"},
      {RAILNET_IF_DOCKER, "docker"}, {RAILNET_IF_LO, "lo"},    {RAILNET_IF_VIRBR, "virbr"},
  };
  *n = 0;
  for (size_t i = 0; i < RAILNET_ARRAY_SIZE(chain) && *n == 0; i++) {
    *step = chain[i].step;
    if (chain[i].spec) {
      NCCLCHECK(findPrefix(all, chain[i].spec, family, names, addrs, ifNameMaxSize, maxIfs, n));
      continue;
    }
    const char* commId = railnetParamStr(&ifaceParams[P_COMM_ID]);
    if (commId == NULL || strlen(commId) <= 1) continue;
    INFO(NCCL_ENV, "NCCL_COMM_ID set by %s to %s",
         railnetParamSourceName(railnetParamSourceOf(&ifaceParams[P_COMM_ID])), commId);
    union ncclSocketAddress idAddr;
    memset(&idAddr, 0, sizeof(idAddr));
    NCCLCHECK(ncclSocketGetAddrFromString(&idAddr, commId));
    if (family != -1 && idAddr.sa.sa_family != family) continue;
    *n = matchSubnetIn(all, &idAddr, names, addrs, ifNameMaxSize);
    if (*n == 0) INFO(NCCL_NET, "NET/Socket : no interface in the subnet of NCCL_COMM_ID %s", commId);
  }
  if (*n == 0) *step = RAILNET_IF_NONE;
  return ncclSuccess;
}

/* The last NCCL_SOCKET_IFNAME that was WARNed about for selecting nothing. */
static pthread_mutex_t saidLock = PTHREAD_MUTEX_INITIALIZER;
static char saidList[256];
static int saidAny;

/* Was the WARN about user already said (then 1), else it is now (0). */
static int saidNoMatch(const char* user) {
  pthread_mutex_lock(&saidLock);
  int again = saidAny && strncmp(saidList, user, sizeof(saidList) - 1) == 0;
  snprintf(saidList, sizeof(saidList), "%s", user);
  saidAny = 1;
  pthread_mutex_unlock(&saidLock);
  return again;
}

int railnetIfacesSaidNoMatch(void) {
  pthread_mutex_lock(&saidLock);
  const char* user = railnetParamStr(&ifaceParams[P_IFNAME]);
  int said = saidAny && user && strncmp(saidList, user, sizeof(saidList) - 1) == 0;
  pthread_mutex_unlock(&saidLock);
  return said;
}

ncclResult_t railnetFindInterfaces(char* ifNames, union ncclSocketAddress* ifAddrs, int ifNameMaxSize, int maxIfs,
                                   int* nIfs, railnetIfStep* stepOut) {
  railnetIfStep step = RAILNET_IF_NONE;
  if (stepOut) *stepOut = RAILNET_IF_NONE;
  if (nIfs == NULL) return ncclInvalidArgument;
  *nIfs = 0;
  if (ifNames == NULL || ifAddrs == NULL || ifNameMaxSize <= 0 || maxIfs <= 0) return ncclInvalidArgument;

  int family = socketFamily();
  const char* user = railnetParamStr(&ifaceParams[P_IFNAME]);
  /* NCCL ignores values of one character or less ("e", "^", "="); a value that names no
   * interface at all ("", "^", "=", ",", "^=,") is a mistake worth a WARN (after the choice). */
  int namesNothing = railnetIfListNamesNothing(user);
  int useUser = user != NULL && strlen(user) > 1 && !namesNothing;
  railnetIfList userList;
  if (user != NULL) {
    INFO(NCCL_ENV, "NCCL_SOCKET_IFNAME set by %s to %s%s",
         railnetParamSourceName(railnetParamSourceOf(&ifaceParams[P_IFNAME])), user,
         useUser || namesNothing ? "" : " (too short: ignored, as NCCL does)");
  }
  if (useUser) NCCLCHECK(railnetIfListParse(user, 0, &userList));

  struct ifaddrs* all;
  if (getifaddrs(&all) != 0) {
    WARN("NET : getifaddrs failed: %s", strerror(errno));
    return ncclSystemError;
  }
  ncclResult_t res = ncclSuccess;
  char seen[1024];
  describeAll(all, family, seen, sizeof(seen));
  INFO(NCCL_NET | NCCL_ENV, "NET/Socket : interfaces considered%s: %s",
       family == AF_INET ? " (AF_INET only)" : family == AF_INET6 ? " (AF_INET6 only)" : "", seen);

  if (useUser) {
    step = RAILNET_IF_USER;
    findMatching(all, &userList, family, ifNames, ifAddrs, ifNameMaxSize, maxIfs, nIfs);
    if (*nIfs == 0) {
      /* one cause, one WARN: the same list again (the next transport's init) is INFO */
      int again = saidNoMatch(user);
      railnetDebugLog(again ? NCCL_LOG_INFO : NCCL_LOG_WARN, NCCL_NET | NCCL_INIT, again ? __func__ : __FILE__,
                      __LINE__, "NET/Socket : NCCL_SOCKET_IFNAME=%s selects no interface that is up and running with "
                      "an %s address; interfaces here: %s", user,
                      family == AF_INET ? "IPv4" : family == AF_INET6 ? "IPv6" : "IPv4/IPv6", seen);
      step = RAILNET_IF_NONE;
    }
  } else {
    res = findAuto(all, family, ifNames, ifAddrs, ifNameMaxSize, maxIfs, nIfs, &step);
  }
  freeifaddrs(all);
  if (res != ncclSuccess) return res;

  char chosen[1024] = "nothing";
  if (*nIfs > 0) describeChosen(ifNames, ifAddrs, ifNameMaxSize, *nIfs, chosen, sizeof(chosen));
  if (namesNothing)
    WARN("NET/Socket : NCCL_SOCKET_IFNAME=\"%s\" (from %s) names no interface: ignored; using the automatic "
         "choice instead: %s (chosen by: %s). Fix: name the interfaces (e.g. NCCL_SOCKET_IFNAME=eth0 or =eth0,eth1) "
         "or unset NCCL_SOCKET_IFNAME",
         user, railnetParamSourceName(railnetParamSourceOf(&ifaceParams[P_IFNAME])), chosen,
         railnetIfStepName(step));
  if (*nIfs > 0) {
    INFO(NCCL_NET | NCCL_ENV, "NET/Socket : selected %s (chosen by: %s)", chosen, railnetIfStepName(step));
  } else if (!useUser) {
    INFO(NCCL_NET | NCCL_ENV, "NET/Socket : no usable interface (up and running, with an address) found");
  }
  if (stepOut) *stepOut = step;
  return ncclSuccess;
}

ncclResult_t ncclFindInterfaces(char* ifNames, union ncclSocketAddress* ifAddrs, int ifNameMaxSize, int maxIfs,
                                int* nIfs) {
  return railnetFindInterfaces(ifNames, ifAddrs, ifNameMaxSize, maxIfs, nIfs, NULL);
}
