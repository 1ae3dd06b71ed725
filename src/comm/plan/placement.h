// Where a group's ranks are: which share a host (Note [What a host is]) and which share a
// device, learnt in one round through the store when a group is set up, and kept as plain data
// so that tests can feed the backend choice any layout.
#pragma once

#include <c10/core/Device.h>

#include <chrono>
#include <string>
#include <vector>

#include "dpx/store/store.h"

namespace dpx::detail {

struct HostLayout {
  // Hosts are numbered in the order of their lowest rank; a host's ranks are ascending, and the
  // first is its leader (local rank 0). So rank 0 leads host 0.
  std::vector<std::vector<int>> ranks_of;  // host -> its ranks
  std::vector<int> host_of;                // rank -> host
  std::vector<int> local_rank_of;          // rank -> its index among its host's ranks

  int hosts() const { return static_cast<int>(ranks_of.size()); }
  int leader(int host) const { return ranks_of[host][0]; }
  bool is_leader(int rank) const { return local_rank_of[rank] == 0; }
  int local_size(int rank) const { return static_cast<int>(ranks_of[host_of[rank]].size()); }
  // Some host runs more than one rank.
  bool shares_a_host() const;
};

// `identities[r]` is rank r's host identity; equal strings mean one host.
HostLayout host_layout(const std::vector<std::string>& identities);

struct Placement {
  HostLayout hosts;
  bool device_shared = false;  // two ranks of one host on the same device (CPU groups: any two)
};

// This process's namespace of `kind` ("net", "pid"): "net:[4026531833]", or "" where /proc
// does not say.
std::string namespace_of(const char* kind);

// "hostname/boot id/net namespace/pid namespace": equal for two processes on one host.
std::string host_identity();

// What tells two ranks' devices apart on one host: "cpu", or the GPU's PCI bus id (an index
// repeats across ranks with CUDA_VISIBLE_DEVICES of their own).
std::string device_identity(const c10::Device& device);

// `entries[r]` is rank r's "<host identity>\n<device identity>".
Placement placement_of(const std::vector<std::string>& entries);

// One round through the store (Note [Store rounds]): every rank's host and device. With one
// rank, no store traffic. Waits at most `timeout` for the others.
Placement gather_placement(Store& store, int rank, int size, const c10::Device& device,
                           std::chrono::milliseconds timeout);

}  // namespace dpx::detail
