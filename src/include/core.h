/* railnet internal basics: result propagation and small helpers. */
#ifndef RAILNET_CORE_H
#define RAILNET_CORE_H
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <railnet_net/net.h>
#include "debug.h"

#define NCCLCHECK(call)                                   \
  do {                                                    \
    ncclResult_t res_ = (call);                           \
    if (res_ != ncclSuccess && res_ != ncclInProgress) {  \
      INFO(NCCL_ALL, "%s:%d -> %d", __FILE__, __LINE__, res_); \
      return res_;                                        \
    }                                                     \
  } while (0)

#define NCCLCHECKGOTO(call, res, label)                   \
  do {                                                    \
    (res) = (call);                                       \
    if ((res) != ncclSuccess && (res) != ncclInProgress) { \
      INFO(NCCL_ALL, "%s:%d -> %d", __FILE__, __LINE__, (res)); \
      goto label;                                         \
    }                                                     \
  } while (0)

#define RAILNET_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#ifdef __cplusplus
extern "C" {
#endif
/* calloc that WARNs with the size and call site on failure. */
ncclResult_t railnetCalloc(void** ptr, size_t nelem, size_t elsize, const char* what);
/* Monotonic clock in nanoseconds. */
uint64_t railnetClockNs(void);
#ifdef __cplusplus
}
#endif

#define RAILNET_CALLOC(ptr, n, what) railnetCalloc((void**)(ptr), (n), sizeof(**(ptr)), (what))

#endif
