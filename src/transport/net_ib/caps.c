/*
 * mlx5 Data Direct and out-of-order receive queues: declared, reported as not available
 * (caps.h). NCCL asks mlx5dv for both (mlx5dv_get_data_direct_sysfs_path, the
 * ooo_recv_wrs_caps of mlx5dv_query_device); railnet does not link or load mlx5dv, so no
 * device has them here, mlx5 ones included.
 */
#include <stdio.h>
#include <string.h>
#include "caps.h"
#include "devices.h"
#include "param.h"

enum { P_DATA_DIRECT, P_OOO_RQ };
static const railnetParam capsParams[] = {
    [P_DATA_DIRECT] = RAILNET_PARAM_INT_DEF("NCCL_IB_DATA_DIRECT", 1, 0, 2,
                                            "mlx5 Data Direct DMA: 0 off, 1 the Data Direct NIC only, 2 both "
                                            "NICs (railnet: not available, no mlx5dv)"),
    [P_OOO_RQ] = RAILNET_PARAM_INT_DEF("NCCL_IB_OOO_RQ", 0, 0, 1,
                                       "1: out-of-order receive queues where the device has them (railnet: not "
                                       "available, no mlx5dv); forces ID-based matching and pre-posted receives"),
};
RAILNET_PARAM_TABLE("net_ib/caps", capsParams);

int railnetIbParamOooRq(void) { return (int)railnetParamInt(&capsParams[P_OOO_RQ]); }

static void devNames(char* buf, size_t len) {
  buf[0] = '\0';
  for (int d = 0; d < ncclNIbDevs; d++) {
    size_t l = strlen(buf);
    snprintf(buf + l, len - l, "%s%s:%d", d ? ", " : "", ncclIbDevs[d].devName, ncclIbDevs[d].portNum);
  }
}

void railnetIbReportProviderCaps(void) {
  if (ncclNIbDevs <= 0) return;
  char names[1024];
  devNames(names, sizeof(names));
  int64_t dd = railnetParamInt(&capsParams[P_DATA_DIRECT]);
  if (dd > 0 && railnetParamSourceOf(&capsParams[P_DATA_DIRECT]) != RAILNET_SRC_DEFAULT)
    INFO(NCCL_INIT | NCCL_NET, "NET/IB : NCCL_IB_DATA_DIRECT=%d: mlx5 Data Direct DMA is not available on %s "
         "(railnet has no mlx5dv); the devices are used through their PCI path", (int)dd, names);
  else if (dd > 0)
    TRACE(NCCL_NET, "NET/IB : no device supports Data Direct DMA (%s)", names);
  if (railnetIbParamOooRq())
    INFO(NCCL_INIT | NCCL_NET, "NET/IB : NCCL_IB_OOO_RQ=1: out-of-order receive queues are not available on %s "
         "(they need mlx5 OOO receive WRs through mlx5dv, which railnet does not have); the receive queues stay "
         "in order", names);
}
