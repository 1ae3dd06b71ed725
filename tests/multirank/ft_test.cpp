// Fault-tolerant training (src/ft/): the coordinator's decisions from keys set by hand, and
// replica groups as threads (one rank each) that lose a group and heal it.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <thread>

#include "dpx/errors.h"
#include "dpx/ft/coordinator.h"
#include "dpx/ft/manager.h"
#include "ft/protocol.h"

namespace dpx::ft {
namespace {

using detail::Decision;
using detail::Keys;
using detail::Member;
using namespace std::chrono_literals;

Decision wait_decision(Store& store, const Keys& keys, std::int64_t a) {
  store.wait({keys.decision(a)}, 10s);
  return detail::decode(store.get(keys.decision(a)));
}

std::vector<Member> members(std::initializer_list<Member> m) { return m; }

TEST(FtProtocol, DecisionRoundTrips) {
  Decision d;
  d.attempt = 7, d.commit = true, d.step = 5, d.quorum = 3, d.source = 2;
  d.members = {{0, 0}, {2, 1}, {5, 3}};
  d.joiners = {5};
  d.failed = "why | with a bar";
  const Decision e = detail::decode(detail::encode(d));
  EXPECT_EQ(e.attempt, 7);
  EXPECT_TRUE(e.commit);
  EXPECT_EQ(e.step, 5);
  EXPECT_EQ(e.quorum, 3);
  EXPECT_EQ(e.source, 2);
  EXPECT_EQ(e.members, d.members);
  EXPECT_EQ(e.joiners, d.joiners);
  EXPECT_EQ(e.failed, d.failed);
  EXPECT_THROW(detail::decode("not a decision"), std::runtime_error);
}

TEST(FtCoordinator, CommitsDropsAdmitsAndFinishes) {
  auto store = Store::hash();
  const Keys keys("ft/");
  Coordinator coordinator(store, "ft/", {.min_groups = 1, .max_groups = 3, .drop_after = 2s,
                                         .first_quorum_wait = 200ms});
  GroupBeat a(store, "ft/"), b(store, "ft/");
  ASSERT_NE(a.group(), b.group());
  store->set(keys.join(a.group()), "0");
  store->set(keys.join(b.group()), "0");
  // The first quorum: both, every replica healed from the first.
  Decision d = wait_decision(*store, keys, 0);
  const int g0 = std::min(a.group(), b.group()), g1 = std::max(a.group(), b.group());
  EXPECT_EQ(d.members, members({{g0, 0}, {g1, 0}}));
  EXPECT_EQ(d.source, g0);
  EXPECT_EQ(d.joiners, std::vector<int>{g1});
  EXPECT_FALSE(d.commit);
  // Both vote yes: commit, same quorum.
  store->set(keys.vote(1, g0), "1");
  store->set(keys.vote(1, g1), "1");
  d = wait_decision(*store, keys, 1);
  EXPECT_TRUE(d.commit);
  EXPECT_EQ(d.step, 1);
  EXPECT_EQ(d.quorum, 0);
  EXPECT_TRUE(d.joiners.empty());
  // One votes no: nobody commits, the same step again, the cross groups made again.
  store->set(keys.vote(2, g0), "1");
  store->set(keys.vote(2, g1), "0");
  d = wait_decision(*store, keys, 2);
  EXPECT_FALSE(d.commit);
  EXPECT_EQ(d.step, 1);
  EXPECT_EQ(d.quorum, 1);
  EXPECT_EQ(d.members.size(), 2u);
  // g1's agent reports its workers failed: decided at once without its vote, g1 dropped.
  GroupBeat& beat1 = a.group() == g1 ? a : b;
  store->set(keys.vote(3, g0), "1");
  const auto before = std::chrono::steady_clock::now();
  beat1.failed(1);
  d = wait_decision(*store, keys, 3);
  EXPECT_LT(std::chrono::steady_clock::now() - before, 1500ms);  // before drop_after
  EXPECT_FALSE(d.commit);
  EXPECT_EQ(d.members, members({{g0, 0}}));
  EXPECT_EQ(d.quorum, 2);
  // Its next incarnation asks to join: admitted at the next decision, healed from g0.
  store->set(keys.join(g1), "1");
  store->set(keys.vote(4, g0), "1");
  d = wait_decision(*store, keys, 4);
  EXPECT_TRUE(d.commit);
  EXPECT_EQ(d.step, 2);
  EXPECT_EQ(d.members, members({{g0, 0}, {g1, 1}}));
  EXPECT_EQ(d.source, g0);
  EXPECT_EQ(d.joiners, std::vector<int>{g1});
  // A group whose beat stops (no agent left to say so) is dropped after drop_after.
  const int g2 = static_cast<int>(store->add(keys.groups(), 1) - 1);
  store->add(keys.beat(g2), 1);
  store->set(keys.join(g2), "0");
  store->set(keys.vote(5, g0), "1");
  store->set(keys.vote(5, g1), "1");
  d = wait_decision(*store, keys, 5);
  EXPECT_EQ(d.members.size(), 3u);  // g2 admitted while its beat was fresh
  store->set(keys.vote(6, g0), "1");
  store->set(keys.vote(6, g1), "1");
  d = wait_decision(*store, keys, 6);
  EXPECT_FALSE(d.commit);
  EXPECT_EQ(d.members, members({{g0, 0}, {g1, 1}}));
  // Every member done: the last decision says finished (a joiner still waiting gives up).
  a.done();
  b.done();
  d = wait_decision(*store, keys, 7);
  EXPECT_TRUE(d.finished);
}

// With fewer than min_groups left, the decision waits for joiners; the source must be a group
// that held the model all along, never a joiner admitted while it waited.
TEST(FtCoordinator, WaitingForEnoughGroupsHealsEveryJoinerFromASurvivor) {
  auto store = Store::hash();
  const Keys keys("ft/");
  Coordinator coordinator(store, "ft/", {.min_groups = 3, .max_groups = 3});
  GroupBeat a(store, "ft/"), b(store, "ft/"), c(store, "ft/");
  for (int g : {a.group(), b.group(), c.group()}) store->set(keys.join(g), "0");
  Decision d = wait_decision(*store, keys, 0);
  ASSERT_EQ(d.members.size(), 3u);
  for (const auto& m : d.members) store->set(keys.vote(1, m.group), "1");
  d = wait_decision(*store, keys, 1);
  ASSERT_TRUE(d.commit);
  // Two groups fail; the survivor votes; their next lives ask to join one after the other.
  const int survivor = d.members[1].group, first = d.members[0].group, second = d.members[2].group;
  for (auto* beat : {&a, &b, &c})
    if (beat->group() != survivor) beat->failed(1);
  store->set(keys.vote(2, survivor), "1");
  std::this_thread::sleep_for(300ms);
  store->set(keys.join(first), "1");
  std::this_thread::sleep_for(300ms);
  store->set(keys.join(second), "1");
  d = wait_decision(*store, keys, 2);
  EXPECT_FALSE(d.commit);
  EXPECT_EQ(d.source, survivor);
  std::vector<int> joiners = d.joiners;
  std::sort(joiners.begin(), joiners.end());
  EXPECT_EQ(joiners, (std::vector<int>{first, second}));
  EXPECT_EQ(d.members.size(), 3u);
}

// Groups beyond max_groups stand by, and one takes a lost member's place at the next decision.
TEST(FtCoordinator, AHotSpareReplacesALostGroup) {
  auto store = Store::hash();
  const Keys keys("ft/");
  Coordinator coordinator(store, "ft/", {.min_groups = 1, .max_groups = 2});
  GroupBeat a(store, "ft/"), b(store, "ft/"), spare(store, "ft/");
  for (int g : {a.group(), b.group(), spare.group()}) store->set(keys.join(g), "0");
  Decision d = wait_decision(*store, keys, 0);
  EXPECT_EQ(d.members, members({{a.group(), 0}, {b.group(), 0}}));
  store->set(keys.vote(1, a.group()), "1");
  store->set(keys.vote(1, b.group()), "1");
  d = wait_decision(*store, keys, 1);
  EXPECT_TRUE(d.commit);
  EXPECT_EQ(d.members.size(), 2u);  // the spare still waits
  EXPECT_TRUE(d.joiners.empty());
  store->set(keys.vote(2, a.group()), "1");
  b.failed(1);
  d = wait_decision(*store, keys, 2);
  EXPECT_FALSE(d.commit);
  EXPECT_EQ(d.members, members({{a.group(), 0}, {spare.group(), 0}}));
  EXPECT_EQ(d.source, a.group());
  EXPECT_EQ(d.joiners, std::vector<int>{spare.group()});
}

TEST(FtCoordinator, TooFewGroupsFailTheJobWithAReason) {
  auto store = Store::hash();
  const Keys keys("ft/");
  Coordinator coordinator(store, "ft/", {.min_groups = 2, .max_groups = 2,
                                         .too_few_timeout = 300ms});
  GroupBeat a(store, "ft/");
  store->set(keys.join(a.group()), "0");
  const Decision d = wait_decision(*store, keys, 0);
  EXPECT_NE(d.failed.find("fewer than the 2 needed"), std::string::npos) << d.failed;
}

// Replica groups as threads of one rank each, training y = w.x with SGD on data that depends on
// the step and the group's place in it. Group `victim` loses its workers at step `kill_at`
// (its Manager and cross-group connections go away, its agent reports the failure) and comes
// back as a new incarnation with other initial weights, which it must replace by healing.
struct Replica {
  std::vector<torch::Tensor> weights;
  std::int64_t step = 0, heals = 0, aborts = 0;
};

Replica train_group(std::shared_ptr<Store> store, GroupBeat& beat, int incarnation,
                    std::int64_t steps, std::int64_t stop_at,
                    std::chrono::milliseconds pace = 20ms) {
  ManagerOptions o;
  o.store = store, o.prefix = "ft/", o.group = beat.group(), o.incarnation = incarnation;
  o.local_rank = 0, o.local_size = 1, o.cross_timeout = 10s;
  Manager manager(o);
  torch::manual_seed(100 + beat.group() * 10 + incarnation);  // replicas start apart
  torch::nn::Linear model(torch::nn::LinearOptions(4, 1).bias(false));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  manager.register_state(*model, optimizer);
  Replica r;
  while (manager.start_step() && manager.step() < steps) {
    if (manager.step() == stop_at) break;  // "killed"
    const double s = static_cast<double>(manager.step()), p = manager.participant();
    auto x = torch::tensor({1.0, std::sin(s), std::cos(s + p), 0.5 * p}, torch::kFloat32).view({1, 4});
    auto loss = (model(x) - torch::tensor({{1.0f}})).pow(2).sum();
    loss.backward();
    manager.allreduce_gradients(model->parameters());
    if (manager.should_commit()) optimizer.step();
    optimizer.zero_grad();
    std::this_thread::sleep_for(pace);  // so that the lost group is back before the end
  }
  for (const auto& w : model->parameters()) r.weights.push_back(w.detach().clone());
  r.step = manager.step();
  r.heals = manager.stats().heals_received;
  r.aborts = manager.stats().aborts;
  return r;
}

TEST(FtManager, LostGroupIsDroppedAndHealsBackBitIdentical) {
  auto store = Store::hash();
  Coordinator coordinator(store, "ft/", {.min_groups = 2, .max_groups = 3, .drop_after = 500ms});
  constexpr std::int64_t kSteps = 40, kKillAt = 10;
  std::vector<Replica> out(3);
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  std::vector<std::unique_ptr<GroupBeat>> beats;
  for (int i = 0; i < 3; ++i) beats.push_back(std::make_unique<GroupBeat>(store, "ft/"));
  for (int i = 0; i < 3; ++i) {
    threads.emplace_back([&, i] {
      try {
        GroupBeat& beat = *beats[i];
        if (i != 2) {
          out[i] = train_group(store, beat, 0, kSteps, -1);
          beat.done();
          return;
        }
        train_group(store, beat, 0, kSteps, kKillAt);  // dies at kKillAt
        beat.failed(1);
        std::this_thread::sleep_for(100ms);  // the others go on meanwhile
        out[i] = train_group(store, beat, 1, kSteps, -1);
        beat.done();
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < 3; ++i) ASSERT_EQ(errors[i], "") << "group " << i;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].step, kSteps) << "group " << i;
    ASSERT_EQ(out[i].weights.size(), 1u);
    EXPECT_TRUE(torch::equal(out[i].weights[0], out[0].weights[0]))
        << "group " << i << " holds other weights: " << out[i].weights[0] << " vs "
        << out[0].weights[0];
  }
  EXPECT_GE(out[2].heals, 1);  // its second life took the state from a peer
  EXPECT_GE(out[0].aborts, 1);  // the step in flight when it died did not commit
}

}  // namespace
}  // namespace dpx::ft
