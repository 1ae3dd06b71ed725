// Local SGD's model averaging on the mpi backend, one process per rank under mpirun, at whatever
// world size mpirun started (support/local_sgd_checks.h; post_local_sgd_hook runs there in the
// conformance suite's test_ddp_hook_parity_post_localSGD).
#include <gtest/gtest.h>

#include "mpi/mpi_group.h"
#include "support/local_sgd_checks.h"

namespace dpx::mpi_test {
namespace {

TEST(MpiLocalSgd, PeriodicModelAveragerAveragesOnTheSchedule) {
  test::expect_periodic_averaging(mpi_group());
}

}  // namespace
}  // namespace dpx::mpi_test
