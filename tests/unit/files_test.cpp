// dpx/runtime/files.h: the folder operations dpx's programs use in place of std::filesystem's
// (Note [LibTorch's std::filesystem]).
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "dpx/runtime/files.h"

namespace dpx {
namespace {

class Files : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dpx-files-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { remove_tree(dir_); }
  void touch(const std::string& path) { std::ofstream(path) << "x"; }
  std::string dir_;
};

TEST_F(Files, MakeDirsListsAndRemovesATree) {
  make_dirs(dir_ + "/a/b/c");
  make_dirs(dir_ + "/a/b/c");  // already there: nothing to do
  touch(dir_ + "/a/b/c/f");
  touch(dir_ + "/a/z");
  touch(dir_ + "/a/m");
  EXPECT_EQ(list_dir(dir_ + "/a"), (std::vector<std::string>{"b", "m", "z"}));
  EXPECT_TRUE(list_dir(dir_ + "/missing").empty());
  remove_tree(dir_ + "/a");
  EXPECT_FALSE(path_exists(dir_ + "/a"));
  EXPECT_TRUE(path_exists(dir_));
  remove_tree(dir_ + "/a");  // gone already: no error
}

TEST_F(Files, RemoveTreeLeavesWhatLinksPointToAlone) {
  make_dirs(dir_ + "/keep");
  touch(dir_ + "/keep/file");
  make_dirs(dir_ + "/tree");
  ASSERT_EQ(::symlink((dir_ + "/keep").c_str(), (dir_ + "/tree/link").c_str()), 0);
  ASSERT_EQ(::symlink((dir_ + "/nowhere").c_str(), (dir_ + "/tree/dangling").c_str()), 0);
  EXPECT_TRUE(path_exists(dir_ + "/tree/dangling"));
  remove_tree(dir_ + "/tree");
  EXPECT_FALSE(path_exists(dir_ + "/tree"));
  EXPECT_TRUE(path_exists(dir_ + "/keep/file"));
}

TEST_F(Files, MakeDirsNamesWhatStoodInTheWay) {
  touch(dir_ + "/file");
  try {
    make_dirs(dir_ + "/file/sub");
    FAIL() << "a folder under a file was made";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("cannot create the folder " + dir_ + "/file"));
  }
  try {
    make_dirs(dir_ + "/file");
    FAIL() << "a file passed for a folder";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("a file of that name is there"));
  }
}

TEST_F(Files, AbsolutePathAndTempDir) {
  EXPECT_EQ(absolute_path("/x/y"), "/x/y");
  char* cwd = ::getcwd(nullptr, 0);
  const std::string here = cwd;
  ::free(cwd);
  EXPECT_EQ(absolute_path("x/y"), here + "/x/y");
  EXPECT_EQ(absolute_path("./x"), here + "/x");
  EXPECT_EQ(absolute_path(""), here);
  const char* old = ::getenv("TMPDIR");
  const std::string saved = old ? old : "";
  ::setenv("TMPDIR", "/var/tmp", 1);
  EXPECT_EQ(temp_dir(), "/var/tmp");
  ::setenv("TMPDIR", "", 1);
  EXPECT_EQ(temp_dir(), "/tmp");
  if (old) ::setenv("TMPDIR", saved.c_str(), 1); else ::unsetenv("TMPDIR");
}

}  // namespace
}  // namespace dpx
