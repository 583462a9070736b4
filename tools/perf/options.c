/* railnet-perf's command line (run with --help for every option), the sizes of the sweep,
 * and the role from a launcher's rank variables when no role is given. */
#include <stdlib.h>
#include <string.h>
#include "perf.h"

perfOptions opt = {NULL, 0, 0, 0, NULL, 18515, NULL, 65536, 65536, 1000, 20, 16, 1, 1, 0, 0, 60, 0, 0, 1, 1, -1};

static void usage(FILE* f) {
  fprintf(f,
          "usage: railnet-perf --server [options]          receiver\n"
          "       railnet-perf --client HOST [options]     sender; prints the tables\n"
          "       railnet-perf --loopback [options]        both ends on this host (two processes)\n"
          "Bandwidth and latency through the ncclNet API of a net plugin, like ib_write_bw/ib_write_lat.\n"
          "\n"
          "  --plugin NAME|PATH  plugin to dlopen: libnccl-net-NAME.so, else NAME itself (NCCL's rule);\n"
          "                      default $NCCL_NET_PLUGIN, else railnet. Any ABI v8..v12.\n"
          "  --abi V             use the plugin's ncclNetPlugin_vV (8..12; default the newest it exports)\n"
          "  --dev N             device index of the plugin (default 0)\n"
          "  --port P            TCP port of the handle exchange (default 18515)\n"
          "  --handle-file F     exchange the handle through file F instead (shared file system)\n"
          "  --peer HOST         under a launcher: the host of this client rank's server (rank-1)\n"
          "  -a, --all           sweep sizes 2 B .. 8 MiB (powers of two); see --min-size/--max-size\n"
          "  -s, --size B        one message size (default 65536; sizes take K, M, G suffixes)\n"
          "  --min-size B        smallest size of the sweep (with -a; default 2)\n"
          "  --max-size B        largest size of the sweep (with -a; default 8388608)\n"
          "  -n, --iters N       timed messages per size (default 1000)\n"
          "  --warmup N          untimed messages before each size (default 20)\n"
          "  --window N          messages in flight per comm in the bandwidth test (default 16, max %d)\n"
          "  --recvs N           buffers per irecv, NCCL's multi-receive (1..%d, default 1): the receiver\n"
          "                      posts one irecv of N buffers with tags 0..N-1, the sender one isend per\n"
          "                      tag; -s is the size of each buffer; the plugin's maxRecvs must allow N\n"
          "  --comms N           N send/recv comm pairs on the device (1..%d, default 1); message i goes\n"
          "                      to pair i mod N; results are the sum over all pairs\n"
          "  --use-cuda[=GPU]    buffers in GPU memory (default GPU 0), registered as NCCL_PTR_CUDA;\n"
          "                      loads libcuda.so.1 at run time; exit 2 if it or the GPU is missing\n"
          "  --bw | --lat        run only the bandwidth or only the latency test (default both)\n"
          "  --json | --csv      machine-readable results\n"
          "  --timeout S         give up when connecting, or one size of the sweep, takes longer than\n"
          "                      S seconds (default 60); on a terminal, sizes that run longer than 2 s\n"
          "                      show a progress line on stderr\n"
          "  -v, --verbose       the plugin's INFO lines on stderr\n"
          "  -h, --help          this text\n"
          "\n"
          "The client sends its settings (sizes, iterations, --window, --recvs, --comms, --use-cuda) to the\n"
          "server, so the server needs only --plugin/--dev/--port (and --use-cuda=GPU to pick its own GPU).\n"
          "Without --server/--client/--loopback, the rank from OMPI_COMM_WORLD_RANK, PMI_RANK or\n"
          "SLURM_PROCID picks the role: even ranks serve, odd ranks are clients of rank-1; pair k\n"
          "(ranks 2k, 2k+1) uses port P+k, or the file F.k with --handle-file F; clients need --peer\n"
          "or --handle-file. BW in MB/sec is 2^20 bytes per second (as perftest) and counts every buffer;\n"
          "MsgRate counts isends; latency is half the round trip of a ping-pong (N buffers each way).\n"
          "The receiver checks every size: the sizes test() reports for each buffer, their sum, and the\n"
          "contents of each buffer; --json/--csv rows carry its counts (recv_*). Exit status: 0 all right,\n"
          "1 a failure or a wrong count, 2 a usage error or a setting this host or plugin cannot run.\n",
          NCCL_NET_MAX_REQUESTS, MAX_RECVS, MAX_COMMS);
}

static size_t parseSize(const char* s) {
  char* end;
  double v = strtod(s, &end);
  if (end == s || v < 0) dieWith(2, "bad size '%s'", s);
  if (*end == 'k' || *end == 'K') v *= 1024;
  else if (*end == 'm' || *end == 'M') v *= 1048576;
  else if (*end == 'g' || *end == 'G') v *= 1073741824.0;
  return (size_t)v;
}

/* The options into opt, and those of the sweep and the launcher's peer into the rest;
 * returns -1 to go on, 0 after --help. */
