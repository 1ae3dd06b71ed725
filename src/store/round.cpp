#include "store/round.h"

namespace dpx::detail {

std::string next_round(Store& store, const std::string& name, int rank) {
  return name + "/" + std::to_string(store.add(name + "/gen/" + std::to_string(rank), 1)) + "/";
}

std::vector<std::string> store_all_gather(Store& store, const std::string& name, int rank,
                                          int size, const std::string& mine,
                                          std::chrono::milliseconds timeout,
                                          std::string* round) {
  if (size == 1) return {mine};
  const std::string prefix = next_round(store, name, rank);
  if (round != nullptr) *round = prefix;
  store.set(prefix + std::to_string(rank), mine);
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(prefix + std::to_string(r));
  store.wait(keys, timeout);
  std::vector<std::string> all;
  for (const auto& k : keys) all.push_back(k == keys[rank] ? mine : store.get(k));
  return all;
}

std::vector<int> ranks_but_0(int size) {
  std::vector<int> ranks;
  for (int r = 1; r < size; ++r) ranks.push_back(r);
  return ranks;
}

void done_reading(Store& store, const std::string& round, int rank) noexcept {
  try {
    store.set(round + "read/" + std::to_string(rank), "1");
  } catch (const std::exception&) {
    // The store is gone already: nobody waits for this mark.
  }
}

void wait_until_read(Store& store, const std::string& round, const std::vector<int>& peers,
                     std::chrono::milliseconds limit) noexcept {
  std::vector<std::string> keys;
  for (int r : peers) keys.push_back(round + "read/" + std::to_string(r));
  try {
    if (!keys.empty()) store.wait(keys, limit);
  } catch (const std::exception&) {
    // A peer that died or is stuck does not hold this rank's error back longer.
  }
}

}  // namespace dpx::detail
