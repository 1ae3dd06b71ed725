#pragma once

#include "dpx/store/types.h"  // kDefaultTimeout, for groups as for stores

namespace dpx {

enum class ReduceOp { kSum, kAvg, kMin, kMax, kProduct };

const char* to_string(ReduceOp op);

}  // namespace dpx
