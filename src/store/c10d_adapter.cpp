#include "store/c10d_adapter.h"

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "store/round.h"
#include "store/store_impl.h"
#include "runtime/compat/c10d_store.h"

namespace dpx::detail {
namespace {

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

class C10dImpl final : public StoreImpl {
 public:
  explicit C10dImpl(c10::intrusive_ptr<c10d::Store> s) : s_(std::move(s)) {}
  void set(const std::string& k, const std::string& v) override { s_->set(k, bytes(v)); }
  std::string get(const std::string& k) override { return text(s_->get(k)); }
  std::int64_t add(const std::string& k, std::int64_t d) override { return s_->add(k, d); }
  std::string compare_set(const std::string& k, const std::string& expected,
                          const std::string& desired) override {
    return text(s_->compareSet(k, bytes(expected), bytes(desired)));
  }
  bool check(const std::vector<std::string>& keys) override { return s_->check(keys); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) override {
    s_->wait(keys, t);
  }
  bool delete_key(const std::string& k) override { return s_->deleteKey(k); }
  std::int64_t num_keys() override { return s_->getNumKeys(); }
  void set_timeout(std::chrono::milliseconds t) override { s_->setTimeout(t); }
  std::chrono::milliseconds timeout() const override { return s_->getTimeout(); }

 private:
  c10::intrusive_ptr<c10d::Store> s_;
};

// Forwards to the dpx::Store, whose errors are dpx's typed ones and name the store.
class Adapter final : public compat::C10dStoreBase {
 public:
  explicit Adapter(std::shared_ptr<dpx::Store> store)
      : compat::C10dStoreBase(store->timeout()), store_(std::move(store)) {}

  // Another handle on the same dpx store, whose client serialises its calls.
  c10::intrusive_ptr<c10d::Store> clone_store() override {
    return c10::make_intrusive<Adapter>(store_);
  }

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

std::shared_ptr<StoreImpl> wrap_c10d(c10::intrusive_ptr<c10d::Store> store) {
  return std::make_shared<C10dImpl>(std::move(store));
}

c10::intrusive_ptr<c10d::Store> c10d_store(std::shared_ptr<Store> store) {
  return c10::make_intrusive<Adapter>(std::move(store));
}

c10::intrusive_ptr<c10d::Store> c10d_group_store(const std::shared_ptr<Store>& store,
                                                 const std::string& backend, int rank) {
  return c10d_store(Store::prefix(next_round(*store, backend, rank), store));
}

}  // namespace dpx::detail
