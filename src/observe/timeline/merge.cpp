// Merges the ranks' timeline files into one Chrome trace (dpxrun --timeline does it at the end).
#include <c10/util/Exception.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "dpx/observe/timeline.h"

namespace dpx::timeline {

// Times are shifted so that the earliest event of any rank is at 0: the steady clock's origin
// (boot) means nothing to a reader.
void merge(const std::string& out, const std::vector<std::string>& inputs) {
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json ranks = nlohmann::json::array();
  double origin = std::numeric_limits<double>::max();
  for (const auto& in : inputs) {
    std::ifstream f(in);
    TORCH_CHECK(f, "dpx timeline: cannot read ", in);
    nlohmann::json trace;
    try {
      f >> trace;
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "dpx timeline: ", in, " is not a complete trace (", e.what(),
                  "); did its rank end before writing it?");
    }
    ranks.push_back(trace.value("otherData", nlohmann::json::object()));
    for (auto& e : trace.at("traceEvents")) {
      if (e.contains("ts")) origin = std::min(origin, e["ts"].get<double>());
      events.push_back(std::move(e));
    }
  }
  for (auto& e : events) {
    if (e.contains("ts")) e["ts"] = e["ts"].get<double>() - origin;
  }
  nlohmann::json merged = {{"traceEvents", std::move(events)},
                           {"displayTimeUnit", "ms"},
                           {"otherData", {{"ranks", std::move(ranks)}}}};
  const std::string tmp = out + ".tmp";
  {
    std::ofstream o(tmp);
    TORCH_CHECK(o, "dpx timeline: cannot write ", tmp);
    o << merged.dump() << "\n";
    TORCH_CHECK(o.good(), "dpx timeline: writing ", tmp, " failed (disk full?)");
  }
  TORCH_CHECK(std::rename(tmp.c_str(), out.c_str()) == 0, "dpx timeline: cannot rename ", tmp,
              " to ", out);
}

}  // namespace dpx::timeline
