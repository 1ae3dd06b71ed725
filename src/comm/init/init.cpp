#include "dpx/comm/init.h"

#include <c10/util/Exception.h>
#include <netdb.h>
#include <sys/socket.h>

#include <stdexcept>

#include "comm/backends/mpi/process_group_mpi.h"
#include "comm/plan/backend.h"
#include "comm/init/descriptors.h"
#include "comm/init/factory.h"
#include "comm/init/init_url.h"
#include "comm/plan/members.h"
#include "store/job_token.h"
#include "dpx/errors.h"
#include "dpx/runtime/cuda.h"
#include "dpx/runtime/env.h"
#include "dpx/observe/timeline.h"

namespace dpx {
namespace {

// Where the group's rendezvous store is and who we are, before any connection is made.
struct Rendezvous {
  std::shared_ptr<Store> store;
  int rank = -1;
  int world_size = -1;
  // The init method made the store for this run of the job (rank 0's, or a file): a launcher's
  // agent store outlives the workers it saw, and the caller's store may serve several runs.
  bool fresh_store = false;
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

// Note [Resolve the master first]
// A store client retries a host name that does not resolve until its timeout and then reports "no
// answer", which sends the user looking for a dead rank 0. One getaddrinfo() up front names the
// real problem at once.
void check_resolves(const std::string& host, const char* source, int rank, int world_size) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc == 0) {
    ::freeaddrinfo(found);
    return;
  }
  const std::string what = where(rank, world_size) + source + " '" + host +
                           "' does not resolve to an address (" + ::gai_strerror(rc) + ")";
  if (rc == EAI_AGAIN) {  // the resolver did not answer: a fault that may pass
    throw DistributedError(what + "; the name service did not answer, try again or use an IP");
  }
  TORCH_CHECK(false, what, "; set it to rank 0's host name or IP address");
}

// Note [Agent store]
// With TORCHELASTIC_USE_AGENT_STORE=True the store is the launcher's, which may be torchrun's c10d
// TCPStore (or dpxrun's static one, which PyTorch workers share): speak c10d's protocol to it.
// Otherwise rank 0 serves dpx's own store, bound to MASTER_ADDR, with the job's token.
struct StoreAt {
  std::string host;
  int port = 0;
  const char* host_source;  // what named the host, for errors: "MASTER_ADDR", ...
  bool agent_store = false;
  std::string token;
};

std::shared_ptr<Store> tcp_store(const StoreAt& at, const Rendezvous& r,
                                 std::chrono::milliseconds timeout) {
  TORCH_CHECK(at.port >= 0 && at.port <= 65535, "master port ", at.port,
              " is not a TCP port (0-65535)");
  check_resolves(at.host, at.host_source, r.rank, r.world_size);
  TcpStoreOptions o;
  o.host = at.host;
  o.port = static_cast<std::uint16_t>(at.port);
  o.is_server = r.rank == 0 && !at.agent_store;
  // Before the store listens, so that no stranger has arrived yet (Note [Descriptor budget]).
  detail::check_descriptor_limit(r.rank, r.world_size, o.is_server);
  o.c10d_protocol = at.agent_store;
  o.token = at.token;
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
    r.store = tcp_store({addr, port, "MASTER_ADDR", env.use_agent_store,
                         detail::job_token_from_env()}, r, opts.timeout);
    if (env.use_agent_store) {
      // The launcher's store outlives worker restarts: keep each attempt's keys apart, under
      // the prefix torch.distributed uses, so dpx and PyTorch workers agree on it.
      r.store = Store::prefix("/worker/attempt_" + std::to_string(env.restart_count), r.store);
    }
    r.fresh_store = !env.use_agent_store;
    return r;
  }
  const detail::InitUrl url = detail::parse_init_url(m);
  r.rank = opts.rank >= 0 ? opts.rank : url.rank;
  r.world_size = opts.world_size >= 1 ? opts.world_size : url.world_size;
  TORCH_CHECK(r.rank >= 0 && r.world_size >= 1, "init method '", m,
              "' needs rank and world_size: add ?rank=R&world_size=W or set them in InitOptions");
  check_rank(r.rank, r.world_size);
  if (url.scheme == "tcp") {
    r.store = tcp_store({url.host, url.port, "the init method's host", false, url.token}, r,
                        opts.timeout);
  } else {
    detail::check_descriptor_limit(r.rank, r.world_size, /*serves_store=*/false);
    r.store = Store::file(url.path, r.world_size);
    r.store->set_timeout(opts.timeout);
  }
  r.fresh_store = true;
  return r;
}

