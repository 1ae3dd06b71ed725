#include "comm/store/c10d_adapter.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "comm/store/store_impl.h"

namespace dpx::detail {
namespace {

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

// Forwards to the dpx::Store, whose errors are dpx's typed ones and name the store.
class Adapter final : public c10d::Store {
 public:
  explicit Adapter(std::shared_ptr<dpx::Store> store)
      : c10d::Store(store->timeout()), store_(std::move(store)) {}

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    store_->set(key, text(value));
  }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override {
    return bytes(store_->compare_set(key, text(expected), text(desired)));
  }
  std::vector<uint8_t> get(const std::string& key) override { return bytes(store_->get(key)); }
  int64_t add(const std::string& key, int64_t value) override { return store_->add(key, value); }
  bool deleteKey(const std::string& key) override { return store_->delete_key(key); }
  bool check(const std::vector<std::string>& keys) override { return store_->check(keys); }
  int64_t getNumKeys() override { return StoreAccess::impl(*store_)->num_keys(); }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    store_->wait(keys, timeout);
  }
  void setTimeout(const std::chrono::milliseconds& timeout) override {
    c10d::Store::setTimeout(timeout);
    store_->set_timeout(timeout);
  }

 private:
  std::shared_ptr<dpx::Store> store_;
};

}  // namespace

c10::intrusive_ptr<c10d::Store> c10d_store(std::shared_ptr<Store> store) {
  return c10::make_intrusive<Adapter>(std::move(store));
}

}  // namespace dpx::detail
