// Files and folders for dpx's programs (dpxrun, the tests), without std::filesystem's
// out-of-line operations.
//
// Note [LibTorch's std::filesystem]
// PyTorch 2.11's libtorch.so carries
// its own copies of those operations (remove_all, create_directories, absolute, ...), and a
// program linked against it calls them in place of libstdc++'s, since libtorch.so is searched
// first. Its remove_all jumps to address 0 (seen on the GPU machine: every dpxrun ended in
// SIGSEGV); the CTest `filesystem_imports` keeps dpx's binaries from importing any of them.
#pragma once

#include <string>
#include <vector>

namespace dpx {

// The names in `dir` (not "." and ".."), sorted; empty when `dir` cannot be read.
std::vector<std::string> list_dir(const std::string& dir);

// Whether `path` names something (a symbolic link counts even when it dangles).
bool path_exists(const std::string& path);

// Creates `dir` and the folders above it that are missing (mkdir -p). Throws std::runtime_error
// naming the folder and the system's reason when one cannot be made.
void make_dirs(const std::string& dir);

// Removes `path` and, for a folder, everything inside it, without following symbolic links
// (rm -rf). Errors are ignored: it is for clean-up, and removes what it can.
void remove_tree(const std::string& path) noexcept;

// `path` made absolute against the working directory, without resolving links or requiring
// that it exists.
std::string absolute_path(const std::string& path);

// The folder for temporary files: $TMPDIR when set and not empty, else /tmp (as Python's
// tempfile and torchrun choose it).
std::string temp_dir();

}  // namespace dpx
