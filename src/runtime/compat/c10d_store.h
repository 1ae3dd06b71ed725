// c10d::Store across LibTorch versions: newer releases declare a pure virtual clone() (another
// handle on the same store) that 1.13 lacks. A dpx class seen as a c10d store derives from
// C10dStoreBase and implements clone_store(); clone() is overridden only where LibTorch has it,
// detected from the declaration itself rather than a version number.
#pragma once

#include <chrono>
#include <type_traits>

#include <torch/csrc/distributed/c10d/Store.hpp>

namespace dpx::compat {

class C10dStoreWithCloneStore : public c10d::Store {
 public:
  explicit C10dStoreWithCloneStore(std::chrono::milliseconds timeout) : c10d::Store(timeout) {}
  virtual c10::intrusive_ptr<c10d::Store> clone_store() = 0;
};

template <class Base, class = void>
class WithClone : public Base {
 public:
  using Base::Base;
};

template <class Base>
class WithClone<Base, std::void_t<decltype(&Base::clone)>> : public Base {
 public:
  using Base::Base;
  c10::intrusive_ptr<c10d::Store> clone() override { return this->clone_store(); }
};

using C10dStoreBase = WithClone<C10dStoreWithCloneStore>;

}  // namespace dpx::compat
