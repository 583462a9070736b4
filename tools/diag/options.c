/* railnet-diag's command line: [--json] [--params] [--watch SECONDS] [--help] [--version],
 * --serve / --pair HOST[:P] with their options (pair_options.c), parsed with getopt_long
 * (tools/common/cli.h: usage errors, --version). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include "cli.h"
#include "diag.h"

#define TOOL "railnet-diag"

static void usage(FILE* f) {
  fprintf(f,
          "usage: railnet-diag [--json] [--params] [--watch SECONDS] [--help] [--version]\n"
          "       railnet-diag --serve [--port P] [--timeout S] [--token T]\n"
          "       railnet-diag --pair HOST[:P] [--port P] [--bw] [--token T] [--json]\n"
          "       railnet-diag --cluster [--rendezvous HOST:PORT] [--rank R --size N] [--token T] [--timeout S]\n"
          "                              [--json]\n"
          "What railnet sees on this host, what it would choose, and what is wrong with it.\n"
          "Read-only; no root needed.\n"
          "\n"
          "  (no option)      every section: interfaces and ncclFindInterfaces' choice, TCP port range,\n"
          "                   RDMA ports, GID tables and the chosen index, port error counters, RoCE\n"
          "                   congestion counters (hw_counters, ethtool -S: pause, discards, ECN, CNPs),\n"
          "                   GPUDirect, locked-memory limit, params not at their default\n"
          "  --params         only the parameter table: every variable railnet honours with its\n"
          "                   value, default, source (environment, user conf file, system conf\n"
          "                   file, default) and doc\n"
          "  --watch SECONDS  only the port error and congestion counters: sample them every second\n"
          "                   for SECONDS and print their growth (run it while a job runs)\n"
          "  --serve          answer --pair probes from another node for at most --timeout S seconds\n"
          "                   (default 120) on TCP port --port P (default 18517), then exit\n"
          "  --pair HOST[:P]  check TCP (every interface pair, both ways) and RDMA (every active port x\n"
          "                   GID, RC QP write + read) against a --serve on HOST, then print the\n"
          "                   settings to use on both nodes; exit 0 when the chosen paths work\n"
          "  --bw             with --pair: also a short bandwidth figure per working path between\n"
          "                   the chosen interfaces, and per working RDMA path of the GIDs railnet\n"
          "                   uses, through railnet's own Socket and IB transports\n"
          "  --cluster        one per node, started by the job's launcher (srun, mpirun, torchrun: rank and\n"
          "                   size from SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_RANK/_SIZE, PMI_RANK/\n"
          "                   PMI_SIZE, RANK/WORLD_SIZE; or --rank R --size N): the ranks meet at the\n"
          "                   rendezvous (--rendezvous HOST:PORT, else MASTER_ADDR:MASTER_PORT, else\n"
          "                   NCCL_COMM_ID) where rank 0 listens and waits --timeout S for them; every pair\n"
          "                   is checked once (--pair with --bw), N-1 rounds of disjoint pairs; rank 0\n"
          "                   prints the links and the verdict: slow ranks, broken links, dead ranks;\n"
          "                   every rank exits 0 when nothing is wrong, 1 when something is\n"
          "  --token T        --cluster: the job's token, the same on every rank; rank 0 refuses a JOIN\n"
          "                   without it (default: the launcher's job id, SLURM_JOB_ID,\n"
          "                   OMPI_MCA_ess_base_jobid or TORCHELASTIC_RUN_ID). --serve and --pair: the\n"
          "                   same T on both ends; --serve then serves only that --pair and probes\n"
          "                   every address it names. Without a token --serve serves anyone and probes\n"
          "                   only the client's own addresses (the one it connected from, and those\n"
          "                   on the server's subnets): routed rails are checked one way only\n"
          "  --json           the same facts as one JSON object on stdout\n"
          "  -h, --help       this text\n"
          "  --version        the version (railnet-diag VERSION)\n"
          "\n"
          "My job hangs or fails to connect -- the troubleshooting path:\n"
          "  1. railnet-diag on each node (as the job runs: same user, environment and container):\n"
          "     the interface and GID choice, the settings the plugin would refuse or cut, memlock\n"
          "  2. railnet-diag --serve on one node, railnet-diag --pair NODE1 on another: TCP on every\n"
          "     interface pair both ways and RDMA on every port x GID; the settings to use\n"
          "  3. railnet-diag --cluster under the job's launcher (srun/mpirun): every pair of nodes,\n"
          "     the bad node or link\n"
          "  then railnet-perf between two nodes with NCCL_DEBUG=INFO for the transport's own messages.\n"
          "\n"
          "Environment: SYSFS_PATH (default /sys) is where sysfs is read; NCCL_* variables and the\n"
          "conf files (NCCL_CONF_FILE or ~/.nccl.conf, then /etc/nccl.conf) as railnet reads them.\n"
          "Every problem line says its cause and its fix.\n"
          "Exit status: 0 nothing wrong (warnings allowed), 1 a problem was found, 2 usage error.\n");
}

/* Long options without a short form take values from 256 on. Add an option here with its
 * case in diagParseOptions and its line in usage(). */
