// Everything dpx offers, in one include.
#pragma once

#include "dpx/checkpoint/checkpoint_file.h"
#include "dpx/checkpoint/checkpointer.h"
#include "dpx/comm/errors.h"
#include "dpx/comm/init.h"
#include "dpx/comm/process_group.h"
#include "dpx/comm/store.h"
#include "dpx/comm/types.h"
#include "dpx/comm/work.h"
#include "dpx/data/distributed_sampler.h"
#include "dpx/data/fashion_mnist.h"
#include "dpx/env.h"
#include "dpx/launch/error_handler.h"
#include "dpx/launch/heartbeat.h"
#include "dpx/launch/spawn.h"
#include "dpx/memory_policy.h"
#include "dpx/parallel/parallel.h"
