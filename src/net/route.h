// Which local address and interface face a peer: what every dpx listener binds to when nothing
// names one (Note [Listen where the master is reached] in comm/backends/gloo/gloo_device.h).
#pragma once

#include <optional>
#include <string>

namespace dpx::detail {

// The local address the kernel would send from to reach `host` (a UDP socket connected to it,
// no packet sent), numeric; IPv4 preferred. nullopt when `host` does not resolve or has no route.
std::optional<std::string> local_address_toward(const std::string& host);

// Whether a numeric address is a loopback one (127.0.0.0/8, ::1, ::ffff:127.x).
bool is_loopback_address(const std::string& address);

// Whether `host` names loopback by itself ("localhost", a numeric loopback address), without
// looking at what a name resolves to on this machine.
bool names_loopback(const std::string& host);

// The interface that holds the numeric local `address` ("eth0"), or "" when none does.
std::string interface_of(const std::string& address);

}  // namespace dpx::detail
