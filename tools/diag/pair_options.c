/* railnet-diag's options for the checks between two nodes (--serve, --pair HOST[:P],
 * --port P, --timeout S, --bw) and the entry into them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "diag.h"
#include "pair.h"
#include "railnet.h"

static int number(const char* opt, const char* v, int lo, int hi, int* out) {
  char* end;
  long n = strtol(v, &end, 10);
  if (*v == '\0' || *end || n < lo || n > hi)
    return cliUsageError("railnet-diag", "%s wants a number from %d to %d, not '%s'", opt, lo, hi, v);
  *out = (int)n;
  return -1;
}

int diagPairOption(int opt, const char* value, diagOptions* o) {
  switch (opt) {
    case DIAG_OPT_SERVE: o->serve = 1; return -1;
    case DIAG_OPT_BW: o->bw = 1; return -1;
    case DIAG_OPT_PAIR: o->pair = value; return -1;
    case DIAG_OPT_PORT: return number("--port", value, 1, 65535, &o->port);
    case DIAG_OPT_CLUSTER: o->cluster = 1; return -1;
    case DIAG_OPT_RENDEZVOUS: o->rendezvous = value; return -1;
    case DIAG_OPT_RANK: return number("--rank", value, 0, 1023, &o->rank);
    case DIAG_OPT_SIZE: return number("--size", value, 2, 1024, &o->size);
    case DIAG_OPT_TOKEN:
      if (value[0] == '\0') return cliUsageError("railnet-diag", "--token wants a non-empty value");
      o->token = value;
      return -1;
    default: return number("--timeout", value, 1, 86400, &o->timeout);
  }
}

int diagPairMain(const diagOptions* o) {
  if (o->serve + !!o->pair + o->cluster > 1) {
    return cliUsageError("railnet-diag", "--serve, --pair and --cluster exclude each other");
  }
  if (o->cluster) return clusterMain(o);
  pairOptions p = {o->pair, o->port, o->timeout, o->bw, o->token ? pairTokenHash(o->token) : 0};
  if (o->serve) return pairServe(&p);
  jOpen(NULL, '{');
  jStr("tool", "railnet-diag");
  jStr("version", railnetVersion());
  char host[256] = "?";
  gethostname(host, sizeof(host));
  jStr("host", host);
  jStr("mode", "pair");
  pairClient(&p);
  sectionEnd();
  return reportFindings(0);
}
