#include "dpx/comm/store.h"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "comm/store/translate.h"
#include "dpx/comm/errors.h"

namespace dpx {
namespace {

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& v) { return {v.begin(), v.end()}; }

std::string join(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) {
    out += (out.empty() ? "" : ", ") + k;
  }
  return out;
}

}  // namespace

Store::Store(c10::intrusive_ptr<c10d::Store> impl, std::string describe, std::uint16_t port,
             std::shared_ptr<Store> base)
    : impl_(std::move(impl)), describe_(std::move(describe)), port_(port), base_(std::move(base)) {}

Store::~Store() = default;

std::shared_ptr<Store> Store::tcp(const TcpStoreOptions& o) {
  TORCH_CHECK(!o.host.empty(), "TCP store: the host is empty; give a hostname or an address");
  c10d::TCPStoreOptions opts;
  opts.port = o.port;
  opts.isServer = o.is_server;
  opts.waitWorkers = o.wait_workers && o.world_size > 0;
  if (o.world_size > 0) {
    opts.numWorkers = static_cast<std::size_t>(o.world_size);
  }
  // c10d counts the connect timeout in whole seconds: below one second it gives up at once.
  opts.timeout = std::max(o.timeout, std::chrono::milliseconds(1000));
  const std::string name = "tcp://" + o.host + ":" + std::to_string(o.port);
  try {
    auto impl = c10::make_intrusive<c10d::TCPStore>(o.host, opts);
    impl->setTimeout(o.timeout);
    auto port = impl->getPort();
    return std::shared_ptr<Store>(
        new Store(impl, "tcp://" + o.host + ":" + std::to_string(port), port, nullptr));
  } catch (const std::exception& e) {
    detail::rethrow_store_error(e, name, o.is_server ? "start the store server at"
                                                     : "connect to the store at",
                                o.timeout);
  }
}

std::shared_ptr<Store> Store::file(const std::string& path, int world_size) {
  TORCH_CHECK(!path.empty(), "file store: the path is empty");
  TORCH_CHECK(world_size >= 1, "file store: world_size must be at least 1, got ", world_size);
  auto impl = c10::make_intrusive<c10d::FileStore>(path, world_size);
  return std::shared_ptr<Store>(new Store(impl, "file://" + path, 0, nullptr));
}

std::shared_ptr<Store> Store::hash() {
  return std::shared_ptr<Store>(new Store(c10::make_intrusive<c10d::HashStore>(), "hash", 0,
                                          nullptr));
}

std::shared_ptr<Store> Store::prefix(const std::string& prefix, std::shared_ptr<Store> base) {
  TORCH_CHECK(base != nullptr, "prefix store: the base store is null");
  auto impl = c10::make_intrusive<c10d::PrefixStore>(prefix, base->impl_);
  auto describe = base->describe_ + "/" + prefix;
  auto port = base->port_;
  return std::shared_ptr<Store>(new Store(impl, describe, port, std::move(base)));
}

void Store::set(const std::string& key, const std::string& value) {
  try {
    impl_->set(key, bytes(value));
  } catch (const std::exception& e) {
    detail::rethrow_store_error(e, describe_, "set key '" + key + "' in", timeout());
  }
}

std::string Store::get(const std::string& key) {
  try {
    return text(impl_->get(key));
  } catch (const std::exception& e) {
    detail::rethrow_store_error(e, describe_, "get key '" + key + "' from", timeout());
  }
}

std::int64_t Store::add(const std::string& key, std::int64_t delta) {
  try {
    return impl_->add(key, delta);
  } catch (const std::exception& e) {
    detail::rethrow_store_error(e, describe_, "add to key '" + key + "' in", timeout());
  }
}

std::string Store::compare_set(const std::string& key, const std::string& expected,
                               const std::string& desired) {
  try {
    return text(impl_->compareSet(key, bytes(expected), bytes(desired)));
  } catch (const std::exception& e) {
    detail::rethrow_store_error(e, describe_, "compare-set key '" + key + "' in", timeout());
  }
}

bool Store::check(const std::vector<std::string>& keys) {
  try {
    return impl_->check(keys);
  } catch (const std::exception& e) {
    detail::rethrow_store_error(e, describe_, "check keys in", timeout());
  }
}

void Store::wait(const std::vector<std::string>& keys) { wait(keys, timeout()); }

void Store::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  try {
    impl_->wait(keys, timeout);
  } catch (const std::exception& e) {
    detail::rethrow_store_error(e, describe_, "wait for keys [" + join(keys) + "] in", timeout);
  }
}

bool Store::delete_key(const std::string& key) {
  try {
    return impl_->deleteKey(key);
  } catch (const std::exception& e) {
    detail::rethrow_store_error(e, describe_, "delete key '" + key + "' from", timeout());
  }
}

void Store::set_timeout(std::chrono::milliseconds timeout) { impl_->setTimeout(timeout); }

std::chrono::milliseconds Store::timeout() const { return impl_->getTimeout(); }

}  // namespace dpx
