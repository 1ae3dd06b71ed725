#include <utility>

#include "store/store_impl.h"

namespace dpx::detail {
namespace {

// Keys become "<prefix>/<key>", as c10d's PrefixStore writes them, so a dpx worker and a
// PyTorch worker sharing a launcher's store agree on every key.
class PrefixImpl final : public StoreImpl {
 public:
  PrefixImpl(std::string prefix, std::shared_ptr<StoreImpl> base)
      : prefix_(std::move(prefix) + "/"), base_(std::move(base)) {}

  void set(const std::string& k, const std::string& v) override { base_->set(prefix_ + k, v); }
  std::string get(const std::string& k) override { return base_->get(prefix_ + k); }
  std::int64_t add(const std::string& k, std::int64_t d) override {
    return base_->add(prefix_ + k, d);
  }
  std::string compare_set(const std::string& k, const std::string& expected,
                          const std::string& desired) override {
    return base_->compare_set(prefix_ + k, expected, desired);
  }
  bool check(const std::vector<std::string>& keys) override { return base_->check(join(keys)); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) override {
    base_->wait(join(keys), t);
  }
  bool delete_key(const std::string& k) override { return base_->delete_key(prefix_ + k); }
  // Counts the base store's keys, as c10d's PrefixStore does.
  std::int64_t num_keys() override { return base_->num_keys(); }
  void set_timeout(std::chrono::milliseconds t) override { base_->set_timeout(t); }
  std::chrono::milliseconds timeout() const override { return base_->timeout(); }

 private:
  std::vector<std::string> join(const std::vector<std::string>& keys) const {
    std::vector<std::string> out;
    out.reserve(keys.size());
    for (const auto& k : keys) out.push_back(prefix_ + k);
    return out;
  }

  std::string prefix_;
  std::shared_ptr<StoreImpl> base_;
};

}  // namespace

std::shared_ptr<StoreImpl> make_prefix_impl(const std::string& prefix,
                                            std::shared_ptr<StoreImpl> base) {
  return std::make_shared<PrefixImpl>(prefix, std::move(base));
}

}  // namespace dpx::detail
