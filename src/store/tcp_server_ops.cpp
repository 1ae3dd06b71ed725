// What the TCP store server does with a request, whichever protocol brought it, and how the
// answer is written back in that protocol (tcp_protocol.h, Note [c10d wire] in c10d_wire.h).
#include <algorithm>

#include "store/tcp_protocol.h"
#include "store/tcp_server_state.h"

namespace dpx::detail {

using Op = StoreRequest::Op;
namespace proto = store_protocol;

bool decode_dpx_request(const std::string& body, StoreRequest& out) {
  proto::Reader r(body);
  StoreRequest q;
  switch (r.u8()) {
    case proto::kSet: q.op = Op::kSet; q.keys = {r.str()}; q.values = {r.str()}; break;
    case proto::kGet: q.op = Op::kGet; q.keys = {r.str()}; break;
    case proto::kAdd: q.op = Op::kAdd; q.keys = {r.str()}; q.number = r.i64(); break;
    case proto::kCompareSet:
      q.op = Op::kCompareSet;
      q.keys = {r.str()};
      q.values = {r.str()};
      q.values.push_back(r.str());
      break;
    case proto::kCheck: q.op = Op::kCheck; q.keys = r.strs(); break;
    case proto::kWait: q.op = Op::kWait; q.keys = r.strs(); break;
    case proto::kDelete: q.op = Op::kDelete; q.keys = {r.str()}; break;
    case proto::kNumKeys: q.op = Op::kNumKeys; break;
    default: return false;  // an unknown op: the client is not speaking dpx's protocol
  }
  if (!r.done()) return false;
  out = std::move(q);
  return true;
}

namespace {

// Note [c10d clients] in tcp_server.h.
bool c10d_may_touch(const std::string& key) { return key.rfind('/', 0) == 0 || key == "init/"; }

}  // namespace

void TcpServer::State::execute(ServerClient& c, StoreRequest& r) {
  if (c.c10d() && !std::all_of(r.keys.begin(), r.keys.end(), c10d_may_touch)) {
    c.dead = true;
    return;
  }
  const std::string key = r.keys.empty() ? std::string() : r.keys[0];
  switch (r.op) {
    case Op::kSet: data[key] = std::move(r.values[0]); break;
    case Op::kAppend: data[key] += r.values[0]; break;
    case Op::kMultiSet:
      for (std::size_t i = 0; i < r.keys.size(); ++i) data[r.keys[i]] = std::move(r.values[i]);
      break;
    case Op::kGet:
    case Op::kWait:
    case Op::kMultiGet:
      c.pending = std::move(r);
      answer_pending(c);
      return;
    case Op::kAdd: {
      auto it = data.find(key);
      std::int64_t v = r.number;
      if (it != data.end()) {
        try {
          v += std::stoll(it->second);
        } catch (const std::exception&) {
          answer_error(c, "key '" + key + "' does not hold an integer");
          return;
        }
      }
      data[key] = std::to_string(v);
      answer_int(c, v);
      break;
    }
    case Op::kCompareSet: {
      const std::string& expected = r.values[0];
      auto it = data.find(key);
      if (it == data.end()) {
        // As c10d's TCPStore: an unset key takes `desired` only when `expected` is empty.
        if (expected.empty()) data[key] = r.values[1];
        answer_str(c, expected.empty() ? r.values[1] : expected);
      } else {
        if (it->second == expected) it->second = r.values[1];
        answer_str(c, it->second);
      }
      break;
    }
    case Op::kCheck:
      if (c.c10d()) send(c, c10d_wire::encode_byte(present(r.keys) ? 0 : 1));
      else answer_int(c, present(r.keys) ? 1 : 0);
      return;
    case Op::kDelete: answer_int(c, static_cast<std::int64_t>(data.erase(key))); return;
    case Op::kNumKeys: answer_int(c, static_cast<std::int64_t>(data.size())); return;
    case Op::kCancelWait:
      // Answered whether the wait was still pending or already answered: the client reads
      // the wait's answer first in the second case (Note [c10d wire]).
      c.pending.reset();
      send(c, c10d_wire::encode_byte(1));
      return;
    case Op::kPing: send(c, c10d_wire::encode_u32(static_cast<std::uint32_t>(r.number))); return;
    case Op::kValidate: return;
  }
  if (r.op != Op::kAdd && r.op != Op::kCompareSet) answer_done(c, r.op);
  answer_waiters();
}

bool TcpServer::State::present(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return data.count(k) > 0; });
}

void TcpServer::State::answer_pending(ServerClient& c) {
  if (c.dead || !c.pending || !present(c.pending->keys)) return;
  const StoreRequest r = std::move(*c.pending);
  c.pending.reset();
  if (r.op == Op::kGet) {
    answer_str(c, data.at(r.keys[0]));
  } else if (r.op == Op::kMultiGet) {
    std::string all;
    for (const auto& k : r.keys) all += c10d_wire::encode_str(data.at(k));
    send(c, all);
  } else {
    answer_done(c, r.op);
  }
  // Requests it sent behind the pending one are handled now.
  if (!c.in.empty()) handle_input(c);
}

void TcpServer::State::answer_waiters() {
  for (const auto& c : clients) answer_pending(*c);
}

void TcpServer::State::answer_int(ServerClient& c, std::int64_t v) {
  send(c, c.c10d() ? c10d_wire::encode_int(v) : proto::Writer().u8(proto::kOk).i64(v).frame());
}

void TcpServer::State::answer_str(ServerClient& c, const std::string& v) {
  send(c, c.c10d() ? c10d_wire::encode_str(v) : proto::Writer().u8(proto::kOk).str(v).frame());
}

// Set and wait answer "ok" in dpx's protocol; in c10d's, a wait answers STOP_WAITING (0) and
// the writes answer nothing.
void TcpServer::State::answer_done(ServerClient& c, Op op) {
  if (!c.c10d()) {
    send(c, proto::Writer().u8(proto::kOk).frame());
  } else if (op == Op::kWait) {
    send(c, c10d_wire::encode_byte(0));
  }
}

// c10d's protocol has no way to say what went wrong: such a client is dropped.
void TcpServer::State::answer_error(ServerClient& c, const std::string& message) {
  if (c.c10d()) {
    c.dead = true;
    return;
  }
  send(c, proto::Writer().u8(proto::kError).str(message).frame());
}

}  // namespace dpx::detail
