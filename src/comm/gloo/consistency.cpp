#include "comm/gloo/consistency.h"

#include <sstream>

#include "dpx/comm/errors.h"
#include "dpx/comm/types.h"

namespace dpx::detail {
namespace {

const char* const kOpNames[] = {"allreduce", "broadcast", "allgather", "reduce_scatter",
                                "barrier"};

std::string describe(const Fingerprint& f) {
  std::ostringstream os;
  os << kOpNames[f.op] << " of " << f.numel << " " << static_cast<at::ScalarType>(f.dtype)
     << " elements";
  if (f.op == 1) os << " from root " << f.extra;
  if (f.op == 0 || f.op == 3) os << " with op " << to_string(static_cast<ReduceOp>(f.extra));
  return os.str();
}

}  // namespace

void check_consistency(c10d::ProcessGroupGloo& pg, const Fingerprint& mine, int rank, int size,
                       const std::string& where) {
  auto own = at::tensor({mine.op, mine.dtype, mine.numel, mine.extra}, at::kLong);
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < size; ++r) out[0].push_back(at::empty({4}, at::kLong));
  std::vector<at::Tensor> in{own};
  pg.allgather(out, in)->wait();
  for (int r = 0; r < size; ++r) {
    auto v = out[0][r];
    Fingerprint theirs{v[0].item<int64_t>(), v[1].item<int64_t>(), v[2].item<int64_t>(),
                       v[3].item<int64_t>()};
    if (!v.equal(own)) {
      throw DistributedError(where + "ranks disagree on a collective: this rank called " +
                             describe(mine) + ", rank " + std::to_string(r) + " called " +
                             describe(theirs) +
                             ". Every rank must issue the same collectives in the same order "
                             "with the same sizes and dtypes.");
    }
  }
}

}  // namespace dpx::detail
