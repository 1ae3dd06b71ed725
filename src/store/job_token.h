// The job token a dpx TCP store client presents and a dpx TCP store server demands
// (Note [Job token] in tcp_server.h), as the launcher passes it on.
#pragma once

#include <string>

namespace dpx::detail {

// DPX_STORE_TOKEN (dpxrun sets it for its workers); else TORCHELASTIC_RUN_ID (torchrun sets it:
// random with --standalone, else --rdzv-id, which keeps other jobs out but is no secret); else
// "" (no token: any dpx client may connect).
std::string job_token_from_env();

}  // namespace dpx::detail
