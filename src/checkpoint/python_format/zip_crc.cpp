#include "checkpoint/python_format/zip_crc.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <sstream>
#include <string_view>
#include <utility>

#include "dpx/checkpoint/checkpoint_file.h"

namespace dpx::detail {
namespace {

class Bytes {
 public:
  Bytes(std::string_view s, const std::string& what) : s_(s), what_(what) {}
  template <typename T>
  T at(uint64_t pos) const {
    if (pos > s_.size() || sizeof(T) > s_.size() - pos)
      fail("a zip structure reaches past the end");
    T v;
    std::memcpy(&v, s_.data() + pos, sizeof(T));
    return v;
  }
  [[noreturn]] void fail(const std::string& msg) const {
    throw CheckpointError(what_ +
                          " is not a readable torch.save file (truncated, corrupt or "
                          "another format): " +
                          msg);
  }
  std::string_view s_;
  const std::string& what_;
};

uint32_t crc_of(const char* p, uint64_t n) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (n > 0) {
    const uInt chunk = static_cast<uInt>(std::min<uint64_t>(n, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(p), chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

// The central directory: (its offset, its number of entries), zip64 or not.
std::pair<uint64_t, uint64_t> central_directory(const Bytes& b) {
  const uint64_t size = b.s_.size();
  if (size < 22) b.fail("shorter than a zip's end record");
  uint64_t eocd = size - 22;  // the end record; a comment may follow it
  while (b.at<uint32_t>(eocd) != 0x06054b50) {
    if (eocd == 0 || size - eocd > 22 + 0xffff) b.fail("no zip end record");
    --eocd;
  }
  uint64_t entries = b.at<uint16_t>(eocd + 10), dir = b.at<uint32_t>(eocd + 16);
  if (entries == 0xffff || dir == 0xffffffff) {  // zip64: the locator sits before the end record
    if (eocd < 20 || b.at<uint32_t>(eocd - 20) != 0x07064b50) b.fail("no zip64 locator");
    const auto z = b.at<uint64_t>(eocd - 20 + 8);
    if (b.at<uint32_t>(z) != 0x06064b50) b.fail("no zip64 end record");
    entries = b.at<uint64_t>(z + 32);
    dir = b.at<uint64_t>(z + 48);
  }
  return {dir, entries};
}

struct Entry {
  std::string name;
  uint32_t crc;
  uint64_t size, unpacked, local, next;  // next: where the following entry starts
};

// The central directory entry at `pos`, its 0xffffffff fields read from the zip64 extra field
// (id 1: the 8-byte values of those fields, in order).
Entry read_entry(const Bytes& b, uint64_t pos) {
  if (b.at<uint32_t>(pos) != 0x02014b50) b.fail("bad central directory entry");
  const auto name_len = b.at<uint16_t>(pos + 28), extra_len = b.at<uint16_t>(pos + 30);
  Entry e{std::string(b.s_.substr(std::min<uint64_t>(pos + 46, b.s_.size()), name_len)),
          b.at<uint32_t>(pos + 16),
          b.at<uint32_t>(pos + 20),
          b.at<uint32_t>(pos + 24),
          b.at<uint32_t>(pos + 42),
          pos + 46 + name_len + extra_len + b.at<uint16_t>(pos + 32)};
  if (b.at<uint16_t>(pos + 10) != 0) b.fail("record " + e.name + " is compressed");
  uint64_t x = pos + 46 + name_len;
  for (const uint64_t end = x + extra_len; x + 4 <= end;) {
    const auto id = b.at<uint16_t>(x), len = b.at<uint16_t>(x + 2);
    uint64_t f = x + 4;
    for (uint64_t* field : {&e.unpacked, &e.size, &e.local}) {
      if (id == 1 && *field == 0xffffffff) {
        *field = b.at<uint64_t>(f);
        f += 8;
      }
    }
    x += 4 + len;
  }
  return e;
}

}  // namespace

std::map<std::string, std::string_view> verify_zip_crcs(std::string_view zip,
                                                        const std::string& what) {
  std::map<std::string, std::string_view> records;
  const Bytes b(zip, what);
  auto [pos, entries] = central_directory(b);
  for (uint64_t i = 0; i < entries; ++i) {
    const Entry e = read_entry(b, pos);
    if (b.at<uint32_t>(e.local) != 0x04034b50) b.fail("bad local header of record " + e.name);
    const uint64_t data =
        e.local + 30 + b.at<uint16_t>(e.local + 26) + b.at<uint16_t>(e.local + 28);
    if (data > zip.size() || e.size > zip.size() - data) {
      b.fail("record " + e.name + " is truncated");
    }
    // The reader allocates the uncompressed size: a stored record must declare its own size.
    if (e.unpacked != e.size) {
      b.fail("record " + e.name + " declares " + std::to_string(e.unpacked) +
             " bytes but stores " + std::to_string(e.size));
    }
    const uint32_t got = crc_of(zip.data() + data, e.size);
    if (e.crc != 0 && got != e.crc) {
      std::ostringstream m;
      m << what << " is corrupt: record " << e.name << " has CRC-32 0x" << std::hex << got
        << ", the zip says 0x" << e.crc;
      throw CheckpointError(m.str());
    }
    records[e.name] = zip.substr(data, e.size);
    pos = e.next;
  }
  return records;
}

}  // namespace dpx::detail
