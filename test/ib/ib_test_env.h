// Set-up shared by the soft-RoCE fixtures that move data between two RDMA devices.
// Include after test_util.h, ibvwrap.h and net_ib/common.h.
#pragma once
#include <string>

// Forgets earlier discovery, checks that libibverbs lists two devices and clears the IB
// variables a test may have set; returns "" or why the test must be skipped.
inline std::string ibTwoDevicesOrWhy(ScopedEnv& env) {
  railnetIbResetDevices();
  if (wrap_ibv_symbols() != ncclSuccess) return "libibverbs is not installed";
  struct ibv_device** list = nullptr;
  int n = 0;
  bool two = wrap_ibv_get_device_list(&list, &n) == ncclSuccess && list != nullptr && n >= 2;
  if (list) wrap_ibv_free_device_list(list);
  if (!two) return "needs two RDMA devices (soft-RoCE rxe0/rxe1 run in the tier's VM)";
  for (const char* v : {"NCCL_IB_HCA", "NCCL_IB_GID_INDEX", "NCCL_IB_QPS_PER_CONNECTION",
                        "NCCL_IB_SPLIT_DATA_ON_QPS", "NCCL_IB_DISABLE", "SYSFS_PATH", "NCCL_IB_USE_INLINE"})
    env.unset(v);
  return "";
}
