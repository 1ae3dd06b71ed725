#include <gtest/gtest.h>
#include <torch/torch.h>

#include "dpx/data_parallel/scatter_gather.h"

namespace {

using c10::IValue;

std::vector<torch::Device> cpu_list(int n) { return std::vector<torch::Device>(n, torch::kCPU); }

TEST(Scatter, SplitsTensorsLikeChunk) {
  auto x = torch::arange(14).reshape({7, 2});
  auto pieces = dpx::scatter(x, cpu_list(3));
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_TRUE(torch::equal(pieces[0].toTensor(), x.slice(0, 0, 3)));
  EXPECT_TRUE(torch::equal(pieces[1].toTensor(), x.slice(0, 3, 6)));
  EXPECT_TRUE(torch::equal(pieces[2].toTensor(), x.slice(0, 6, 7)));
}

TEST(Scatter, SmallBatchGivesFewerPieces) {
  // chunk(4) of 5 rows is 2, 2, 1: three replicas, as in PyTorch.
  EXPECT_EQ(dpx::scatter(torch::zeros({5, 1}), cpu_list(4)).size(), 3u);
  EXPECT_EQ(dpx::scatter(torch::zeros({1, 3}), cpu_list(4)).size(), 1u);
  // The shortest split wins across the tensors of one structure.
  auto both = c10::ivalue::Tuple::create({torch::zeros({8}), torch::zeros({2})});
  EXPECT_EQ(dpx::scatter(both, cpu_list(4)).size(), 2u);
}

TEST(Scatter, AlongOtherDimension) {
  auto x = torch::arange(12).reshape({2, 6});
  auto pieces = dpx::scatter(x, cpu_list(2), /*dim=*/1);
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_TRUE(torch::equal(pieces[1].toTensor(), x.slice(1, 3, 6)));
}

TEST(Scatter, NestedStructureAndNonTensors) {
  auto x = torch::arange(4).reshape({4, 1});
  auto y = torch::arange(8).reshape({4, 2});
  c10::impl::GenericList list(c10::AnyType::get());
  list.push_back(y);
  list.push_back(IValue(int64_t{7}));
  c10::Dict<std::string, at::Tensor> dict;
  dict.insert("z", x * 10);
  auto tree = c10::ivalue::Tuple::create({x, list, dict, IValue("tag"), IValue()});

  auto pieces = dpx::scatter(tree, cpu_list(2));
  ASSERT_EQ(pieces.size(), 2u);
  for (int i = 0; i < 2; ++i) {
    const auto& e = pieces[i].toTupleRef().elements();
    ASSERT_EQ(e.size(), 5u);
    EXPECT_TRUE(torch::equal(e[0].toTensor(), x.slice(0, 2 * i, 2 * i + 2)));
    auto l = e[1].toListRef();
    EXPECT_TRUE(torch::equal(l[0].toTensor(), y.slice(0, 2 * i, 2 * i + 2)));
    EXPECT_EQ(l[1].toInt(), 7);
    auto d = c10::impl::toTypedDict<std::string, at::Tensor>(e[2].toGenericDict());
    EXPECT_TRUE(torch::equal(d.at("z"), x.slice(0, 2 * i, 2 * i + 2) * 10));
    EXPECT_EQ(e[3].toStringRef(), "tag");
    EXPECT_TRUE(e[4].isNone());
  }
}

TEST(Scatter, IsDifferentiable) {
  auto x = torch::ones({4, 3}, torch::requires_grad());
  auto pieces = dpx::scatter(x, cpu_list(2));
  (pieces[0].toTensor().sum() * 2 + pieces[1].toTensor().sum() * 3).backward();
  auto expected = torch::cat({torch::full({2, 3}, 2.0), torch::full({2, 3}, 3.0)});
  EXPECT_TRUE(torch::equal(x.grad(), expected));
}

TEST(Gather, InvertsScatterKeepingStructure) {
  auto x = torch::randn({6, 3});
  c10::Dict<std::string, at::Tensor> dict;
  dict.insert("a", torch::randn({6}));
  dict.insert("b", torch::randn({6, 2}));
  std::vector<at::Tensor> vec{torch::randn({6, 4}), torch::randn({6})};
  auto tree = c10::ivalue::Tuple::create({x, dict, vec});

  auto gathered = dpx::gather(dpx::scatter(tree, cpu_list(3)), torch::kCPU);
  auto e = gathered.toTupleRef().elements();
  ASSERT_EQ(e.size(), 3u);
  EXPECT_TRUE(torch::equal(e[0].toTensor(), x));
  auto d = c10::impl::toTypedDict<std::string, at::Tensor>(e[1].toGenericDict());
  EXPECT_TRUE(torch::equal(d.at("a"), dict.at("a")));
  EXPECT_TRUE(torch::equal(d.at("b"), dict.at("b")));
  EXPECT_EQ(d.begin()->key(), "a");  // insertion order kept
  auto v = e[2].to<std::vector<at::Tensor>>();
  ASSERT_EQ(v.size(), 2u);
  EXPECT_TRUE(torch::equal(v[0], vec[0]));
  EXPECT_TRUE(torch::equal(v[1], vec[1]));
}

TEST(Gather, ScalarsBecomeAVector) {
  auto gathered = dpx::gather({torch::tensor(1.5), torch::tensor(2.5)}, torch::kCPU);
  EXPECT_TRUE(torch::equal(gathered.toTensor(), torch::tensor({1.5, 2.5})));
}

TEST(Gather, NoneStaysNone) {
  EXPECT_TRUE(dpx::gather({IValue(), IValue()}, torch::kCPU).isNone());
}

TEST(Gather, RejectsMismatchedOrNonTensorOutputs) {
  auto t = torch::zeros({2});
  auto pair = c10::ivalue::Tuple::create({t, t});
  auto single = c10::ivalue::Tuple::create({t});
  EXPECT_THROW(dpx::gather({pair, single}, torch::kCPU), c10::Error);
  EXPECT_THROW(dpx::gather({IValue(t), IValue(pair)}, torch::kCPU), c10::Error);
  try {
    dpx::gather({IValue(int64_t{1}), IValue(int64_t{2})}, torch::kCPU);
    FAIL() << "gathering ints must fail";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("can only gather tensors"), std::string::npos);
  }
}

