// Everything dpx offers, in one include: each layer's headers, bottom up (docs/architecture.md).
// Left out: dpx/data/fashion_mnist.h (the example's data set), dpx/runtime/slurm.h (what srun
// tells a task; Env reads it for programs, dpxrun for its agents), and dpx/store/errors.h and
// dpx/comm/errors.h (older paths of dpx/errors.h).
#pragma once

#include "dpx/errors.h"

#include "dpx/runtime/cuda.h"
#include "dpx/runtime/env.h"
#include "dpx/runtime/files.h"
#include "dpx/runtime/memory_policy.h"
#include "dpx/runtime/process.h"

#include "dpx/data/distributed_sampler.h"

#include "dpx/store/store.h"
#include "dpx/store/types.h"

#include "dpx/observe/timeline.h"

#include "dpx/comm/diagnostics.h"
#include "dpx/comm/init.h"
#include "dpx/comm/process_group.h"
#include "dpx/comm/types.h"
#include "dpx/comm/work.h"

#include "dpx/data_parallel/data_parallel.h"
#include "dpx/data_parallel/data_parallel_convert.h"
#include "dpx/data_parallel/parallel_apply.h"
#include "dpx/data_parallel/replicate.h"
#include "dpx/data_parallel/scatter_gather.h"
#include "dpx/ddp/bucket_assignment.h"
#include "dpx/ddp/comm_hooks.h"
#include "dpx/ddp/ddp_base.h"
#include "dpx/ddp/ddp_options.h"
#include "dpx/ddp/ddp_stats.h"
#include "dpx/ddp/distributed_data_parallel.h"
#include "dpx/ddp/future.h"
#include "dpx/fsdp/fsdp_options.h"
#include "dpx/fsdp/fsdp_state_dict.h"
#include "dpx/fsdp/fully_shard.h"

#include "dpx/algorithms/local_sgd.h"
#include "dpx/algorithms/powersgd.h"
#include "dpx/algorithms/sync_batch_norm.h"
#include "dpx/algorithms/zero_redundancy_optimizer.h"
#include "dpx/amp/autocast.h"
#include "dpx/amp/grad_scaler.h"

#include "dpx/checkpoint/checkpoint_file.h"
#include "dpx/checkpoint/checkpointer.h"
#include "dpx/checkpoint/dcp.h"
#include "dpx/checkpoint/dcp_checkpointer.h"
#include "dpx/checkpoint/fsdp_checkpoint.h"
#include "dpx/checkpoint/python_format.h"
#include "dpx/checkpoint/training_checkpointer.h"
#include "dpx/ft/coordinator.h"
#include "dpx/ft/manager.h"
#include "dpx/launch/error_handler.h"
#include "dpx/launch/heartbeat.h"
#include "dpx/launch/spawn.h"
