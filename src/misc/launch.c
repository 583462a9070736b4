/* What the tools read about how they were started: the net plugin NCCL would load, and the
 * rank a launcher (Open MPI, an MPI with PMI, Slurm) gave this process. */
#include <stdlib.h>
#include "launch.h"
#include "param.h"

enum { P_NET_PLUGIN, P_OMPI_RANK, P_PMI_RANK, P_SLURM_RANK };
static const railnetParam launchParams[] = {
    [P_NET_PLUGIN] = RAILNET_PARAM_STR_DEF("NCCL_NET_PLUGIN", NULL,
                                           "Net plugin NCCL loads (railnet: libnccl-net-railnet.so); "
                                           "railnet-perf and railnet-demo load the same one"),
    [P_OMPI_RANK] = RAILNET_PARAM_INT_DEF("OMPI_COMM_WORLD_RANK", -1, -1, INT32_MAX,
                                          "Rank given by Open MPI's mpirun (railnet-perf's role)"),
    [P_PMI_RANK] = RAILNET_PARAM_INT_DEF("PMI_RANK", -1, -1, INT32_MAX,
                                         "Rank given by a PMI launcher such as MPICH's (railnet-perf's role)"),
    [P_SLURM_RANK] = RAILNET_PARAM_INT_DEF("SLURM_PROCID", -1, -1, INT32_MAX,
                                           "Rank given by Slurm's srun (railnet-perf's role)"),
};
RAILNET_PARAM_TABLE("launch", launchParams);

const char* railnetNetPluginName(void) {
  const char* name = railnetParamStr(&launchParams[P_NET_PLUGIN]);
  return name != NULL && name[0] != '\0' ? name : "railnet";
}

int railnetLauncherRank(void) {
  for (int p = P_OMPI_RANK; p <= P_SLURM_RANK; p++) {
    int64_t r = railnetParamInt(&launchParams[p]);
    if (r >= 0) return (int)r;
  }
  return -1;
}