enum { OPT_JSON = 256, OPT_PARAMS, OPT_WATCH, OPT_VERSION };
static const struct option longOptions[] = {
    {"json", no_argument, NULL, OPT_JSON},
    {"params", no_argument, NULL, OPT_PARAMS},
    {"watch", required_argument, NULL, OPT_WATCH},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
    {"serve", no_argument, NULL, DIAG_OPT_SERVE},
    {"pair", required_argument, NULL, DIAG_OPT_PAIR},
    {"port", required_argument, NULL, DIAG_OPT_PORT},
    {"timeout", required_argument, NULL, DIAG_OPT_TIMEOUT},
    {"bw", no_argument, NULL, DIAG_OPT_BW},
    {"cluster", no_argument, NULL, DIAG_OPT_CLUSTER},
    {"rendezvous", required_argument, NULL, DIAG_OPT_RENDEZVOUS},
    {"rank", required_argument, NULL, DIAG_OPT_RANK},
    {"size", required_argument, NULL, DIAG_OPT_SIZE},
    {"token", required_argument, NULL, DIAG_OPT_TOKEN},
    {NULL, 0, NULL, 0},
};

int diagParseOptions(int argc, char** argv, diagOptions* o) {
  o->json = 0;
  o->params = 0;
  o->watch = -1;
  o->serve = 0, o->pair = NULL, o->port = 18517, o->timeout = 120, o->bw = 0;
  o->cluster = 0, o->rendezvous = NULL, o->rank = -1, o->size = -1, o->token = NULL;
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":h", longOptions, NULL)) != -1) {
    switch (c) {
      case OPT_JSON: o->json = 1; break;
      case OPT_PARAMS: o->params = 1; break;
      case OPT_WATCH: {
        char* end;
        long v = strtol(optarg, &end, 10);
        if (end == optarg || *end || v <= 0 || v > INT_MAX)
          return cliUsageError(TOOL, "--watch wants a positive number of seconds, not '%s'", optarg);
        o->watch = (int)v;
        break;
      }
      case DIAG_OPT_SERVE:
      case DIAG_OPT_PAIR:
      case DIAG_OPT_PORT:
      case DIAG_OPT_TIMEOUT:
      case DIAG_OPT_BW:
      case DIAG_OPT_CLUSTER:
      case DIAG_OPT_RENDEZVOUS:
      case DIAG_OPT_RANK:
      case DIAG_OPT_SIZE:
      case DIAG_OPT_TOKEN: {
        int r = diagPairOption(c, optarg, o);
        if (r >= 0) return r;
        break;
      }
      case 'h': usage(stdout); return 0;
      case OPT_VERSION: return cliVersion(TOOL);
      default: return cliOptionError(TOOL, c, argv);
    }
  }
  return cliNoOperands(TOOL, argc, argv);
}
