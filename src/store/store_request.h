// One request to the TCP store server, as the server executes it whichever protocol brought it:
// dpx's own (tcp_protocol.h) or c10d's TCPStore protocol (c10d_wire.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dpx::detail {

struct StoreRequest {
  enum class Op {
    kSet,         // keys[0] = values[0]
    kGet,         // the value of keys[0], once it exists
    kAdd,         // keys[0] += number; the new value
    kCompareSet,  // keys[0]: values[0] expected, values[1] desired; the value now stored
    kCheck,       // whether every key exists
    kWait,        // answered once every key exists
    kDelete,      // keys[0]; how many were deleted
    kNumKeys,
    kAppend,      // keys[0] += values[0] (c10d only)
    kMultiGet,    // every key's value, once all exist (c10d only)
    kMultiSet,    // keys[i] = values[i] (c10d only)
    kCancelWait,  // ends this client's pending wait (c10d only)
    kPing,        // echoes number (c10d only)
    kValidate,    // a c10d client's first message; no answer
  };
  Op op = Op::kNumKeys;
  std::vector<std::string> keys;
  std::vector<std::string> values;
  std::int64_t number = 0;
};

}  // namespace dpx::detail
