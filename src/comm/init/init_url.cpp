#include "comm/init/init_url.h"

#include <c10/util/Exception.h>

namespace dpx::detail {
namespace {

constexpr const char* kForms =
    "use env://, tcp://host:port?rank=R&world_size=W or file:///path?rank=R&world_size=W";

int to_int(const std::string& url, const std::string& what, const std::string& v) {
  size_t used = 0;
  int x = -1;
  try {
    x = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TORCH_CHECK(used == v.size() && !v.empty(), "init method '", url, "': ", what,
              " must be an integer, got '", v, "'");
  return x;
}

void parse_query(const std::string& url, const std::string& query, InitUrl& out) {
  size_t pos = 0;
  while (pos < query.size()) {
    size_t amp = query.find('&', pos);
    std::string kv = query.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
    pos = amp == std::string::npos ? query.size() : amp + 1;
    auto eq = kv.find('=');
    TORCH_CHECK(eq != std::string::npos, "init method '", url, "': expected key=value, got '",
                kv, "'");
    std::string key = kv.substr(0, eq), value = kv.substr(eq + 1);
    if (key == "rank") {
      out.rank = to_int(url, "rank", value);
    } else if (key == "world_size") {
      out.world_size = to_int(url, "world_size", value);
    } else if (key == "token") {
      out.token = value;
    } else {
      TORCH_CHECK(false, "init method '", url, "': unknown parameter '", key,
                  "'; only rank, world_size and token are understood");
    }
  }
}

}  // namespace

InitUrl parse_init_url(const std::string& url) {
  InitUrl out;
  auto sep = url.find("://");
  TORCH_CHECK(sep != std::string::npos, "unknown init method '", url, "'; ", kForms);
  out.scheme = url.substr(0, sep);
  std::string rest = url.substr(sep + 3);
  auto q = rest.find('?');
  if (q != std::string::npos) {
    parse_query(url, rest.substr(q + 1), out);
    rest.resize(q);
  }
  if (out.scheme == "tcp") {
    auto colon = rest.rfind(':');
    TORCH_CHECK(colon != std::string::npos && colon > 0, "init method '", url,
                "' needs a host and a port: tcp://host:port");
    out.host = rest.substr(0, colon);
    if (out.host.size() > 2 && out.host.front() == '[' && out.host.back() == ']') {
      out.host = out.host.substr(1, out.host.size() - 2);  // [::1]
    }
    out.port = to_int(url, "port", rest.substr(colon + 1));
    return out;
  }
  if (out.scheme == "file") {
    TORCH_CHECK(!rest.empty() && rest[0] == '/', "init method '", url,
                "' needs an absolute path: file:///path/to/file");
    out.path = rest;
    return out;
  }
  TORCH_CHECK(false, "unknown init method '", url, "'; ", kForms);
}

}  // namespace dpx::detail
