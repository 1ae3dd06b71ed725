// The checkpoint file: a small header with a checksum, then the payload (a LibTorch archive).
//
// Layout (little-endian):
//   bytes 0-7    magic "DPXCKPT1"
//   bytes 8-15   payload size in bytes
//   bytes 16-19  CRC32 of the payload (zlib's crc32)
//   bytes 20-23  reserved, 0
//   bytes 24-    payload
// A truncated file fails the size check, a flipped bit the CRC, so a damaged checkpoint is
// refused before LibTorch parses any of it.
#pragma once

#include <cstddef>
#include <functional>
#include <stdexcept>
#include <string>

#include "dpx/errors.h"

namespace dpx {

struct CheckpointWriteOptions {
  // Test hook: called once after the first `partial_bytes` bytes reached the temporary file
  // (before fsync and rename), so a test can kill the writer in the middle of a save.
  std::function<void()> after_partial_write;
  size_t partial_bytes = 64;
};

// Writes atomically: <path>.tmp.<pid>, write, fsync, rename over <path>, fsync the directory.
// After a crash at any point, <path> is either absent, or the old or the new complete file.
void write_checkpoint_file(const std::string& path, const std::string& payload,
                           const CheckpointWriteOptions& options = {});

// The atomic write alone, for files that carry their own checksums (the zip of a torch.save file
// holds a CRC-32 per record; see python_format.h).
void write_file_atomically(const std::string& path, const std::string& data,
                           const CheckpointWriteOptions& options = {});

// The same for a file made piece by piece, never whole in memory: `produce` hands each piece to
// the sink it is given, which writes it to the temporary file.
using ByteSink = std::function<void(const char* data, size_t size)>;
void write_file_atomically(const std::string& path,
                           const std::function<void(const ByteSink&)>& produce,
                           const CheckpointWriteOptions& options = {});

// The payload of a file written by write_checkpoint_file; throws CheckpointError naming the
// file and what is wrong with it.
std::string read_checkpoint_file(const std::string& path);

}  // namespace dpx
