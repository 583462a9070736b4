/* The listen handle's way from the server to the client, outside the plugin: one TCP
 * connection on --port, or a file (--handle-file) on a shared file system. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include "perf.h"

void serveHandleTcp(const char* handle) {
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  int v4 = 0;
  if (fd < 0) {
    fd = socket(AF_INET, SOCK_STREAM, 0);
    v4 = 1;
  }
  if (fd < 0) die("socket: %s", strerror(errno));
  int one = 1, zero = 0;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (!v4) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
  struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)opt.port), .sin6_addr = in6addr_any};
  struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)opt.port), .sin_addr = {htonl(INADDR_ANY)}};
  int rc = v4 ? bind(fd, (struct sockaddr*)&a4, sizeof(a4)) : bind(fd, (struct sockaddr*)&a6, sizeof(a6));
  if (rc != 0 || listen(fd, 1) != 0)
    die("cannot listen on TCP port %d for the handle exchange: %s (pick another with --port)", opt.port, strerror(errno));
  if (!opt.json && !opt.csv) printf(" Waiting for the client on TCP port %d...\n", opt.port);
  fflush(stdout);
  struct pollfd pf = {.fd = fd, .events = POLLIN};
  int ready;
  while ((ready = poll(&pf, 1, opt.timeoutSec * 1000)) < 0 && errno == EINTR) {
  }
  if (ready < 0) die("waiting for the client on TCP port %d: %s", opt.port, strerror(errno));
  if (ready == 0) die("no client came for the handle on TCP port %d within %d s (--timeout)", opt.port, opt.timeoutSec);
  int c = accept(fd, NULL, NULL);
  if (c < 0) die("accept on port %d: %s", opt.port, strerror(errno));
  uint64_t magic = PERF_MAGIC;
  if (writeAll(c, &magic, sizeof(magic)) || writeAll(c, handle, NCCL_NET_HANDLE_MAXSIZE)) die("sending the handle failed");
  close(c);
  close(fd);
}

void fetchHandleTcp(const char* host, char* handle) {
  char port[16];
  snprintf(port, sizeof(port), "%d", opt.port);
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  int g = getaddrinfo(host, port, &hints, &res);
  if (g != 0) die("cannot resolve %s: %s", host, gai_strerror(g));
  double deadline = nowSec() + opt.timeoutSec;
  int fd = -1;
  while (fd < 0) {
    for (struct addrinfo* ai = res; ai && fd < 0; ai = ai->ai_next) {
      fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
      if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        close(fd);
        fd = -1;
      }
    }
    if (fd < 0) {
      if (nowSec() > deadline) die("no server answered on %s:%d within %d s", host, opt.port, opt.timeoutSec);
      usleep(100000);
    }
  }
  freeaddrinfo(res);
  /* a stranger on the port that accepts and says nothing: the reads end at the deadline */
  double left = deadline - nowSec();
  struct timeval tv = {.tv_sec = left > 1 ? (time_t)left : 1};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  uint64_t magic = 0;
  if (readAll(fd, &magic, sizeof(magic)) || magic != PERF_MAGIC || readAll(fd, handle, NCCL_NET_HANDLE_MAXSIZE))
    die("%s:%d sent no railnet-perf handle within %d s (--timeout): it is not a railnet-perf server, or another "
        "program holds the port (pick another with --port on both sides)", host, opt.port, opt.timeoutSec);
  close(fd);
}

void writeHandleFile(const char* path, const char* handle) {
  char tmp[600];
  snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, (int)getpid());
  FILE* f = fopen(tmp, "w");
  if (f == NULL) die("cannot write %s: %s", tmp, strerror(errno));
  for (int i = 0; i < NCCL_NET_HANDLE_MAXSIZE; i++) fprintf(f, "%02x", (unsigned char)handle[i]);
  fprintf(f, "\n");
  fclose(f);
  if (rename(tmp, path) != 0) die("cannot rename %s to %s: %s", tmp, path, strerror(errno));
  if (!opt.json && !opt.csv) printf(" Handle written to %s; waiting for the client...\n", path);
  fflush(stdout);
}

void readHandleFile(const char* path, char* handle) {
  double deadline = nowSec() + opt.timeoutSec;
  FILE* f;
  while ((f = fopen(path, "r")) == NULL) {
    if (nowSec() > deadline) die("%s did not appear within %d s", path, opt.timeoutSec);
    usleep(100000);
  }
  for (int i = 0; i < NCCL_NET_HANDLE_MAXSIZE; i++) {
    unsigned v;
    if (fscanf(f, "%2x", &v) != 1) die("%s is not a railnet-perf handle file", path);
    handle[i] = (char)v;
  }
  fclose(f);
}
