/* How a tool was started: the plugin NCCL would load and the launcher's rank. */
#ifndef RAILNET_LAUNCH_H
#define RAILNET_LAUNCH_H

#ifdef __cplusplus
extern "C" {
#endif

/* NCCL_NET_PLUGIN, or "railnet" when it is unset or empty. */
const char* railnetNetPluginName(void);
/* OMPI_COMM_WORLD_RANK, else PMI_RANK, else SLURM_PROCID; -1 when none is set. */
int railnetLauncherRank(void);

#ifdef __cplusplus
}
#endif
#endif
