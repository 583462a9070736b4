/* The listener of railnet-diag --serve and --pair. Every connection is greeted (GREET with
 * this process's token) and must then open with a pair protocol message within the probe
 * bound: a TCP_PROBE is echoed; a HELLO goes to the server's session (one at a time);
 * anything else is refused with one log line. Connections are served concurrently, each in
 * its own thread and bounded by its own deadline, at most PAIR_MAX_CONNS at a time (more are
 * closed at once), so that slow or idle strangers cannot make a real probe wait. */
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

int pairAccept(int lfd, struct sockaddr* sa, socklen_t* len) {
  static uint64_t saidNs; /* one line in 10 s, not one per poll */
  int fd = accept4(lfd, sa, len, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd >= 0 || (errno != EMFILE && errno != ENFILE && errno != ENOBUFS && errno != ENOMEM)) return fd;
  /* the connection stays queued and poll() says so at once: wait instead of spinning */
  int e = errno;
  uint64_t now = railnetClockNs(), last = __atomic_load_n(&saidNs, __ATOMIC_RELAXED);
  if ((last == 0 || now - last > 10000000000ull) &&
      __atomic_compare_exchange_n(&saidNs, &last, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    pairLog("cannot accept a connection: %s (%s); it waits until a descriptor is free. Raise the limit "
            "(ulimit -n) or end what holds the descriptors", strerror(e),
            e == EMFILE ? "this process's open-file limit" : e == ENFILE ? "the system's open-file limit" : "no memory");
  usleep(100000);
  return -1;
}

int pairListen(pairListener* l, uint16_t port, int tryOthers) {
  memset(l, 0, sizeof(*l));
  l->fd = -1;
  pthread_mutex_init(&l->lock, NULL);
  pthread_cond_init(&l->idle, NULL);
  l->token = railnetPairNewToken();
  for (int k = 0; k < RAILNET_PAIR_EPHEMERAL; k++) l->ephFd[k] = -1;
  int e = railnetPairListen(port, &l->fd, &l->port);
  if (e == EADDRINUSE && tryOthers) e = railnetPairListen(0, &l->fd, &l->port);
  if (e == 0) pairListenEphemeral(l);
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

static void countRejected(pairListener* l) { __atomic_add_fetch(&l->rejected, 1, __ATOMIC_RELAXED); }

/* One accepted connection: greeted, then its first message decides. */
static void serveConn(pairListener* l, int fd, const char* peer) {
  railnetPairMsg m;
  char why[128] = "";
  uint64_t deadline = railnetClockNs() + PAIR_PROBE_MS * 1000000ull;
  int e = railnetPairGreetSend(fd, l->token, deadline);
  if (e == 0) e = railnetPairRecv(fd, &m, deadline, why);
  if (e) {
    countRejected(l);
    if (e == EPROTO) pairLog("rejected %s: %s", peer, why);
    else if (e == ETIMEDOUT) pairLog("rejected %s: no pair protocol message within %d ms", peer, PAIR_PROBE_MS);
    else pairLog("rejected %s: %s before its first message", peer, strerror(e));
    close(fd);
    return;
  }
  if (m.type == RAILNET_PAIR_TCP_PROBE) {
    e = railnetPairTcpProbeAnswer(fd, m.u.probe, deadline);
    if (e == 0) __atomic_add_fetch(&l->probesAnswered, 1, __ATOMIC_RELAXED);
    else pairLog("TCP probe from %s (%s) ended early: %s", peer, m.u.probe->from, strerror(e));
    close(fd);
  } else if (m.type == RAILNET_PAIR_HELLO && l->onHello && (e = l->onHello(fd, m.u.hello, peer, l->arg)) == 0) {
    /* the session owns fd now */
  } else if (m.type == RAILNET_PAIR_HELLO && e == -2) {
    countRejected(l); /* refused, and said why */
    close(fd);
  } else {
    countRejected(l);
    pairLog("rejected %s: %s %s", peer, railnetPairTypeName(m.type),
            m.type == RAILNET_PAIR_HELLO ? "while a session runs (one peer at a time)" : "as its first message");
    close(fd);
  }
  railnetPairFree(&m);
}

typedef struct {
  pairListener* l;
  int fd;
  char peer[INET6_ADDRSTRLEN + 16];
} pairConn;

static void* connThread(void* arg) {
  pairConn* c = (pairConn*)arg;
  pairListener* l = c->l;
  serveConn(l, c->fd, c->peer);
  free(c);
  pthread_mutex_lock(&l->lock);
  if (--l->conns == 0) pthread_cond_broadcast(&l->idle);
  pthread_mutex_unlock(&l->lock);
  return NULL;
}

/* fd in a thread of its own, or closed at once when PAIR_MAX_CONNS are being served. */
static void dispatch(pairListener* l, int fd, const char* peer) {
  pthread_mutex_lock(&l->lock);
  int full = l->conns >= PAIR_MAX_CONNS;
  if (!full) l->conns++;
  pthread_mutex_unlock(&l->lock);
  pairConn* c = full ? NULL : (pairConn*)calloc(1, sizeof(*c));
  pthread_t t;
  pthread_attr_t attr;
  int started = 0;
  if (c) {
    c->l = l, c->fd = fd;
    snprintf(c->peer, sizeof(c->peer), "%s", peer);
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    started = pthread_create(&t, &attr, connThread, c) == 0;
    pthread_attr_destroy(&attr);
  }
  if (started) return;
  countRejected(l);
  if (full) pairLog("rejected %s: %d connections are being served already", peer, PAIR_MAX_CONNS);
  else pairLog("rejected %s: no thread for it (%s)", peer, strerror(errno ? errno : EAGAIN));
  free(c);
  close(fd);
  if (!full) {
    pthread_mutex_lock(&l->lock);
    if (--l->conns == 0) pthread_cond_broadcast(&l->idle);
    pthread_mutex_unlock(&l->lock);
  }
}

void pairServeLoop(pairListener* l) {
  while (!l->stop) {
    uint64_t now = railnetClockNs();
    if (l->deadlineNs && now >= l->deadlineNs) break;
    struct pollfd p[1 + RAILNET_PAIR_EPHEMERAL];
    int n = 0;
    p[n++] = (struct pollfd){l->fd, POLLIN, 0};
    for (int k = 0; k < RAILNET_PAIR_EPHEMERAL; k++)
      if (l->ephFd[k] >= 0) p[n++] = (struct pollfd){l->ephFd[k], POLLIN, 0};
    if (poll(p, (nfds_t)n, 100) <= 0) continue;
    for (int i = 0; i < n; i++) {
      if (!(p[i].revents & POLLIN)) continue;
      struct sockaddr_storage ss;
      socklen_t len = sizeof(ss);
      int fd = pairAccept(p[i].fd, (struct sockaddr*)&ss, &len);
      if (fd < 0) continue;
      char peer[INET6_ADDRSTRLEN + 16];
      peerText(&ss, peer, sizeof(peer));
      dispatch(l, fd, peer);
    }
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
  /* the connections in flight end by their own deadline (PAIR_PROBE_MS) */
  pthread_mutex_lock(&l->lock);
  while (l->conns > 0) pthread_cond_wait(&l->idle, &l->lock);
  pthread_mutex_unlock(&l->lock);
  if (l->fd >= 0) close(l->fd);
  l->fd = -1;
  for (int k = 0; k < RAILNET_PAIR_EPHEMERAL; k++) {
    if (l->ephFd[k] >= 0) close(l->ephFd[k]);
    l->ephFd[k] = -1;
  }
}
