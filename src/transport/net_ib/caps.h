/*
 * Provider features of NCCL 2.30's net_ib that railnet does not have (it has no mlx5dv):
 * mlx5 Data Direct DMA (NCCL_IB_DATA_DIRECT) and out-of-order receive queues
 * (NCCL_IB_OOO_RQ). Both are read with NCCL's defaults and reported, once per discovery, as
 * not available on the devices found; NCCL_IB_OOO_RQ=1 still has NCCL's side effects on the
 * receive path (ID-based matching, pre-posted receives: matching.c).
 */
#ifndef RAILNET_NET_IB_CAPS_H
#define RAILNET_NET_IB_CAPS_H

#ifdef __cplusplus
extern "C" {
#endif

/* After discovery (caller holds ncclIbLock): what of these features the devices have. */
void railnetIbReportProviderCaps(void);
/* NCCL_IB_OOO_RQ as set (0 or 1). */
int railnetIbParamOooRq(void);

#ifdef __cplusplus
}
#endif
#endif
