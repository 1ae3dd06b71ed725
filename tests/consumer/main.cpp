// All-reduces rank+1 over Gloo between processes started by hand with the launcher's variables.
#include <dpx/dpx.h>
#include <torch/torch.h>

#include <iostream>

int main() {
  dpx::InitOptions options;
  options.backend = "gloo";
  auto pg = dpx::init_process_group(options);
  auto t = torch::full({3}, static_cast<float>(pg->rank() + 1));
  pg->allreduce(t)->wait();
  const float expected = pg->size() * (pg->size() + 1) / 2.0f;
  std::cout << "rank " << pg->rank() << " sum " << t[0].item<float>() << "\n";
  return t.equal(torch::full({3}, expected)) ? 0 : 1;
}
