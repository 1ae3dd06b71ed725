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
// `round`, if given, receives the round's prefix.
std::vector<std::string> store_all_gather(Store& store, const std::string& name, int rank,
                                          int size, const std::string& mine,
                                          std::chrono::milliseconds timeout,
                                          std::string* round = nullptr);

// Note [Failing together]
// When a set-up round fails on every rank for a reason the ranks read from the store (settings
// that differ, a segment one rank cannot open, world sizes that differ), the rank that hosts
// the store must not take it down before the others have read that reason: under
// init_process_group rank 0 hosts it, and its error unwinds the store with it, so a peer still
// reading got "the store server went away" instead of the reason. So each failing rank says it
// has read everything (done_reading), and rank 0 waits for the `peers` that will fail too, at
// most `limit`, before it raises. Neither ever throws: the error being raised is what counts.
void done_reading(Store& store, const std::string& round, int rank) noexcept;
void wait_until_read(Store& store, const std::string& round, const std::vector<int>& peers,
                     std::chrono::milliseconds limit) noexcept;

// 1, 2, ..., size - 1: whom rank 0 waits for when every rank fails.
std::vector<int> ranks_but_0(int size);

// What a failing round waits for its readers: a moment, not a timeout.
constexpr std::chrono::milliseconds kReadLimit = std::chrono::seconds(5);

}  // namespace dpx::detail
