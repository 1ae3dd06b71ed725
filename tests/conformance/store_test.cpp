// test/cpp/c10d/TCPStoreTest.cpp, FileStoreTest.cpp and HashStoreTest.cpp on dpx's stores:
// dpx's own TCP store, and c10d's FileStore and HashStore behind dpx::Store; each with and
// without a key prefix.
#include <unistd.h>

#include <atomic>
#include <thread>

#include "conformance/conformance.h"

namespace dpx::conformance {
namespace {

using std::chrono::milliseconds;

std::shared_ptr<Store> with_prefix(std::shared_ptr<Store> s, const std::string& prefix) {
  return prefix.empty() ? s : Store::prefix(prefix, s);
}

// The basic checks of every store test: set, get, compare_set (a wrong expected value changes
// nothing), delete (true, then false for a missing key).
void set_get_compare_delete(Store& store) {
  store.set("key0", "value0");
  store.set("key1", "value1");
  store.set("key2", "value2");
  EXPECT_EQ(store.get("key0"), "value0");
  EXPECT_EQ(store.get("key1"), "value1");
  EXPECT_EQ(store.get("key2"), "value2");
  store.compare_set("key0", "wrongExpectedValue", "newValue");
  EXPECT_EQ(store.get("key0"), "value0");
  store.compare_set("key0", "value0", "newValue");
  EXPECT_EQ(store.get("key0"), "newValue");
}

// TCPStoreTest testHelper: the server's own checks, then 16 clients hammering one counter and
// their own keys; the counter and the keys are still there once every client is gone (the store
// outlives its clients). PyTorch's count of 5 keys includes the one its TCPStore adds to meet its
// workers; dpx's store adds none (4). 300 rounds per client instead of 1000, for time.
void tcp_store_helper(const std::string& prefix) {
  TcpStoreOptions so;
  so.is_server = true;
  so.timeout = std::chrono::seconds(20);
  auto server_tcp = Store::tcp(so);
  auto server = with_prefix(server_tcp, prefix);
  set_get_compare_delete(*server);
  server->add("counter", 1);
  EXPECT_EQ(server->num_keys(), 4);
  EXPECT_TRUE(server->delete_key("key0"));
  EXPECT_FALSE(server->delete_key("badKeyName"));
  EXPECT_EQ(server->num_keys(), 3);
  server->set_timeout(milliseconds(100));
  EXPECT_THROW(server->get("key0"), TimeoutError);
  server->set_timeout(std::chrono::seconds(20));

  constexpr int kThreads = 16, kIterations = 300;
  std::vector<std::shared_ptr<Store>> clients;
  for (int i = 0; i < kThreads; ++i) {
    TcpStoreOptions co;
    co.port = server_tcp->port();
    co.timeout = std::chrono::seconds(20);
    clients.push_back(with_prefix(Store::tcp(co), prefix));
  }
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&, i] {
      auto& c = *clients[i];
      for (int j = 0; j < kIterations; ++j) c.add("counter", 1);
      const std::string key = "thread_" + std::to_string(i);
      for (int j = 0; j < kIterations; ++j) {
        c.set(key, "thread_val_" + std::to_string(j));
        EXPECT_EQ(c.get(key), "thread_val_" + std::to_string(j));
      }
      ++done;
      c.wait({"all done"});
      EXPECT_EQ(c.get("counter"), std::to_string(kThreads * kIterations + 1));
      for (int j = 0; j < kThreads; ++j) {
        EXPECT_EQ(c.get("thread_" + std::to_string(j)), "thread_val_" + std::to_string(kIterations - 1));
      }
    });
  }
  while (done < kThreads) std::this_thread::sleep_for(milliseconds(5));
  server->set("all done", "1");
  for (auto& t : threads) t.join();
  clients.clear();  // disconnecting clients does not shut the store down
  EXPECT_EQ(server->get("counter"), std::to_string(kThreads * kIterations + 1));
  for (int i = 0; i < kThreads; ++i) {
    EXPECT_EQ(server->get("thread_" + std::to_string(i)),
              "thread_val_" + std::to_string(kIterations - 1));
  }
}

TEST(TCPStoreTest, testHelper) { tcp_store_helper(""); }

TEST(TCPStoreTest, testHelperPrefix) { tcp_store_helper("testPrefix"); }

