// What dpxrun gathers from its workers' files around a run: the timeline (--timeline FILE,
// docs/timeline.md) and DDP's step reports (docs/ddp.md, "Step report").
#pragma once

#include "dpxrun/config.h"

namespace dpxrun {

// Before the workers start: points them (through the environment they inherit) at where to
// write, and removes what an earlier run left there.
void prepare_reports(Config& config);

// After the run, whatever its outcome: merges the ranks' timeline files into config.timeline
// and prints the step reports the workers left. Problems are printed, never thrown: the run's
// exit code stays the workers'.
void finish_reports(const Config& config);

}  // namespace dpxrun
