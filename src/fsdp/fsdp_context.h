// What the units of one root share: the order they ran in, the reduce-scatters in flight and
// the end-of-backward callback.
//
// Note [Prefetch]
// Host backends run collectives on their own thread, so an all-gather issued before it is
// needed overlaps with computation. Forward: when a unit's forward starts (its own all-gather
// done), the all-gather of the unit that followed it in the previous iteration's forward is
// issued. Backward: when a unit's backward starts, the all-gather of the unit before it in this
// iteration's forward order is issued (FSDP2's default backward prefetch). Every rank issues
// the same collectives in the same order as long as the ranks run the same units in the same
// order, which the model's code decides as it does for DDP; a rank that does not is caught by
// the groups' consistency check (MismatchError) rather than left hanging. A prefetched unit
// that then does not run is resharded when the forward ends.
//
// Note [Gradient reduction]
// A unit's reduce-scatter is issued at its post_backward and finished at the next unit's
// post_backward (or at the end of backward): so it runs while autograd computes the unit
// before it, and at most one reduce-scatter's buffers are alive besides the one being filled.
// The average follows FSDP2: ReduceOp avg for float32 and bfloat16; a sum between a division
// before and one after for other dtypes (float64, float16), each by about sqrt(world).
#pragma once

#include <ATen/ATen.h>

#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "dpx/comm/work.h"
#include "fsdp/fsdp_unit.h"

namespace dpx::detail {

class FsdpContext : public std::enable_shared_from_this<FsdpContext> {
 public:
  // Makes `root` the root of the units in its module tree (FSDP2's lazy initialisation): they
  // share one context, and get the names of their modules and parameters under the root.
  static void init_root(const std::shared_ptr<FsdpUnit>& root);

  // The units alive, the root first.
  std::vector<std::shared_ptr<FsdpUnit>> units() const;
  FsdpUnit& root() const { return *root_; }

  // The root's pre_forward and post_forward (Note [Unit iteration]).
  void start_forward();
  void end_forward(bool backward_follows);
  bool in_forward() const { return in_forward_; }
  // The units below the root that this forward has not called and that hold shards, by name
  // ("unit 'a', unit 'b'"); "" when none.
  std::string sharded_units_not_called() const;

  // Called at a unit's pre_forward (its place in the forward order is recorded), post_forward
  // (recorded for backward) and pre_backward (Note [Prefetch]).
  void prefetch_forward(FsdpUnit* unit);
  void record_forward(FsdpUnit* unit);
  void prefetch_backward(FsdpUnit* unit);

  // Queues the end-of-backward callback once per backward.
  void backward_started();

  // Note [Gradient reduction].
  struct Reduction {
    std::shared_ptr<FsdpUnit> unit;
    std::vector<std::size_t> params;
    std::vector<int64_t> columns;
    at::Tensor input, output;
    double postdivide = 1.0;
    std::shared_ptr<Work> work;
  };
  void add_reduction(Reduction reduction);
  void finish_reductions();

 private:
  void end_backward();

  // The root first, then module order. Weak: each unit holds its context, and the registry
  // the units (registry.h); a context that held them too would keep every unit, with its
  // process group and that group's sockets, alive after its model is gone.
  std::vector<std::weak_ptr<FsdpUnit>> units_;
  FsdpUnit* root_ = nullptr;  // alive whenever the context is used: it runs the iteration
  bool in_forward_ = false;
  std::vector<FsdpUnit*> pre_order_;       // this forward's pre_forwards
  std::vector<FsdpUnit*> last_pre_order_;  // the last complete forward's
  std::size_t pre_cursor_ = 0;             // where this forward stands in last_pre_order_
  std::vector<FsdpUnit*> post_order_;      // post_forwards since the last backward; backward
                                           // clears the entry of each unit it reaches
  bool callback_queued_ = false;
  std::deque<Reduction> reductions_;
};

}  // namespace dpx::detail