// The one path from a parsed backend to a group; the stall inspector watches every group made
// with a store (an mpi group may have none).
std::shared_ptr<ProcessGroup> new_group(detail::Backend backend, std::shared_ptr<Store> store,
                                        int rank, int size, ProcessGroup::Options options,
                                        std::vector<int> mpi_members = {}) {
  TORCH_CHECK(store != nullptr || backend == detail::Backend::kMpi,
              "new_process_group: the store is null (only the mpi backend needs none; "
              "hierarchical-mpi sets its hosts' shm groups up through one)");
  check_rank(rank, size);
  detail::BackendArgs args{store, rank, size, options, std::move(mpi_members)};
  args.options.device = cuda::local_device(args.options.device);  // "cuda": LOCAL_RANK's GPU
  // The rank's GPU is current from here on (this thread): NCCL's communicator, c10d's streams
  // and any CUDA call without a device land on it, not on GPU 0 (Note [Thread devices]).
  cuda::set_current_device(args.options.device);
  auto group = detail::make_group(backend, args);
  if (store) group->start_stall_inspector(std::move(store));
  return group;
}

// Note [MPI without a store]
// Under mpirun or srun --mpi=pmix, MPI knows every rank: no MASTER_ADDR, no store. Rank and
// world size come from MPI; RANK/WORLD_SIZE (or InitOptions') only have to agree with it. With
// no store there is no stall inspector and no timeline clock alignment (docs/backends.md).
std::shared_ptr<ProcessGroup> init_mpi_group(const InitOptions& opts) {
  int rank = opts.rank;
  int size = opts.world_size;
  if (rank < 0 || size < 1) {
    const Env env = Env::read();
    if (rank < 0) rank = env.rank.value_or(-1);
    if (size < 1) size = env.world_size.value_or(-1);
  }
  const detail::MpiWorld world = detail::mpi_world(rank, size);
  ProcessGroup::Options pg;
  pg.timeout = opts.timeout;
  pg.device = cuda::local_device(opts.device);
  auto group = new_group(detail::Backend::kMpi, nullptr, world.rank, world.size, pg);
  timeline::start_from_env(world.rank);
  return group;
}

}  // namespace

std::shared_ptr<ProcessGroup> new_process_group(const std::string& backend,
                                                std::shared_ptr<Store> store, int rank, int size,
                                                ProcessGroup::Options options) {
  return new_group(detail::requested_backend(backend), std::move(store), rank, size, options);
}

std::shared_ptr<ProcessGroup> new_process_group(const std::string& backend,
                                                const StoreAndRank& world,
                                                std::vector<int> members,
                                                ProcessGroup::Options options) {
  const detail::Backend b = detail::requested_backend(backend);
  int rank = world.rank;
  int size = world.world_size;
  if (b == detail::Backend::kMpi) {
    const detail::MpiWorld mpi = detail::mpi_world(rank, size);
    rank = mpi.rank;
    size = mpi.size;
  } else if (rank < 0 || size < 1 || !world.store) {
    throw std::invalid_argument(
        "new_process_group(\"" + backend + "\", world, members): give the world's store, this "
        "process's rank in it and its world size (rendezvous_store returns them); only mpi "
        "takes them from MPI");
  }
  check_rank(rank, size);
  const int place = detail::place_in(members, rank, size, where(rank, size));
  const int n = static_cast<int>(members.size());
  auto store = world.store ? Store::prefix(detail::members_key(members), world.store) : nullptr;
  if (b != detail::Backend::kMpi) members.clear();  // their store is the group's already
  return new_group(b, std::move(store), place, n, options, std::move(members));
}

std::shared_ptr<ProcessGroup> init_process_group(InitOptions opts) {
  // A bad name fails before any connection is made.
  const detail::Backend backend = detail::requested_backend(opts.backend);
  if (opts.process) init_process(*opts.process);  // before any socket: Note [SIGPIPE]
  if (backend == detail::Backend::kMpi && !opts.store) return init_mpi_group(opts);
  Rendezvous r = rendezvous(opts);
  auto store = Store::prefix(opts.group_name, r.store);
  // In a store made for this run, a rank claimed twice is two processes started with one rank.
  if (r.fresh_store) detail::claim_rank(*store, r.rank, where(r.rank, r.world_size));
  ProcessGroup::Options pg;
  pg.timeout = opts.timeout;
  pg.device = cuda::local_device(opts.device);  // before connecting; new_group makes it current
  auto group = new_group(backend, store, r.rank, r.world_size, pg);
  // Note [Timeline clocks] in src/observe/timeline/clock.cpp: every rank of the group takes part.
  if (timeline::start_from_env(r.rank)) timeline::align_clock(*store, r.rank, r.world_size);
  return group;
}

StoreAndRank rendezvous_store(const InitOptions& opts) {
  Rendezvous r = rendezvous(opts);
  return {std::move(r.store), r.rank, r.world_size};
}

}  // namespace dpx
