// The CRC-32 check of a zip's records. PyTorchStreamReader (and Python's torch.load) read stored
// records without checking the CRC-32 the writer put in the zip, so a flipped bit would load as a
// wrong weight; dpx checks every record against its central-directory CRC before parsing.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace dpx::detail {

// Throws CheckpointError (naming `what` and the record) for a malformed zip or a CRC mismatch.
// A record whose stored CRC is 0 is not checked (torch.save with compute_crc32=False writes 0).
// Returns every record's bytes (views into `zip`) by its full name ("archive/data/0").
std::map<std::string, std::string_view> verify_zip_crcs(std::string_view zip,
                                                        const std::string& what);

}  // namespace dpx::detail
