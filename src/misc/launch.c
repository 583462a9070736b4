/* What the tools read about how they were started: the net plugin NCCL would load, and the
 * rank, size and rendezvous a launcher (Open MPI, an MPI with PMI, Slurm, torchrun) gave this
 * process. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "launch.h"
#include "param.h"

enum {
  P_NET_PLUGIN,
  P_OMPI_RANK, P_PMI_RANK, P_SLURM_RANK, P_TORCH_RANK,
  P_OMPI_SIZE, P_PMI_SIZE, P_SLURM_SIZE, P_TORCH_SIZE,
  P_MASTER_ADDR, P_MASTER_PORT,
  P_SLURM_JOB, P_OMPI_JOB, P_TORCH_JOB
};
static const railnetParam launchParams[] = {
    [P_NET_PLUGIN] = RAILNET_PARAM_STR_DEF("NCCL_NET_PLUGIN", NULL,
                                           "Net plugin NCCL loads (railnet: libnccl-net-railnet.so); "
                                           "railnet-perf and railnet-demo load the same one"),
    [P_OMPI_RANK] = RAILNET_PARAM_INT_DEF("OMPI_COMM_WORLD_RANK", -1, -1, INT32_MAX,
                                          "Rank given by Open MPI's mpirun (railnet-perf's role, railnet-diag --cluster)"),
    [P_PMI_RANK] = RAILNET_PARAM_INT_DEF("PMI_RANK", -1, -1, INT32_MAX,
                                         "Rank given by a PMI launcher such as MPICH's (railnet-perf's role, "
                                         "railnet-diag --cluster)"),
    [P_SLURM_RANK] = RAILNET_PARAM_INT_DEF("SLURM_PROCID", -1, -1, INT32_MAX,
                                           "Rank given by Slurm's srun (railnet-perf's role, railnet-diag --cluster)"),
    [P_TORCH_RANK] = RAILNET_PARAM_INT_DEF("RANK", -1, -1, INT32_MAX,
                                           "Rank given by torchrun (railnet-diag --cluster)"),
    [P_OMPI_SIZE] = RAILNET_PARAM_INT_DEF("OMPI_COMM_WORLD_SIZE", -1, -1, INT32_MAX,
                                          "Number of ranks Open MPI's mpirun started (railnet-diag --cluster)"),
    [P_PMI_SIZE] = RAILNET_PARAM_INT_DEF("PMI_SIZE", -1, -1, INT32_MAX,
                                         "Number of ranks a PMI launcher started (railnet-diag --cluster)"),
    [P_SLURM_SIZE] = RAILNET_PARAM_INT_DEF("SLURM_NTASKS", -1, -1, INT32_MAX,
                                           "Number of tasks Slurm's srun started (railnet-diag --cluster)"),
    [P_TORCH_SIZE] = RAILNET_PARAM_INT_DEF("WORLD_SIZE", -1, -1, INT32_MAX,
                                           "Number of ranks torchrun started (railnet-diag --cluster)"),
    [P_MASTER_ADDR] = RAILNET_PARAM_STR_DEF("MASTER_ADDR", NULL,
                                            "torchrun's rendezvous host: railnet-diag --cluster meets there (rank 0 "
                                            "listens) without --rendezvous"),
    [P_MASTER_PORT] = RAILNET_PARAM_INT_DEF("MASTER_PORT", -1, -1, 65535,
                                            "torchrun's rendezvous port (with MASTER_ADDR)"),
    [P_SLURM_JOB] = RAILNET_PARAM_STR_DEF("SLURM_JOB_ID", NULL,
                                          "Slurm's job id: railnet-diag --cluster's job token without --token"),
    [P_OMPI_JOB] = RAILNET_PARAM_STR_DEF("OMPI_MCA_ess_base_jobid", NULL,
                                         "Open MPI's job id: railnet-diag --cluster's job token without --token"),
    [P_TORCH_JOB] = RAILNET_PARAM_STR_DEF("TORCHELASTIC_RUN_ID", NULL,
                                          "torchrun's run id (--rdzv-id): railnet-diag --cluster's job token "
                                          "without --token"),
};
RAILNET_PARAM_TABLE("launch", launchParams);

const char* railnetNetPluginName(void) {
  const char* name = railnetParamStr(&launchParams[P_NET_PLUGIN]);
  return name != NULL && name[0] != '\0' ? name : "railnet";
}

/* The first of params first..last that is set (>= 0), the index of its param in *which. */
static int firstSet(int first, int last, int* which) {
  for (int p = first; p <= last; p++) {
    int64_t v = railnetParamInt(&launchParams[p]);
    if (v >= 0) {
      if (which) *which = p;
      return (int)v;
    }
  }
  return -1;
}

int railnetLauncherRank(void) { return firstSet(P_OMPI_RANK, P_TORCH_RANK, NULL); }

int railnetLauncherSize(void) {
  int which = -1;
  if (firstSet(P_OMPI_RANK, P_TORCH_RANK, &which) < 0) return firstSet(P_OMPI_SIZE, P_TORCH_SIZE, NULL);
  /* the size of the launcher that gave the rank */
  return (int)railnetParamInt(&launchParams[which - P_OMPI_RANK + P_OMPI_SIZE]);
}

const char* railnetLauncherName(void) {
  static const char* names[] = {"Open MPI", "PMI", "Slurm", "torchrun"};
  int which = -1;
  return firstSet(P_OMPI_RANK, P_TORCH_RANK, &which) < 0 ? NULL : names[which - P_OMPI_RANK];
}

int railnetLauncherRendezvous(char* buf, size_t size) {
  const char* addr = railnetParamStr(&launchParams[P_MASTER_ADDR]);
  int64_t port = railnetParamInt(&launchParams[P_MASTER_PORT]);
  if (addr && addr[0] && port > 0) {
    snprintf(buf, size, strchr(addr, ':') ? "[%s]:%d" : "%s:%d", addr, (int)port);
    return 1;
  }
  const char* id = railnetParamStrByName("NCCL_COMM_ID");
  if (id && id[0]) {
    snprintf(buf, size, "%s", id);
    return 2;
  }
  if (size) buf[0] = '\0';
  return 0;
}

const char* railnetLauncherJobId(char* buf, size_t size) {
  static const char* names[] = {"SLURM_JOB_ID", "OMPI_MCA_ess_base_jobid", "TORCHELASTIC_RUN_ID"};
  for (int p = P_SLURM_JOB; p <= P_TORCH_JOB; p++) {
    const char* v = railnetParamStr(&launchParams[p]);
    if (v && v[0]) {
      snprintf(buf, size, "%s", v);
      return names[p - P_SLURM_JOB];
    }
  }
  if (size) buf[0] = '\0';
  return NULL;
}
