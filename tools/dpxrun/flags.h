// dpxrun's flags: each one's canonical name, whether it takes a value, what it does with it,
// and its help line (flags.cpp holds the table and the value parsers).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "dpxrun/config.h"

namespace dpxrun {

// Sets what one flag's value means in a Config; throws UsageError naming the flag.
using Apply = std::function<void(Config&, const std::string&)>;

struct Flag {
  const char* name;  // canonical, underscored: the PET_ variable is PET_<NAME upper-cased>
  bool takes_value;
  Apply apply;
  const char* help;
  const char* short_name = "";  // "-r" for --redirects
};

// Every flag dpxrun knows, in the order help lists them.
const std::vector<Flag>& flags();

// "nproc-per-node" for "nproc_per_node".
std::string dashed(std::string name);
// "PET_NPROC_PER_NODE" for "nproc_per_node".
std::string pet_variable(const std::string& name);

}  // namespace dpxrun
