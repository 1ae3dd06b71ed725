#include "checkpoint/python_format/optimizer_state.h"

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include "runtime/compat/optimizer.h"

namespace dpx::detail {
namespace {

using Dict = c10::impl::GenericDict;

Dict new_dict() { return Dict(c10::AnyType::get(), c10::AnyType::get()); }

// A hyper-parameter as Python wrote it: a float, an int (SGD's defaults dampening=0 and
// weight_decay=0 are ints) or a 0-dim tensor (a tensor lr).
double number(const c10::IValue& v) {
  if (v.isTensor()) return v.toTensor().item<double>();
  return v.toScalar().toDouble();
}

// Python's `step` tensor: float64 in a program whose default dtype is float64, else float32
// (torch.optim's _get_scalar_dtype).
at::ScalarType step_dtype() {
  return at::typeMetaToScalarType(at::get_default_dtype()) == at::kDouble ? at::kDouble : at::kFloat;
}

// Hyper-parameters as Python 2.x names them (AdamW: Adam with decoupled_weight_decay); the
// flags LibTorch lacks get Python's defaults.
template <class Options>
void adam_options(Dict& g, const Options& o, bool decoupled_weight_decay) {
  g.insert("lr", o.lr());
  g.insert("betas", c10::ivalue::Tuple::create({std::get<0>(o.betas()), std::get<1>(o.betas())}));
  g.insert("eps", o.eps());
  g.insert("weight_decay", o.weight_decay());
  g.insert("amsgrad", o.amsgrad());
  g.insert("maximize", false);
  g.insert("foreach", c10::IValue());
  g.insert("capturable", false);
  g.insert("differentiable", false);
  g.insert("fused", c10::IValue());
  g.insert("decoupled_weight_decay", decoupled_weight_decay);
}

template <class Options>
void set_adam_options(Options& o, const Dict& g) {
  o.lr(number(g.at("lr")));
  const auto betas = g.at("betas").toTupleRef().elements();
  o.betas({number(betas.at(0)), number(betas.at(1))});
  o.eps(number(g.at("eps")));
  o.weight_decay(number(g.at("weight_decay")));
  o.amsgrad(g.at("amsgrad").toBool());
}

template <class State>  // AdamParamState or AdamWParamState: the same fields, unrelated classes
Dict adam_state(const State& s) {
  auto d = new_dict();
  d.insert("step", at::scalar_tensor(static_cast<double>(s.step()), step_dtype()));
  d.insert("exp_avg", s.exp_avg());
  d.insert("exp_avg_sq", s.exp_avg_sq());
  if (s.max_exp_avg_sq().defined()) d.insert("max_exp_avg_sq", s.max_exp_avg_sq());
  return d;
}

template <class State>
std::unique_ptr<torch::optim::OptimizerParamState> adam_state_from(const Dict& d,
                                                                   c10::Device device) {
  auto s = std::make_unique<State>();
  const auto step = d.at("step");
  s->step(step.isTensor() ? static_cast<int64_t>(step.toTensor().item<double>()) : step.toInt());
  s->exp_avg(d.at("exp_avg").toTensor().to(device));
  s->exp_avg_sq(d.at("exp_avg_sq").toTensor().to(device));
  if (d.contains("max_exp_avg_sq")) s->max_exp_avg_sq(d.at("max_exp_avg_sq").toTensor().to(device));
  return s;
}

enum class Kind { kSgd, kAdam, kAdamW };

Kind kind_of(const torch::optim::Optimizer& o) {
  if (dynamic_cast<const torch::optim::SGD*>(&o)) return Kind::kSgd;
  if (dynamic_cast<const torch::optim::Adam*>(&o)) return Kind::kAdam;
  if (dynamic_cast<const torch::optim::AdamW*>(&o)) return Kind::kAdamW;
  TORCH_CHECK(false,
              "Python-format checkpoints map the state of SGD, Adam and AdamW only; this "
              "optimizer is ",
              typeid(o).name(), ": use the dpx format (CheckpointFormat::kDpx)");
}

}  // namespace

c10::IValue optimizer_state_dict(const torch::optim::Optimizer& optimizer) {
  const Kind kind = kind_of(optimizer);
  auto state = new_dict();
  auto groups = c10::impl::GenericList(c10::AnyType::get());
  int64_t index = 0;
  for (const auto& group : optimizer.param_groups()) {
    auto g = new_dict();
    if (kind == Kind::kSgd) {
      const auto& o = static_cast<const torch::optim::SGDOptions&>(group.options());
      g.insert("lr", o.lr());
      g.insert("momentum", o.momentum());
      g.insert("dampening", o.dampening());
      g.insert("weight_decay", o.weight_decay());
      g.insert("nesterov", o.nesterov());
      g.insert("maximize", false);
      g.insert("foreach", c10::IValue());
      g.insert("differentiable", false);
      g.insert("fused", c10::IValue());
    } else if (kind == Kind::kAdam) {
      adam_options(g, static_cast<const torch::optim::AdamOptions&>(group.options()), false);
    } else {
      adam_options(g, static_cast<const torch::optim::AdamWOptions&>(group.options()), true);
    }
    auto params = c10::impl::GenericList(c10::AnyType::get());
    for (const auto& p : group.params()) {
      const auto it = optimizer.state().find(compat::optimizer_state_key(p));
      if (it != optimizer.state().end()) {
        if (kind == Kind::kSgd) {
          auto d = new_dict();
          d.insert("momentum_buffer",
                   static_cast<const torch::optim::SGDParamState&>(*it->second).momentum_buffer());
          state.insert(index, d);
        } else if (kind == Kind::kAdam) {
          state.insert(index,
                       adam_state(static_cast<const torch::optim::AdamParamState&>(*it->second)));
        } else {
          state.insert(index,
                       adam_state(static_cast<const torch::optim::AdamWParamState&>(*it->second)));
        }
      }
      params.push_back(index++);
    }
    g.insert("params", params);
    groups.push_back(g);
  }
  auto out = new_dict();
  out.insert("state", state);
  out.insert("param_groups", groups);
  return out;
}

void load_optimizer_state_dict(torch::optim::Optimizer& optimizer, const c10::IValue& value) {
  const Kind kind = kind_of(optimizer);
  const auto dict = value.toGenericDict();
  const auto groups = dict.at("param_groups").toListRef();
  const auto state = dict.at("state").toGenericDict();
  TORCH_CHECK(groups.size() == optimizer.param_groups().size(), "optimizer state has ",
              groups.size(), " param groups, the optimizer ", optimizer.param_groups().size());
  for (size_t i = 0; i < groups.size(); ++i) {
    const auto g = groups[i].toGenericDict();
    auto& group = optimizer.param_groups()[i];
    const auto indices = g.at("params").toListRef();
    TORCH_CHECK(indices.size() == group.params().size(), "optimizer param group ", i, " has ",
                indices.size(), " parameters in the checkpoint, ", group.params().size(), " here");
    if (kind == Kind::kSgd) {
      auto& o = static_cast<torch::optim::SGDOptions&>(group.options());
      o.lr(number(g.at("lr"))).momentum(number(g.at("momentum")));
      o.dampening(number(g.at("dampening"))).weight_decay(number(g.at("weight_decay")));
      o.nesterov(g.at("nesterov").toBool());
    } else if (kind == Kind::kAdam) {
      set_adam_options(static_cast<torch::optim::AdamOptions&>(group.options()), g);
    } else {
      set_adam_options(static_cast<torch::optim::AdamWOptions&>(group.options()), g);
    }
    for (size_t j = 0; j < indices.size(); ++j) {
      const auto& p = group.params()[j];
      const auto key = compat::optimizer_state_key(p);
      optimizer.state().erase(key);
      if (!state.contains(indices[j])) continue;
      const auto s = state.at(indices[j]).toGenericDict();
      if (kind == Kind::kSgd) {
        auto st = std::make_unique<torch::optim::SGDParamState>();
        st->momentum_buffer(s.at("momentum_buffer").toTensor().to(p.device()));
        optimizer.state()[key] = std::move(st);
      } else if (kind == Kind::kAdam) {
        optimizer.state()[key] = adam_state_from<torch::optim::AdamParamState>(s, p.device());
      } else {
        optimizer.state()[key] = adam_state_from<torch::optim::AdamWParamState>(s, p.device());
      }
    }
  }
}

}  // namespace dpx::detail
