// dpx's TCP store protocol, shared by the server (tcp_server.h) and the client (tcp_client.h).
//
// Every message is a frame: a 4-byte little-endian body length, then the body. A request body is
// an op byte and its fields; a reply body is a status byte (kOk, or kError with a message) and
// the op's result. Strings are a 4-byte length and the bytes; integers are 8 bytes,
// little-endian.
//   0. The client's first byte is kPreamble, which no c10d TCPStore client sends first, so that
//      one server can serve both (Note [c10d clients] in tcp_server.h).
//   1. Then kHello(magic, token). The server answers kOk, or kError and closes
//      when the magic or the job token is wrong (Note [Job token] in tcp_server.h), or kBusy
//      when it had to close the connection before the hello arrived.
//   2. Then requests, one at a time, each answered in order:
//        kSet(key, value) -> ok            kGet(key) -> value, once the key exists
//        kAdd(key, delta) -> new value     kCompareSet(key, expected, desired) -> value now
//        kCheck(n, keys)  -> 0 or 1        kWait(n, keys) -> ok, once every key exists
//        kDelete(key)     -> 0 or 1        kNumKeys -> count
//      kGet and kWait are answered when the keys appear; the client gives up at its own
//      deadline and drops the connection (the next call opens a fresh one).
// A frame longer than kMaxFrameBytes ends the connection before any of it is stored.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace dpx::detail::store_protocol {

constexpr std::uint32_t kMaxFrameBytes = 64u << 20;
constexpr const char* kMagic = "dpx-store-2";
constexpr std::uint8_t kPreamble = 0xd7;

enum Op : std::uint8_t {
  kHello = 1,
  kSet,
  kGet,
  kAdd,
  kCompareSet,
  kCheck,
  kWait,
  kDelete,
  kNumKeys,
};

// kBusy (with a message) answers a hello that came too late: the server had closed the
// connection to make room (Note [Out of descriptors] in tcp_server.cpp); the client may connect
// again. Clients that do not know it read it as an error with that message.
enum Status : std::uint8_t { kOk = 0, kError = 1, kBusy = 2 };

// Appends fields to a frame body.
class Writer {
 public:
  Writer& u8(std::uint8_t v) {
    out_.push_back(static_cast<char>(v));
    return *this;
  }
  Writer& i64(std::int64_t v) {
    for (int i = 0; i < 8; ++i) out_.push_back(static_cast<char>((static_cast<std::uint64_t>(v) >> (8 * i)) & 0xff));
    return *this;
  }
  Writer& str(const std::string& s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
    return *this;
  }
  // The whole frame: length, then body.
  std::string frame() const {
    std::string f;
    const auto n = static_cast<std::uint32_t>(out_.size());
    for (int i = 0; i < 4; ++i) f.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
    return f + out_;
  }

 private:
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string out_;
};

inline std::uint32_t read_u32(const char* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

// Reads fields from a frame body; ok() turns false (and stays) on a short or malformed body.
class Reader {
 public:
  explicit Reader(const std::string& body) : body_(body) {}
  std::uint8_t u8() {
    if (!need(1)) return 0;
    return static_cast<std::uint8_t>(body_[pos_++]);
  }
  std::int64_t i64() {
    if (!need(8)) return 0;
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(static_cast<unsigned char>(body_[pos_ + i])) << (8 * i);
    pos_ += 8;
    return static_cast<std::int64_t>(v);
  }
  std::string str() {
    if (!need(4)) return {};
    const std::uint32_t n = read_u32(body_.data() + pos_);
    pos_ += 4;
    if (!need(n)) return {};
    std::string s = body_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::vector<std::string> strs() {
    const std::int64_t n = i64();
    std::vector<std::string> v;
    // Each key takes at least its 4-byte length, which bounds a lying count.
    if (n < 0 || static_cast<std::uint64_t>(n) > (body_.size() - pos_) / 4) {
      ok_ = false;
      return v;
    }
    for (std::int64_t i = 0; i < n && ok_; ++i) v.push_back(str());
    return v;
  }
  bool ok() const { return ok_; }
  bool done() const { return ok_ && pos_ == body_.size(); }

 private:
  bool need(std::size_t n) {
    ok_ = ok_ && body_.size() - pos_ >= n;
    return ok_;
  }
  const std::string& body_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

}  // namespace dpx::detail::store_protocol
