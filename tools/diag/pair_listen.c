/* The listener of railnet-diag --serve and --pair: every connection must open with a pair
 * protocol message within the probe bound. A TCP_PROBE is echoed; a HELLO goes to the
 * server's session (one at a time); anything else is refused with one log line. */
#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>
#include "pair.h"

void pairLog(const char* fmt, ...) {
  char line[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  fprintf(stderr, "railnet-diag: %s\n", line);
  fflush(stderr);
}

int pairListen(pairListener* l, uint16_t port, int tryOthers) {
  memset(l, 0, sizeof(*l));
  l->fd = -1;
  int e = railnetPairListen(port, &l->fd, &l->port);
  if (e == EADDRINUSE && tryOthers) e = railnetPairListen(0, &l->fd, &l->port);
  return e;
}

static void peerText(const struct sockaddr_storage* ss, char* buf, size_t size) {
  char a[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss->ss_family == AF_INET6) {
    const struct sockaddr_in6* s = (const struct sockaddr_in6*)ss;
    if (IN6_IS_ADDR_V4MAPPED(&s->sin6_addr)) inet_ntop(AF_INET, s->sin6_addr.s6_addr + 12, a, sizeof(a));
    else inet_ntop(AF_INET6, &s->sin6_addr, a, sizeof(a));
    port = ntohs(s->sin6_port);
  } else if (ss->ss_family == AF_INET) {
    const struct sockaddr_in* s = (const struct sockaddr_in*)ss;
    inet_ntop(AF_INET, &s->sin_addr, a, sizeof(a));
    port = ntohs(s->sin_port);
  }
  snprintf(buf, size, "%s:%d", a, port);
}

/* One accepted connection: its first message decides. */
static void serveConn(pairListener* l, int fd, const char* peer) {
  railnetPairMsg m;
  char why[128] = "";
  uint64_t deadline = railnetClockNs() + PAIR_PROBE_MS * 1000000ull;
  int e = railnetPairRecv(fd, &m, deadline, why);
  if (e) {
    l->rejected++;
    if (e == EPROTO) pairLog("rejected %s: %s", peer, why);
    else if (e == ETIMEDOUT) pairLog("rejected %s: no pair protocol message within %d ms", peer, PAIR_PROBE_MS);
    else pairLog("rejected %s: %s before its first message", peer, strerror(e));
    close(fd);
    return;
  }
  if (m.type == RAILNET_PAIR_TCP_PROBE) {
    e = railnetPairTcpProbeAnswer(fd, m.u.probe, deadline);
    if (e == 0) l->probesAnswered++;
    else pairLog("TCP probe from %s (%s) ended early: %s", peer, m.u.probe->from, strerror(e));
    close(fd);
  } else if (m.type == RAILNET_PAIR_HELLO && l->onHello && l->onHello(fd, m.u.hello, peer, l->arg) == 0) {
    /* the session owns fd now */
  } else {
    l->rejected++;
    pairLog("rejected %s: %s %s", peer, railnetPairTypeName(m.type),
            m.type == RAILNET_PAIR_HELLO ? "while a session runs (one peer at a time)" : "as its first message");
    close(fd);
  }
  railnetPairFree(&m);
}

void pairServeLoop(pairListener* l) {
  while (!l->stop) {
    uint64_t now = railnetClockNs();
    if (l->deadlineNs && now >= l->deadlineNs) break;
    struct pollfd p = {l->fd, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int fd = accept4(l->fd, (struct sockaddr*)&ss, &len, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) continue;
    char peer[INET6_ADDRSTRLEN + 16];
    peerText(&ss, peer, sizeof(peer));
    serveConn(l, fd, peer);
  }
}

static void* serveThread(void* arg) {
  pairServeLoop((pairListener*)arg);
  return NULL;
}

int pairServeInThread(pairListener* l) {
  if (pthread_create(&l->thread, NULL, serveThread, l) != 0) return errno ? errno : EAGAIN;
  l->threaded = 1;
  return 0;
}

void pairListenStop(pairListener* l) {
  l->stop = 1;
  if (l->threaded) pthread_join(l->thread, NULL);
  l->threaded = 0;
  if (l->fd >= 0) close(l->fd);
  l->fd = -1;
}
