/* How a tool was started: the plugin NCCL would load and what the launcher says (rank, size,
 * where the ranks meet). */
#ifndef RAILNET_LAUNCH_H
#define RAILNET_LAUNCH_H
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* NCCL_NET_PLUGIN, or "railnet" when it is unset or empty. */
const char* railnetNetPluginName(void);
/* OMPI_COMM_WORLD_RANK, else PMI_RANK, else SLURM_PROCID, else RANK (torchrun); -1 when none
 * is set. */
int railnetLauncherRank(void);
/* The number of ranks of the launcher that gave the rank (OMPI_COMM_WORLD_SIZE, PMI_SIZE,
 * SLURM_NTASKS, WORLD_SIZE); without a rank, the first of them set; -1 when none is. */
int railnetLauncherSize(void);
/* "Open MPI", "PMI", "Slurm", "torchrun": the launcher that gave the rank; NULL for none. */
const char* railnetLauncherName(void);
/* Where the ranks meet, "HOST:PORT" into buf: MASTER_ADDR:MASTER_PORT (returns 1), else
 * NCCL_COMM_ID (2); 0 and "" when neither is set. */
int railnetLauncherRendezvous(char* buf, size_t size);
/* The job's id, which every rank of it shares, into buf: SLURM_JOB_ID, else
 * OMPI_MCA_ess_base_jobid, else TORCHELASTIC_RUN_ID; returns the variable's name, or NULL and
 * "" when none is set. */
const char* railnetLauncherJobId(char* buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
