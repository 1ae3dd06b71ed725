// expect_throws<E>(body): the message of the exception of type E that `body` throws; a failure
// of the test if it throws another type or nothing.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <string>

namespace dpx::test {

template <typename E, typename F>
std::string expect_throws(F&& body) {
  try {
    body();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no exception";
  return "";
}

}  // namespace dpx::test
