// The error file's JSON: torchelastic's layout, any message text kept exactly, and bytes that
// are not UTF-8 replaced so that the file always parses.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "dpx/launch/error_handler.h"

namespace dpx {
namespace {

TEST(ErrorFile, KeepsTorchelasticsLayoutAndAnyMessage) {
  const std::string message = "RuntimeError: say \"hi\"\\\n\ttab \x01 caf\xc3\xa9 \xe2\x9c\x93";
  const auto file = nlohmann::json::parse(error_file_json(message, "frame 1\nframe 2"));
  EXPECT_EQ(file["message"]["message"], message);
  EXPECT_EQ(file["message"]["extraInfo"]["py_callstack"], "frame 1\nframe 2");
  const std::string stamp = file["message"]["extraInfo"]["timestamp"];
  EXPECT_GT(std::stol(stamp), 1700000000L);  // unix seconds, as a string
  EXPECT_EQ(file.size(), 1u);
  EXPECT_EQ(file["message"].size(), 2u);
}

TEST(ErrorFile, InvalidUtf8IsReplacedNotThrown) {
  const std::string text = error_file_json("path /tmp/\xff\xfe broke", "");
  const auto file = nlohmann::json::parse(text);  // throws if the file were not valid UTF-8
  EXPECT_EQ(file["message"]["message"], "path /tmp/\xef\xbf\xbd\xef\xbf\xbd broke");  // U+FFFD
}

}  // namespace
}  // namespace dpx
