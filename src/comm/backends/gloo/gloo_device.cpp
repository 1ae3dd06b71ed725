#include "comm/backends/gloo/gloo_device.h"

#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include "net/route.h"
#include "dpx/store/store.h"
#include "dpx/runtime/env.h"
#include "runtime/env_read.h"

namespace dpx::detail {
namespace {

// The host of a TCP store's describe(): "tcp://host:port/prefix..." or "tcp://[v6]:port...".
std::string tcp_store_host(const std::string& describe) {
  const std::string scheme = "tcp://";
  if (describe.rfind(scheme, 0) != 0) return "";
  std::string rest = describe.substr(scheme.size());
  rest = rest.substr(0, rest.find('/'));
  if (!rest.empty() && rest[0] == '[') {
    const auto close = rest.find(']');
    return close == std::string::npos ? "" : rest.substr(1, close - 1);
  }
  return rest.substr(0, rest.rfind(':'));
}

}  // namespace

std::string GlooListen::describe() const {
  switch (kind) {
    case Kind::kInterface: return "interface " + value + " (" + reason + ")";
    case Kind::kAddress: {
      const std::string ifname = interface_of(value);
      return value + (ifname.empty() ? "" : " (" + ifname + ")") + ", " + reason;
    }
    case Kind::kHostname: return "the address of this host's name, " + reason;
  }
  return value;
}

GlooListen choose_gloo_listen(const GlooListenInputs& in, const std::string& where) {
  if (in.ifname) return {GlooListen::Kind::kInterface, *in.ifname, "GLOO_SOCKET_IFNAME"};
  if (in.master.empty()) {
    // A file or hash store and no MASTER_ADDR: ranks that share such a store share a host.
    return {GlooListen::Kind::kAddress, "127.0.0.1", "no master host is known"};
  }
  if (!in.route) {  // the store was reached, so this is rare: PyTorch's choice, the host's name
    return {GlooListen::Kind::kHostname, "", "no route to " + in.master + " was found"};
  }
  const bool spans_hosts = in.world_size > 0 && in.local_world_size > 0 &&
                           in.local_world_size < in.world_size;
  TORCH_CHECK(!is_loopback_address(*in.route) || names_loopback(in.master) || !spans_hosts,
              where, "gloo would listen on ", *in.route, ", a loopback address, because ",
              in.master_source, " '", in.master, "' leads to this host's loopback; but the job "
              "spans several hosts (WORLD_SIZE ", in.world_size, ", LOCAL_WORLD_SIZE ",
              in.local_world_size, "), whose ranks cannot connect to it. Set ", in.master_source,
              " to an address of rank 0's host that every host reaches (its IP, not a name that "
              "/etc/hosts maps to 127.x), or GLOO_SOCKET_IFNAME to the interface to use.");
  return {GlooListen::Kind::kAddress, *in.route,
          std::string("the route to ") + in.master_source + " " + in.master};
}

GlooListenInputs gloo_listen_inputs(const Store* store) {
  GlooListenInputs in;
  in.ifname = env_string("GLOO_SOCKET_IFNAME");
  if (store != nullptr) in.master = tcp_store_host(store->describe());
  if (!in.master.empty()) {
    in.master_source = "the store's host";
    if (env_string("MASTER_ADDR").value_or("") == in.master) in.master_source = "MASTER_ADDR";
  } else {
    in.master = env_string("MASTER_ADDR").value_or("");
  }
  if (!in.ifname && !in.master.empty()) in.route = local_address_toward(in.master);
  const Env env = Env::read();
  in.world_size = env.world_size.value_or(0);
  in.local_world_size = env.local_world_size.value_or(0);
  return in;
}

std::shared_ptr<::gloo::transport::Device> make_gloo_device(const GlooListen& listen) {
  switch (listen.kind) {
    case GlooListen::Kind::kInterface:
      return c10d::ProcessGroupGloo::createDeviceForInterface(listen.value);
    case GlooListen::Kind::kAddress:
      return c10d::ProcessGroupGloo::createDeviceForHostname(listen.value);
    case GlooListen::Kind::kHostname:
      break;
  }
  return c10d::ProcessGroupGloo::createDefaultDevice();
}

}  // namespace dpx::detail
