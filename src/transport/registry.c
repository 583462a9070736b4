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

const char* railnetVersion(void) { return "0.1.0"; }

const ncclNet_t* railnetGetNet(const char* name) {
  if (name == NULL) return NULL;
  for (const railnetTransportEntry* t = railnetTransports; t->key != NULL; t++)
    if (strcasecmp(name, t->key) == 0 || strcasecmp(name, t->net->name) == 0) return t->net;
  return NULL;
}
