// c10d's TCPStore protocol, server side: what lets dpx's store server (tcp_server.h) also serve
// PyTorch programs (and LibTorch's TCPStore client), as dpxrun's static rendezvous store must
// (Note [Rendezvous stores] in tools/dpxrun/rendezvous.cpp).
//
// Note [c10d wire]
// c10d's client sends each request as an operation byte and its fields, with no frame length:
// strings as a u64 length and the bytes, integers as 8 bytes, all little-endian (x86's native
// order, which c10d writes). Set, append and multi-set get no answer; get and compare-set answer
// a string, add, delete and num-keys an integer, check one byte (0 ready, 1 not), wait one byte
// (0) once the keys exist, cancel-wait one byte (1), ping its u32 nonce. Two dialects exist:
//   - PyTorch 2.x opens with VALIDATE (op 0, u32 magic 0x3C85F7CE); its operations are numbered
//     VALIDATE, SET, COMPARE_SET, GET, ADD, CHECK, WAIT, GETNUMKEYS, DELETE_KEY, APPEND,
//     MULTI_GET, MULTI_SET, CANCEL_WAIT, PING (then queue, list-keys and barrier operations,
//     which this server does not offer: a client that asks is dropped);
//   - PyTorch 1.13 sends no greeting and numbers SET, COMPARE_SET, GET, ADD, CHECK, WAIT,
//     GETNUMKEYS, WATCH_KEY (not offered), DELETE_KEY.
// Both were read off the clients of PyTorch 1.13.1 and 2.15.0 on the wire. Lengths above
// kMaxFrameBytes end the connection, as dpx's own frames do.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "store/store_request.h"

namespace dpx::detail::c10d_wire {

enum class Dialect { kV1, kV2 };  // PyTorch 1.x, PyTorch 2.x

enum class Parse { kNeedMore, kBad, kDone };

// Which dialect a connection whose first bytes are `in` speaks: kDone with `dialect` set,
// kNeedMore, or kBad when they are not a c10d client's.
Parse detect(const std::string& in, Dialect& dialect);

// Parses the request at the start of `in`; on kDone, `consumed` is its length in bytes.
Parse parse(const std::string& in, Dialect dialect, StoreRequest& out, std::size_t& consumed);

// The answer's bytes ("" for requests that get none).
std::string encode_int(std::int64_t v);
std::string encode_str(const std::string& s);
std::string encode_byte(std::uint8_t b);
std::string encode_u32(std::uint32_t v);

}  // namespace dpx::detail::c10d_wire
