/*
 * railnet's ncclSocket: addresses, listen, non-blocking connect with NCCL's retries
 * (bounded: every attempt has a deadline, so an interface whose peer drops packets
 * ends in a WARN that names it, never in a hang), and an accept that checks a magic
 * and a socket type so that a stray client is never taken for a peer.
 */
#include "socket.h"
#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include "param.h"

enum { P_RETRY_CNT, P_RETRY_SLEEP, P_POLL_TIMEOUT, P_SNDBUF, P_RCVBUF, P_MAGIC, P_ACCEPT_TIMEOUT, P_PEER_TIMEOUT };
static const railnetParam socketParams[] = {
    [P_RETRY_CNT] = RAILNET_PARAM_INT_DEF("NCCL_SOCKET_RETRY_CNT", 34, 0, 1000000,
                                          "Connect attempts to a peer that refuses or does not answer"),
    [P_RETRY_SLEEP] = RAILNET_PARAM_INT_DEF("NCCL_SOCKET_RETRY_SLEEP_MSEC", 100, 0, 3600000,
                                            "Sleep unit between connect attempts (attempt k sleeps k units)"),
    [P_POLL_TIMEOUT] = RAILNET_PARAM_INT_DEF("NCCL_SOCKET_POLL_TIMEOUT_MSEC", 0, 0, 3600000,
                                             "poll() timeout of blocking socket waits (0: spin without sleeping)"),
    [P_SNDBUF] = RAILNET_PARAM_INT_DEF("NCCL_SOCKET_SNDBUF", -1, -1, INT32_MAX,
                                       "SO_SNDBUF of connected sockets (-1: kernel default)"),
    [P_RCVBUF] = RAILNET_PARAM_INT_DEF("NCCL_SOCKET_RCVBUF", -1, -1, INT32_MAX,
                                       "SO_RCVBUF of connected sockets (-1: kernel default)"),
    [P_MAGIC] = RAILNET_PARAM_STR_DEF("NCCL_SOCKET_MAGIC", NULL,
                                      "Handshake magic both ends must share (default: NCCL's built-in value)"),
    [P_ACCEPT_TIMEOUT] = RAILNET_PARAM_INT_DEF("RAILNET_SOCKET_ACCEPT_TIMEOUT_MSEC", 10000, 1, 3600000,
                                               "An accepted connection whose handshake, and the setup the transport reads after "
                                               "it, is not done in this time is dropped"),
    [P_PEER_TIMEOUT] = RAILNET_PARAM_INT_DEF("RAILNET_SOCKET_TIMEOUT_MSEC", 600000, 100, 86400000,
                                             "A comm's connection (the Socket transport's sockets, the IB transport's "
                                             "comm socket) whose peer host stops acknowledging (powered off, link or "
                                             "switch down, hung kernel) fails after this long (TCP_USER_TIMEOUT, "
                                             "keepalive probes every quarter of it); keep it above the longest time "
                                             "ranks may legitimately diverge"),
};
RAILNET_PARAM_TABLE("socket", socketParams);

/* NCCL's historical built-in handshake value. */
#define RAILNET_SOCKET_DEFAULT_MAGIC 0x3c5ac8a3e1f5d3b2ULL

uint64_t railnetSocketMagic(void) {
  static uint64_t magic;
  static int loaded;
  if (__atomic_load_n(&loaded, __ATOMIC_ACQUIRE)) return magic;
  uint64_t m = RAILNET_SOCKET_DEFAULT_MAGIC;
  const char* s = railnetParamStr(&socketParams[P_MAGIC]);
  if (s != NULL && s[0] != '\0') {
    char* end = NULL;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 0);
    if (errno == 0 && end != s && *end == '\0') m = v;
    else WARN("NCCL_SOCKET_MAGIC=%s is not a number; using the built-in handshake magic", s);
  }
  magic = m;
  __atomic_store_n(&loaded, 1, __ATOMIC_RELEASE);
  return magic;
}

/* ------------------------------------------------------------------ addresses */

socklen_t railnetSockaddrLen(const union ncclSocketAddress* addr) {
  if (addr->sa.sa_family == AF_INET) return sizeof(struct sockaddr_in);
  if (addr->sa.sa_family == AF_INET6) return sizeof(struct sockaddr_in6);
  return 0;
}

int railnetSocketAddrUsable(const union ncclSocketAddress* addr, char* text) {
  int fam = addr->sa.sa_family;
  if (fam != AF_INET && fam != AF_INET6) {
    snprintf(text, SOCKET_NAME_MAXLEN, "(bad family %d)", fam);
    return 0;
  }
  ncclSocketToString(addr, text, 1);
  return (fam == AF_INET ? addr->sin.sin_port : addr->sin6.sin6_port) != 0;
}

