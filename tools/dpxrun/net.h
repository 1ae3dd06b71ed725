// Small socket helpers of the rendezvous: free ports and which local address faces a peer.
#pragma once

#include <string>

namespace dpxrun {

std::string hostname();
// A TCP port that was free a moment ago (bound to port 0, then released), as torchrun picks
// MASTER_PORT; the worker that binds it next may still lose a race, which ends in a restart.
int free_port();
// Whether something listens on (or holds) TCP `port` of this machine already.
bool port_in_use(int port);
// Whether `host` names an address of this machine (it can be bound to).
bool is_local_host(const std::string& host);

}  // namespace dpxrun
