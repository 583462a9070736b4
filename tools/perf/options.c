/* railnet-perf's command line (run with --help for every option; getopt_long, usage errors
 * and --version as tools/common/cli.h says), the sizes of the sweep, and the role from a
 * launcher's rank variables when no role is given. */
#include <stdlib.h>
#include "cli.h"
#include "json.h"
#include "perf.h"
#include "socket.h"

#define TOOL "railnet-perf"

perfOptions opt = {NULL, 0, 0, 0, NULL, 18515, NULL, 65536, 65536, 1000, 20, 16, 1, 1, 0, 0, 0, 0, 0, 1, 1, -1, 0};

/* The plugin's connect gives up after its retry budget with a WARN that names the interface
 * and the fix: wait longer than that, so that the WARN, not a bare timeout, reaches the user. */
static int defaultTimeout(void) {
  double budget = railnetSocketConnectBudgetSec() + 15;
  return budget < 60 ? 60 : budget > 86400 ? 86400 : (int)budget + 1;
}

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
          "  --recv-size B       bytes each irecv buffer posts when larger than the message (default: the\n"
          "                      message size), as NCCL's proxy posts its step buffers: e.g. 64K\n"
          "  --comms N           N send/recv comm pairs on the device (1..%d, default 1); message i goes\n"
          "                      to pair i mod N; results are the sum over all pairs\n"
          "  --use-cuda[=GPU]    buffers in GPU memory (default GPU 0), registered as NCCL_PTR_CUDA;\n"
          "                      loads libcuda.so.1 at run time; exit 2 if it or the GPU is missing\n"
          "  --bw | --lat        run only the bandwidth or only the latency test (default both)\n"
          "  --json | --csv      machine-readable results\n"
          "  --timeout S         give up when the handle exchange, connecting, or one size of the\n"
          "                      sweep takes longer than S seconds (default: the plugin's connect\n"
          "                      retry budget, from NCCL_SOCKET_RETRY_CNT and NCCL_SOCKET_RETRY_SLEEP_MSEC,\n"
          "                      plus 15 s, at least 60: 110 s at NCCL's defaults, so the plugin's own\n"
          "                      WARN comes first); on a terminal, sizes that run longer than 2 s show a\n"
          "                      progress line on stderr (here and now: %d s)\n"
          "  -v, --verbose       the plugin's INFO lines on stderr (as NCCL_DEBUG=INFO; NCCL_DEBUG=WARN\n"
          "                      or unset: its WARNs only, NCCL_DEBUG=NONE: nothing)\n"
          "  -h, --help          this text\n"
          "  --version           the version (railnet-perf VERSION)\n"
          "\n"
          "The client sends its settings (sizes, iterations, --window, --recvs, --recv-size, --comms, --use-cuda)\n"
          "to the server, so the server needs only --plugin/--dev/--port (and --use-cuda=GPU to pick its own\n"
          "GPU).\n"
          "Without --server/--client/--loopback, the rank from OMPI_COMM_WORLD_RANK, PMI_RANK or\n"
          "SLURM_PROCID picks the role: even ranks serve, odd ranks are clients of rank-1; pair k\n"
          "(ranks 2k, 2k+1) uses port P+k, or the file F.k with --handle-file F; clients need --peer\n"
          "or --handle-file. BW in MB/sec is 2^20 bytes per second (as perftest) and counts every buffer;\n"
          "MsgRate counts isends; latency is half the round trip of a ping-pong (N buffers each way).\n"
          "The receiver checks every size: the sizes test() reports for each buffer, their sum, and the\n"
          "contents of each buffer; --json/--csv rows carry its counts (recv_*). Exit status: 0 all right,\n"
          "1 a failure or a wrong count, 2 a usage error or a setting this host or plugin cannot run.\n",
          NCCL_NET_MAX_REQUESTS, MAX_RECVS, MAX_COMMS, defaultTimeout());
}

