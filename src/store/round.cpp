#include "store/round.h"

namespace dpx::detail {

std::string next_round(Store& store, const std::string& name, int rank) {
  return name + "/" + std::to_string(store.add(name + "/gen/" + std::to_string(rank), 1)) + "/";
}

std::vector<std::string> store_all_gather(Store& store, const std::string& name, int rank,
                                          int size, const std::string& mine,
                                          std::chrono::milliseconds timeout) {
  if (size == 1) return {mine};
  const std::string prefix = next_round(store, name, rank);
  store.set(prefix + std::to_string(rank), mine);
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(prefix + std::to_string(r));
  store.wait(keys, timeout);
  std::vector<std::string> all;
  for (const auto& k : keys) all.push_back(k == keys[rank] ? mine : store.get(k));
  return all;
}

}  // namespace dpx::detail
