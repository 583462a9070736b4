/*
 * Shared by railnet's libFuzzer targets (fuzz/<target>.c; `make fuzz`, fuzz/README.md).
 * Each target feeds bytes from the fuzzer to the real parser or state machine in the
 * library, linked from objects built with -fsanitize=fuzzer-no-link,address,undefined.
 */
#ifndef RAILNET_FUZZ_COMMON_H
#define RAILNET_FUZZ_COMMON_H
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "debug.h"
#include "param.h"
#include "testing.h"

/* Formats every message, as NCCL's logger would, and drops it: a fuzzer that prints
 * each WARN runs a hundred times slower. FUZZ_VERBOSE=1 prints them. */
static int fuzzVerbose;
static unsigned long fuzzWarns;
static void fuzzLogger(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt,
                       ...) {
  (void)flags;
  char msg[4096];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof(msg), fmt, ap);
  va_end(ap);
  if (level == NCCL_LOG_WARN) fuzzWarns++;
  if (fuzzVerbose) fprintf(stderr, "[%d] %s:%d %s\n", (int)level, file ? file : "?", line, msg);
}

/* A NUL-terminated copy of the input (the caller frees it). */
static inline char* fuzzString(const uint8_t* data, size_t size) {
  char* s = (char*)malloc(size + 1);
  if (s == NULL) abort();
  memcpy(s, data, size);
  s[size] = '\0';
  return s;
}

/* A broken invariant: print it and abort, so that libFuzzer keeps the input. */
#define FUZZ_CHECK(cond, ...)                                             \
  do {                                                                    \
    if (!(cond)) {                                                        \
      fprintf(stderr, "fuzz check failed at %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                       \
      fprintf(stderr, "\n");                                              \
      abort();                                                            \
    }                                                                     \
  } while (0)

/* Common set-up: quiet logger, and the debug settings loaded once from the environment
 * (a conf file under test must never open an NCCL_DEBUG_FILE). */
static inline void fuzzSetup(void) {
  const char* v = getenv("FUZZ_VERBOSE");
  fuzzVerbose = v != NULL && v[0] == '1';
  setenv("NCCL_DEBUG", "WARN", 1);
  unsetenv("NCCL_DEBUG_FILE");
  railnetSetLogger(fuzzLogger);
  (void)railnetDebugEnabled(NCCL_LOG_WARN, NCCL_ALL);
}

/* connect() of a fuzz client to a listener on this host. Hundreds of thousands of loopback
 * connections a minute (two socket targets at once in the fuzz tier) run one source
 * address's local ports dry: an IPv4 client takes its source from 127.0.0.1 .. 127.0.0.254
 * in turn (the port picked at connect, IP_BIND_ADDRESS_NO_PORT), and EADDRNOTAVAIL/EAGAIN
 * are retried for up to 5 s. A connect interrupted by libFuzzer's SIGALRM (EINTR) goes on
 * in the kernel: its outcome is awaited (5 s). Returns 0, or the errno of the failure. */
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
static inline int fuzzConnect(int fd, const struct sockaddr* addr, socklen_t len) {
  static unsigned n;
  if (addr->sa_family == AF_INET) {
    struct sockaddr_in src;
    memset(&src, 0, sizeof(src));
    src.sin_family = AF_INET;
    src.sin_addr.s_addr = htonl(0x7f000001u + (n++ % 254));
    int one = 1;
    setsockopt(fd, IPPROTO_IP, IP_BIND_ADDRESS_NO_PORT, &one, sizeof(one));
    if (bind(fd, (struct sockaddr*)&src, sizeof(src)) != 0) return errno;
  }
  for (int i = 0; i < 5000; i++) {
    if (connect(fd, addr, len) == 0) return 0;
    int e = errno;
    if (e == EINTR || e == EALREADY || e == EINPROGRESS) {
      /* interrupted (libFuzzer's SIGALRM): the connection goes on; wait for its outcome */
      struct pollfd p = {fd, POLLOUT, 0};
      int r = poll(&p, 1, 5000);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return ETIMEDOUT;
      int soErr = 0;
      socklen_t l = sizeof(soErr);
      if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soErr, &l) != 0) return errno;
      return soErr;
    }
    if (e == EISCONN) return 0;
    if (e != EADDRNOTAVAIL && e != EAGAIN) return e;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  return EADDRNOTAVAIL;
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerInitialize(int* argc, char*** argv);

#endif
