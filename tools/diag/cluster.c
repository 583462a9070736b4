/* railnet-diag --cluster (cluster.h): who this process is (--rank/--size, else the
 * launcher's variables), where the ranks meet (--rendezvous, else MASTER_ADDR:MASTER_PORT,
 * else NCCL_COMM_ID), then rank 0 coordinates and the others follow; every rank serves its
 * partners' pair checks all along. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "cli.h"
#include "cluster.h"
#include "diag.h"
#include "launch.h"
#include "railnet.h"

/* Rank, size and rendezvous from the options, else the launcher; -1 to go on, else the exit status. */
static int whoAmI(const diagOptions* d, clusterOptions* o) {
  memset(o, 0, sizeof(*o));
  o->rank = d->rank >= 0 ? d->rank : railnetLauncherRank();
  o->size = d->size > 0 ? d->size : railnetLauncherSize();
  o->launcher = d->rank >= 0 ? NULL : railnetLauncherName();
  o->joinSec = d->timeout;
  if (o->rank < 0 || o->size < 2)
    return cliUsageError("railnet-diag", "--cluster needs its rank and the number of ranks: start it with srun, "
                                         "mpirun or torchrun (one per node), or pass --rank R --size N");
  if (o->size > RAILNET_CLUSTER_MAX_RANKS || o->rank >= o->size)
    return cliUsageError("railnet-diag", "--cluster: rank %d of %d ranks (at most %d)", o->rank, o->size,
                         RAILNET_CLUSTER_MAX_RANKS);
  char job[256];
  const char* from = d->token ? "--token" : railnetLauncherJobId(job, sizeof(job));
  if (from) o->token = pairTokenHash(d->token ? d->token : job), o->tokenFrom = from;
  if (d->rendezvous) snprintf(o->rendezvous, sizeof(o->rendezvous), "%s", d->rendezvous);
  else railnetLauncherRendezvous(o->rendezvous, sizeof(o->rendezvous));
  char host[256];
  int port;
  if (clusterSplitHostPort(o->rendezvous, host, sizeof(host), &port))
    return cliUsageError("railnet-diag", "--cluster needs a rendezvous HOST:PORT where rank 0 listens: "
                                         "--rendezvous, or MASTER_ADDR and MASTER_PORT, or NCCL_COMM_ID%s%s",
                         o->rendezvous[0] ? "; not " : "", o->rendezvous);
  return -1;
}

int clusterMain(const diagOptions* d) {
  clusterOptions o;
  int rc = whoAmI(d, &o);
  if (rc >= 0) return rc;
  pairProgressOff = 1;
  pairServer* sv = pairServerStart();
  if (sv == NULL) {
    fprintf(stderr, "railnet-diag --cluster: rank %d cannot listen for its partners' checks: %s\n", o.rank,
            strerror(errno));
    return 1;
  }
  pairServerSetJobToken(sv, o.token);
  if (o.rank == 0) {
    jOpen(NULL, '{');
    jStr("tool", "railnet-diag");
    jStr("version", railnetVersion());
    jStr("mode", "cluster");
    text("railnet-diag %s --cluster\n", railnetVersion());
    rc = clusterCoordinate(&o, sv);
  } else {
    rc = clusterFollow(&o, sv);
  }
  pairServerStop(sv);
  return rc;
}
