/* Which transports this build of railnet carries (auto mode tries them in this order). */
#include <strings.h>
#include "railnet.h"
#include "transport.h"

extern const ncclNet_t railnetNetSocket;
extern const ncclNet_t railnetNetIb;

const railnetTransportEntry railnetTransports[] = {
    {"ib", &railnetNetIb},
    {"socket", &railnetNetSocket},
    {NULL, NULL},
};

/* include/railnet.h's version macros as "MAJOR.MINOR.PATCH" (the one place it is written). */
#define RAILNET_STR_(x) #x
#define RAILNET_STR(x) RAILNET_STR_(x)
const char* railnetVersion(void) {
  return RAILNET_STR(RAILNET_VERSION_MAJOR) "." RAILNET_STR(RAILNET_VERSION_MINOR) "." RAILNET_STR(RAILNET_VERSION_PATCH);
}

const ncclNet_t* railnetGetNet(const char* name) {
  if (name == NULL) return NULL;
  for (const railnetTransportEntry* t = railnetTransports; t->key != NULL; t++)
    if (strcasecmp(name, t->key) == 0 || strcasecmp(name, t->net->name) == 0) return t->net;
  return NULL;
}
