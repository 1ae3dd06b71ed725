// Parsing of tcp:// and file:// init methods.
#pragma once

#include <string>

namespace dpx::detail {

struct InitUrl {
  std::string scheme;  // "tcp" or "file"
  std::string host;    // tcp
  int port = -1;       // tcp
  std::string path;    // file
  int rank = -1;       // from ?rank=, -1 when absent
  int world_size = -1; // from ?world_size=, -1 when absent
  std::string token;   // tcp: from ?token=, the job token of dpx's TCP store ("" when absent)
};

// Throws a message naming the URL and the accepted forms on anything else.
InitUrl parse_init_url(const std::string& url);

}  // namespace dpx::detail
