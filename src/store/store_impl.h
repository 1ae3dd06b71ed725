// What every kind of store implements behind dpx::Store: dpx's own TCP store (tcp_client.h),
// c10d's stores where dpx keeps them (c10d_adapter.cpp) and key prefixes (prefix_store.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dpx/store/store.h"

namespace dpx::detail {

class StoreImpl {
 public:
  virtual ~StoreImpl() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Waits up to timeout() for the key.
  virtual std::string get(const std::string& key) = 0;
  virtual std::int64_t add(const std::string& key, std::int64_t delta) = 0;
  virtual std::string compare_set(const std::string& key, const std::string& expected,
                                  const std::string& desired) = 0;
  virtual bool check(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  virtual bool delete_key(const std::string& key) = 0;
  virtual std::int64_t num_keys() = 0;
  virtual void set_timeout(std::chrono::milliseconds timeout) = 0;
  virtual std::chrono::milliseconds timeout() const = 0;
};

std::shared_ptr<StoreImpl> make_prefix_impl(const std::string& prefix,
                                            std::shared_ptr<StoreImpl> base);

// The implementation behind a Store, for src/ only (the c10d adapter that Gloo needs).
struct StoreAccess {
  static const std::shared_ptr<StoreImpl>& impl(const Store& store) { return store.impl_; }
};

}  // namespace dpx::detail
