// Rounds through the store: how the ranks of a group that is being set up exchange what each
// knows (host identities, placements, settings, a shared-memory file's name).
//
// Note [Store rounds]
// Every group built on one store (a job may build several, and build one again after a
// failure) must read only its own round's keys, and no rank can know how many rounds came
// before. So each rank counts its own rounds of a name (store.add on "<name>/gen/<rank>"): the
// ranks of one group call in the same order, so the n-th call of every rank gets n, and
// "<name>/<n>/" is that round's private prefix.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "dpx/store/store.h"

namespace dpx::detail {

// This rank's next round of `name`: the prefix "<name>/<n>/" its keys go under.
std::string next_round(Store& store, const std::string& name, int rank);

// A round in which every rank publishes `mine` and gets every rank's value, in rank order.
// Waits at most `timeout` for the others (TimeoutError). With one rank, no store traffic.
std::vector<std::string> store_all_gather(Store& store, const std::string& name, int rank,
                                          int size, const std::string& mine,
                                          std::chrono::milliseconds timeout);

}  // namespace dpx::detail
