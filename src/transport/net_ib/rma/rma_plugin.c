/*
 * The RMA table of libraries that link railnet (railnetGetRma(), include/railnet.h): version
 * 14 over rma.h's functions, its init asking for no GPUDirect RDMA (host memory is served).
 * NCCL's tables, exported from the net plugin, are in ext-net/rma_plugin.c.
 */
#include "rma.h"
#include "railnet.h"

static const ncclRma_v14_t railnetRma_v14 = RAILNET_RMA_V14_TABLE(railnetRmaInit);

const ncclRma_v14_t* railnetGetRma(void) { return &railnetRma_v14; }
