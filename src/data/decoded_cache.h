// One decoded copy of a data file per host: the decoded bytes kept in a file and mapped, so
// every process of the host that opens the same source shares one copy of them in
// the page cache instead of decoding its own.
#pragma once

#include <torch/types.h>

#include <functional>
#include <string>

namespace dpx::detail {

// Note [One decoded copy per host]
// Each rank of a job used to decode the whole data set into memory of its own: Fashion-MNIST's
// 70,000 images are 55 MB as bytes, 220 MB as float, so 64 ranks on one machine held 14 GB of
// the same numbers. Now the first process to open a source decodes it and writes the bytes to
// a file in the cache folder (under a temporary name, linked to its own once whole and on disk:
// a process that dies halfway leaves no file that looks whole); every process, the first included, maps that file, so the
// kernel keeps one copy for the host and counts each process a share of it (its PSS). No
// coordination between ranks is needed: when several decode at once (a cold start), the first
// to link its whole file under the name wins and the others map that one and delete theirs; a
// named file is never replaced under a process that maps it. The mapping is private: a process
// that writes to its tensor gets its own copy of the pages it writes. A file is
// found again only for the same source: its name carries a hash of the source's real path, size,
// modification time and inode, and its header the tensor's shape, checked against its length.
// Where there is no cache folder to write (DPX_DATA_CACHE=off, a read-only home), decode()'s
// own tensor is used, as before.

// The uint8 tensor decode() makes of `source`, read from the host's cache folder when an
// earlier process put it there, else decoded and put there. decode() errors pass through
// unchanged.
torch::Tensor decoded_bytes(const std::string& source, const std::function<torch::Tensor()>& decode);

// The cache folder: DPX_DATA_CACHE, else $XDG_CACHE_HOME/dpx/data, else $HOME/.cache/dpx/data;
// "" when DPX_DATA_CACHE is "off" or there is no home.
std::string data_cache_folder();

}  // namespace dpx::detail
