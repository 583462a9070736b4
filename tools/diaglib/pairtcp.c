/* The TCP probes of `railnet-diag --pair` (pairprobe.h): interface addresses, the listener,
 * a bounded connect from a given local address, and the echo that checks both directions. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>
#include <sys/random.h>
#include "pairprobe.h"
#include "socket.h"

const char* railnetPairAddrString(int family, const uint8_t* addr, char* buf, size_t size) {
  if (inet_ntop(family == 4 ? AF_INET : AF_INET6, addr, buf, (socklen_t)size) == NULL) snprintf(buf, size, "?");
  return buf;
}

static int prefixOf(const struct sockaddr* mask) {
  if (mask == NULL) return 0;
  const unsigned char* b = mask->sa_family == AF_INET ? (const unsigned char*)&((const struct sockaddr_in*)mask)->sin_addr
                                                      : ((const struct sockaddr_in6*)mask)->sin6_addr.s6_addr;
  int n = mask->sa_family == AF_INET ? 4 : 16, len = 0;
  for (int i = 0; i < n; i++) len += __builtin_popcount(b[i]);
  return len;
}

static uint32_t mtuOf(const char* name) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  struct ifreq ifr;
  memset(&ifr, 0, sizeof(ifr));
  snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
  uint32_t mtu = ioctl(fd, SIOCGIFMTU, &ifr) == 0 ? (uint32_t)ifr.ifr_mtu : 0;
  close(fd);
  return mtu;
}

/* 1 + the index of name among ncclFindInterfaces' choice, 0 when not chosen. */
static int selectedIndex(const char* names, int nChosen, const char* name) {
  for (int i = 0; i < nChosen; i++)
    if (strncmp(names + i * MAX_IF_NAME_SIZE, name, MAX_IF_NAME_SIZE) == 0) return i + 1;
  return 0;
}

ncclResult_t railnetPairListIfaces(railnetPairIface* out, int max, int* n) {
  char names[MAX_IFS * MAX_IF_NAME_SIZE];
  union ncclSocketAddress addrs[MAX_IFS];
  int nChosen = 0;
  memset(names, 0, sizeof(names));
  if (railnetFindInterfaces(names, addrs, MAX_IF_NAME_SIZE, MAX_IFS, &nChosen, NULL) != ncclSuccess) nChosen = 0;
  struct ifaddrs* all = NULL;
  *n = 0;
  if (getifaddrs(&all) != 0) {
    WARN("getifaddrs failed: %s", strerror(errno));
    return ncclSystemError;
  }
  for (struct ifaddrs* e = all; e && *n < max; e = e->ifa_next) {
    if (e->ifa_name == NULL || e->ifa_addr == NULL || (e->ifa_flags & IFF_LOOPBACK)) continue;
    int fam = e->ifa_addr->sa_family;
    if (fam != AF_INET && fam != AF_INET6) continue;
    if (fam == AF_INET6 && IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6*)e->ifa_addr)->sin6_addr)) continue;
    railnetPairIface* r = &out[(*n)++];
    memset(r, 0, sizeof(*r));
    snprintf(r->name, sizeof(r->name), "%s", e->ifa_name);
    r->family = fam == AF_INET ? 4 : 6;
    if (fam == AF_INET) memcpy(r->addr, &((struct sockaddr_in*)e->ifa_addr)->sin_addr, 4);
    else memcpy(r->addr, &((struct sockaddr_in6*)e->ifa_addr)->sin6_addr, 16);
    r->prefix = (uint8_t)prefixOf(e->ifa_netmask);
    r->up = (e->ifa_flags & IFF_UP) && (e->ifa_flags & IFF_RUNNING);
    r->mtu = mtuOf(e->ifa_name);
    r->selected = (uint8_t)selectedIndex(names, nChosen, e->ifa_name);
  }
  freeifaddrs(all);
  return ncclSuccess;
}

