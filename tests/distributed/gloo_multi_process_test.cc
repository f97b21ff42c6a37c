// GlooCollective across real processes on loopback: three gloo_rank_main
// processes all-reduce 16 MiB round after round against a store served by
// this test; one is killed with SIGKILL mid-round. The other two fail within
// seconds with UNAVAILABLE naming it, rebuild a group of two under a new
// prefix, and all-reduce there.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "distributed/collective_store.h"

namespace flowstate {
namespace {

using Clock = std::chrono::steady_clock;

// A rank process: its PID and its stdout, read line by line.
class RankProcess {
 public:
  RankProcess(const std::vector<std::string>& args) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      std::vector<char*> argv;
      std::string bin = FLOWSTATE_GLOO_RANK_MAIN;
      argv.push_back(bin.data());
      std::vector<std::string> copy = args;
      for (std::string& a : copy) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(out[1]);
    fd_ = out[0];
  }
  ~RankProcess() {
    Kill();
    if (fd_ >= 0) close(fd_);
  }
  // The next line starting with `prefix`, or "" at the deadline or EOF.
  // Every line read is kept in log().
  std::string WaitFor(const std::string& prefix, Clock::time_point deadline) {
    for (;;) {
      size_t nl;
      while ((nl = buf_.find('\n')) != std::string::npos) {
        std::string line = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        log_ += line + "\n";
        if (line.rfind(prefix, 0) == 0) return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      if (left.count() <= 0 || fd_ < 0) return "";
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, int(std::min<int64_t>(left.count(), 100))) <= 0) continue;
      char chunk[4096];
      ssize_t n = read(fd_, chunk, sizeof(chunk));
      if (n <= 0) return "";
      buf_.append(chunk, size_t(n));
    }
  }
  void Kill() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  // The exit status; kills it after the deadline.
  int Wait(Clock::time_point deadline) {
    while (pid_ > 0 && Clock::now() < deadline) {
      int st = 0;
      if (waitpid(pid_, &st, WNOHANG) == pid_) {
        pid_ = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    Kill();
    return -2;
  }
  const std::string& log() const { return log_; }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string buf_, log_;
};

TEST(GlooMultiProcess, AKilledRankIsNamedAndTheSurvivorsRebuild) {
  CollectiveStoreService store;
  StatusOr<int> port = store.Start("127.0.0.1", 0);
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  const std::string address = "127.0.0.1:" + std::to_string(*port);
  std::vector<std::unique_ptr<RankProcess>> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.push_back(std::make_unique<RankProcess>(std::vector<std::string>{
        address, "multi", std::to_string(r), "3", std::to_string(4 << 20), "20000"}));
  }
  auto deadline = Clock::now() + std::chrono::seconds(60);
  for (auto& p : ranks) {
    ASSERT_NE(p->WaitFor("ROUND 3 OK", deadline), "") << p->log();
  }
  // Mid-round: the ranks are all-reducing 16 MiB back to back.
  const auto killed = Clock::now();
  ranks[2]->Kill();
  deadline = Clock::now() + std::chrono::seconds(30);
  for (int r = 0; r < 2; ++r) {
    std::string failed = ranks[r]->WaitFor("FAILED", deadline);
    const double after = std::chrono::duration<double>(Clock::now() - killed).count();
    ASSERT_NE(failed, "") << "rank " << r << ":\n" << ranks[r]->log();
    EXPECT_EQ(failed.rfind("FAILED UNAVAILABLE 2 ", 0), 0u) << failed;
    EXPECT_NE(failed.find("rank(s) 2 left the group"), std::string::npos) << failed;
    EXPECT_LT(after, 5.0) << "rank " << r << " noticed the killed rank after " << after << " s";
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(ranks[r]->WaitFor("REBUILT ", deadline), "REBUILT " + std::to_string(r) + " 2")
        << ranks[r]->log();
    EXPECT_NE(ranks[r]->WaitFor("REBUILT_OK", deadline), "") << ranks[r]->log();
    EXPECT_EQ(ranks[r]->Wait(deadline), 0) << ranks[r]->log();
  }
  EXPECT_EQ(store.DropPrefix("multi"), 2);  // the membership and its rebuild
}

}  // namespace
}  // namespace flowstate
