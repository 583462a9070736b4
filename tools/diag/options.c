/* railnet-diag's command line: [--json] [--params] [--watch SECONDS] [--help]. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "diag.h"

static void usage(FILE* f) {
  fprintf(f,
          "usage: railnet-diag [--json] [--params] [--watch SECONDS] [--help]\n"
          "       railnet-diag --serve [--port P] [--timeout S]\n"
          "       railnet-diag --pair HOST[:P] [--port P] [--bw] [--json]\n"
          "What railnet sees on this host, what it would choose, and what is wrong with it.\n"
          "Read-only; no root needed.\n"
          "\n"
          "  (no option)      every section: interfaces and ncclFindInterfaces' choice, TCP port range,\n"
          "                   RDMA ports, GID tables and the chosen index, port error counters,\n"
          "                   GPUDirect, locked-memory limit, params not at their default\n"
          "  --params         only the parameter table: every variable railnet honours with its\n"
          "                   value, default, source (environment, user conf file, system conf\n"
          "                   file, default) and doc\n"
          "  --watch SECONDS  only the port error counters: sample them every second for SECONDS\n"
          "                   and print their growth (run it while a job runs)\n"
          "  --serve          answer --pair probes from another node for at most --timeout S seconds\n"
          "                   (default 120) on TCP port --port P (default 18517), then exit\n"
          "  --pair HOST[:P]  check TCP (every interface pair, both ways) and RDMA (every active port x\n"
          "                   GID, RC QP write + read) against a --serve on HOST, then print the\n"
          "                   settings to use on both nodes; exit 0 when the chosen paths work\n"
          "  --bw             with --pair: also a short bandwidth figure per working chosen path,\n"
          "                   through railnet's own Socket and IB transports\n"
          "  --json           the same facts as one JSON object on stdout\n"
          "  --help           this text\n"
          "\n"
          "Environment: SYSFS_PATH (default /sys) is where sysfs is read; NCCL_* variables and the\n"
          "conf files (NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf) as railnet reads them.\n"
          "Every problem line says its cause and its fix.\n"
          "Exit status: 0 nothing wrong (warnings allowed), 1 a problem was found, 2 usage error.\n");
}

int diagParseOptions(int argc, char** argv, diagOptions* o) {
  o->json = 0;
  o->params = 0;
  o->watch = -1;
  o->serve = 0, o->pair = NULL, o->port = 18517, o->timeout = 120, o->bw = 0;
  for (int i = 1; i < argc; i++) {
    int pr = diagParsePairOption(argc, argv, &i, o);
    if (pr >= 0) return pr;
    if (pr == -2) continue;
    if (!strcmp(argv[i], "--json")) o->json = 1;
    else if (!strcmp(argv[i], "--params")) o->params = 1;
    else if (!strcmp(argv[i], "--watch") && i + 1 < argc) {
      char* end;
      o->watch = (int)strtol(argv[++i], &end, 10);
      if (*end || o->watch <= 0) {
        fprintf(stderr, "railnet-diag: --watch wants a positive number of seconds, not '%s'\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "railnet-diag: unknown option '%s'\n", argv[i]);
      usage(stderr);
      return 2;
    }
  }
  return -1;
}
