/* Small helpers every layer uses. */
#include <stdio.h>
#include <time.h>
#include "core.h"

ncclResult_t railnetCalloc(void** ptr, size_t nelem, size_t elsize, const char* what) {
  void* p = calloc(nelem ? nelem : 1, elsize ? elsize : 1);
  if (p == NULL) {
    WARN("Failed to allocate %zu x %zu bytes for %s: out of host memory", nelem, elsize, what);
    *ptr = NULL;
    return ncclSystemError;
  }
  *ptr = p;
  return ncclSuccess;
}

uint64_t railnetClockNs(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

