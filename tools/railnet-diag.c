/*
 * railnet-diag: what railnet sees on this host, what it would choose, and what is wrong.
 * Read-only; needs no root. Every problem is printed with its cause and its fix.
 *
 *   railnet-diag [--json] [--params] [--watch SECONDS] [--help]
 *
 * Sections: interfaces (and ncclFindInterfaces' choice), TCP ports, RDMA ports, GID tables,
 * port error counters, GPUDirect, locked memory, settings. sysfs is read under $SYSFS_PATH
 * (default /sys), as libibverbs and railnet's IB transport do.
 * Exit status: 0 nothing wrong (warnings allowed), 1 a problem was found, 2 usage error.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <limits.h>
#include <net/if.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>
#include "../transport/net_ib/gid.h"    /* railnetIbChooseGid */
#include "../transport/net_ib/gdr.h"    /* ncclIbGdrSupport, railnetIbDmaBufProbe */
#include "ibvwrap.h"
#include "param.h"
#include "railnet.h"
#include "socket.h"

/* ================================================================ output */

/* snprintf that truncates silently (long names are cut, never overflow). */
static int sfmt(char* buf, size_t size, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static int sfmt(char* buf, size_t size, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, size, fmt, ap);
  va_end(ap);
  return n;
}

static int jsonMode;
static int nProblems, nWarnings;

/* Findings are printed inline in text mode and gathered for the JSON "findings" array. */
#define MAX_FINDINGS 256
static struct {
  const char* section;
  int problem; /* 1 problem, 0 warning */
  char cause[512];
  char fix[512];
} findings[MAX_FINDINGS];
static int nFindings;
static const char* curSection = "";

