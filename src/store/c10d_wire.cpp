#include "store/c10d_wire.h"

#include "store/tcp_protocol.h"

namespace dpx::detail::c10d_wire {
namespace {

using Op = StoreRequest::Op;

constexpr std::uint32_t kValidationMagic = 0x3C85F7CE;

// Reads little-endian fields from the start of a buffer that may hold only part of a request.
class Cursor {
 public:
  Cursor(const std::string& in, std::size_t start) : in_(in), pos_(start) {}
  Parse state() const { return state_; }
  std::size_t pos() const { return pos_; }

  std::uint64_t u64() { return fixed(8); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(fixed(4)); }
  std::string str() {
    const std::uint64_t n = u64();
    if (state_ != Parse::kDone) return {};
    if (n > store_protocol::kMaxFrameBytes) return fail();
    if (in_.size() - pos_ < n) return more();
    std::string s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  std::string more() {
    state_ = Parse::kNeedMore;
    return {};
  }
  std::string fail() {
    state_ = Parse::kBad;
    return {};
  }
  // A count of keys, each at least a u64 length long: a count no request could hold is refused.
  std::uint64_t count() {
    const std::uint64_t n = u64();
    if (state_ == Parse::kDone && n > store_protocol::kMaxFrameBytes / 8) fail();
    return n;
  }

 private:
  std::uint64_t fixed(int bytes) {
    if (state_ != Parse::kDone) return 0;
    if (in_.size() - pos_ < static_cast<std::size_t>(bytes)) {
      more();
      return 0;
    }
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) {
      v |= static_cast<std::uint64_t>(static_cast<unsigned char>(in_[pos_ + i])) << (8 * i);
    }
    pos_ += bytes;
    return v;
  }
  const std::string& in_;
  std::size_t pos_;
  Parse state_ = Parse::kDone;
};

// The dialect's operation numbers, in the order each declares them (Note [c10d wire]).
bool to_op(Dialect d, std::uint8_t code, Op& op) {
  static const Op v2[] = {Op::kValidate, Op::kSet,      Op::kCompareSet, Op::kGet,
                          Op::kAdd,      Op::kCheck,    Op::kWait,       Op::kNumKeys,
                          Op::kDelete,   Op::kAppend,   Op::kMultiGet,   Op::kMultiSet,
                          Op::kCancelWait, Op::kPing};
  static const Op v1[] = {Op::kSet,   Op::kCompareSet, Op::kGet,     Op::kAdd,
                          Op::kCheck, Op::kWait,       Op::kNumKeys};
  if (d == Dialect::kV2) {
    if (code >= sizeof(v2) / sizeof(v2[0])) return false;
    op = v2[code];
    return true;
  }
  if (code == 8) {  // DELETE_KEY; 7 is WATCH_KEY, not offered
    op = Op::kDelete;
    return true;
  }
  if (code >= sizeof(v1) / sizeof(v1[0])) return false;
  op = v1[code];
  return true;
}

void fields(Cursor& c, StoreRequest& r) {
  switch (r.op) {
    case Op::kValidate:
      if (c.u32() != kValidationMagic && c.state() == Parse::kDone) c.fail();
      return;
    case Op::kPing: r.number = c.u32(); return;
    case Op::kNumKeys:
    case Op::kCancelWait: return;
    case Op::kGet:
    case Op::kDelete: r.keys = {c.str()}; return;
    case Op::kAdd:
      r.keys = {c.str()};
      r.number = static_cast<std::int64_t>(c.u64());
      return;
    case Op::kSet:
    case Op::kAppend:
      r.keys = {c.str()};
      r.values = {c.str()};
      return;
    case Op::kCompareSet:
      r.keys = {c.str()};
      r.values = {c.str()};
      r.values.push_back(c.str());
      return;
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet: {
      const std::uint64_t n = c.count();
      for (std::uint64_t i = 0; i < n && c.state() == Parse::kDone; ++i) r.keys.push_back(c.str());
      return;
    }
    case Op::kMultiSet: {
      const std::uint64_t n = c.count();
      for (std::uint64_t i = 0; i < n && c.state() == Parse::kDone; ++i) {
        r.keys.push_back(c.str());
        r.values.push_back(c.str());
      }
      return;
    }
  }
}

std::string little_endian(std::uint64_t v, int bytes) {
  std::string out(static_cast<std::size_t>(bytes), '\0');
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return out;
}

}  // namespace

Parse detect(const std::string& in, Dialect& dialect) {
  if (in.empty()) return Parse::kNeedMore;
  const auto first = static_cast<std::uint8_t>(in[0]);
  if (first >= 1 && first <= 8) {
    dialect = Dialect::kV1;
    return Parse::kDone;
  }
  if (first != 0) return Parse::kBad;
  // 0 is PyTorch 2's VALIDATE, or PyTorch 1's SET, whose key length follows.
  if (in.size() < 5) return Parse::kNeedMore;
  Cursor c(in, 1);
  dialect = c.u32() == kValidationMagic ? Dialect::kV2 : Dialect::kV1;
  return Parse::kDone;
}

Parse parse(const std::string& in, Dialect dialect, StoreRequest& out, std::size_t& consumed) {
  if (in.empty()) return Parse::kNeedMore;
  StoreRequest r;
  if (!to_op(dialect, static_cast<std::uint8_t>(in[0]), r.op)) return Parse::kBad;
  Cursor c(in, 1);
  fields(c, r);
  if (c.state() == Parse::kDone) {
    out = std::move(r);
    consumed = c.pos();
  }
  return c.state();
}

std::string encode_int(std::int64_t v) { return little_endian(static_cast<std::uint64_t>(v), 8); }
std::string encode_str(const std::string& s) { return little_endian(s.size(), 8) + s; }
std::string encode_byte(std::uint8_t b) { return std::string(1, static_cast<char>(b)); }
std::string encode_u32(std::uint32_t v) { return little_endian(v, 4); }

}  // namespace dpx::detail::c10d_wire
