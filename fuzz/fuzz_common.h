/*
 * Shared by railnet's libFuzzer targets (fuzz/<target>.c; `make fuzz`, fuzz/README.md).
 * Each target feeds bytes from the fuzzer to the real parser or state machine in the
 * library, linked from objects built with -fsanitize=fuzzer-no-link,address,undefined.
 */
#ifndef RAILNET_FUZZ_COMMON_H
#define RAILNET_FUZZ_COMMON_H
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core.h"
#include "debug.h"
#include "param.h"

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

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerInitialize(int* argc, char*** argv);

#endif