static void finding(int problem, const char* fix, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static void finding(int problem, const char* fix, const char* fmt, ...) {
  char cause[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(cause, sizeof(cause), fmt, ap);
  va_end(ap);
  if (problem) nProblems++;
  else nWarnings++;
  if (!jsonMode) printf("  %s: %s. Fix: %s\n", problem ? "PROBLEM" : "WARNING", cause, fix);
  if (nFindings < MAX_FINDINGS) {
    findings[nFindings].section = curSection;
    findings[nFindings].problem = problem;
    sfmt(findings[nFindings].cause, sizeof(findings[nFindings].cause), "%s", cause);
    sfmt(findings[nFindings].fix, sizeof(findings[nFindings].fix), "%s", fix);
    nFindings++;
  }
}
#define PROBLEM(fix, ...) finding(1, (fix), __VA_ARGS__)
#define WARNING(fix, ...) finding(0, (fix), __VA_ARGS__)

/* Text output only (a no-op with --json). */
static void text(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
static void text(const char* fmt, ...) {
  if (jsonMode) return;
  va_list ap;
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
}

/* A minimal JSON writer: objects and arrays nest, commas are placed for the caller. */
static int jDepth;
static int jCount[32];

static void jEsc(const char* s) {
  putchar('"');
  for (; s && *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') printf("\\%c", c);
    else if (c == '\n') printf("\\n");
    else if (c < 0x20) printf("\\u%04x", c);
    else putchar(c);
  }
  putchar('"');
}
static void jKey(const char* key) {
  if (jCount[jDepth]++) putchar(',');
  if (key) {
    jEsc(key);
    putchar(':');
  }
}
static void jOpen(const char* key, char c) {
  if (!jsonMode) return;
  jKey(key);
  putchar(c);
  jCount[++jDepth] = 0;
}
static void jClose(char c) {
  if (!jsonMode) return;
  putchar(c);
  jDepth--;
}
static void jStr(const char* key, const char* val) {
  if (!jsonMode) return;
  jKey(key);
  if (val) jEsc(val);
  else printf("null");
}
static void jInt(const char* key, long long v) {
  if (!jsonMode) return;
  jKey(key);
  printf("%lld", v);
}
static void jNum(const char* key, double v) {
  if (!jsonMode) return;
  jKey(key);
  printf("%g", v);
}
static void jBool(const char* key, int v) {
  if (!jsonMode) return;
  jKey(key);
  printf(v ? "true" : "false");
}

/* Starts a section: a "== title" header, or a JSON object under key (closing the previous one). */
static int sectionOpen;
static void sectionEnd(void) {
  if (sectionOpen) jClose('}');
  sectionOpen = 0;
}
static void section(const char* key, const char* title) {
  sectionEnd();
  curSection = key;
  text("\n== %s\n", title);
  jOpen(key, '{');
  sectionOpen = 1;
}

/* ================================================================ files */

static char sysfsRoot[PATH_MAX] = "/sys";

/* First line of a file, without the newline; 0 on success. */
static int readLine(const char* path, char* buf, size_t size) {
  FILE* f = fopen(path, "r");
  if (f == NULL) return -1;
  char* r = fgets(buf, (int)size, f);
  fclose(f);
  if (r == NULL) return -1;
  buf[strcspn(buf, "\n")] = '\0';
  return 0;
}
static int readSys(char* buf, size_t size, const char* fmt, ...) __attribute__((format(printf, 3, 4)));
static int readSys(char* buf, size_t size, const char* fmt, ...) {
  char rel[PATH_MAX], path[PATH_MAX + 64];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(rel, sizeof(rel), fmt, ap);
  va_end(ap);
  sfmt(path, sizeof(path), "%s/%s", sysfsRoot, rel);
  return readLine(path, buf, size);
}
static int existsSys(const char* rel) {
  char path[PATH_MAX + 64];
  sfmt(path, sizeof(path), "%s/%s", sysfsRoot, rel);
  return access(path, F_OK) == 0;
}

/* ================================================================ interfaces */

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

static void sectionInterfaces(void) {
  section("interfaces", "Interfaces (ncclFindInterfaces)");
  char names[MAX_IFS * MAX_IF_NAME_SIZE];
  union ncclSocketAddress addrs[MAX_IFS];
  int n = 0;
  railnetIfStep step = RAILNET_IF_NONE;
  memset(names, 0, sizeof(names));
  ncclResult_t res = railnetFindInterfaces(names, addrs, MAX_IF_NAME_SIZE, MAX_IFS, &n, &step);

  railnetParamSource src;
  const char* user = railnetGetEnv("NCCL_SOCKET_IFNAME", &src);
  railnetIfList userList;
  int userOk = user && strlen(user) > 1 && railnetIfListParse(user, 0, &userList) == ncclSuccess;

  struct ifaddrs* all = NULL;
  if (getifaddrs(&all) != 0) {
    PROBLEM("check that /proc and netlink are available to this process", "getifaddrs failed: %s", strerror(errno));
    return;
  }
  jOpen("interfaces", '[');
  text("  %-16s %-18s %s\n", "name", "state", "addresses");
  for (struct ifaddrs* ifa = all; ifa; ifa = ifa->ifa_next) {
    if (ifa->ifa_name == NULL) continue;
    int seen = 0;
    for (struct ifaddrs* p = all; p != ifa && !seen; p = p->ifa_next) seen = p->ifa_name && !strcmp(p->ifa_name, ifa->ifa_name);
    if (seen) continue;
    const char* state = !(ifa->ifa_flags & IFF_UP) ? "down" : !(ifa->ifa_flags & IFF_RUNNING) ? "up, no carrier" : "up, running";
    int chosen = -1;
    for (int i = 0; i < n; i++)
      if (strncmp(names + i * MAX_IF_NAME_SIZE, ifa->ifa_name, MAX_IF_NAME_SIZE) == 0) chosen = i;
    char addrText[1024] = "";
    size_t len = 0;
    jOpen(NULL, '{');
    jStr("name", ifa->ifa_name);
    jStr("state", state);
    jBool("up", (ifa->ifa_flags & IFF_UP) != 0);
    jBool("running", (ifa->ifa_flags & IFF_RUNNING) != 0);
    jOpen("addresses", '[');
    for (struct ifaddrs* e = ifa; e; e = e->ifa_next) {
      if (e->ifa_name == NULL || strcmp(e->ifa_name, ifa->ifa_name) || e->ifa_addr == NULL) continue;
      if (e->ifa_addr->sa_family != AF_INET && e->ifa_addr->sa_family != AF_INET6) continue;
      char ip[INET6_ADDRSTRLEN], one[INET6_ADDRSTRLEN + 8];
      sfmt(one, sizeof(one), "%s/%d", ipString(e->ifa_addr, ip, sizeof(ip)), prefixLen(e->ifa_netmask));
      jStr(NULL, one);
      if (len < sizeof(addrText)) len += (size_t)sfmt(addrText + len, sizeof(addrText) - len, "%s%s", len ? " " : "", one);
    }
    jClose(']');
    jBool("selected", chosen >= 0);
    if (userOk) jBool("matches_NCCL_SOCKET_IFNAME", railnetIfListSelects(&userList, ifa->ifa_name, -1));
    jClose('}');
    char mark[64] = "";
    if (chosen >= 0) sfmt(mark, sizeof(mark), "   <- selected [%d]", chosen);
    text("  %-16s %-18s %s%s\n", ifa->ifa_name, state, addrText[0] ? addrText : "-", mark);
    if (userOk && chosen < 0 && railnetIfListSelects(&userList, ifa->ifa_name, -1) && !userList.exclude)
      WARNING("bring it up (ip link set <if> up), give it an address, or drop it from NCCL_SOCKET_IFNAME",
              "NCCL_SOCKET_IFNAME=%s names %s, which is not used: %s%s", user, ifa->ifa_name, state,
              addrText[0] ? "" : ", no address");
  }
  jClose(']');
  freeifaddrs(all);

  char chosenText[512] = "";
  size_t len = 0;
  jOpen("selected", '[');
  for (int i = 0; i < n; i++) {
    char a[INET6_ADDRSTRLEN];
    ipString(&addrs[i].sa, a, sizeof(a));
    jOpen(NULL, '{');
    jStr("name", names + i * MAX_IF_NAME_SIZE);
    jStr("address", a);
    jClose('}');
    if (len < sizeof(chosenText))
      len += (size_t)sfmt(chosenText + len, sizeof(chosenText) - len, "%s%s (%s)", i ? ", " : "",
                              names + i * MAX_IF_NAME_SIZE, a);
  }
  jClose(']');
  jStr("step", railnetIfStepName(step));
  jStr("NCCL_SOCKET_IFNAME", user);
  if (user) jStr("NCCL_SOCKET_IFNAME_source", railnetParamSourceName(src));

  if (user && strlen(user) > 1)
    text("  NCCL_SOCKET_IFNAME=%s (%s) bypasses the automatic chain\n", user, railnetParamSourceName(src));
  else
    text("  automatic chain: ib* > subnet of NCCL_COMM_ID > any but docker*,lo,virbr* > docker* > lo > virbr*\n");
  if (res != ncclSuccess) {
    PROBLEM("fix the syntax: comma-separated prefixes, '=' for exact names, '^' to exclude (e.g. =eth0,eth1)",
            "NCCL_SOCKET_IFNAME=%s cannot be parsed", user ? user : "");
    return;
  }
  if (n == 0) {
    if (user && strlen(user) > 1)
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

static void sectionPorts(void) {
  section("tcp_ports", "TCP ports (net.ipv4.ip_local_port_range)");
  char line[128];
  int lo = 0, hi = 0;
  if (readLine("/proc/sys/net/ipv4/ip_local_port_range", line, sizeof(line)) != 0 || sscanf(line, "%d %d", &lo, &hi) != 2) {
    text("  /proc/sys/net/ipv4/ip_local_port_range not readable\n");
    jStr("ip_local_port_range", NULL);
    return;
  }
  int count = hi - lo + 1;
  jInt("low", lo);
  jInt("high", hi);
  jInt("count", count);
  text("  ip_local_port_range = %d %d (%d ports)\n", lo, hi, count);
  text("  NCCL's bootstrap and proxy sockets and the Socket transport listen on port 0: the kernel picks their ports\n"
       "  from this range. A firewall between the nodes must allow TCP %d-%d inbound (plus the launcher's ports).\n"
       "  To narrow it: sysctl -w net.ipv4.ip_local_port_range=\"50000 51000\" (persist in /etc/sysctl.conf), then\n"
       "  open exactly that range.\n",
       lo, hi);
  char reserved[256];
  if (readLine("/proc/sys/net/ipv4/ip_local_reserved_ports", reserved, sizeof(reserved)) == 0 && reserved[0]) {
    text("  ip_local_reserved_ports = %s (never picked)\n", reserved);
    jStr("reserved", reserved);
  }
  if (count < 1000)
    WARNING("widen it to at least ~1000 ports (each rank listens on several, connections use more)",
            "ip_local_port_range holds only %d ports: many ranks per node can exhaust it (bind: Address already in use)",
            count);
}

/* ================================================================ RDMA ports */

#define MAX_PORTS 64
#define MAX_GIDS 256
typedef struct {
  char dev[64];
  int port;
  int state;         /* 4 ACTIVE */
  char stateName[32];
  char phys[32];
  char link[32];
  char rateText[64];
  double gbps;
  char width[16];
  char netdev[64];
  int mtu;
  int selected; /* NCCL_IB_HCA allows it */
} portInfo;
static portInfo ports[MAX_PORTS];
static int nPorts;

/* "4: ACTIVE" -> 4 and "ACTIVE". */
static int parseNumName(const char* s, char* name, size_t size) {
  int v = -1;
  const char* colon = strchr(s, ':');
  if (sscanf(s, "%d", &v) != 1) v = -1;
  sfmt(name, size, "%s", colon ? colon + 1 + strspn(colon + 1, " ") : s);
  return v;
}

/* The netdev behind a RoCE port (first GID's ndev), else the device's first net/ entry. */
static void portNetdev(portInfo* p) {
  p->netdev[0] = '\0';
  if (readSys(p->netdev, sizeof(p->netdev), "class/infiniband/%s/ports/%d/gid_attrs/ndevs/0", p->dev, p->port) == 0)
    return;
  char path[PATH_MAX + 64];
  sfmt(path, sizeof(path), "%s/class/infiniband/%s/device/net", sysfsRoot, p->dev);
  DIR* d = opendir(path);
  if (d == NULL) return;
  struct dirent* e;
  while ((e = readdir(d)) != NULL)
    if (e->d_name[0] != '.') {
      sfmt(p->netdev, sizeof(p->netdev), "%s", e->d_name);
      break;
    }
  closedir(d);
}

/* MTU: the netdev's (RoCE carries at most that less headers); IB active MTU needs verbs. */
static int portMtu(const portInfo* p) {
  char buf[32];
  if (p->netdev[0] && readSys(buf, sizeof(buf), "class/net/%s/mtu", p->netdev) == 0) return atoi(buf);
  return 0;
}

static int cmpName(const void* a, const void* b) { return strcmp((const char*)a, (const char*)b); }

static void scanPorts(void) {
  char path[PATH_MAX + 64];
  sfmt(path, sizeof(path), "%s/class/infiniband", sysfsRoot);
  DIR* d = opendir(path);
  if (d == NULL) return;
  char devs[64][64];
  int nd = 0;
  struct dirent* e;
  while ((e = readdir(d)) != NULL && nd < 64)
    if (e->d_name[0] != '.') sfmt(devs[nd++], 64, "%s", e->d_name);
  closedir(d);
  qsort(devs, (size_t)nd, sizeof(devs[0]), cmpName);

  railnetParamSource src;
  const char* hca = railnetGetEnv("NCCL_IB_HCA", &src);
  railnetIfList hcaList;
  int useList = hca && hca[0] && railnetIfListParse(hca, 1, &hcaList) == ncclSuccess;

  for (int i = 0; i < nd; i++) {
    for (int port = 1; port < 16 && nPorts < MAX_PORTS; port++) {
      char buf[128];
      if (readSys(buf, sizeof(buf), "class/infiniband/%s/ports/%d/state", devs[i], port) != 0) continue;
      portInfo* p = &ports[nPorts++];
      memset(p, 0, sizeof(*p));
      sfmt(p->dev, sizeof(p->dev), "%s", devs[i]);
      p->port = port;
      p->state = parseNumName(buf, p->stateName, sizeof(p->stateName));
      if (readSys(buf, sizeof(buf), "class/infiniband/%s/ports/%d/phys_state", devs[i], port) == 0)
        parseNumName(buf, p->phys, sizeof(p->phys));
      if (readSys(p->link, sizeof(p->link), "class/infiniband/%s/ports/%d/link_layer", devs[i], port) != 0)
        sfmt(p->link, sizeof(p->link), "InfiniBand");
      if (readSys(p->rateText, sizeof(p->rateText), "class/infiniband/%s/ports/%d/rate", devs[i], port) == 0) {
        p->gbps = atof(p->rateText);
        const char* paren = strchr(p->rateText, '(');
        if (paren) sscanf(paren + 1, "%15[0-9xX]", p->width);
      }
      portNetdev(p);
      p->mtu = portMtu(p);
      p->selected = useList ? railnetIfListSelects(&hcaList, p->dev, p->port) : 1;
    }
  }
}

static void sectionRdma(void) {
  section("rdma", "RDMA devices and ports");
  railnetParamSource src;
  const char* hca = railnetGetEnv("NCCL_IB_HCA", &src);
  jStr("sysfs", sysfsRoot);
  jStr("NCCL_IB_HCA", hca);
  if (nPorts == 0) {
    text("  no RDMA device under %s/class/infiniband: railnet uses the Socket transport\n", sysfsRoot);
    jOpen("ports", '[');
    jClose(']');
    return;
  }
  if (hca) text("  NCCL_IB_HCA=%s (%s)\n", hca, railnetParamSourceName(src));
  text("  %-10s %-4s %-8s %-9s %-11s %-22s %-10s %-5s %s\n", "device", "port", "state", "phys", "link", "rate",
       "netdev", "mtu", "used");
  jOpen("ports", '[');
  double maxRate[2] = {0, 0}; /* per link layer: 0 InfiniBand, 1 Ethernet */
  for (int i = 0; i < nPorts; i++) {
    portInfo* p = &ports[i];
    int eth = strcmp(p->link, "Ethernet") == 0;
    if (p->state == 4 && p->selected && p->gbps > maxRate[eth]) maxRate[eth] = p->gbps;
    const char* used = !p->selected ? "no (NCCL_IB_HCA)" : p->state != 4 ? "no (not active)" : "yes";
    char mtu[16] = "-";
    if (p->mtu) sfmt(mtu, sizeof(mtu), "%d", p->mtu);
    text("  %-10s %-4d %-8s %-9s %-11s %-22s %-10s %-5s %s\n", p->dev, p->port, p->stateName, p->phys, p->link,
         p->rateText[0] ? p->rateText : "-", p->netdev[0] ? p->netdev : "-", mtu, used);
    jOpen(NULL, '{');
    jStr("device", p->dev);
    jInt("port", p->port);
    jStr("state", p->stateName);
    jStr("phys_state", p->phys);
    jStr("link_layer", p->link);
    jStr("rate", p->rateText);
    jNum("gbps", p->gbps);
    jStr("width", p->width);
    jStr("netdev", p->netdev);
    jInt("mtu", p->mtu);
    jBool("used", p->selected && p->state == 4);
    jClose('}');
  }
  jClose(']');

  int anyUsed = 0;
  const portInfo* firstUsed = NULL;
  for (int i = 0; i < nPorts; i++) {
    portInfo* p = &ports[i];
    if (!p->selected) continue;
    if (p->state != 4) {
      char fix[512];
      if (strcmp(p->link, "InfiniBand") == 0 && (p->state == 2 || p->state == 3))
        sfmt(fix, sizeof(fix), "start a Subnet Manager (opensm on one node, or the switch's SM) and check it "
                                   "with sminfo; then ibstat %s should show Active", p->dev);
      else
        sfmt(fix, sizeof(fix), "check the cable, transceiver and switch port (ibstat %s %d, mlxlink); "
                                   "or exclude the port with NCCL_IB_HCA=^%s:%d", p->dev, p->port, p->dev, p->port);
      PROBLEM(fix, "%s:%d is %s (physical state %s)%s", p->dev, p->port, p->stateName, p->phys,
              (p->state == 2 || p->state == 3) && strcmp(p->link, "InfiniBand") == 0
                  ? ": the link is up but no Subnet Manager has configured it"
                  : ": no usable link");
      continue;
    }
    anyUsed = 1;
    if (firstUsed == NULL) firstUsed = p;
    else if (strcmp(firstUsed->link, p->link) != 0) {
      char fix[256];
      sfmt(fix, sizeof(fix), "select NICs of one link layer with NCCL_IB_HCA (e.g. NCCL_IB_HCA==%s), or set the "
                                 "port's link type (mlxconfig LINK_TYPE_P%d)", firstUsed->dev, p->port);
      PROBLEM(fix, "link layers disagree: %s:%d is %s but %s:%d is %s (NCCL cannot pair or merge them)",
              firstUsed->dev, firstUsed->port, firstUsed->link, p->dev, p->port, p->link);
    }
    int eth = strcmp(p->link, "Ethernet") == 0;
    if (p->gbps > 0 && p->gbps < maxRate[eth]) {
      char fix[256];
      sfmt(fix, sizeof(fix), "check %s:%d's cable, transceiver and switch port (mlxlink -d <mst dev> shows width, "
                                 "speed and errors); reseat or replace the cable", p->dev, p->port);
      PROBLEM(fix, "%s:%d runs at %s, below the %.0f Gb/sec of the other %s ports: link downshift", p->dev, p->port,
              p->rateText, maxRate[eth], p->link);
    }
  }
  if (!anyUsed)
    PROBLEM(hca ? "fix NCCL_IB_HCA so that it names an active port, or unset it" : "bring a port to Active (see above)",
            "no active RDMA port is usable%s: railnet and NCCL fall back to the Socket transport",
            hca ? " with NCCL_IB_HCA" : "");
}

/* ================================================================ GIDs */

typedef struct {
  int valid;
  unsigned char raw[16];
  char text[48];
  int roceVer; /* 1, 2; 0 unknown */
  char type[32];
  char ndev[32];
} gidEntry;

static int gidIsV4(const unsigned char* r) {
  static const unsigned char pre[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(r, pre, 12) == 0;
}
static int gidConfigured(const unsigned char* r) {
  static const unsigned char zero[16];
  static const unsigned char ll[8] = {0xfe, 0x80};
  if (memcmp(r, zero, 16) == 0) return 0;
  if (memcmp(r, ll, 4) == 0 && memcmp(r + 4, zero, 12) == 0) return 0;
  return 1;
}
static int gidLinkLocal(const unsigned char* r) {
  static const unsigned char ll[8] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0};
  return memcmp(r, ll, 8) == 0;
}
static int gidValid(const unsigned char* r) { return gidConfigured(r) && !gidLinkLocal(r); }

static int readGids(const portInfo* p, gidEntry* g, int max) {
  int n = 0;
  for (int i = 0; i < max; i++) {
    char buf[64];
    if (readSys(buf, sizeof(buf), "class/infiniband/%s/ports/%d/gids/%d", p->dev, p->port, i) != 0) break;
    n = i + 1;
    memset(&g[i], 0, sizeof(g[i]));
    sfmt(g[i].text, sizeof(g[i].text), "%s", buf);
    unsigned v[8];
    if (sscanf(buf, "%x:%x:%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) == 8) {
      for (int k = 0; k < 8; k++) {
        g[i].raw[2 * k] = (unsigned char)(v[k] >> 8);
        g[i].raw[2 * k + 1] = (unsigned char)v[k];
      }
      g[i].valid = gidConfigured(g[i].raw);
    }
    if (readSys(g[i].type, sizeof(g[i].type), "class/infiniband/%s/ports/%d/gid_attrs/types/%d", p->dev, p->port, i) == 0) {
      if (strncmp(g[i].type, "RoCE v2", 7) == 0) g[i].roceVer = 2;
      else if (strncmp(g[i].type, "IB/RoCE v1", 10) == 0 || strncmp(g[i].type, "RoCE v1", 7) == 0) g[i].roceVer = 1;
    }
    readSys(g[i].ndev, sizeof(g[i].ndev), "class/infiniband/%s/ports/%d/gid_attrs/ndevs/%d", p->dev, p->port, i);
  }
  return n;
}

/* ---------------------------------------------------------------- verbs access */

/* libibverbs' device list, loaded once (1 listed, -1 failed with the reason in verbsFailure). */
static int verbsState;
static struct ibv_device** verbsList;
static int verbsCount;
static char verbsFailure[96];

/* An open context of dev, or NULL with *why set. */
static struct ibv_context* verbsOpen(const char* dev, char* why, size_t size) {
  if (verbsState == 0) {
    verbsState = -1;
    if (wrap_ibv_symbols() != ncclSuccess) sfmt(verbsFailure, sizeof(verbsFailure), "libibverbs not found (install rdma-core)");
    else if (wrap_ibv_get_device_list(&verbsList, &verbsCount) != ncclSuccess || verbsList == NULL)
      sfmt(verbsFailure, sizeof(verbsFailure), "ibv_get_device_list failed: no RDMA support in this kernel/container?");
    else verbsState = 1;
  }
  if (verbsState < 0) {
    sfmt(why, size, "%s", verbsFailure);
    return NULL;
  }
  for (int i = 0; i < verbsCount; i++) {
    if (strcmp(wrap_ibv_get_device_name(verbsList[i]), dev) != 0) continue;
    struct ibv_context* ctx = NULL;
    if (wrap_ibv_open_device(&ctx, verbsList[i]) != ncclSuccess || ctx == NULL) {
      sfmt(why, size, "cannot open %s (permissions on /dev/infiniband?)", dev);
      return NULL;
    }
    return ctx;
  }
  sfmt(why, size, "libibverbs does not list %s (no uverbs device?)", dev);
  return NULL;
}

/* ibv_query_gid answered from <sysfs>/class/infiniband/<dev>/ports/<port>/gids/<index>: lets
 * the IB transport's own GID selection run where libibverbs cannot open the device. */
static int sysfsQueryGid(struct ibv_context* ctx, uint8_t port, int index, union ibv_gid* gid) {
  char buf[64];
  unsigned v[8];
  memset(gid, 0, sizeof(*gid));
  if (readSys(buf, sizeof(buf), "class/infiniband/%s/ports/%d/gids/%d", ctx->device->name, port, index) != 0 ||
      sscanf(buf, "%x:%x:%x:%x:%x:%x:%x:%x", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) != 8)
    return EINVAL;
  for (int k = 0; k < 8; k++) {
    gid->raw[2 * k] = (uint8_t)(v[k] >> 8);
    gid->raw[2 * k + 1] = (uint8_t)v[k];
  }
  return 0;
}

/* The GID index railnet's IB transport uses for this port, by its own rules
 * (railnetIbChooseGid): through libibverbs when it can open the device, else from sysfs. */
static int chooseGid(const portInfo* p, int tblLen, char* why, size_t whySize, const char** via) {
  struct railnetIbGidChoice ch;
  char reason[160];
  struct ibv_context* ctx = verbsOpen(p->dev, reason, sizeof(reason));
  int ok;
  if (ctx) {
    struct ibv_port_attr attr;
    memset(&attr, 0, sizeof(attr));
    ok = wrap_ibv_query_port(ctx, (uint8_t)p->port, &attr) == ncclSuccess &&
         railnetIbChooseGid(ctx, p->dev, (uint8_t)p->port, &attr, &ch) == ncclSuccess;
    wrap_ibv_close_device(ctx);
    *via = "libibverbs";
  } else {
    struct ibv_device dev;
    struct ibv_context fake;
    memset(&dev, 0, sizeof(dev));
    memset(&fake, 0, sizeof(fake));
    sfmt(dev.name, sizeof(dev.name), "%s", p->dev);
    fake.device = &dev;
    struct ibv_port_attr attr;
    memset(&attr, 0, sizeof(attr));
    attr.link_layer = strcmp(p->link, "Ethernet") == 0 ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
    attr.gid_tbl_len = tblLen;
    struct railnetIbvSymbols saved = railnetIbv, sysfs;
    memset(&sysfs, 0, sizeof(sysfs));
    sysfs.query_gid = sysfsQueryGid;
    railnetIbvSetSymbols(&sysfs);
    ok = railnetIbChooseGid(&fake, p->dev, (uint8_t)p->port, &attr, &ch) == ncclSuccess;
    railnetIbvSetSymbols(saved.get_device_list ? &saved : NULL);
    *via = "sysfs";
  }
  if (!ok) {
    sfmt(why, whySize, "the GID selection failed (run with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=NET)");
    return -1;
  }
  sfmt(why, whySize, "%s", ch.why);
  return ch.index;
}

static void sectionGids(void) {
  section("gids", "GID tables (RoCE: the index railnet uses for the QPs)");
  if (nPorts == 0) {
    text("  no RDMA ports\n");
    return;
  }
  railnetParamSource src;
  const char* forced = railnetGetEnv("NCCL_IB_GID_INDEX", &src);
  jOpen("ports", '[');
  static gidEntry g[MAX_GIDS];
  for (int i = 0; i < nPorts; i++) {
    portInfo* p = &ports[i];
    int n = readGids(p, g, MAX_GIDS);
    char why[400];
    const char* via = "";
    int chosen = chooseGid(p, n, why, sizeof(why), &via);
    text("  %s port %d (%s)\n", p->dev, p->port, p->link);
    text("    %-4s %-40s %-11s %-10s %s\n", "idx", "gid", "type", "netdev", "ipv4");
    jOpen(NULL, '{');
    jStr("device", p->dev);
    jInt("port", p->port);
    jOpen("gids", '[');
    for (int k = 0; k < n; k++) {
      if (!g[k].valid && k != chosen) continue;
      char v4[INET_ADDRSTRLEN] = "";
      if (gidIsV4(g[k].raw)) inet_ntop(AF_INET, g[k].raw + 12, v4, sizeof(v4));
      if (k == chosen)
        text("    %-4d %-40s %-11s %-10s %-15s <- chosen\n", k, g[k].text, g[k].type[0] ? g[k].type : "-",
             g[k].ndev[0] ? g[k].ndev : "-", v4[0] ? v4 : "-");
      else
        text("    %-4d %-40s %-11s %-10s %s\n", k, g[k].text, g[k].type[0] ? g[k].type : "-", g[k].ndev[0] ? g[k].ndev : "-",
             v4[0] ? v4 : "-");
      jOpen(NULL, '{');
      jInt("index", k);
      jStr("gid", g[k].text);
      jStr("type", g[k].type);
      jStr("netdev", g[k].ndev);
      jStr("ipv4", v4[0] ? v4 : NULL);
      jClose('}');
    }
    jClose(']');
    jInt("chosen", chosen);
    jStr("why", why);
    jStr("read_through", via);
    jClose('}');
    text("    chosen: %d -- %s (GIDs read through %s)\n", chosen, why, via);
    int eth = strcmp(p->link, "Ethernet") == 0;
    if (!eth) continue;
    if (forced && atoi(forced) >= 0) {
      int fi = atoi(forced);
      if (fi >= n || !g[fi].valid)
        PROBLEM("unset NCCL_IB_GID_INDEX and let railnet choose",
                "NCCL_IB_GID_INDEX=%s (%s) names an empty GID on %s:%d: ibv_modify_qp fails with Invalid argument",
                forced, railnetParamSourceName(src), p->dev, p->port);
      else
        WARNING("unset NCCL_IB_GID_INDEX: NCCL >= 2.21 and railnet choose the GID per port; a wrong index makes "
                "ibv_modify_qp fail with Invalid argument",
                "NCCL_IB_GID_INDEX=%s (%s) overrides the automatic GID selection on %s:%d", forced,
                railnetParamSourceName(src), p->dev, p->port);
    } else if (chosen < 0 || chosen >= n || !gidValid(g[chosen].raw)) {
      char fix[256];
      sfmt(fix, sizeof(fix), "assign an IP address to %s (ip addr add ...) so that a routable RoCE v2 GID appears",
               p->netdev[0] ? p->netdev : "the port's netdev");
      PROBLEM(fix, "%s:%d has no routable GID of the wanted family and version (only link-local or empty entries): "
              "RoCE v2 traffic cannot be routed", p->dev, p->port);
    } else if (g[chosen].roceVer == 1 && !strstr(why, "RoCE v1")) {
      WARNING("enable RoCE v2 on the NIC or set NCCL_IB_ROCE_VERSION_NUM=1 knowingly",
              "%s:%d only offers a RoCE v1 GID for that address: v1 is not routable across subnets", p->dev, p->port);
    }
  }
  jClose(']');
}

/* ================================================================ counters */

static const struct {
  const char* dir;
  const char* name;
  const char* cause;
  const char* fix;
} counterDefs[] = {
    {"counters", "symbol_error", "bit errors on the wire", "reseat or replace the cable/transceiver; mlxlink shows BER"},
    {"counters", "link_error_recovery", "the link retrained", "check cable and switch port (mlxlink, ibdiagnet)"},
    {"counters", "link_downed", "the link went down", "check cable, transceiver and switch port logs"},
    {"hw_counters", "rnr_nak_retry_err", "receiver-not-ready retries exhausted",
     "the peer posts receives too late: check that the peer process is alive and not stalled"},
    {"hw_counters", "packet_seq_err", "packets lost or reordered",
     "check for drops in the fabric (RoCE: PFC/ECN config, ethtool -S)"},
    {"hw_counters", "implied_nak_seq_err", "responses lost (implied NAK)",
     "check for drops in the fabric (RoCE: PFC/ECN config, ethtool -S)"},
    {"hw_counters", "local_ack_timeout_err", "ACKs did not arrive in time (transport retries)",
     "check congestion/drops; NCCL_IB_TIMEOUT raises the timeout"},
    /* rdma_rxe (soft-RoCE) has no counters/ directory: its error counters, by its own names */
    {"hw_counters", "link_downed", "the link went down", "check the netdev under the rxe device (ip link)"},
    {"hw_counters", "rcvd_seq_err", "packets lost or reordered (out-of-sequence PSN)",
     "check for drops on the netdev (ip -s link, ethtool -S)"},
    {"hw_counters", "completer_retry_err", "ACKs did not arrive in time (the sender retried)",
     "check congestion/drops; NCCL_IB_TIMEOUT raises the timeout"},
    {"hw_counters", "retry_exceeded_err", "transport retries exhausted: a QP went to the error state",
     "check that the peer is alive and reachable over the netdev without drops"},
    {"hw_counters", "retry_rnr_exceeded_err", "receiver-not-ready retries exhausted",
     "the peer posts receives too late: check that the peer process is alive and not stalled"},
    {"hw_counters", "send_err", "packets could not be sent (netdev down or out of buffers)",
     "check the netdev's state and drops (ip -s link)"},
};
#define N_COUNTERS ((int)(sizeof(counterDefs) / sizeof(counterDefs[0])))

static long long readCounterFile(const portInfo* p, int c) {
  char buf[64];
  if (readSys(buf, sizeof(buf), "class/infiniband/%s/ports/%d/%s/%s", p->dev, p->port, counterDefs[c].dir,
              counterDefs[c].name) != 0)
    return -1;
  return strtoll(buf, NULL, 10);
}
/* -1 when the device does not expose the counter, or exposes it under an earlier entry's
 * directory (link_downed: counters/ on real HCAs, hw_counters/ on rxe; shown once). */
static long long readCounter(const portInfo* p, int c) {
  for (int e = 0; e < c; e++)
    if (strcmp(counterDefs[e].name, counterDefs[c].name) == 0 && readCounterFile(p, e) >= 0) return -1;
  return readCounterFile(p, c);
}

static void sectionCounters(void) {
  section("counters", "Port error counters (since boot or the last reset)");
  if (nPorts == 0) {
    text("  no RDMA ports\n");
    return;
  }
  jOpen("ports", '[');
  for (int i = 0; i < nPorts; i++) {
    portInfo* p = &ports[i];
    jOpen(NULL, '{');
    jStr("device", p->dev);
    jInt("port", p->port);
    text("  %s:%d", p->dev, p->port);
    int shown = 0;
    for (int c = 0; c < N_COUNTERS; c++) {
      long long v = readCounter(p, c);
      if (v < 0) continue;
      jInt(counterDefs[c].name, v);
      text(" %s=%lld", counterDefs[c].name, v);
      shown++;
    }
    text("%s\n", shown ? "" : " (no error counters exposed)");
    jClose('}');
    for (int c = 0; c < N_COUNTERS; c++) {
      long long v = readCounter(p, c);
      if (v > 0) {
        char fix[384];
        sfmt(fix, sizeof(fix), "run railnet-diag --watch 60 during a job: if it grows, %s", counterDefs[c].fix);
        WARNING(fix, "%s:%d %s=%lld: %s", p->dev, p->port, counterDefs[c].name, v, counterDefs[c].cause);
      }
    }
  }
  jClose(']');
}

static int watchCounters(int seconds) {
  curSection = "watch";
  jOpen("watch", '{');
  jInt("seconds", seconds);
  if (nPorts == 0) {
    text("no RDMA ports under %s/class/infiniband: nothing to watch\n", sysfsRoot);
    jOpen("growth", '[');
    jClose(']');
    jClose('}');
    return 0;
  }
  static long long first[MAX_PORTS][N_COUNTERS], prev[MAX_PORTS][N_COUNTERS];
  for (int i = 0; i < nPorts; i++)
    for (int c = 0; c < N_COUNTERS; c++) first[i][c] = prev[i][c] = readCounter(&ports[i], c);
  text("watching error counters of %d port(s) for %d s (growth per second is printed)\n", nPorts, seconds);
  fflush(stdout);
  for (int t = 1; t <= seconds; t++) {
    sleep(1);
    for (int i = 0; i < nPorts; i++)
      for (int c = 0; c < N_COUNTERS; c++) {
        long long v = readCounter(&ports[i], c);
        if (v > prev[i][c] && prev[i][c] >= 0)
          text("  +%3ds %s:%d %s +%lld (now %lld)\n", t, ports[i].dev, ports[i].port, counterDefs[c].name,
               v - prev[i][c], v);
        prev[i][c] = v;
      }
    fflush(stdout);
  }
  jOpen("growth", '[');
  text("growth over %d s:\n", seconds);
  int grew = 0;
  for (int i = 0; i < nPorts; i++)
    for (int c = 0; c < N_COUNTERS; c++) {
      if (first[i][c] < 0 || prev[i][c] <= first[i][c]) continue;
      grew = 1;
      long long d = prev[i][c] - first[i][c];
      jOpen(NULL, '{');
      jStr("device", ports[i].dev);
      jInt("port", ports[i].port);
      jStr("counter", counterDefs[c].name);
      jInt("delta", d);
      jClose('}');
      text("  %s:%d %s +%lld\n", ports[i].dev, ports[i].port, counterDefs[c].name, d);
    }
  jClose(']');
  if (!grew) text("  none: no error counter grew\n");
  jClose('}');
  for (int i = 0; i < nPorts; i++)
    for (int c = 0; c < N_COUNTERS; c++)
      if (first[i][c] >= 0 && prev[i][c] > first[i][c])
        PROBLEM(counterDefs[c].fix, "%s:%d %s grew by %lld in %d s: %s", ports[i].dev, ports[i].port,
                counterDefs[c].name, prev[i][c] - first[i][c], seconds, counterDefs[c].cause);
  return grew;
}

/* ================================================================ GPUDirect */

/* DMA-BUF per device, with the IB transport's own probe: 1 yes, 0 no, -1 not probed (why). */
static int dmaBufOf(const char* dev, char* why, size_t size) {
  struct ibv_context* ctx = verbsOpen(dev, why, size);
  if (ctx == NULL) return -1;
  int err = 0;
  int res = railnetIbDmaBufProbe(ctx, &err);
  sfmt(why, size, "ibv_reg_dmabuf_mr probe: %s", res < 0 ? "no protection domain" : err ? strerror(err) : "registered");
  wrap_ibv_close_device(ctx);
  return res;
}

static void sectionGpuDirect(void) {
  section("gpudirect", "GPUDirect RDMA");
  int nvidia = existsSys("module/nvidia");
  int peermem = ncclIbPeerMemSupport() == ncclSuccess;           /* nvidia_peermem */
  int nvPeerMem = !peermem && ncclIbGdrSupport() == ncclSuccess; /* legacy nv_peer_mem */
  jBool("nvidia_driver", nvidia);
  jBool("nvidia_peermem", peermem);
  jBool("nv_peer_mem", nvPeerMem);
  text("  NVIDIA driver module: %s\n", nvidia ? "loaded" : "not loaded");
  text("  peer-memory module: %s\n", peermem ? "nvidia_peermem" : nvPeerMem ? "nv_peer_mem (legacy)" : "none");
  int anyDmaBuf = 0;
  jOpen("dmabuf", '[');
  for (int i = 0; i < nPorts; i++) {
    if (i > 0 && strcmp(ports[i].dev, ports[i - 1].dev) == 0) continue;
    char why[160];
    int d = dmaBufOf(ports[i].dev, why, sizeof(why));
    anyDmaBuf |= d == 1;
    text("  DMA-BUF on %s: %s (%s)\n", ports[i].dev, d == 1 ? "supported" : d == 0 ? "not supported" : "unknown", why);
    jOpen(NULL, '{');
    jStr("device", ports[i].dev);
    jStr("dmabuf", d == 1 ? "supported" : d == 0 ? "unsupported" : "unknown");
    jStr("why", why);
    jClose('}');
  }
  jClose(']');
  if (!nvidia) {
    text("  no NVIDIA GPU driver: GPUDirect RDMA does not apply\n");
    return;
  }
  int anyUsed = 0;
  for (int i = 0; i < nPorts; i++) anyUsed |= ports[i].selected && ports[i].state == 4;
  if (anyUsed && !peermem && !nvPeerMem && !anyDmaBuf)
    WARNING("modprobe nvidia_peermem (shipped with the NVIDIA driver), or use DMA-BUF (kernel >= 5.12, open GPU "
            "kernel module, rdma-core >= 34)",
            "no peer-memory module is loaded and no device showed DMA-BUF support: NICs cannot read GPU memory, so "
            "NCCL stages GPU data through host memory (GPUDirect RDMA off)");
}

/* ================================================================ memlock */

static unsigned long long memTotalBytes(void) {
  FILE* f = fopen("/proc/meminfo", "r");
  if (f == NULL) return 0;
  char line[256];
  unsigned long long kb = 0;
  while (fgets(line, sizeof(line), f))
    if (sscanf(line, "MemTotal: %llu kB", &kb) == 1) break;
  fclose(f);
  return kb * 1024ULL;
}

static void fmtLimit(rlim_t v, char* buf, size_t size) {
  if (v == RLIM_INFINITY) sfmt(buf, size, "unlimited");
  else sfmt(buf, size, "%llu KiB", (unsigned long long)v / 1024);
}

static void sectionMemlock(void) {
  section("memlock", "Locked memory (RLIMIT_MEMLOCK, ulimit -l)");
  struct rlimit rl;
  if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) {
    text("  getrlimit failed: %s\n", strerror(errno));
    return;
  }
  char soft[32], hard[32];
  fmtLimit(rl.rlim_cur, soft, sizeof(soft));
  fmtLimit(rl.rlim_max, hard, sizeof(hard));
  unsigned long long total = memTotalBytes();
  int ok = rl.rlim_cur == RLIM_INFINITY || (total > 0 && rl.rlim_cur >= total);
  jStr("soft", soft);
  jStr("hard", hard);
  jBool("ok", ok);
  text("  soft %s, hard %s\n", soft, hard);
  if (ok) return;
  int rdma = 0;
  for (int i = 0; i < nPorts; i++) rdma |= ports[i].selected && ports[i].state == 4;
  const char* fix = rl.rlim_max == RLIM_INFINITY
                        ? "run 'ulimit -l unlimited' in the job script (the hard limit allows it), or add "
                          "'* soft memlock unlimited' and '* hard memlock unlimited' to /etc/security/limits.conf"
                        : "add '* soft memlock unlimited' and '* hard memlock unlimited' to "
                          "/etc/security/limits.conf and log in again (Slurm: also LimitMEMLOCK=infinity in "
                          "slurmd's systemd unit, and PropagateResourceLimits); check with ulimit -l";
  if (rdma)
    PROBLEM(fix, "the locked-memory limit is %s: RDMA registrations pin memory and fail beyond it (NCCL WARN Call "
            "to ibv_reg_mr / ibv_create_qp failed)", soft);
  else
    WARNING(fix, "the locked-memory limit is %s: harmless for the Socket transport, but RDMA registrations would "
            "fail beyond it (ibv_reg_mr / ibv_create_qp failed)", soft);
}

/* ================================================================ params */

/* Every registered param, or (all == 0) only those not at their default. */
static void sectionParams(int all) {
  section("params", all ? "Parameters railnet honours (value, default, source)" : "Settings (params not at their default)");
  jOpen("params", '[');
  int shown = 0;
  for (int t = 0; t < railnetParamTableCount(); t++) {
    const railnetParamTable* tab = railnetParamTableAt(t);
    for (int i = 0; i < tab->count; i++) {
      railnetParam* p = &tab->params[i];
      char val[256], def[64];
      railnetParamSource src;
      if (p->type == RAILNET_PARAM_INT) {
        sfmt(val, sizeof(val), "%" PRId64, railnetParamInt(p));
        sfmt(def, sizeof(def), "%" PRId64, p->def);
      } else {
        const char* s = railnetParamStr(p);
        sfmt(val, sizeof(val), "%s", s ? s : "(unset)");
        sfmt(def, sizeof(def), "%s", p->defStr ? p->defStr : "(unset)");
      }
      src = railnetParamSourceOf(p);
      if (p->malformed) {
        const char* raw = railnetGetEnv(p->name, &src);
        char fix[256];
        sfmt(fix, sizeof(fix), "set %s to an integer in [%" PRId64 ", %" PRId64 "] or unset it", p->name, p->min,
                 p->max);
        PROBLEM(fix, "%s='%s' (%s) is invalid: the default %s is used instead", p->name, raw ? raw : "",
                railnetParamSourceName(src), def);
      }
      if (!all && src == RAILNET_SRC_DEFAULT && !p->malformed) continue;
      shown++;
      jOpen(NULL, '{');
      jStr("name", p->name);
      jStr("module", tab->module);
      jStr("value", strcmp(val, "(unset)") ? val : NULL);
      jStr("default", strcmp(def, "(unset)") ? def : NULL);
      jStr("source", railnetParamSourceName(src));
      jStr("doc", p->doc);
      jClose('}');
      char from[96];
      if (src == RAILNET_SRC_DEFAULT) sfmt(from, sizeof(from), "(default)");
      else sfmt(from, sizeof(from), "(%s; default %s)", railnetParamSourceName(src), def);
      if (all) text("  %-36s %-12s %s\n      %s\n", p->name, val, from, p->doc);
      else text("  %s=%s %s\n", p->name, val, from);
    }
  }
  jClose(']');
  if (!all && shown == 0) text("  every param at its default (railnet-diag --params lists them)\n");
}

/* ================================================================ main */

static void usage(FILE* f) {
  fprintf(f,
          "usage: railnet-diag [--json] [--params] [--watch SECONDS] [--help]\n"
          "What railnet sees on this host, what it would choose, and what is wrong with it.\n"
          "Read-only; no root needed.\n"
          "\n"
          "  (no option)      every section: interfaces and ncclFindInterfaces' choice, TCP port range,\n"
          "                   RDMA ports, GID tables and the chosen index, port error counters,\n"
          "                   GPUDirect, locked-memory limit, params not at their default\n"
          "  --params         only the parameter table: every variable railnet honours with its\n"
          "                   value, default, source (environment, user conf file, system conf\n"
          "                   file, default) and doc\n"
          "  --watch SECONDS  only the port error counters: sample them every second for SECONDS\n"
          "                   and print their growth (run it while a job runs)\n"
          "  --json           the same facts as one JSON object on stdout\n"
          "  --help           this text\n"
          "\n"
          "Environment: SYSFS_PATH (default /sys) is where sysfs is read; NCCL_* variables and the\n"
          "conf files (NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf) as railnet reads them.\n"
          "Every problem line says its cause and its fix.\n"
          "Exit status: 0 nothing wrong (warnings allowed), 1 a problem was found, 2 usage error.\n");
}

static void noLog(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)level, (void)flags, (void)file, (void)line, (void)fmt;
}

int main(int argc, char** argv) {
  int params = 0, watch = -1;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--json")) jsonMode = 1;
    else if (!strcmp(argv[i], "--params")) params = 1;
    else if (!strcmp(argv[i], "--watch") && i + 1 < argc) {
      char* end;
      watch = (int)strtol(argv[++i], &end, 10);
      if (*end || watch <= 0) {
        fprintf(stderr, "railnet-diag: --watch wants a positive number of seconds, not '%s'\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "railnet-diag: unknown option '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  const char* sys = railnetGetEnv("SYSFS_PATH", NULL); /* as the IB transport reads it */
  if (sys && sys[0]) sfmt(sysfsRoot, sizeof(sysfsRoot), "%s", sys);
  if (jsonMode) railnetSetLogger(noLog); /* keep stdout pure JSON */

  jOpen(NULL, '{');
  jStr("tool", "railnet-diag");
  jStr("version", railnetVersion());
  if (!params) scanPorts();
  char host[256] = "?";
  gethostname(host, sizeof(host));
  jStr("host", host);
  if (watch > 0) {
    watchCounters(watch);
  } else if (params) {
    text("railnet-diag %s on %s\n", railnetVersion(), host);
    sectionParams(1);
  } else {
    text("railnet-diag %s on %s\n", railnetVersion(), host);
    sectionInterfaces();
    sectionPorts();
    sectionRdma();
    sectionGids();
    sectionCounters();
    sectionGpuDirect();
    sectionMemlock();
    sectionParams(0);
  }
  sectionEnd();
  jOpen("findings", '[');
  for (int i = 0; i < nFindings; i++) {
    jOpen(NULL, '{');
    jStr("section", findings[i].section);
    jStr("severity", findings[i].problem ? "problem" : "warning");
    jStr("cause", findings[i].cause);
    jStr("fix", findings[i].fix);
    jClose('}');
  }
  jClose(']');
  jInt("problems", nProblems);
  jInt("warnings", nWarnings);
  jClose('}');
  if (jsonMode) putchar('\n');
  text("%s%d problem(s), %d warning(s)\n", watch > 0 ? "" : "\n", nProblems, nWarnings);
  return nProblems ? 1 : 0;
}
