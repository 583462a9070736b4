/* railnet-diag's options for the checks between two nodes (--serve, --pair HOST[:P],
 * --port P, --timeout S, --bw) and the entry into them. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "diag.h"
#include "pair.h"
#include "railnet.h"

static int number(const char* opt, const char* v, int lo, int hi, int* out) {
  char* end;
  long n = strtol(v, &end, 10);
  if (*v == '\0' || *end || n < lo || n > hi) {
    fprintf(stderr, "railnet-diag: %s wants a number from %d to %d, not '%s'\n", opt, lo, hi, v);
    return 2;
  }
  *out = (int)n;
  return -1;
}

int diagParsePairOption(int argc, char** argv, int* i, diagOptions* o) {
  const char* a = argv[*i];
  int takesValue = !strcmp(a, "--pair") || !strcmp(a, "--port") || !strcmp(a, "--timeout");
  if (!strcmp(a, "--serve") || !strcmp(a, "--bw")) {
    *(a[2] == 's' ? &o->serve : &o->bw) = 1;
    return -2;
  }
  if (!takesValue) return -1;
  if (*i + 1 >= argc) {
    fprintf(stderr, "railnet-diag: %s needs a value\n", a);
    return 2;
  }
  const char* v = argv[++*i];
  int r = -1;
  if (!strcmp(a, "--pair")) o->pair = v;
  else if (!strcmp(a, "--port")) r = number(a, v, 1, 65535, &o->port);
  else r = number(a, v, 1, 86400, &o->timeout);
  return r >= 0 ? r : -2;
}

int diagPairMain(const diagOptions* o) {
  if (o->serve && o->pair) {
    fprintf(stderr, "railnet-diag: --serve and --pair exclude each other (one runs on each node)\n");
    return 2;
  }
  pairOptions p = {o->pair, o->port, o->timeout, o->bw};
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
