// Keeps a peer's death from killing this process through SIGPIPE (Note [SIGPIPE]).
#pragma once

namespace dpx::detail {

// Note [SIGPIPE]
// Gloo and c10d's TCP store write to sockets without MSG_NOSIGNAL. When a peer dies, the next
// write to its socket raises SIGPIPE, whose default action ends this process at once: no
// PeerLostError, no message, just "killed by signal 13" (seen about once in 25 runs of
// Faults.RankKilledDuringCollectiveRaisesTypedError). With the signal ignored, the write fails
// with EPIPE and the error reaches the caller as PeerLostError. Python does the same for every
// program at startup. Called by init_process() (dpx/runtime/process.h), which init_process_group()
// calls by default; a handler the program installed itself is left alone. dpxrun restores the
// default in the workers it starts.
void ignore_sigpipe();

}  // namespace dpx::detail
