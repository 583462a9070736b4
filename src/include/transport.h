/* The transports railnet carries, each a complete ncclNet (newest version). */
#ifndef RAILNET_TRANSPORT_H
#define RAILNET_TRANSPORT_H
#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  const char* key;     /* "socket", "ib": the RAILNET_TRANSPORT value */
  const ncclNet_t* net;
} railnetTransportEntry;

/* NULL-terminated, in RAILNET_TRANSPORT=auto preference order. */
extern const railnetTransportEntry railnetTransports[];

#ifdef __cplusplus
}
#endif
#endif
