#include "dpx/comm/init.h"

#include <c10/util/Exception.h>

#include "comm/backends.h"
#include "comm/init_url.h"
#include "dpx/comm/errors.h"
#include "dpx/env.h"
#include "env_read.h"

namespace dpx {
namespace {

// Where the group's rendezvous store is and who we are, before any connection is made.
struct Rendezvous {
  std::shared_ptr<Store> store;
  int rank = -1;
  int world_size = -1;
};

// A launcher variable Env::read() found (and parsed), or the "expected, but not set" error.
template <typename T>
T required(const std::optional<T>& value, const char* variable) {
  return value ? *value : (Env::require(variable), T{});  // require() throws: it is unset
}

void check_rank(int rank, int world_size) {
  TORCH_CHECK(world_size >= 1, "world_size must be at least 1, got ", world_size,
              "; it is the total number of processes in the job");
  TORCH_CHECK(rank >= 0 && rank < world_size, "rank ", rank, " is out of range for world_size ",
              world_size, "; ranks go from 0 to world_size - 1");
}

std::shared_ptr<Store> tcp_store(const std::string& host, int port, int rank, int world_size,
                                 bool agent_store, std::chrono::milliseconds timeout) {
  TORCH_CHECK(port >= 0 && port <= 65535, "master port ", port, " is not a TCP port (0-65535)");
  TcpStoreOptions o;
  o.host = host;
  o.port = static_cast<std::uint16_t>(port);
  o.is_server = rank == 0 && !agent_store;
  o.world_size = world_size;
  o.timeout = timeout;
  return Store::tcp(o);
}

Rendezvous rendezvous(const InitOptions& opts) {
  Rendezvous r;
  if (opts.store) {
    TORCH_CHECK(opts.rank >= 0 && opts.world_size >= 1,
                "init_process_group: with an explicit store, give rank and world_size too");
    r = {opts.store, opts.rank, opts.world_size};
    check_rank(r.rank, r.world_size);
    return r;
  }
  const std::string& m = opts.init_method;
  if (m == "env://") {
    const Env env = Env::read();
    r.rank = opts.rank >= 0 ? opts.rank : required(env.rank, "RANK");
    r.world_size = opts.world_size >= 1 ? opts.world_size : required(env.world_size, "WORLD_SIZE");
    check_rank(r.rank, r.world_size);
    const std::string addr = required(env.master_addr, "MASTER_ADDR");
    const int port = required(env.master_port, "MASTER_PORT");
    r.store = tcp_store(addr, port, r.rank, r.world_size, env.use_agent_store, opts.timeout);
    if (env.use_agent_store) {
      // The launcher's store outlives worker restarts: keep each attempt's keys apart, under
      // the prefix torch.distributed uses, so dpx and PyTorch workers agree on it.
      r.store = Store::prefix("/worker/attempt_" + std::to_string(env.restart_count), r.store);
    }
    return r;
  }
  const detail::InitUrl url = detail::parse_init_url(m);
  r.rank = opts.rank >= 0 ? opts.rank : url.rank;
  r.world_size = opts.world_size >= 1 ? opts.world_size : url.world_size;
  TORCH_CHECK(r.rank >= 0 && r.world_size >= 1, "init method '", m,
              "' needs rank and world_size: add ?rank=R&world_size=W or set them in InitOptions");
  check_rank(r.rank, r.world_size);
  if (url.scheme == "tcp") {
    r.store = tcp_store(url.host, url.port, r.rank, r.world_size, false, opts.timeout);
  } else {
    r.store = Store::file(url.path, r.world_size);
    r.store->set_timeout(opts.timeout);
  }
  return r;
}

std::string pick_backend(const std::string& asked) {
  std::string b = asked;
  if (b == "auto") {
    b = detail::env_string("DPX_BACKEND").value_or("auto");
  }
  TORCH_CHECK(b == "auto" || b == "shm" || b == "gloo", "unknown backend '", b,
              "'; use auto, shm or gloo");
  return b;
}

}  // namespace

std::shared_ptr<ProcessGroup> new_process_group(const std::string& backend,
                                                std::shared_ptr<Store> store, int rank, int size,
                                                ProcessGroup::Options options) {
  TORCH_CHECK(store != nullptr, "new_process_group: the store is null");
  check_rank(rank, size);
  const std::string b = pick_backend(backend);
  detail::BackendArgs args{std::move(store), rank, size, options};
  const bool shm = b == "shm" || (b == "auto" && detail::all_ranks_on_one_host(args));
  return shm ? detail::make_shm_group(args) : detail::make_gloo_group(args);
}

std::shared_ptr<ProcessGroup> init_process_group(InitOptions opts) {
  const std::string backend = pick_backend(opts.backend);  // bad names fail before connecting
  if (opts.process) init_process(*opts.process);  // before any socket: Note [SIGPIPE]
  Rendezvous r = rendezvous(opts);
  auto store = Store::prefix(opts.group_name, r.store);
  ProcessGroup::Options pg;
  pg.timeout = opts.timeout;
  return new_process_group(backend, std::move(store), r.rank, r.world_size, pg);
}

}  // namespace dpx