const char* ncclSocketToString(const union ncclSocketAddress* addr, char* buf, int numericHostForm) {
  (void)numericHostForm; /* always numeric: a name lookup could block in a log line */
  buf[0] = '\0';
  if (addr == NULL) return buf;
  char host[INET6_ADDRSTRLEN] = "";
  int port = 0;
  if (addr->sa.sa_family == AF_INET) {
    inet_ntop(AF_INET, &addr->sin.sin_addr, host, sizeof(host));
    port = ntohs(addr->sin.sin_port);
  } else if (addr->sa.sa_family == AF_INET6) {
    inet_ntop(AF_INET6, &addr->sin6.sin6_addr, host, sizeof(host));
    port = ntohs(addr->sin6.sin6_port);
  } else {
    snprintf(buf, SOCKET_NAME_MAXLEN, "(no address)");
    return buf;
  }
  snprintf(buf, SOCKET_NAME_MAXLEN, "%s<%d>", host, port);
  return buf;
}

static int parsePort(const char* s, int* port) {
  char* end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0' || v < 0 || v > 65535) return -1;
  *port = (int)v;
  return 0;
}

ncclResult_t ncclSocketGetAddrFromString(union ncclSocketAddress* ua, const char* ipPortPair) {
  if (ua == NULL || ipPortPair == NULL) return ncclInvalidArgument;
  memset(ua, 0, sizeof(*ua));
  char buf[SOCKET_NAME_MAXLEN];
  size_t len = strlen(ipPortPair);
  if (len == 0 || len >= sizeof(buf)) {
    WARN("Net : address '%.64s' is empty or too long; expected ip:port, [ipv6]:port or host:port", ipPortPair);
    return ncclInvalidArgument;
  }
  memcpy(buf, ipPortPair, len + 1);
  char *host = buf, *portStr = NULL;
  if (buf[0] == '[') {
    char* close = strchr(buf, ']');
    if (close == NULL || close[1] != ':') {
      WARN("Net : address '%s' has '[' without ']:port'; expected [ipv6]:port", ipPortPair);
      return ncclInvalidArgument;
    }
    *close = '\0';
    host = buf + 1;
    portStr = close + 2;
  } else {
    char* colon = strrchr(buf, ':');
    if (colon == NULL || strchr(buf, ':') != colon) {
      WARN("Net : address '%s' has no port or is an IPv6 address without brackets; expected ip:port or [ipv6]:port",
           ipPortPair);
      return ncclInvalidArgument;
    }
    *colon = '\0';
    portStr = colon + 1;
  }
  int port;
  if (host[0] == '\0' || parsePort(portStr, &port) != 0) {
    WARN("Net : address '%s' has an empty host or a port outside 0..65535", ipPortPair);
    return ncclInvalidArgument;
  }
  if (inet_pton(AF_INET, host, &ua->sin.sin_addr) == 1) {
    ua->sin.sin_family = AF_INET;
    ua->sin.sin_port = htons(port);
    return ncclSuccess;
  }
  char* pct = strchr(host, '%'); /* fe80::1%eth0 */
  if (pct) *pct = '\0';
  if (inet_pton(AF_INET6, host, &ua->sin6.sin6_addr) == 1) {
    ua->sin6.sin6_family = AF_INET6;
    ua->sin6.sin6_port = htons(port);
    if (pct) ua->sin6.sin6_scope_id = if_nametoindex(pct + 1);
    return ncclSuccess;
  }
  if (pct) *pct = '%';
  struct addrinfo hints, *res = NULL;
  memset(&hints, 0, sizeof(hints));
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  int rc = getaddrinfo(host, NULL, &hints, &res);
  if (rc != 0 || res == NULL) {
    WARN("Net : cannot resolve host '%s' of address '%s': %s", host, ipPortPair, gai_strerror(rc));
    return ncclInvalidArgument;
  }
  memcpy(ua, res->ai_addr, res->ai_addrlen < sizeof(*ua) ? res->ai_addrlen : sizeof(*ua));
  if (ua->sa.sa_family == AF_INET) ua->sin.sin_port = htons(port);
  else ua->sin6.sin6_port = htons(port);
  freeaddrinfo(res);
  return ncclSuccess;
}

/* ------------------------------------------------------------------ sockets */

static ncclResult_t setNonBlocking(int fd, const char* what) {
  int flags = fcntl(fd, F_GETFL);
  if (flags == -1 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) == -1) {
    WARN("Net : fcntl(O_NONBLOCK) on the %s socket failed: %s", what, strerror(errno));
    return ncclSystemError;
  }
  return ncclSuccess;
}

