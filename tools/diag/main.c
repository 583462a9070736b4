/*
 * railnet-diag: what railnet sees on this host, what it would choose, and what is wrong.
 * Read-only; needs no root. Every problem is printed with its cause and its fix.
 *
 *   railnet-diag [--json] [--params] [--watch SECONDS] [--help] [--version]
 *
 * Sections: interfaces (and ncclFindInterfaces' choice), TCP ports, RDMA ports, GID tables,
 * port error counters, RoCE congestion counters, GPUDirect, locked memory, settings. sysfs is
 * read under $SYSFS_PATH (default /sys), as libibverbs and railnet's IB transport do.
 * Exit status: 0 nothing wrong (warnings allowed), 1 a problem was found, 2 usage error.
 * The parts are in tools/diag/ (see diag.h).
 */
#include <unistd.h>
#include "debug.h" /* railnetSetLogger */
#include "diag.h"
#include "param.h"
#include "railnet.h"

static void noLog(ncclDebugLogLevel level, unsigned long flags, const char* file, int line, const char* fmt, ...) {
  (void)level, (void)flags, (void)file, (void)line, (void)fmt;
}

/* Every section, or only the param table (--params), or only the counters (--watch). */
static void runSections(const diagOptions* o, const char* host) {
  if (o->watch > 0) {
    watchCounters(o->watch);
  } else if (o->params) {
    text("railnet-diag %s on %s\n", railnetVersion(), host);
    sectionParams(1);
  } else {
    text("railnet-diag %s on %s\n", railnetVersion(), host);
    sectionInterfaces();
    sectionPorts();
    sectionRdma();
    sectionGids();
    sectionCounters();
    sectionCongestion();
    sectionGpuDirect();
    sectionMemlock();
    sectionParams(0);
  }
  sectionEnd();
}

int main(int argc, char** argv) {
  diagOptions o;
  int rc = diagParseOptions(argc, argv, &o);
  if (rc >= 0) return rc;
  jsonMode = o.json;
  const char* sys = railnetParamRaw("SYSFS_PATH", NULL); /* as the IB transport reads it */
  if (sys && sys[0]) sfmt(sysfsRoot, sizeof(sysfsRoot), "%s", sys);
  if (jsonMode) railnetSetLogger(noLog); /* keep stdout pure JSON */
  if (o.serve || o.pair || o.cluster) return diagPairMain(&o);

  jOpen(NULL, '{');
  jStr("tool", "railnet-diag");
  jStr("version", railnetVersion());
  if (!o.params) scanPorts();
  char host[256] = "?";
  gethostname(host, sizeof(host));
  jStr("host", host);
  runSections(&o, host);
  return reportFindings(o.watch);
}
