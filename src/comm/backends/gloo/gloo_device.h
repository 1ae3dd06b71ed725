// Which local address the gloo backend listens on, and the Gloo device made for it.
//
// Note [Listen where the master is reached]
// Every rank of a job reaches the rendezvous store, so the local address the kernel routes to the
// store's host (MASTER_ADDR) is one the other hosts can reach us on, whatever this host's name
// resolves to (often 127.0.1.1 in /etc/hosts, or the same name on every network-namespace host).
// GLOO_SOCKET_IFNAME still wins, as in PyTorch. A rank that would listen on loopback although the
// job spans several hosts fails at once: its peers would otherwise get "connection refused" from
// somewhere else much later.
#pragma once

#include <memory>
#include <optional>
#include <string>

namespace gloo::transport {
class Device;
}

namespace dpx {
class Store;
}

namespace dpx::detail {

struct GlooListenInputs {
  std::optional<std::string> ifname;  // GLOO_SOCKET_IFNAME
  std::string master;                 // the host every rank reaches; "" when unknown
  const char* master_source = "MASTER_ADDR";
  std::optional<std::string> route;   // local_address_toward(master)
  int world_size = 0;                 // WORLD_SIZE and LOCAL_WORLD_SIZE when known (else 0):
  int local_world_size = 0;           // fewer local than world ranks means several hosts
};

struct GlooListen {
  enum class Kind { kInterface, kAddress, kHostname };
  Kind kind = Kind::kHostname;
  std::string value;   // an interface name, a numeric address, or "" for this host's name
  std::string reason;  // why, for --check: "GLOO_SOCKET_IFNAME", "the route to MASTER_ADDR ..."
  std::string describe() const;  // "10.0.0.2 (eth1), the route to MASTER_ADDR 10.0.0.1"
};

// The choice of Note [Listen where the master is reached]; throws c10::Error (starting with
// `where`) for a loopback address in a job that spans hosts.
GlooListen choose_gloo_listen(const GlooListenInputs& in, const std::string& where);

// The inputs as this process sees them: the TCP store's host (else MASTER_ADDR), the
// environment's GLOO_SOCKET_IFNAME, WORLD_SIZE and LOCAL_WORLD_SIZE.
GlooListenInputs gloo_listen_inputs(const Store* store);

std::shared_ptr<::gloo::transport::Device> make_gloo_device(const GlooListen& listen);

}  // namespace dpx::detail