/* Options of every connected socket: no Nagle, buffer sizes from the params. */
static void setConnectedOptions(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  int snd = (int)railnetParamInt(&socketParams[P_SNDBUF]);
  int rcv = (int)railnetParamInt(&socketParams[P_RCVBUF]);
  if (snd > 0 && setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &snd, sizeof(snd)) != 0)
    INFO(NCCL_NET, "NET/Socket : setsockopt(SO_SNDBUF=%d) failed: %s", snd, strerror(errno));
  if (rcv > 0 && setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv)) != 0)
    INFO(NCCL_NET, "NET/Socket : setsockopt(SO_RCVBUF=%d) failed: %s", rcv, strerror(errno));
}

/* A socket() or accept() that failed for want of file descriptors: the WARN says so, the
 * limit, what a comm takes and how to raise it. Returns 1 when errno was EMFILE or ENFILE. */
static int warnOutOfFds(const char* call) {
  int e = errno;
  if (e != EMFILE && e != ENFILE) return 0;
  struct rlimit rl = {0, 0};
  getrlimit(RLIMIT_NOFILE, &rl);
  if (e == ENFILE) {
    WARN("Net : %s failed: %s: the system-wide file limit (fs.file-max) is reached. Fix: raise it (sysctl -w "
         "fs.file-max=N) or run fewer processes per host", call, strerror(e));
  } else {
    WARN("Net : %s failed: %s: this process has its RLIMIT_NOFILE of %llu file descriptors (hard limit %llu) open. "
         "Every Socket comm takes 1 + NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD of them and every receive comm's "
         "listen comm one more, every IB comm one. Fix: raise it before the job starts (ulimit -n %llu, "
         "LimitNOFILE= in a systemd unit, 'nofile' in /etc/security/limits.conf, or your launcher's option for it)",
         call, strerror(e), (unsigned long long)rl.rlim_cur, (unsigned long long)rl.rlim_max,
         (unsigned long long)(rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 4 * rl.rlim_cur ? 4 * rl.rlim_cur
                                                                                            : rl.rlim_max));
  }
  errno = e;
  return 1;
}

static ncclResult_t newFd(struct ncclSocket* sock) {
  int family = sock->addr.sa.sa_family;
  if (family != AF_INET && family != AF_INET6) {
    WARN("Net : socket address family %d is neither AF_INET nor AF_INET6", family);
    return ncclInvalidArgument;
  }
  sock->fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (sock->fd < 0) {
    if (!warnOutOfFds("socket()")) WARN("Net : socket() failed: %s", strerror(errno));
    return ncclSystemError;
  }
  /* Connects never block: the retry logic below owns every wait. */
  return setNonBlocking(sock->fd, "new");
}

ncclResult_t ncclSocketInit(struct ncclSocket* sock, const union ncclSocketAddress* addr, uint64_t magic,
                            enum ncclSocketType type, volatile uint32_t* abortFlag, int asyncFlag) {
  if (sock == NULL) return ncclInvalidArgument;
  memset(sock, 0, sizeof(*sock));
  sock->fd = -1;
  sock->acceptFd = -1;
  sock->magic = magic;
  sock->type = type;
  sock->abortFlag = abortFlag;
  sock->asyncFlag = asyncFlag;
  sock->state = ncclSocketStateInitialized;
  if (addr != NULL) {
    memcpy(&sock->addr, addr, sizeof(*addr));
    sock->salen = (int)railnetSockaddrLen(addr);
    if (sock->salen == 0) {
      WARN("Net : ncclSocketInit with address family %d (expected AF_INET or AF_INET6)", addr->sa.sa_family);
      sock->state = ncclSocketStateError;
      return ncclInvalidArgument;
    }
    return newFd(sock);
  }
  return ncclSuccess;
}

ncclResult_t ncclSocketListen(struct ncclSocket* sock) {
  char line[SOCKET_NAME_MAXLEN];
  if (sock == NULL || sock->fd < 0) {
    WARN("Net : ncclSocketListen on an uninitialised socket");
    return ncclInvalidArgument;
  }
  int one = 1;
  setsockopt(sock->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(sock->fd, &sock->addr.sa, sock->salen) != 0) {
    WARN("Net : bind to %s failed: %s%s", ncclSocketToString(&sock->addr, line, 1), strerror(errno),
         errno == EADDRINUSE ? " (the port is in use: choose another or let the kernel pick one with port 0)"
         : errno == EADDRNOTAVAIL ? " (no local interface has this address: check NCCL_SOCKET_IFNAME)" : "");
    return ncclSystemError;
  }
  if (listen(sock->fd, 16384) != 0) {
    WARN("Net : listen on %s failed: %s", ncclSocketToString(&sock->addr, line, 1), strerror(errno));
    return ncclSystemError;
  }
  socklen_t len = sizeof(sock->addr);
  getsockname(sock->fd, &sock->addr.sa, &len);
  TRACE(NCCL_INIT | NCCL_NET, "Listening on socket %s", ncclSocketToString(&sock->addr, line, 1));
  sock->state = ncclSocketStateReady;
  return ncclSuccess;
}

