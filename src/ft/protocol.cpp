#include "ft/protocol.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

namespace dpx::ft::detail {

bool Decision::has(const Member& m) const {
  return std::find(members.begin(), members.end(), m) != members.end();
}

int Decision::index_of(int group) const {
  for (size_t i = 0; i < members.size(); ++i)
    if (members[i].group == group) return static_cast<int>(i);
  return -1;
}

bool Decision::joining(int group) const {
  return std::find(joiners.begin(), joiners.end(), group) != joiners.end();
}

// One line: "attempt commit step quorum source finished n g:i... k j... |failed text".
std::string encode(const Decision& d) {
  std::ostringstream s;
  s << d.attempt << ' ' << d.commit << ' ' << d.step << ' ' << d.quorum << ' ' << d.source << ' '
    << d.finished << ' ' << d.members.size();
  for (const auto& m : d.members) s << ' ' << m.group << ':' << m.incarnation;
  s << ' ' << d.joiners.size();
  for (int j : d.joiners) s << ' ' << j;
  s << " |" << d.failed;
  return s.str();
}

Decision decode(const std::string& text) {
  const auto bar = text.find(" |");
  std::istringstream s(text.substr(0, bar));
  Decision d;
  size_t n = 0, k = 0;
  bool ok = static_cast<bool>(s >> d.attempt >> d.commit >> d.step >> d.quorum >> d.source >>
                              d.finished >> n);
  for (size_t i = 0; ok && i < n; ++i) {
    Member m;
    char colon = 0;
    ok = static_cast<bool>(s >> m.group >> colon >> m.incarnation) && colon == ':';
    d.members.push_back(m);
  }
  ok = ok && static_cast<bool>(s >> k);
  for (size_t i = 0; ok && i < k; ++i) {
    int j = 0;
    ok = static_cast<bool>(s >> j);
    d.joiners.push_back(j);
  }
  if (!ok || bar == std::string::npos) {
    throw std::runtime_error("fault-tolerant training: not a coordinator's decision: '" + text +
                             "' (a store shared with another job, or another dpx version?)");
  }
  d.failed = text.substr(bar + 2);
  return d;
}

}  // namespace dpx::ft::detail
