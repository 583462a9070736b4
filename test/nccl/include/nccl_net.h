/*
 * What NCCL 2.30's plugin/rma and plugin/gin headers include as "nccl_net.h", for a client
 * built without CUDA: NCCL's own standalone net plugin headers (plugins/net/example/nccl/net.h,
 * which define ncclResult_t, ncclNetProperties_v12_t, ncclNetDeviceHandle_v11_t, NCCL_PTR_*,
 * the GIN signal operations) and nothing of railnet's.
 */
#ifndef RAILNET_TEST_NCCL_NET_SHIM_H
#define RAILNET_TEST_NCCL_NET_SHIM_H
#include <stdbool.h>
#include <stddef.h>
#include "net.h"
#endif