static size_t parseSize(const char* s) {
  char* end;
  double v = strtod(s, &end);
  if (end == s || v < 0) cliUsageExit(TOOL, "bad size '%s'", s);
  if (*end == 'k' || *end == 'K') v *= 1024;
  else if (*end == 'm' || *end == 'M') v *= 1048576;
  else if (*end == 'g' || *end == 'G') v *= 1073741824.0;
  if (v > (double)MAX_MSG_SIZE) cliUsageExit(TOOL, "size '%s' is larger than 1G, the most railnet-perf moves", s);
  return (size_t)v;
}

/* Long options without a short form take values from 256 on. */
enum {
  OPT_SERVER = 256, OPT_CLIENT, OPT_LOOPBACK, OPT_PLUGIN, OPT_DEV, OPT_ABI, OPT_PORT, OPT_PEER, OPT_HANDLE_FILE,
  OPT_MIN_SIZE, OPT_MAX_SIZE, OPT_WARMUP, OPT_WINDOW, OPT_RECVS, OPT_COMMS, OPT_USE_CUDA, OPT_BW, OPT_LAT, OPT_RECV_SIZE,
  OPT_JSON, OPT_CSV, OPT_TIMEOUT, OPT_VERSION
};
static const struct option longOptions[] = {
    {"server", no_argument, NULL, OPT_SERVER},
    {"client", required_argument, NULL, OPT_CLIENT},
    {"loopback", no_argument, NULL, OPT_LOOPBACK},
    {"plugin", required_argument, NULL, OPT_PLUGIN},
    {"dev", required_argument, NULL, OPT_DEV},
    {"abi", required_argument, NULL, OPT_ABI},
    {"port", required_argument, NULL, OPT_PORT},
    {"peer", required_argument, NULL, OPT_PEER},
    {"handle-file", required_argument, NULL, OPT_HANDLE_FILE},
    {"all", no_argument, NULL, 'a'},
    {"size", required_argument, NULL, 's'},
    {"min-size", required_argument, NULL, OPT_MIN_SIZE},
    {"max-size", required_argument, NULL, OPT_MAX_SIZE},
    {"iters", required_argument, NULL, 'n'},
    {"warmup", required_argument, NULL, OPT_WARMUP},
    {"window", required_argument, NULL, OPT_WINDOW},
    {"recvs", required_argument, NULL, OPT_RECVS},
    {"recv-size", required_argument, NULL, OPT_RECV_SIZE},
    {"comms", required_argument, NULL, OPT_COMMS},
    {"use-cuda", optional_argument, NULL, OPT_USE_CUDA},
    {"bw", no_argument, NULL, OPT_BW},
    {"lat", no_argument, NULL, OPT_LAT},
    {"json", no_argument, NULL, OPT_JSON},
    {"csv", no_argument, NULL, OPT_CSV},
    {"timeout", required_argument, NULL, OPT_TIMEOUT},
    {"verbose", no_argument, NULL, 'v'},
    {"help", no_argument, NULL, 'h'},
    {"version", no_argument, NULL, OPT_VERSION},
    {NULL, 0, NULL, 0},
};

/* The options into opt, and those of the sweep and the launcher's peer into the rest;
 * returns -1 to go on, 0 after --help or --version, 2 on a usage error. */
