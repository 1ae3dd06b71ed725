// The data-parallel layer in one include.
#pragma once

#include "dpx/parallel/bucket_assignment.h"
#include "dpx/parallel/comm_hooks.h"
#include "dpx/parallel/data_parallel.h"
#include "dpx/parallel/ddp_options.h"
#include "dpx/parallel/ddp_stats.h"
#include "dpx/parallel/distributed_data_parallel.h"
#include "dpx/parallel/future.h"
#include "dpx/parallel/local_sgd.h"
#include "dpx/parallel/parallel_apply.h"
#include "dpx/parallel/powersgd.h"
#include "dpx/parallel/replicate.h"
#include "dpx/parallel/scatter_gather.h"
#include "dpx/parallel/sync_batch_norm.h"
#include "dpx/parallel/zero_redundancy_optimizer.h"