// testCleanShutdown: the server goes away while a client waits for a key; the client's call ends
// with an error (dpx: a DistributedError, PeerLostError here) instead of waiting forever.
TEST(TCPStoreTest, testCleanShutdown) {
  TcpStoreOptions so;
  so.is_server = true;
  so.timeout = std::chrono::seconds(20);
  auto server = Store::tcp(so);
  server->set("key", "val");
  TcpStoreOptions co;
  co.port = server->port();
  co.timeout = std::chrono::seconds(20);
  auto client = Store::tcp(co);
  EXPECT_EQ(client->get("key"), "val");
  const auto start = std::chrono::steady_clock::now();
  std::thread waiter([&] { EXPECT_THROW(client->get("invalid_key"), DistributedError); });
  std::this_thread::sleep_for(milliseconds(200));  // the client is inside its get
  server.reset();
  waiter.join();
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

std::string temp_path() {
  char path[] = "/tmp/dpx-filestore-XXXXXX";
  const int fd = ::mkstemp(path);
  if (fd >= 0) ::close(fd);
  return path;
}

// The keys c10d's FileStore keeps for itself in a fresh file (PyTorch 2.x counts one, 1.13 none).
std::int64_t file_store_own_keys() {
  const std::string path = temp_path();
  const auto n = Store::file(path, 1)->num_keys();
  ::unlink(path.c_str());
  return n;
}

// FileStoreTest testGetAndSet: the checks and the key count, then a second instance on the same
// file sees the keys, and counts one more (the new instance's own, as PyTorch's test expects).
void file_store_get_set(const std::string& prefix) {
  const std::string path = temp_path();
  const auto own = file_store_own_keys();
  {
    auto file = Store::file(path, 2);
    auto store = with_prefix(file, prefix);
    set_get_compare_delete(*store);
    EXPECT_EQ(file->num_keys(), 3 + own);
  }
  {
    auto file = Store::file(path, 2);
    EXPECT_EQ(with_prefix(file, prefix)->get("key0"), "newValue");
    EXPECT_EQ(file->num_keys(), 3 + own + 1);
  }
  ::unlink(path.c_str());
}

TEST(FileStoreTest, testGetAndSet) { file_store_get_set(""); }

TEST(FileStoreTest, testGetAndSetWithPrefix) { file_store_get_set("testPrefix"); }

// testStressStore: 4 threads, each with its own FileStore on one file, add 100 times.
void file_store_stress(const std::string& prefix) {
  const std::string path = temp_path();
  constexpr int kThreads = 4, kIterations = 100;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      auto store = with_prefix(Store::file(path, kThreads + 1), prefix);
      for (int j = 0; j < kIterations; ++j) store->add("counter", 1);
    });
  }
  for (auto& t : threads) t.join();
  auto store = with_prefix(Store::file(path, kThreads + 1), prefix);
  EXPECT_EQ(store->get("counter"), std::to_string(kThreads * kIterations));
  ::unlink(path.c_str());
}

TEST(FileStoreTest, testStressStore) { file_store_stress(""); }

TEST(FileStoreTest, testStressStoreWithPrefix) { file_store_stress("testPrefix"); }

// HashStoreTest testGetAndSet: the checks, the key count, a get that times out, and a get that
// waits for a set from another thread.
void hash_store_get_set(const std::string& prefix) {
  {
    auto store = with_prefix(Store::hash(), prefix);
    set_get_compare_delete(*store);
    EXPECT_EQ(store->num_keys(), 3);
    EXPECT_TRUE(store->delete_key("key0"));
    EXPECT_EQ(store->num_keys(), 2);
    EXPECT_FALSE(store->delete_key("badKeyName"));
    store->set_timeout(milliseconds(100));
    EXPECT_THROW(store->get("key0"), TimeoutError);
  }
  {
    auto store = with_prefix(Store::hash(), prefix);
    std::thread setter([&] { store->set("key0", "value0"); });
    EXPECT_EQ(store->get("key0"), "value0");
    setter.join();
  }
}

TEST(HashStoreTest, testGetAndSet) { hash_store_get_set(""); }

TEST(HashStoreTest, testGetAndSetWithPrefix) { hash_store_get_set("testPrefix"); }

// testStressStore: 4 threads add 100 times to one store.
void hash_store_stress(const std::string& prefix) {
  auto store = with_prefix(Store::hash(), prefix);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      for (int j = 0; j < 100; ++j) store->add("counter", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store->get("counter"), "400");
}

TEST(HashStoreTest, testStressStore) { hash_store_stress(""); }

TEST(HashStoreTest, testStressStoreWithPrefix) { hash_store_stress("testPrefix"); }

}  // namespace
}  // namespace dpx::conformance
