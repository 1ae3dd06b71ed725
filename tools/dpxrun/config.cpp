#include "dpxrun/config.h"

#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "dpxrun/flags.h"
#include "dpxrun/slurm_step.h"

namespace dpxrun {
namespace {

[[noreturn]] void fail(const std::string& msg) { throw UsageError(msg); }

// Help lists each flag once, dashed; the underscored spelling and PET_<NAME> are in the footer.
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App*, std::string) const override {
    return "Usage: dpxrun [FLAGS] PROGRAM [ARGS...]\n";
  }
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override {
    if (is_positional) return opt->get_name(true, false);
    std::string out;
    for (const auto& s : opt->get_snames()) out += "-" + s + ", ";
    return out + "--" + opt->get_lnames().front();
  }
};

std::string random_id() {
  std::random_device rd;
  std::uniform_int_distribution<unsigned> d(0, 15);
  std::string s;
  for (int i = 0; i < 32; ++i) {
    if (i == 8 || i == 12 || i == 16 || i == 20) s += '-';
    s += "0123456789abcdef"[d(rd)];
  }
  return s;
}

std::string self_path() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) fail("--check: cannot find dpxrun's own executable (/proc/self/exe)");
  return std::string(buf, static_cast<std::size_t>(n));
}

void finish(Config& c) {
  if (c.standalone) {
    c.rdzv_backend = "c10d";
    c.rdzv_host = "127.0.0.1";
    c.rdzv_port = 0;
    c.rdzv_id = random_id();
    c.min_nodes = c.max_nodes = 1;
  }
  if (c.is_static()) {
    if (c.min_nodes != c.max_nodes) {
      fail("--nnodes " + std::to_string(c.min_nodes) + ":" + std::to_string(c.max_nodes) +
           ": the static rendezvous needs a fixed number of nodes; use --rdzv-backend c10d");
    }
    if (c.node_rank >= c.max_nodes) {
      fail("--node-rank " + std::to_string(c.node_rank) + " is out of range for --nnodes " +
           std::to_string(c.max_nodes));
    }
    if (!c.rdzv_host.empty()) {  // torchrun: a static endpoint replaces master addr/port
      c.master_addr = c.rdzv_host;
      c.master_port = c.rdzv_port;
    }
  } else if (c.rdzv_host.empty()) {
    fail("--rdzv-backend c10d needs --rdzv-endpoint host[:port] (or use --standalone)");
  }
  if (c.check) {  // the workers are dpxrun itself (check.h); nothing to restart
    c.program = {self_path()};
    c.max_restarts = 0;
    // A check is run with every node at once: a node or store missing after a minute is a
    // finding, not something to wait the training default (600 s) for.
    c.timeouts.join = std::min(c.timeouts.join, 60.0);
  }
  if (c.fault_tolerant) {
    if (c.is_static()) {
      fail("--fault-tolerant needs --rdzv-backend c10d (or --standalone): a node that comes back "
           "joins by itself, without a node rank");
    }
    if (c.check) fail("--fault-tolerant and --check do not go together");
  }
  if (c.program.empty()) fail("no program given: dpxrun [flags] PROGRAM [ARGS...]");
}

}  // namespace

int StreamSelect::for_rank(int local_rank) const {
  if (per_rank.empty()) return all;
  auto it = per_rank.find(local_rank);
  return it == per_rank.end() ? 0 : it->second;
}

Config parse_config(const std::vector<std::string>& args) {
  CLI::App app("Starts PROGRAM on every worker of a node as torchrun does; exit code 0 iff the "
               "job succeeded.",
               "dpxrun");
  app.formatter(std::make_shared<HelpFormatter>());
  app.footer("PROGRAM and its ARGS are passed on untouched. Every flag is also spelled with\n"
             "underscores (--nproc_per_node) and read from PET_<NAME> (PET_NPROC_PER_NODE=2)\n"
             "when not given. See docs/launcher.md.");
  // Note [Program arguments]
  // prefix_command() stops at the first word that is not a flag or a flag's value: that word is
  // PROGRAM, and it and everything after it are left as they are.
  app.prefix_command();
  std::map<std::string, std::string> values;
  std::vector<std::pair<const Flag*, CLI::Option*>> options;
  for (const auto& f : flags()) {
    std::string names = std::string(f.short_name) + (*f.short_name ? "," : "") + "--" +
                        dashed(f.name);
    if (dashed(f.name) != f.name) names += std::string(",--") + f.name;
    CLI::Option* o = f.takes_value ? app.add_option(names, values[f.name], f.help)
                                   : app.add_flag(names, values[f.name], f.help);
    o->envname(pet_variable(f.name))->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    if (f.takes_value) o->type_name("VALUE");
    options.emplace_back(&f, o);
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 pops from the back
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    throw HelpRequested(app.help());
  } catch (const CLI::ParseError& e) {
    fail(e.what());
  }
  Config c;
  c.program = app.remaining();
  if (!c.program.empty() && c.program.front() == "--") {
    c.program.erase(c.program.begin());
  } else if (!c.program.empty() && c.program.front().size() > 1 && c.program.front()[0] == '-') {
    fail("unknown flag '" + c.program.front() + "'");  // prefix_command() let it through
  }
  std::set<std::string> given;
  for (const auto& [flag, option] : options) {
    if (option->count() > 0) {
      flag->apply(c, values[flag->name]);
      given.insert(flag->name);
    }
  }
  c.notice = apply_slurm(c, given);  // Note [srun dpxrun]
  finish(c);
  return c;
}

}  // namespace dpxrun