static socklen_t fillSockaddr(int family, const uint8_t* addr, uint16_t port, struct sockaddr_storage* ss) {
  memset(ss, 0, sizeof(*ss));
  if (family == 4) {
    struct sockaddr_in* s = (struct sockaddr_in*)ss;
    s->sin_family = AF_INET;
    s->sin_port = htons(port);
    memcpy(&s->sin_addr, addr, 4);
    return sizeof(*s);
  }
  struct sockaddr_in6* s = (struct sockaddr_in6*)ss;
  s->sin6_family = AF_INET6;
  s->sin6_port = htons(port);
  memcpy(&s->sin6_addr, addr, 16);
  return sizeof(*s);
}

int railnetPairListen(uint16_t port, int* fdOut, uint16_t* boundPort) {
  int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int v6 = fd >= 0;
  if (!v6) fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno;
  int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (v6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  struct sockaddr_storage ss;
  static const uint8_t any[16];
  socklen_t len = fillSockaddr(v6 ? 6 : 4, any, port, &ss);
  if (bind(fd, (struct sockaddr*)&ss, len) != 0 || listen(fd, 64) != 0) {
    int e = errno;
    close(fd);
    return e;
  }
  len = sizeof(ss);
  getsockname(fd, (struct sockaddr*)&ss, &len);
  *boundPort = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6*)&ss)->sin6_port : ((struct sockaddr_in*)&ss)->sin_port);
  *fdOut = fd;
  return 0;
}

int railnetPairConnectFrom(const railnetPairIface* local, int family, const uint8_t* addr, uint16_t port,
                           uint64_t deadlineNs, int* fdOut) {
  int fd = socket(family == 4 ? AF_INET : AF_INET6, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return errno;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  struct sockaddr_storage ss;
  socklen_t len;
  if (local) {
    /* the interface itself where allowed (root), else only its address as the source */
    (void)setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, local->name, (socklen_t)strlen(local->name));
    len = fillSockaddr(local->family, local->addr, 0, &ss);
    if (bind(fd, (struct sockaddr*)&ss, len) != 0) {
      int e = errno;
      close(fd);
      return e;
    }
  }
  len = fillSockaddr(family, addr, port, &ss);
  int e = 0;
  if (connect(fd, (struct sockaddr*)&ss, len) != 0) {
    e = errno;
    while (e == EINPROGRESS || e == EINTR) {
      uint64_t now = railnetClockNs();
      if (now >= deadlineNs) {
        e = ETIMEDOUT;
        break;
      }
      struct pollfd p = {fd, POLLOUT, 0};
      int r = poll(&p, 1, (int)((deadlineNs - now + 999999) / 1000000));
      if (r < 0 && errno == EINTR) continue;
      if (r == 0) continue;
      socklen_t l = sizeof(e);
      if (r < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &l) != 0) e = errno;
      break;
    }
  }
  if (e) {
    close(fd);
    return e;
  }
  *fdOut = fd;
  return 0;
}

static void fillPattern(uint8_t* b, uint32_t n, uint64_t token) {
  for (uint32_t i = 0; i < n; i++) b[i] = (uint8_t)(token >> (8 * (i % 8))) ^ (uint8_t)(i * 131u);
}

/* The listener's greeting on a fresh connection: 0 when it carries token; else the errno
 * (ETIMEDOUT: nothing greeted by the deadline; EPERM: another token or other bytes). */
int railnetPairAwaitGreet(int fd, uint64_t token, uint64_t deadlineNs, uint64_t* got) {
  railnetPairMsg m;
  char why[128];
  int e = railnetPairExpect(fd, RAILNET_PAIR_GREET, &m, deadlineNs, why);
  if (e) return e == EPROTO ? EPERM : e;
  uint64_t t = m.u.greet->token;
  railnetPairFree(&m);
  if (got) *got = t;
  return got || t == token ? 0 : EPERM;
}

int railnetPairGreetSend(int fd, uint64_t token, uint64_t deadlineNs) {
  railnetPairGreet g = {token};
  return railnetPairSend(fd, RAILNET_PAIR_GREET, &g, 1, deadlineNs);
}

uint64_t railnetPairNewToken(void) {
  uint64_t t = 0;
  if (getrandom(&t, sizeof(t), 0) != (ssize_t)sizeof(t)) t = railnetClockNs() ^ ((uint64_t)getpid() << 40);
  return t ? t : 1;
}

