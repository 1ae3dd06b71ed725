// Who takes part in a group: the first set-up round of every group compares the world size
// each rank was started with (Note [Members]), and init_process_group claims each rank once.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "dpx/store/store.h"

namespace dpx::detail {

// Note [Members]
// Ranks started with different world sizes wait for different peers: with rank 0 told 2 and
// the others 3, rank 0 set a 2-rank group up with rank 1 and went on alone, while the others
// waited for it until the timeout and beyond, and no error named the cause. So before placement,
// settings or any backend:
//  1. every rank publishes "<world size> <host>:<pid>" under members/<n>/<rank> (a round,
//     Note [Store rounds]) and waits for the keys of the ranks of its own world size;
//  2. a rank that reads another world size fills the keys that nobody published, up to the
//     largest world size it read, with a mark naming what it read, so that a rank waiting for
//     ranks that do not exist stops waiting;
//  3. every rank that read another world size, or a mark, raises DistributedError naming both
//     sizes; rank 0 first waits until the others have read (Note [Failing together]), and up to
//     a second for ranks it marked, which may only be late to start.
// A rank whose world size its peers share but that lies outside it (rank 3 of 3) is refused
// where rank and world size are read (init_process_group, new_process_group).
void check_members(Store& store, int rank, int size, std::chrono::milliseconds timeout,
                   const std::string& where);

// Claims `rank` for this process in the job's store: a second process started with the same
// rank fails at once, naming the process that has it. Only for a store made for this run of the
// job (rank 0's, or a file): a launcher's agent store outlives the workers it saw, whose ranks
// new workers take over after a membership change.
void claim_rank(Store& store, int rank, const std::string& where);

// This rank's place in `members` (a sub-group's members as ranks of a world of `world_size`, in
// group-rank order). Throws std::invalid_argument naming what is wrong with the list: empty, a
// rank out of range or named twice, or this rank not in it (only members make a sub-group).
int place_in(const std::vector<int>& members, int rank, int world_size, const std::string& where);

// The store prefix that keeps a sub-group's keys apart from every other member list's.
std::string members_key(const std::vector<int>& members);

}  // namespace dpx::detail
