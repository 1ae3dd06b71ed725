// The data-parallel layer in one include.
#pragma once

#include "dpx/parallel/bucket_assignment.h"
#include "dpx/parallel/comm_hooks.h"
#include "dpx/parallel/ddp_options.h"
#include "dpx/parallel/ddp_stats.h"
#include "dpx/parallel/distributed_data_parallel.h"
#include "dpx/parallel/future.h"
