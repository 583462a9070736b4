/*
 * railnet-perf: bandwidth and latency through the ncclNet API of any net plugin, in the
 * spirit of perftest's ib_write_bw / ib_write_lat (same columns).
 *
 *   railnet-perf --server [--port P | --handle-file F]          # receiver
 *   railnet-perf --client HOST [--port P] | --handle-file F      # sender, prints the tables
 *   railnet-perf --loopback                                      # both ends, two processes here
 *
 * The client drives: it sends its settings (sizes, iterations, tests, buffers per irecv,
 * comm pairs, CUDA) as the first message, so the server needs only --plugin/--dev. Data
 * goes client -> server over --comms comms; as many comms server -> client carry the acks
 * (with the receiver's byte counts) and the pongs of the latency test.
 * Run with --help for every option. The parts are in tools/perf/ (see perf.h).
 */
#include "perf.h"

/* One end on this host: the server hands out its listen handle, the client fetches it. */
static int runEnd(const size_t* sizes, int nSizes) {
  if (opt.cuda >= 0) cudaSetup(opt.cuda);
  loadPlugin();
  NETCALL(netInit());
  printDevice();
  if (opt.client) checkDevice(opt.recvs, opt.cuda >= 0);
  char handle[NCCL_NET_HANDLE_MAXSIZE] = {0};
  if (opt.server) {
    void* lc = NULL;
    NETCALL(netListen(opt.dev, handle, &lc));
    if (opt.handleFile) writeHandleFile(opt.handleFile, handle);
    else serveHandleTcp(handle);
    return runServer(lc);
  }
  if (opt.handleFile) readHandleFile(opt.handleFile, handle);
  else fetchHandleTcp(opt.client, handle);
  return runClient(handle, sizes, nSizes);
}

int main(int argc, char** argv) {
  size_t sizes[MAX_SIZES];
  int nSizes = 0;
  int rc = perfParseOptions(argc, argv, sizes, &nSizes);
  if (rc >= 0) return rc;
  if (opt.loopback) return runLoopback(sizes, nSizes);
  return runEnd(sizes, nSizes);
}