static int parseArgs(int argc, char** argv, int* all, const char** peer, size_t* sweepMin, size_t* sweepMax) {
  for (int i = 1; i < argc; i++) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
#define NEEDV() \
  do { if (v == NULL) dieWith(2, "%s needs a value", a); i++; } while (0)
    if (!strcmp(a, "--server")) opt.server = 1;
    else if (!strcmp(a, "--client")) { NEEDV(); opt.client = v; }
    else if (!strcmp(a, "--loopback")) opt.loopback = 1;
    else if (!strcmp(a, "--plugin")) { NEEDV(); opt.plugin = v; }
    else if (!strcmp(a, "--dev")) { NEEDV(); opt.dev = atoi(v); }
    else if (!strcmp(a, "--abi")) {
      NEEDV();
      opt.abi = atoi(v);
      if (opt.abi < 8 || opt.abi > 12) dieWith(2, "--abi takes 8 ... 12, not '%s'", v);
    }
    else if (!strcmp(a, "--port")) { NEEDV(); opt.port = atoi(v); }
    else if (!strcmp(a, "--peer")) { NEEDV(); *peer = v; }
    else if (!strcmp(a, "--handle-file")) { NEEDV(); opt.handleFile = v; }
    else if (!strcmp(a, "-a") || !strcmp(a, "--all")) *all = 1;
    else if (!strcmp(a, "-s") || !strcmp(a, "--size")) { NEEDV(); opt.minSize = opt.maxSize = parseSize(v); }
    else if (!strcmp(a, "--min-size")) { NEEDV(); *sweepMin = parseSize(v); }
    else if (!strcmp(a, "--max-size")) { NEEDV(); *sweepMax = parseSize(v); }
    else if (!strcmp(a, "-n") || !strcmp(a, "--iters")) { NEEDV(); opt.iters = atoi(v); }
    else if (!strcmp(a, "--warmup")) { NEEDV(); opt.warmup = atoi(v); }
    else if (!strcmp(a, "--window")) { NEEDV(); opt.window = atoi(v); }
    else if (!strcmp(a, "--recvs")) {
      NEEDV();
      opt.recvs = atoi(v);
      if (opt.recvs < 1 || opt.recvs > MAX_RECVS) dieWith(2, "--recvs takes 1 ... %d, not '%s'", MAX_RECVS, v);
    }
    else if (!strcmp(a, "--comms")) {
      NEEDV();
      opt.comms = atoi(v);
      if (opt.comms < 1 || opt.comms > MAX_COMMS) dieWith(2, "--comms takes 1 ... %d, not '%s'", MAX_COMMS, v);
    }
    else if (!strcmp(a, "--use-cuda")) opt.cuda = 0;
    else if (!strncmp(a, "--use-cuda=", 11)) {
      char* end;
      long g = strtol(a + 11, &end, 10);
      if (end == a + 11 || *end || g < 0 || g > 1024) dieWith(2, "--use-cuda=GPU takes a GPU index, not '%s'", a + 11);
      opt.cuda = (int)g;
    }
    else if (!strcmp(a, "--bw")) opt.lat = 0;
    else if (!strcmp(a, "--lat")) opt.bw = 0;
    else if (!strcmp(a, "--json")) opt.json = 1;
    else if (!strcmp(a, "--csv")) opt.csv = 1;
    else if (!strcmp(a, "--timeout")) { NEEDV(); opt.timeoutSec = atoi(v); }
    else if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) opt.verbose = 1;
    else if (!strcmp(a, "-h") || !strcmp(a, "--help")) { usage(stdout); return 0; }
    else { usage(stderr); dieWith(2, "unknown option '%s'", a); }
  }
#undef NEEDV
  return -1;
}

/* -s alone, or with -a the powers of two from sweepMin to sweepMax; returns the count. */
static int sweepSizes(int all, size_t sweepMin, size_t sweepMax, size_t* sizes) {
  int n = 0;
  if (all) {
    if (sweepMin < 1 || sweepMin > sweepMax) dieWith(2, "--min-size must be >= 1 and <= --max-size");
    for (size_t s = sweepMin; s <= sweepMax && n < MAX_SIZES; s *= 2) sizes[n++] = s;
  } else {
    sizes[n++] = opt.minSize;
  }
  return n;
}

/* Without --server/--client/--loopback, under mpirun/srun: even ranks serve, odd ranks are
 * clients of rank-1; pair k uses port P+k, or the file F.k. */
static void roleFromRank(const char* peer) {
  int rank = railnetLauncherRank();
  if (!opt.server && !opt.client && !opt.loopback && rank >= 0) {
    opt.port += rank / 2;
    if (rank % 2 == 0) opt.server = 1;
    else if (peer) opt.client = peer;
    else if (!opt.handleFile) dieWith(2, "rank %d is a client: give --peer HOST (its server's host) or --handle-file", rank);
    if (opt.handleFile) {
      static char path[600];
      snprintf(path, sizeof(path), "%s.%d", opt.handleFile, rank / 2);
      opt.handleFile = path;
    }
    if (rank % 2 == 1 && !opt.client) opt.client = "";
  }
}

int perfParseOptions(int argc, char** argv, size_t* sizes, int* nSizes) {
  int all = 0;
  const char* peer = NULL;
  size_t sweepMin = 2, sweepMax = 8388608;
  int rc = parseArgs(argc, argv, &all, &peer, &sweepMin, &sweepMax);
  if (rc >= 0) return rc;
  if (opt.iters <= 0 || opt.warmup < 0 || opt.window <= 0 || opt.timeoutSec <= 0)
    dieWith(2, "iterations, window and timeout must be positive");
  if (!opt.bw && !opt.lat) dieWith(2, "--bw and --lat exclude each other; give neither to run both");
  if (opt.window > NCCL_NET_MAX_REQUESTS) opt.window = NCCL_NET_MAX_REQUESTS;
  *nSizes = sweepSizes(all, sweepMin, sweepMax, sizes);
  roleFromRank(peer);
  if (opt.server + (opt.client != NULL) + opt.loopback != 1) {
    usage(stderr);
    dieWith(2, "choose one of --server, --client HOST, --loopback (or run under mpirun/srun)");
  }
  return -1;
}
