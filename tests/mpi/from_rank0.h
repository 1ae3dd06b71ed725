// Work that one rank does for all under mpirun (running PyTorch, making a shared folder): rank 0
// does it and the others learn its answer, a string, from a broadcast.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "dpx/comm/process_group.h"
#include "support/temp_dir.h"

namespace dpx::mpi_test {

// `make`'s result on rank 0, given to every rank; "" everywhere when it threw (the test failed on
// rank 0 saying why) or returned "". Whatever fails, rank 0 joins the broadcast, so the others
// learn it at once instead of waiting out the group's timeout.
inline std::string from_rank0(const std::shared_ptr<ProcessGroup>& pg,
                              const std::function<std::string()>& make) {
  auto bytes = at::zeros({1024}, at::kInt);  // 4096 bytes, as int32 (broadcast's dtypes)
  if (pg->rank() == 0) {
    try {
      const std::string s = make();
      TORCH_CHECK(s.size() < 4096, "from_rank0: ", s.size(), " bytes, past 4095");
      std::memcpy(bytes.data_ptr(), s.data(), s.size());
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank 0's part failed: " << e.what();
    }
  }
  pg->broadcast(bytes, {0})->wait();
  return std::string(static_cast<const char*>(bytes.data_ptr()));
}

// A folder every rank sees (one machine, or hosts that share /tmp): rank 0 makes it in `own`
// and names it to the others. Rank 0 removes it when `own` goes, so the test's ranks meet in a
// barrier first.
inline std::string shared_temp_dir(const std::shared_ptr<ProcessGroup>& pg,
                                   std::optional<test::TempDir>& own) {
  return from_rank0(pg, [&] { return own.emplace().path(); });
}

}  // namespace dpx::mpi_test
