#include "store/agent_store.h"

#include <c10/util/Exception.h>

#include "store/job_token.h"

namespace dpx::detail {

std::shared_ptr<Store> connect_agent_store(const std::string& address, const char* variable,
                                           std::chrono::milliseconds timeout) {
  std::string addr = address;
  const std::string dpx_scheme = "dpx://";
  const bool dpx_store = addr.rfind(dpx_scheme, 0) == 0;
  if (dpx_store) addr = addr.substr(dpx_scheme.size());
  const auto colon = addr.rfind(':');
  TORCH_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < addr.size(), variable,
              " must be host:port or dpx://host:port, got '", address, "'");
  TcpStoreOptions o;
  o.host = addr.substr(0, colon);
  o.port = static_cast<std::uint16_t>(std::stoi(addr.substr(colon + 1)));
  o.timeout = timeout;
  o.c10d_protocol = !dpx_store;
  o.token = dpx_store ? job_token_from_env() : "";
  return Store::tcp(o);
}

}  // namespace dpx::detail
