#include "dpx/store/store.h"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "store/c10d_adapter.h"
#include "store/store_impl.h"
#include "store/tcp_client.h"
#include "store/tcp_server.h"
#include "store/translate.h"
#include "dpx/errors.h"

namespace dpx {
namespace {

std::string join(const std::vector<std::string>& keys) {
  std::string out;
  for (const auto& k : keys) {
    out += (out.empty() ? "" : ", ") + k;
  }
  return out;
}

std::string address(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return "tcp://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

Store::Store(std::shared_ptr<detail::StoreImpl> impl, std::string describe, std::uint16_t port,
             std::shared_ptr<void> owned)
    : owned_(std::move(owned)), impl_(std::move(impl)), describe_(std::move(describe)),
      port_(port) {}

Store::~Store() = default;

std::shared_ptr<Store> Store::tcp(const TcpStoreOptions& o) {
  TORCH_CHECK(!o.host.empty(), "TCP store: the host is empty; give a hostname or an address");
  TORCH_CHECK(o.c10d_protocol || !o.wait_workers,
              "TCP store: wait_workers needs c10d_protocol; dpx's store has no such wait");
  const std::string name = address(o.host, o.port);
  try {
    if (o.c10d_protocol) {
      c10d::TCPStoreOptions opts;
      opts.port = o.port;
      opts.isServer = o.is_server;
      opts.waitWorkers = o.wait_workers && o.world_size > 0;
      if (o.world_size > 0) {
        opts.numWorkers = static_cast<std::size_t>(o.world_size);
      }
      // c10d counts the connect timeout in whole seconds: below one second it gives up at once.
      opts.timeout = std::max(o.timeout, std::chrono::milliseconds(1000));
      auto impl = c10::make_intrusive<c10d::TCPStore>(o.host, opts);
      impl->setTimeout(o.timeout);
      const auto port = impl->getPort();
      return std::shared_ptr<Store>(new Store(detail::wrap_c10d(impl),
                                              address(o.host, port), port, nullptr));
    }
    std::shared_ptr<detail::TcpServer> server;
    int port = o.port;
    if (o.is_server) {
      detail::TcpServerOptions so;
      so.host = o.host;
      so.port = o.port;
      so.token = o.token;
      so.client_deadline = o.client_deadline;
      so.hello_deadline = o.hello_deadline;
      so.accept_c10d_clients = o.accept_c10d_clients;
      so.max_unidentified = o.max_unidentified;
      server = std::make_shared<detail::TcpServer>(so);
      port = server->port();
    }
    auto client = std::make_shared<detail::TcpClient>(
        detail::TcpClientOptions{o.host, port, o.token, o.timeout});
    return std::shared_ptr<Store>(new Store(client, address(o.host, port),
                                            static_cast<std::uint16_t>(port), server));
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
  return std::shared_ptr<Store>(
      new Store(detail::wrap_c10d(impl), "file://" + path, 0, nullptr));
}

std::shared_ptr<Store> Store::hash() {
  return std::shared_ptr<Store>(new Store(
      detail::wrap_c10d(c10::make_intrusive<c10d::HashStore>()), "hash", 0, nullptr));
}

std::shared_ptr<Store> Store::prefix(const std::string& prefix, std::shared_ptr<Store> base) {
  TORCH_CHECK(base != nullptr, "prefix store: the base store is null");
  auto impl = detail::make_prefix_impl(prefix, base->impl_);
  auto describe = base->describe_ + "/" + prefix;
  auto port = base->port_;
  return std::shared_ptr<Store>(new Store(impl, describe, port, std::move(base)));
}

void Store::set(const std::string& key, const std::string& value) {
  try {
    impl_->set(key, value);
  } catch (const std::exception& e) {
    detail::rethrow_store_error(e, describe_, "set key '" + key + "' in", timeout());
  }
}

std::string Store::get(const std::string& key) {
  try {
    return impl_->get(key);
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
    return impl_->compare_set(key, expected, desired);
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
    return impl_->delete_key(key);
  } catch (const std::exception& e) {
    detail::rethrow_store_error(e, describe_, "delete key '" + key + "' from", timeout());
  }
}

std::int64_t Store::num_keys() {
  try {
    return impl_->num_keys();
  } catch (const std::exception& e) {
    detail::rethrow_store_error(e, describe_, "count the keys of", timeout());
  }
}

void Store::set_timeout(std::chrono::milliseconds timeout) { impl_->set_timeout(timeout); }

std::chrono::milliseconds Store::timeout() const { return impl_->timeout(); }

}  // namespace dpx
