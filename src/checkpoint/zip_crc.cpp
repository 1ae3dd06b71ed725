#include "checkpoint/zip_crc.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <sstream>

#include "dpx/checkpoint/checkpoint_file.h"

namespace dpx::detail {
namespace {

class Bytes {
 public:
  Bytes(const std::string& s, const std::string& what) : s_(s), what_(what) {}
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
  const std::string& s_;
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

}  // namespace

void verify_zip_crcs(const std::string& zip, const std::string& what) {
  const Bytes b(zip, what);
  if (zip.size() < 22) b.fail("shorter than a zip's end record");
  uint64_t eocd = zip.size() - 22;  // the end record; a comment may follow it
  while (b.at<uint32_t>(eocd) != 0x06054b50) {
    if (eocd == 0 || zip.size() - eocd > 22 + 0xffff) b.fail("no zip end record");
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
  uint64_t pos = dir;
  for (uint64_t i = 0; i < entries; ++i) {
    if (b.at<uint32_t>(pos) != 0x02014b50) b.fail("bad central directory entry");
    const auto crc = b.at<uint32_t>(pos + 16);
    uint64_t size = b.at<uint32_t>(pos + 20), local = b.at<uint32_t>(pos + 42);
    uint64_t unpacked = b.at<uint32_t>(pos + 24);
    const auto name_len = b.at<uint16_t>(pos + 28), extra_len = b.at<uint16_t>(pos + 30);
    const auto comment_len = b.at<uint16_t>(pos + 32);
    const std::string name = zip.substr(std::min<uint64_t>(pos + 46, zip.size()), name_len);
    if (b.at<uint16_t>(pos + 10) != 0) b.fail("record " + name + " is compressed");
    // zip64 extra field (id 1): the 8-byte values of the fields set to 0xffffffff, in order.
    uint64_t x = pos + 46 + name_len;
    for (const uint64_t end = x + extra_len; x + 4 <= end;) {
      const auto id = b.at<uint16_t>(x), len = b.at<uint16_t>(x + 2);
      if (id == 1) {
        uint64_t f = x + 4;
        if (unpacked == 0xffffffff) {
          unpacked = b.at<uint64_t>(f);
          f += 8;
        }
        if (size == 0xffffffff) {
          size = b.at<uint64_t>(f);
          f += 8;
        }
        if (local == 0xffffffff) local = b.at<uint64_t>(f);
      }
      x += 4 + len;
    }
    if (b.at<uint32_t>(local) != 0x04034b50) b.fail("bad local header of record " + name);
    const uint64_t data = local + 30 + b.at<uint16_t>(local + 26) + b.at<uint16_t>(local + 28);
    if (data > zip.size() || size > zip.size() - data) b.fail("record " + name + " is truncated");
    // The reader allocates the uncompressed size: a stored record must declare its own size.
    if (unpacked != size) {
      b.fail("record " + name + " declares " + std::to_string(unpacked) + " bytes but stores " +
             std::to_string(size));
    }
    const uint32_t got = crc_of(zip.data() + data, size);
    if (crc != 0 && got != crc) {
      std::ostringstream m;
      m << what << " is corrupt: record " << name << " has CRC-32 0x" << std::hex << got
        << ", the zip says 0x" << crc;
      throw CheckpointError(m.str());
    }
    pos += 46 + name_len + extra_len + comment_len;
  }
}

}  // namespace dpx::detail