static int parseArgs(int argc, char** argv, int* all, const char** peer, size_t* sweepMin, size_t* sweepMax) {
  opterr = 0;
  int c;
  while ((c = getopt_long(argc, argv, ":as:n:vh", longOptions, NULL)) != -1) {
    const char* v = optarg;
    switch (c) {
      case OPT_SERVER: opt.server = 1; break;
      case OPT_CLIENT: opt.client = v; break;
      case OPT_LOOPBACK: opt.loopback = 1; break;
      case OPT_PLUGIN: opt.plugin = v; break;
      case OPT_DEV: opt.dev = atoi(v); break;
      case OPT_ABI:
        opt.abi = atoi(v);
        if (opt.abi < 8 || opt.abi > 12) return cliUsageError(TOOL, "--abi takes 8 ... 12, not '%s'", v);
        break;
      case OPT_PORT: opt.port = atoi(v); break;
      case OPT_PEER: *peer = v; break;
      case OPT_HANDLE_FILE: opt.handleFile = v; break;
      case 'a': *all = 1; break;
      case 's': opt.minSize = opt.maxSize = parseSize(v); break;
      case OPT_MIN_SIZE: *sweepMin = parseSize(v); break;
      case OPT_MAX_SIZE: *sweepMax = parseSize(v); break;
      case 'n': opt.iters = atoi(v); break;
      case OPT_WARMUP: opt.warmup = atoi(v); break;
      case OPT_WINDOW: opt.window = atoi(v); break;
      case OPT_RECVS:
        opt.recvs = atoi(v);
        if (opt.recvs < 1 || opt.recvs > MAX_RECVS)
          return cliUsageError(TOOL, "--recvs takes 1 ... %d, not '%s'", MAX_RECVS, v);
        break;
      case OPT_RECV_SIZE:
        opt.recvSize = parseSize(v);
        if (opt.recvSize > MAX_RECV_SIZE)
          return cliUsageError(TOOL, "--recv-size takes 0 ... %d bytes, not '%s'", MAX_RECV_SIZE, v);
        break;
      case OPT_COMMS:
        opt.comms = atoi(v);
        if (opt.comms < 1 || opt.comms > MAX_COMMS)
          return cliUsageError(TOOL, "--comms takes 1 ... %d, not '%s'", MAX_COMMS, v);
        break;
      case OPT_USE_CUDA:
        if (v == NULL) {
          opt.cuda = 0;
        } else {
          char* end;
          long g = strtol(v, &end, 10);
          if (end == v || *end || g < 0 || g > 1024)
            return cliUsageError(TOOL, "--use-cuda=GPU takes a GPU index, not '%s'", v);
          opt.cuda = (int)g;
        }
        break;
      case OPT_BW: opt.lat = 0; break;
      case OPT_LAT: opt.bw = 0; break;
      case OPT_JSON: opt.json = 1; break;
      case OPT_CSV: opt.csv = 1; break;
      case OPT_TIMEOUT:
        opt.timeoutSec = atoi(v);
        if (opt.timeoutSec <= 0) return cliUsageError(TOOL, "--timeout takes a positive number of seconds, not '%s'", v);
        break;
      case 'v': opt.verbose = 1; break;
      case 'h': usage(stdout); return 0;
      case OPT_VERSION: return cliVersion(TOOL);
      default: return cliOptionError(TOOL, c, argv);
    }
  }
  return cliNoOperands(TOOL, argc, argv);
}

/* -s alone, or with -a the powers of two from sweepMin to sweepMax; returns the count. */
static int sweepSizes(int all, size_t sweepMin, size_t sweepMax, size_t* sizes) {
  int n = 0;
  if (all) {
    if (sweepMin < 1 || sweepMin > sweepMax) cliUsageExit(TOOL, "--min-size must be >= 1 and <= --max-size");
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
    else if (!opt.handleFile)
      cliUsageExit(TOOL, "rank %d is a client: give --peer HOST (its server's host) or --handle-file", rank);
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
  jsonMode = opt.json;
  if (opt.timeoutSec == 0) opt.timeoutSec = defaultTimeout();
  if (opt.iters <= 0 || opt.warmup < 0 || opt.window <= 0 || opt.timeoutSec <= 0)
    cliUsageExit(TOOL, "iterations, window and timeout must be positive");
  if (!opt.bw && !opt.lat) cliUsageExit(TOOL, "--bw and --lat exclude each other; give neither to run both");
  if (opt.window > NCCL_NET_MAX_REQUESTS) opt.window = NCCL_NET_MAX_REQUESTS;
  *nSizes = sweepSizes(all, sweepMin, sweepMax, sizes);
  roleFromRank(peer);
  if (opt.server + (opt.client != NULL) + opt.loopback != 1)
    cliUsageExit(TOOL, "choose one of --server, --client HOST, --loopback (or run under mpirun/srun)");
  return -1;
}