TEST(Gather, IsDifferentiable) {
  auto a = torch::ones({2}, torch::requires_grad());
  auto b = torch::ones({3}, torch::requires_grad());
  auto g = dpx::gather({a * 2, b * 3}, torch::kCPU).toTensor();
  ASSERT_EQ(g.size(0), 5);
  g.sum().backward();
  EXPECT_TRUE(torch::equal(a.grad(), torch::full({2}, 2.0)));
  EXPECT_TRUE(torch::equal(b.grad(), torch::full({3}, 3.0)));
}

TEST(TreeWalk, VisitsTensorsInScatterOrder) {
  auto x = torch::zeros({2, 1});
  c10::Dict<std::string, at::Tensor> dict;
  dict.insert("k", torch::ones({2}));
  auto tree = c10::ivalue::Tuple::create({x, dict, IValue(int64_t{3}), at::Tensor()});
  std::vector<int64_t> dims;
  dpx::detail::for_each_tensor(tree, [&](const at::Tensor& t) { dims.push_back(t.dim()); });
  EXPECT_EQ(dims, (std::vector<int64_t>{2, 1}));
  auto mapped = dpx::detail::map_tensors(tree, [](const at::Tensor& t) { return t + 1; });
  EXPECT_TRUE(torch::equal(mapped.toTupleRef().elements()[0].toTensor(), x + 1));
  EXPECT_EQ(mapped.toTupleRef().elements()[2].toInt(), 3);
}

}  // namespace
