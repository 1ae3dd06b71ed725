// A dpx::Store seen as a c10d::Store, for the c10d classes that take one (ProcessGroupGloo).
// The one place that subclasses c10d::Store: its virtuals differ between LibTorch releases.
#pragma once

#include <memory>

#include <c10/util/intrusive_ptr.h>

#include "dpx/comm/store.h"

namespace c10d {
class Store;
}

namespace dpx::detail {

c10::intrusive_ptr<c10d::Store> c10d_store(std::shared_ptr<Store> store);

}  // namespace dpx::detail