static void resultOf(const railnetPairIface* local, const railnetPairIface* peer, railnetPairTcpResult* r) {
  memset(r, 0, sizeof(*r));
  snprintf(r->localIf, sizeof(r->localIf), "%s", local->name);
  snprintf(r->peerIf, sizeof(r->peerIf), "%s", peer->name);
  r->family = peer->family;
  memcpy(r->localAddr, local->addr, sizeof(r->localAddr));
  memcpy(r->peerAddr, peer->addr, sizeof(r->peerAddr));
}

void railnetPairTcpNotRun(const railnetPairIface* local, const railnetPairIface* peer, railnetPairTcpResult* r) {
  resultOf(local, peer, r);
  r->step = RAILNET_PAIR_TCP_BOUND;
  r->err = ETIMEDOUT;
}

void railnetPairTcpOutOfScope(const railnetPairIface* local, const railnetPairIface* peer, railnetPairTcpResult* r) {
  resultOf(local, peer, r);
  r->step = RAILNET_PAIR_TCP_SCOPE;
  r->err = EACCES;
}

void railnetPairTcpProbeRun(const railnetPairIface* local, const railnetPairIface* peer, uint16_t port, int timeoutMs,
                            uint32_t bytes, uint64_t peerToken, railnetPairTcpResult* r) {
  resultOf(local, peer, r);
  uint64_t start = railnetClockNs(), deadline = start + (uint64_t)timeoutMs * 1000000ull;
  int fd = -1;
  if (!local->up) {
    r->step = RAILNET_PAIR_TCP_LOCAL;
    r->err = ENETDOWN;
    return;
  }
  r->err = railnetPairConnectFrom(local, peer->family, peer->addr, port, deadline, &fd);
  r->step = r->err ? RAILNET_PAIR_TCP_CONNECT : RAILNET_PAIR_TCP_OK;
  if (r->err == 0 && (r->err = railnetPairAwaitGreet(fd, peerToken, deadline, NULL)) != 0) {
    r->step = RAILNET_PAIR_TCP_GREET; /* not the peer's listener: it gets nothing */
    close(fd);
  } else if (r->err == 0) {
    uint8_t* out = (uint8_t*)malloc(bytes ? bytes : 1);
    uint8_t* in = (uint8_t*)malloc(bytes ? bytes : 1);
    railnetPairTcpProbe p;
    memset(&p, 0, sizeof(p));
    p.token = start ^ ((uint64_t)getpid() << 32);
    p.bytes = bytes;
    snprintf(p.from, sizeof(p.from), "%s", local->name);
    if (out == NULL || in == NULL) {
      r->step = RAILNET_PAIR_TCP_SEND, r->err = ENOMEM;
    } else {
      fillPattern(out, bytes, p.token);
      if ((r->err = railnetPairSend(fd, RAILNET_PAIR_TCP_PROBE, &p, 1, deadline)) == 0)
        r->err = railnetPairWriteAll(fd, out, bytes, deadline);
      if (r->err) r->step = RAILNET_PAIR_TCP_SEND;
      else if ((r->err = railnetPairReadAll(fd, in, bytes, deadline)) != 0) r->step = RAILNET_PAIR_TCP_RECV;
      else if (memcmp(in, out, bytes) != 0) r->step = RAILNET_PAIR_TCP_VERIFY, r->err = EIO;
    }
    free(out);
    free(in);
    close(fd);
  }
  r->usec = (uint32_t)((railnetClockNs() - start) / 1000);
}

int railnetPairTcpProbeAnswer(int fd, const railnetPairTcpProbe* probe, uint64_t deadlineNs) {
  uint8_t* buf = (uint8_t*)malloc(probe->bytes ? probe->bytes : 1);
  if (buf == NULL) return ENOMEM;
  int e = railnetPairReadAll(fd, buf, probe->bytes, deadlineNs);
  if (e == 0) e = railnetPairWriteAll(fd, buf, probe->bytes, deadlineNs);
  free(buf);
  return e;
}