ncclResult_t ncclSocketGetAddr(struct ncclSocket* sock, union ncclSocketAddress* addr) {
  if (sock == NULL || addr == NULL) return ncclInvalidArgument;
  if (sock->state != ncclSocketStateReady) return ncclInternalError;
  memcpy(addr, &sock->addr, sizeof(*addr));
  return ncclSuccess;
}

static int aborted(struct ncclSocket* sock) {
  return sock->abortFlag != NULL && __atomic_load_n(sock->abortFlag, __ATOMIC_ACQUIRE) != 0;
}

/* The local address and interface the kernel would use to reach addr. */
static void localRouteTo(const union ncclSocketAddress* addr, char* ifName, size_t ifLen, char* local, size_t localLen) {
  snprintf(ifName, ifLen, "?");
  snprintf(local, localLen, "?");
  int fd = socket(addr->sa.sa_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  union ncclSocketAddress me;
  socklen_t len = sizeof(me);
  memset(&me, 0, sizeof(me));
  if (connect(fd, &addr->sa, railnetSockaddrLen(addr)) == 0 && getsockname(fd, &me.sa, &len) == 0) {
    if (me.sa.sa_family == AF_INET) inet_ntop(AF_INET, &me.sin.sin_addr, local, localLen);
    else inet_ntop(AF_INET6, &me.sin6.sin6_addr, local, localLen);
    struct ifaddrs *ifs = NULL, *it;
    if (getifaddrs(&ifs) == 0) {
      for (it = ifs; it; it = it->ifa_next) {
        if (it->ifa_addr == NULL || it->ifa_addr->sa_family != me.sa.sa_family) continue;
        int same = me.sa.sa_family == AF_INET
                       ? memcmp(&((struct sockaddr_in*)it->ifa_addr)->sin_addr, &me.sin.sin_addr, 4) == 0
                       : memcmp(&((struct sockaddr_in6*)it->ifa_addr)->sin6_addr, &me.sin6.sin6_addr, 16) == 0;
        if (same) {
          snprintf(ifName, ifLen, "%s", it->ifa_name);
          break;
        }
      }
      freeifaddrs(ifs);
    }
  }
  close(fd);
}

/* The final WARN of a connect that never succeeded: which path, how long, what to set. */
static void warnUnreachable(struct ncclSocket* sock, int err) {
  char peer[SOCKET_NAME_MAXLEN], ifName[IF_NAMESIZE + 1], local[INET6_ADDRSTRLEN];
  localRouteTo(&sock->addr, ifName, sizeof(ifName), local, sizeof(local));
  /* every other interface that is up with an address of the peer's family is a candidate,
   * whatever NCCL_SOCKET_IFNAME selects now */
  char others[256] = "";
  struct ifaddrs *ifs = NULL, *it;
  if (getifaddrs(&ifs) == 0) {
    for (it = ifs; it; it = it->ifa_next) {
      if (it->ifa_addr == NULL || it->ifa_addr->sa_family != sock->addr.sa.sa_family) continue;
      if ((it->ifa_flags & (IFF_UP | IFF_RUNNING)) != (IFF_UP | IFF_RUNNING) || (it->ifa_flags & IFF_LOOPBACK)) continue;
      const char* nm = it->ifa_name;
      if (strcmp(nm, ifName) == 0 || strstr(others, nm) != NULL) continue;
      size_t l = strlen(others);
      if (l + strlen(nm) + 2 >= sizeof(others)) break;
      if (l) others[l++] = ',';
      memcpy(others + l, nm, strlen(nm) + 1);
    }
    freeifaddrs(ifs);
  }
  double secs = (railnetClockNs() - sock->connectStartNs) / 1e9;
  WARN("Net : connect to %s via interface %s (local address %s) failed with %s after %d attempts in %.1f s. "
       "The peer is not reachable from this interface: check that the peer listens and that no firewall drops "
       "the traffic (TCP port %d: NCCL's listeners take ports of the peer's net.ipv4.ip_local_port_range, which a "
       "firewall must pass), or select another interface with NCCL_SOCKET_IFNAME=%s%s",
       ncclSocketToString(&sock->addr, peer, 1), ifName, local, strerror(err), sock->errorRetries, secs,
       ntohs(sock->addr.sa.sa_family == AF_INET6 ? sock->addr.sin6.sin6_port : sock->addr.sin.sin_port),
       others[0] ? others : "<interface>",
       others[0] ? " (other candidates found here)" : " (no other candidate interface was found)");
}

/* Per-attempt deadline of a connect whose SYNs go unanswered. */
static uint64_t attemptTimeoutNs(void) {
  int64_t ms = 10 * railnetParamInt(&socketParams[P_RETRY_SLEEP]);
  if (ms < 1000) ms = 1000;
  return (uint64_t)ms * 1000000ull;
}

double railnetSocketConnectBudgetSec(void) {
  int64_t n = railnetParamInt(&socketParams[P_RETRY_CNT]);
  int64_t sleepMs = railnetParamInt(&socketParams[P_RETRY_SLEEP]);
  /* n retries sleep 1, 2, ..., n units; n + 1 attempts run to their deadline */
  return ((double)n * (double)(n + 1) / 2.0 * (double)sleepMs) / 1e3 + (double)(n + 1) * (double)attemptTimeoutNs() / 1e9;
}

/* A retryable connect error: schedule the next attempt (k sleep units later) or give up. */
static ncclResult_t connectRetry(struct ncclSocket* sock, int err) {
  char peer[SOCKET_NAME_MAXLEN];
  int64_t maxRetries = railnetParamInt(&socketParams[P_RETRY_CNT]);
  if (sock->errorRetries++ >= maxRetries) {
    sock->state = ncclSocketStateError;
    warnUnreachable(sock, err);
    return ncclRemoteError;
  }
  int64_t sleepMs = sock->errorRetries * railnetParamInt(&socketParams[P_RETRY_SLEEP]);
  INFO(NCCL_NET | NCCL_INIT, "Net : connect to %s returned %s, retrying (%d/%" PRId64 ") after %" PRId64 " msec",
       ncclSocketToString(&sock->addr, peer, 1), strerror(err), sock->errorRetries, maxRetries, sleepMs);
  close(sock->fd);
  sock->fd = -1;
  NCCLCHECK(newFd(sock)); /* the state of a socket after a failed connect is unspecified */
  sock->nextAttemptNs = railnetClockNs() + (uint64_t)sleepMs * 1000000ull;
  sock->state = ncclSocketStateConnecting;
  return ncclSuccess;
}

static ncclResult_t startConnect(struct ncclSocket* sock) {
  char peer[SOCKET_NAME_MAXLEN];
  uint64_t now = railnetClockNs();
  if (now < sock->nextAttemptNs) {
    if (sock->asyncFlag) return ncclSuccess; /* an async caller comes back later */
    usleep((useconds_t)((sock->nextAttemptNs - now) / 1000));
  }
  sock->attemptStartNs = railnetClockNs();
  if (connect(sock->fd, &sock->addr.sa, sock->salen) == 0) {
    sock->state = ncclSocketStateConnected;
    return ncclSuccess;
  }
  int err = errno;
  if (err == EINPROGRESS) {
    sock->state = ncclSocketStateConnectPolling;
    return ncclSuccess;
  }
  if (err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH || err == EAGAIN ||
      err == EINTR)
    return connectRetry(sock, err);
  sock->state = ncclSocketStateError;
  WARN("Net : connect to %s failed: %s", ncclSocketToString(&sock->addr, peer, 1), strerror(err));
  return ncclSystemError;
}

static ncclResult_t pollConnect(struct ncclSocket* sock) {
  struct pollfd pfd = {.fd = sock->fd, .events = POLLOUT};
  int ret = poll(&pfd, 1, sock->asyncFlag ? 0 : 10);
  if (ret == 0 || (ret < 0 && errno == EINTR)) {
    if (railnetClockNs() - sock->attemptStartNs > attemptTimeoutNs()) return connectRetry(sock, ETIMEDOUT);
    return ncclSuccess;
  }
  if (ret < 0) {
    WARN("Net : poll() on a connecting socket failed: %s", strerror(errno));
    return ncclSystemError;
  }
  int err = 0;
  socklen_t len = sizeof(err);
  if (getsockopt(sock->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  if (err == 0) {
    sock->state = ncclSocketStateConnected;
    return ncclSuccess;
  }
  if (err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH || err == ENETUNREACH)
    return connectRetry(sock, err);
  char peer[SOCKET_NAME_MAXLEN];
  sock->state = ncclSocketStateError;
  WARN("Net : connect to %s failed: %s", ncclSocketToString(&sock->addr, peer, 1), strerror(err));
  return ncclSystemError;
}

/* Moves up to size-*offset bytes now; *closed when the peer has closed the connection. */
static ncclResult_t progressOnce(int op, struct ncclSocket* sock, void* ptr, int size, int* offset, int* closed) {
  char peer[SOCKET_NAME_MAXLEN];
  char* data = (char*)ptr;
  *closed = 0;
  while (*offset < size) {
    ssize_t n = op == NCCL_SOCKET_RECV ? recv(sock->fd, data + *offset, size - *offset, MSG_DONTWAIT)
                                       : send(sock->fd, data + *offset, size - *offset, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      *offset += (int)n;
      continue;
    }
    if (n == 0 && op == NCCL_SOCKET_RECV) {
      *closed = 1;
      return ncclSuccess;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ncclSuccess;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == ECONNRESET || errno == EPIPE)) {
      *closed = 1;
      return ncclSuccess;
    }
    WARN("Net : %s %s peer %s failed: %s", op == NCCL_SOCKET_RECV ? "recv from" : "send to", "",
         ncclSocketToString(&sock->addr, peer, 1), strerror(errno));
    sock->state = ncclSocketStateError;
    return ncclRemoteError;
  }
  return ncclSuccess;
}

ncclResult_t ncclSocketProgress(int op, struct ncclSocket* sock, void* ptr, int size, int* offset, int* closed) {
  if (sock == NULL || sock->fd < 0 || offset == NULL || size < 0) return ncclInvalidArgument;
  int c = 0;
  NCCLCHECK(progressOnce(op, sock, ptr, size, offset, &c));
  if (closed) *closed = c;
  else if (c) {
    char peer[SOCKET_NAME_MAXLEN];
    WARN("Net : connection closed by peer %s", ncclSocketToString(&sock->addr, peer, 1));
    return ncclRemoteError;
  }
  return ncclSuccess;
}

/* Connecting side of the handshake: magic, then our socket type. */
static ncclResult_t finalizeConnect(struct ncclSocket* sock) {
  memcpy(sock->finalizeBuffer, &sock->magic, sizeof(sock->magic));
  int type = (int)sock->type;
  memcpy(sock->finalizeBuffer + sizeof(sock->magic), &type, sizeof(type));
  int closed = 0;
  do {
    NCCLCHECK(progressOnce(NCCL_SOCKET_SEND, sock, sock->finalizeBuffer, sizeof(sock->finalizeBuffer),
                           &sock->finalizeCounter, &closed));
    if (closed) {
      char peer[SOCKET_NAME_MAXLEN];
      WARN("Net : peer %s closed the connection during the handshake", ncclSocketToString(&sock->addr, peer, 1));
      sock->state = ncclSocketStateError;
      return ncclRemoteError;
    }
  } while (!sock->asyncFlag && sock->finalizeCounter < (int)sizeof(sock->finalizeBuffer) && !aborted(sock));
  if (sock->finalizeCounter == (int)sizeof(sock->finalizeBuffer)) {
    setConnectedOptions(sock->fd);
    sock->state = ncclSocketStateReady;
  }
  return ncclSuccess;
}

/* Drops the accepted connection (a stray client) and goes back to accepting. */
static void discardAccepted(struct ncclSocket* sock) {
  close(sock->fd);
  sock->fd = -1;
  sock->finalizeCounter = 0;
  sock->state = ncclSocketStateAccepting;
}

static ncclResult_t tryAccept(struct ncclSocket* sock) {
  socklen_t len = sizeof(sock->addr);
  int fd = accept4(sock->acceptFd, &sock->addr.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd >= 0) {
    sock->fd = fd;
    sock->state = ncclSocketStateAccepted;
    sock->finalizeCounter = 0;
    sock->acceptStartNs = railnetClockNs();
    return ncclSuccess;
  }
  if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) {
    if (!sock->asyncFlag) {
      struct pollfd pfd = {.fd = sock->acceptFd, .events = POLLIN};
      poll(&pfd, 1, 100);
    }
    return ncclSuccess;
  }
  if (!warnOutOfFds("accept() on the listening socket"))
    WARN("Net : accept() on the listening socket failed: %s", strerror(errno));
  sock->state = ncclSocketStateError;
  return ncclSystemError;
}

/* Accepting side: read magic and type; anything else is a stray client, dropped with a line in the log. */
static ncclResult_t finalizeAccept(struct ncclSocket* sock) {
  char peer[SOCKET_NAME_MAXLEN];
  int closed = 0;
  NCCLCHECK(progressOnce(NCCL_SOCKET_RECV, sock, sock->finalizeBuffer, sizeof(sock->finalizeBuffer),
                         &sock->finalizeCounter, &closed));
  int have = sock->finalizeCounter;
  if (have >= (int)sizeof(uint64_t)) {
    uint64_t magic;
    memcpy(&magic, sock->finalizeBuffer, sizeof(magic));
    if (magic != sock->magic) {
      WARN("Net : connection from %s sent a wrong handshake magic 0x%016" PRIx64 " (expected 0x%016" PRIx64
           "): not a railnet/NCCL peer of this job (or NCCL_SOCKET_MAGIC differs); dropped it, still listening",
           ncclSocketToString(&sock->addr, peer, 1), magic, sock->magic);
      discardAccepted(sock);
      return ncclSuccess;
    }
  }
  if (have == (int)sizeof(sock->finalizeBuffer)) {
    int type;
    memcpy(&type, sock->finalizeBuffer + sizeof(uint64_t), sizeof(type));
    if (type != (int)sock->type) {
      WARN("Net : connection from %s is of socket type %d, this listener expects type %d; dropped it, still "
           "listening", ncclSocketToString(&sock->addr, peer, 1), type, (int)sock->type);
      discardAccepted(sock);
      return ncclSuccess;
    }
    setConnectedOptions(sock->fd);
    sock->state = ncclSocketStateReady;
    return ncclSuccess;
  }
  if (closed) {
    INFO(NCCL_NET | NCCL_INIT, "Net : connection from %s closed before its handshake (%d of %d bytes); dropped it",
         ncclSocketToString(&sock->addr, peer, 1), have, (int)sizeof(sock->finalizeBuffer));
    discardAccepted(sock);
    return ncclSuccess;
  }
  uint64_t limit = (uint64_t)railnetParamInt(&socketParams[P_ACCEPT_TIMEOUT]) * 1000000ull;
  if (railnetClockNs() - sock->acceptStartNs > limit) {
    WARN("Net : connection from %s sent only %d of %d handshake bytes in %" PRId64 " ms; dropped it, still listening",
         ncclSocketToString(&sock->addr, peer, 1), have, (int)sizeof(sock->finalizeBuffer),
         railnetParamInt(&socketParams[P_ACCEPT_TIMEOUT]));
    discardAccepted(sock);
  } else if (!sock->asyncFlag) {
    struct pollfd pfd = {.fd = sock->fd, .events = POLLIN};
    poll(&pfd, 1, 10);
  }
  return ncclSuccess;
}

static ncclResult_t progressState(struct ncclSocket* sock) {
  if (sock->state == ncclSocketStateAccepting) NCCLCHECK(tryAccept(sock));
  if (sock->state == ncclSocketStateAccepted) NCCLCHECK(finalizeAccept(sock));
  if (sock->state == ncclSocketStateConnecting) NCCLCHECK(startConnect(sock));
  if (sock->state == ncclSocketStateConnectPolling) NCCLCHECK(pollConnect(sock));
  if (sock->state == ncclSocketStateConnected) NCCLCHECK(finalizeConnect(sock));
  return ncclSuccess;
}

static int inProgress(enum ncclSocketState s) {
  return s == ncclSocketStateConnecting || s == ncclSocketStateConnectPolling || s == ncclSocketStateConnected ||
         s == ncclSocketStateAccepting || s == ncclSocketStateAccepted;
}

ncclResult_t ncclSocketConnect(struct ncclSocket* sock) {
  if (sock == NULL || sock->fd < 0) {
    WARN("Net : ncclSocketConnect on an uninitialised socket");
    return ncclInvalidArgument;
  }
  if (sock->state != ncclSocketStateInitialized) {
    WARN("Net : ncclSocketConnect on a socket in state %d", sock->state);
    return sock->state == ncclSocketStateError ? ncclRemoteError : ncclInternalError;
  }
  sock->state = ncclSocketStateConnecting;
  sock->finalizeCounter = 0;
  sock->errorRetries = 0;
  sock->connectStartNs = railnetClockNs();
  sock->nextAttemptNs = 0;
  do {
    NCCLCHECK(progressState(sock));
  } while (!sock->asyncFlag && !aborted(sock) && inProgress(sock->state));
  if (aborted(sock)) return ncclInternalError;
  return ncclSuccess;
}

ncclResult_t ncclSocketAccept(struct ncclSocket* sock, struct ncclSocket* listenSock) {
  if (sock == NULL || listenSock == NULL) return ncclInvalidArgument;
  if (listenSock->state != ncclSocketStateReady || listenSock->fd < 0) {
    WARN("Net : ncclSocketAccept on a socket that is not listening (state %d)", listenSock->state);
    return ncclInvalidUsage;
  }
  if (sock->acceptFd < 0 || sock->state == ncclSocketStateInitialized || sock->state == ncclSocketStateNone) {
    memcpy(sock, listenSock, sizeof(*sock));
    sock->acceptFd = listenSock->fd;
    sock->fd = -1;
    sock->state = ncclSocketStateAccepting;
    sock->finalizeCounter = 0;
  }
  do {
    NCCLCHECK(progressState(sock));
  } while (!sock->asyncFlag && !aborted(sock) && inProgress(sock->state));
  if (aborted(sock)) return ncclInternalError;
  return ncclSuccess;
}

ncclResult_t ncclSocketReady(struct ncclSocket* sock, int* running) {
  if (sock == NULL || running == NULL) return ncclInvalidArgument;
  if (sock->state == ncclSocketStateError || sock->state == ncclSocketStateClosed) {
    *running = 0;
    return ncclRemoteError;
  }
  if (sock->state != ncclSocketStateReady) NCCLCHECK(progressState(sock));
  *running = sock->state == ncclSocketStateReady;
  return ncclSuccess;
}

/* Blocking transfer of exactly size bytes; waits in poll() so an abort flag is seen. */
static ncclResult_t socketWait(int op, struct ncclSocket* sock, void* ptr, int size) {
  int offset = 0, lastOffset = 0;
  int timeout = (int)railnetParamInt(&socketParams[P_POLL_TIMEOUT]);
  uint64_t lastMove = railnetClockNs();
  while (offset < size) {
    NCCLCHECK(ncclSocketProgress(op, sock, ptr, size, &offset, NULL));
    if (offset == size) break;
    if (aborted(sock)) return ncclInternalError;
    if (offset != lastOffset) {
      lastOffset = offset;
      lastMove = railnetClockNs();
    } else if (railnetClockNs() - lastMove > 60ull * 1000000000ull) {
      /* blocking by contract, but never silently: say who we wait for, every minute */
      char peer[SOCKET_NAME_MAXLEN];
      WARN("Net : still waiting to %s %d of %d bytes %s peer %s after 60 s without progress: the peer is busy, "
           "hung or unreachable", op == NCCL_SOCKET_RECV ? "receive" : "send", size - offset, size,
           op == NCCL_SOCKET_RECV ? "from" : "to", ncclSocketToString(&sock->addr, peer, 1));
      lastMove = railnetClockNs();
    }
    struct pollfd pfd = {.fd = sock->fd, .events = op == NCCL_SOCKET_RECV ? POLLIN : POLLOUT};
    poll(&pfd, 1, timeout > 0 ? timeout : 100);
  }
  return ncclSuccess;
}

ncclResult_t ncclSocketSend(struct ncclSocket* sock, void* ptr, int size) {
  if (sock == NULL || sock->state != ncclSocketStateReady) {
    WARN("Net : ncclSocketSend on a socket that is not connected");
    return ncclInternalError;
  }
  return socketWait(NCCL_SOCKET_SEND, sock, ptr, size);
}

ncclResult_t ncclSocketRecv(struct ncclSocket* sock, void* ptr, int size) {
  if (sock == NULL || sock->state != ncclSocketStateReady) {
    WARN("Net : ncclSocketRecv on a socket that is not connected");
    return ncclInternalError;
  }
  return socketWait(NCCL_SOCKET_RECV, sock, ptr, size);
}

int64_t railnetSocketAcceptTimeoutMs(void) { return railnetParamInt(&socketParams[P_ACCEPT_TIMEOUT]); }

int railnetSocketAcceptExpired(const struct ncclSocket* sock, int64_t* ms) {
  *ms = railnetSocketAcceptTimeoutMs();
  return railnetClockNs() - sock->acceptStartNs > (uint64_t)*ms * 1000000ull;
}

int64_t railnetSocketPeerTimeoutMs(void) { return railnetParamInt(&socketParams[P_PEER_TIMEOUT]); }

void railnetSocketSetPeerTimeout(int fd) {
  int64_t ms = railnetSocketPeerTimeoutMs();
  unsigned int uto = (unsigned int)ms;
  /* the first keepalive probe after a quarter of the timeout idle, then one each quarter:
   * TCP_USER_TIMEOUT ends the connection once probes are unanswered for the whole time */
  int one = 1, idle = ms / 4000 > 0 ? (int)(ms / 4000) : 1, intvl = idle, cnt = 4;
  setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &uto, sizeof(uto));
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

int railnetSocketPeerGone(const struct ncclSocket* sock, int* err) {
  if (err) *err = 0;
  if (sock == NULL || sock->fd < 0) return 1;
  char b;
  ssize_t n = recv(sock->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n < 0 && err && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) *err = errno;
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

void railnetSocketShutdownSend(struct ncclSocket* sock) {
  if (sock != NULL && sock->fd >= 0) (void)shutdown(sock->fd, SHUT_WR);
}

ncclResult_t ncclSocketClose(struct ncclSocket* sock) {
  if (sock == NULL) return ncclSuccess;
  if (sock->fd >= 0) {
    /* a listening or accepted socket: say goodbye without lingering */
    shutdown(sock->fd, SHUT_RDWR);
    close(sock->fd);
  }
  sock->fd = -1;
  sock->state = ncclSocketStateClosed;
  return ncclSuccess;
}
