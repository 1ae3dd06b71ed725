// `srun dpxrun ...`: one agent per node of a Slurm step (Note [srun dpxrun]).
#pragma once

#include <set>
#include <string>

#include "dpxrun/config.h"

namespace dpxrun {

// Note [srun dpxrun]
// Inside an srun step, what the command line (or PET_*) leaves unset comes from Slurm: --nnodes is
// the step's node count, and the static rendezvous runs on the step's first node (--master-addr),
// at --node-rank SLURM_NODEID, on MASTER_PORT or a port derived from the job id (the same on every
// node), with the job id as --rdzv-id. `given` holds the canonical names of the flags set
// explicitly. Returns a one-line notice of what was derived, or "" outside a Slurm step. Throws
// UsageError when the step runs more than one task per node.
std::string apply_slurm(Config& config, const std::set<std::string>& given);

}  // namespace dpxrun
