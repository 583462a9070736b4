/* railnet-perf's small helpers: the clock, dying with an exit status, whole reads and writes. */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "perf.h"

double nowSec(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

pid_t serverChild;

void dieWith(int status, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fflush(stdout);
  fprintf(stderr, "railnet-perf: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  if (serverChild > 0) {
    kill(serverChild, SIGTERM);
    waitpid(serverChild, NULL, 0);
  }
  exit(status);
}

int writeAll(int fd, const void* p, size_t n) {
  for (size_t off = 0; off < n;) {
    ssize_t w = write(fd, (const char*)p + off, n - off);
    if (w <= 0 && errno != EINTR) return -1;
    if (w > 0) off += (size_t)w;
  }
  return 0;
}
int readAll(int fd, void* p, size_t n) {
  for (size_t off = 0; off < n;) {
    ssize_t r = read(fd, (char*)p + off, n - off);
    if (r == 0 || (r < 0 && errno != EINTR)) return -1;
    if (r > 0) off += (size_t)r;
  }
  return 0;
}
