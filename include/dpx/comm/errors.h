// The error only collectives raise; the rest of the family (DistributedError, TimeoutError,
// PeerLostError) starts in the store, below (dpx/store/errors.h).
#pragma once

#include "dpx/store/errors.h"

namespace dpx {

// Ranks called different collectives (another op, size, dtype, root or order). Every rank
// raises it before any data moves, and the group stays usable (Note [Consistency]).
class MismatchError : public DistributedError {
 public:
  using DistributedError::DistributedError;
};

}  // namespace dpx
