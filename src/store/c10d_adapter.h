// Both directions between dpx's stores and c10d's: a c10d store (TCPStore, FileStore,
// HashStore) behind dpx::Store, and a dpx::Store seen as a c10d::Store for the c10d classes that
// take one (ProcessGroupGloo). The one place that calls or subclasses c10d::Store's virtuals,
// which differ between LibTorch releases.
#pragma once

#include <memory>
#include <string>

#include <c10/util/intrusive_ptr.h>

#include "dpx/store/store.h"

namespace c10d {
class Store;
}

namespace dpx::detail {

class StoreImpl;

std::shared_ptr<StoreImpl> wrap_c10d(c10::intrusive_ptr<c10d::Store> store);
c10::intrusive_ptr<c10d::Store> c10d_store(std::shared_ptr<Store> store);

// The store one c10d process group (ProcessGroupGloo, ProcessGroupNCCL) sets itself up through:
// `store` under this group's own round prefix "<backend>/<n>/" (Note [Store rounds]). c10d's
// groups key their rendezvous by fixed names (Gloo's addresses by rank, NCCL's unique id by
// communicator number), so a second group on one store would read the first one's.
c10::intrusive_ptr<c10d::Store> c10d_group_store(const std::shared_ptr<Store>& store,
                                                 const std::string& backend, int rank);

}  // namespace dpx::detail
