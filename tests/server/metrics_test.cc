#include "server/metrics.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace flowstate {
namespace {

// One sample line of the text format.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  std::string value;  // as written
};

// Parses the sample lines (not # lines) of a text exposition. Fails the
// test on a line it cannot read.
std::vector<Sample> ParseSamples(const std::string& text) {
  std::vector<Sample> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') s.name += line[i++];
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        std::string key, value;
        while (i < line.size() && line[i] != '=') key += line[i++];
        i += 2;  // ="
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\' && i + 1 < line.size()) {
            char e = line[++i];
            value += e == 'n' ? '\n' : e;
          } else {
            value += line[i];
          }
          ++i;
        }
        ++i;  // closing quote
        if (i < line.size() && line[i] == ',') ++i;
        s.labels[key] = value;
      }
      ++i;  // }
    }
    EXPECT_TRUE(i < line.size() && line[i] == ' ') << "bad sample line: " << line;
    if (i < line.size()) s.value = line.substr(i + 1);
    out.push_back(s);
  }
  return out;
}

// The value of the series `name{labels}` (exact label set), or nullopt.
std::optional<double> Value(const std::string& text, const std::string& name,
                            const std::map<std::string, std::string>& labels = {}) {
  for (const Sample& s : ParseSamples(text)) {
    if (s.name == name && s.labels == labels) return std::strtod(s.value.c_str(), nullptr);
  }
  return std::nullopt;
}

int CountSeries(const std::string& text, const std::string& name) {
  int n = 0;
  for (const Sample& s : ParseSamples(text)) n += s.name == name;
  return n;
}

// "# TYPE name type" lines, by name; a name written twice fails the test.
std::map<std::string, std::string> Types(const std::string& text) {
  std::map<std::string, std::string> types;
  std::set<std::string> helps;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    std::string hash, kind, name, rest;
    l >> hash >> kind >> name >> rest;
    if (hash != "#") continue;
    if (kind == "TYPE") {
      EXPECT_TRUE(types.emplace(name, rest).second) << "second TYPE for " << name;
    } else if (kind == "HELP") {
      EXPECT_TRUE(helps.insert(name).second) << "second HELP for " << name;
      EXPECT_FALSE(rest.empty()) << "empty HELP for " << name;
    }
  }
  for (const auto& [name, type] : types) EXPECT_TRUE(helps.count(name)) << "no HELP for " << name;
  return types;
}

// Runs `promtool check metrics` on `text`; returns its exit status and
// fills `output` with what it printed. Fails the test when promtool is not
// installed (CI always has it: Debian's `prometheus` package, installed by
// scripts/install-deps).
int Promtool(const std::string& text, std::string* output) {
  if (std::system("command -v promtool >/dev/null 2>&1") != 0) {
    ADD_FAILURE() << "promtool not found on PATH: install Debian's `prometheus` package "
                     "(scripts/install-deps does)";
    return -1;
  }
  char path[] = "/tmp/flowstate_metrics_XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) {
    ADD_FAILURE() << "mkstemp failed";
    return -1;
  }
  ::close(fd);
  {
    std::ofstream f(path, std::ios::binary);
    f << text;
  }
  std::string cmd = std::string("promtool check metrics < ") + path + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    ADD_FAILURE() << "popen failed: " << cmd;
    std::remove(path);
    return -1;
  }
  output->clear();
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) output->append(buf, n);
  int status = pclose(p);
  std::remove(path);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void ExpectPromtoolPasses(const std::string& text) {
  std::string out;
  int rc = Promtool(text, &out);
  EXPECT_EQ(rc, 0) << "promtool check metrics (0 ok, 1 malformed, 3 lint):\n" << out << "\non:\n" << text;
  EXPECT_EQ(out, "") << text;
}

JobInfo Job(const std::string& id, JobState state, double loss = 0, double eps = 0) {
  JobInfo j;
  j.id = id;
  j.name = "job " + id;
  j.state = state;
  j.loss = loss;
  j.examples_per_sec = eps;
  return j;
}

// Records some of everything and renders it.
std::string RecordEverything(Metrics* m) {
  m->ObserveHttpRequest("/v1/jobs", 200, 0.002);
  m->ObserveHttpRequest("/v1/jobs", 200, 0.004);
  m->ObserveHttpRequest("/v1/jobs", 400, 0.0003);
  m->ObserveHttpRequest("/v1/jobs/{id}", 404, 0.0002);
  m->ObserveHttpRequest("/metrics", 200, 0.001);
  m->ObserveGrpcRequest("/flowstate.v1.Jobs/Submit", "OK", 0.01);
  m->ObserveGrpcRequest("/flowstate.v1.Jobs/Submit", "INVALID_ARGUMENT", 0.0005);
  m->ObserveGrpcRequest("/flowstate.v1.Jobs/Get", "NOT_FOUND", 0.0001);

  JobObserver* o = m->job_observer();
  o->OnStateChange(Job("job-1", JobState::kQueued), JobState::kQueued);
  o->OnStateChange(Job("job-1", JobState::kRunning), JobState::kQueued);
  o->OnStep(Job("job-1", JobState::kRunning, 2.5, 6400), 0.02, 128);
  o->OnStep(Job("job-1", JobState::kRunning, 1.5, 6400), 0.02, 128);
  o->OnStep(Job("job-1", JobState::kRunning, 0.75, 6000), 0.2, 128);
  o->OnStateChange(Job("job-2", JobState::kRunning), JobState::kQueued);
  o->OnStep(Job("job-2", JobState::kRunning, 0.25, 100), 3, 64);

  m->ObserveCheckpoint("job-1", 0.3, 1 << 20, true);
  m->ObserveCheckpoint("job-1", 0.1, 0, false);

  m->SetScrapeHook([](Metrics* mm) {
    mm->SetJobsByState("RUNNING", 2);
    mm->SetJobsByState("QUEUED", 1);
    mm->SetQueueDepth(1);
    mm->SetDeviceMemory("/job:localhost/replica:0/task:0/device:CPU:0", 4096, 8192);
  });
  return m->Render();
}

using Labels = std::map<std::string, std::string>;

TEST(Metrics, RendersEverySeriesWithItsValue) {
  Metrics m;
  std::string text = RecordEverything(&m);

  EXPECT_EQ(Value(text, "flowstate_http_requests_total", {{"route", "/v1/jobs"}, {"code", "200"}}), 2);
  EXPECT_EQ(Value(text, "flowstate_http_requests_total", {{"route", "/v1/jobs"}, {"code", "400"}}), 1);
  EXPECT_EQ(Value(text, "flowstate_http_requests_total", {{"route", "/v1/jobs/{id}"}, {"code", "404"}}), 1);
  EXPECT_EQ(Value(text, "flowstate_http_requests_total", {{"route", "/metrics"}, {"code", "200"}}), 1);
  EXPECT_EQ(CountSeries(text, "flowstate_http_requests_total"), 4);
  EXPECT_EQ(Value(text, "flowstate_http_request_duration_seconds_count", {{"route", "/v1/jobs"}}), 3);
  EXPECT_NEAR(*Value(text, "flowstate_http_request_duration_seconds_sum", {{"route", "/v1/jobs"}}), 0.0063, 1e-12);
  EXPECT_EQ(Value(text, "flowstate_http_request_duration_seconds_bucket", {{"route", "/v1/jobs"}, {"le", "0.0001"}}),
            0);
  EXPECT_EQ(Value(text, "flowstate_http_request_duration_seconds_bucket", {{"route", "/v1/jobs"}, {"le", "0.0005"}}),
            1);
  EXPECT_EQ(Value(text, "flowstate_http_request_duration_seconds_bucket", {{"route", "/v1/jobs"}, {"le", "0.005"}}),
            3);
  EXPECT_EQ(Value(text, "flowstate_http_request_duration_seconds_bucket", {{"route", "/v1/jobs"}, {"le", "10"}}), 3);
  EXPECT_EQ(Value(text, "flowstate_http_request_duration_seconds_bucket", {{"route", "/v1/jobs"}, {"le", "+Inf"}}),
            3);

  const std::string submit = "/flowstate.v1.Jobs/Submit";
  EXPECT_EQ(Value(text, "flowstate_grpc_requests_total", {{"method", submit}, {"code", "OK"}}), 1);
  EXPECT_EQ(Value(text, "flowstate_grpc_requests_total", {{"method", submit}, {"code", "INVALID_ARGUMENT"}}), 1);
  EXPECT_EQ(Value(text, "flowstate_grpc_requests_total", {{"method", "/flowstate.v1.Jobs/Get"}, {"code", "NOT_FOUND"}}),
            1);
  EXPECT_EQ(Value(text, "flowstate_grpc_request_duration_seconds_count", {{"method", submit}}), 2);

  Labels j1{{"job_id", "job-1"}}, j2{{"job_id", "job-2"}};
  EXPECT_EQ(Value(text, "flowstate_job_steps_total", j1), 3);
  EXPECT_EQ(Value(text, "flowstate_job_steps_total", j2), 1);
  EXPECT_EQ(Value(text, "flowstate_job_examples_total", j1), 384);
  EXPECT_EQ(Value(text, "flowstate_job_loss", j1), 0.75);
  EXPECT_EQ(Value(text, "flowstate_job_loss", j2), 0.25);
  EXPECT_EQ(Value(text, "flowstate_job_examples_per_second", j1), 6000);
  EXPECT_EQ(Value(text, "flowstate_job_examples_per_second", j2), 100);
  EXPECT_EQ(Value(text, "flowstate_job_step_duration_seconds_count", j1), 3);
  EXPECT_NEAR(*Value(text, "flowstate_job_step_duration_seconds_sum", j1), 0.24, 1e-12);
  EXPECT_EQ(Value(text, "flowstate_job_step_duration_seconds_bucket", {{"job_id", "job-1"}, {"le", "0.01"}}), 0);
  EXPECT_EQ(Value(text, "flowstate_job_step_duration_seconds_bucket", {{"job_id", "job-1"}, {"le", "0.025"}}), 2);
  EXPECT_EQ(Value(text, "flowstate_job_step_duration_seconds_bucket", {{"job_id", "job-1"}, {"le", "0.25"}}), 3);
  EXPECT_EQ(Value(text, "flowstate_job_step_duration_seconds_bucket", {{"job_id", "job-2"}, {"le", "2.5"}}), 0);
  EXPECT_EQ(Value(text, "flowstate_job_step_duration_seconds_bucket", {{"job_id", "job-2"}, {"le", "5"}}), 1);
  EXPECT_EQ(Value(text, "flowstate_job_step_duration_seconds_bucket", {{"job_id", "job-2"}, {"le", "60"}}), 1);

  EXPECT_EQ(Value(text, "flowstate_checkpoint_duration_seconds_count", j1), 1);
  EXPECT_EQ(Value(text, "flowstate_checkpoint_bytes", j1), 1 << 20);
  EXPECT_EQ(Value(text, "flowstate_checkpoint_failures_total", j1), 1);

  // Set by the scrape hook, which Render ran first.
  EXPECT_EQ(Value(text, "flowstate_jobs", {{"state", "RUNNING"}}), 2);
  EXPECT_EQ(Value(text, "flowstate_jobs", {{"state", "QUEUED"}}), 1);
  EXPECT_EQ(Value(text, "flowstate_jobs", {{"state", "SUCCEEDED"}}), 0);  // every state, always
  EXPECT_EQ(CountSeries(text, "flowstate_jobs"), 6);
  EXPECT_EQ(Value(text, "flowstate_scheduler_queue_depth"), 1);
  EXPECT_EQ(Value(text, "flowstate_device_memory_bytes",
                  {{"device", "/job:localhost/replica:0/task:0/device:CPU:0"}}),
            4096);
  EXPECT_EQ(Value(text, "flowstate_device_cached_bytes",
                  {{"device", "/job:localhost/replica:0/task:0/device:CPU:0"}}),
            8192);
}

TEST(Metrics, HasHelpTypeAndBaseUnits) {
  Metrics m;
  std::map<std::string, std::string> types = Types(RecordEverything(&m));
  std::map<std::string, std::string> want = {
      {"flowstate_job_steps_total", "counter"},
      {"flowstate_job_examples_total", "counter"},
      {"flowstate_job_step_duration_seconds", "histogram"},
      {"flowstate_job_examples_per_second", "gauge"},
      {"flowstate_job_loss", "gauge"},
      {"flowstate_jobs", "gauge"},
      {"flowstate_scheduler_queue_depth", "gauge"},
      {"flowstate_device_memory_bytes", "gauge"},
      {"flowstate_device_cached_bytes", "gauge"},
      {"flowstate_http_requests_total", "counter"},
      {"flowstate_http_request_duration_seconds", "histogram"},
      {"flowstate_http_connections", "gauge"},
      {"flowstate_http_connections_refused_total", "counter"},
      {"flowstate_event_streams", "gauge"},
      {"flowstate_grpc_requests_total", "counter"},
      {"flowstate_grpc_request_duration_seconds", "histogram"},
      {"flowstate_checkpoint_duration_seconds", "histogram"},
      {"flowstate_checkpoint_bytes", "gauge"},
      {"flowstate_checkpoint_failures_total", "counter"},
  };
  EXPECT_EQ(types, want);
}

// Every `le` is written so that it parses back to exactly the bound (no
// 0.30000000000000004 printed as "0.3"), bounds increase, +Inf comes last
// and equals _count.
TEST(Metrics, HistogramBucketsAreExactAndOrdered) {
  Metrics m;
  std::string text = RecordEverything(&m);
  const std::vector<double> step = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                    0.5,   1,      2.5,   5,    10,    30,   60};
  const std::vector<double> request = {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                       0.05,   0.1,     0.25,   0.5,   1,      2.5,   5,    10};
  const std::vector<double> checkpoint = {0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1,
                                          2.5,   5,     10,   30,   60,  120,  300};
  std::map<std::string, const std::vector<double>*> bounds = {
      {"flowstate_job_step_duration_seconds", &step},
      {"flowstate_http_request_duration_seconds", &request},
      {"flowstate_grpc_request_duration_seconds", &request},
      {"flowstate_checkpoint_duration_seconds", &checkpoint},
  };
  // Series -> its le values in output order.
  std::map<std::string, std::vector<std::string>> les;
  std::map<std::string, double> inf, count;
  for (const Sample& s : ParseSamples(text)) {
    for (const auto& [family, b] : bounds) {
      Labels rest = s.labels;
      rest.erase("le");
      std::string key = family;
      for (const auto& [k, v] : rest) key += "," + k + "=" + v;
      if (s.name == family + "_bucket") {
        les[key].push_back(s.labels.at("le"));
        if (s.labels.at("le") == "+Inf") inf[key] = std::strtod(s.value.c_str(), nullptr);
      } else if (s.name == family + "_count") {
        count[key] = std::strtod(s.value.c_str(), nullptr);
      }
    }
  }
  EXPECT_EQ(les.size(), 8u);  // 3 http routes, 2 grpc methods, 2 jobs, 1 checkpoint
  for (const auto& [key, values] : les) {
    const std::vector<double>& want = *bounds.at(key.substr(0, key.find(',')));
    ASSERT_EQ(values.size(), want.size() + 1) << key;
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_EQ(std::strtod(values[i].c_str(), nullptr), want[i]) << key << " le=" << values[i];
    }
    EXPECT_EQ(values.back(), "+Inf") << key;
    EXPECT_EQ(inf[key], count[key]) << key;
  }
}

TEST(Metrics, FinishedJobsLoseThroughputThenTheirSeries) {
  Metrics m;
  m.SetFinishedJobRetention(1);
  JobObserver* o = m.job_observer();
  for (const char* id : {"a", "b", "c"}) {
    o->OnStateChange(Job(id, JobState::kRunning), JobState::kQueued);
    o->OnStep(Job(id, JobState::kRunning, 1.0, 50), 0.01, 10);
  }
  // Never ran: no series at all.
  o->OnStateChange(Job("q", JobState::kQueued), JobState::kQueued);
  o->OnStateChange(Job("q", JobState::kCancelled), JobState::kQueued);

  o->OnStateChange(Job("c", JobState::kPaused, 1.0, 50), JobState::kRunning);
  std::string text = m.Render();
  EXPECT_EQ(Value(text, "flowstate_job_examples_per_second", {{"job_id", "c"}}), 0);
  EXPECT_EQ(Value(text, "flowstate_job_steps_total", {{"job_id", "q"}}), std::nullopt);

  o->OnStateChange(Job("a", JobState::kSucceeded, 1.0, 50), JobState::kRunning);
  text = m.Render();
  EXPECT_EQ(Value(text, "flowstate_job_examples_per_second", {{"job_id", "a"}}), std::nullopt);
  EXPECT_EQ(Value(text, "flowstate_job_steps_total", {{"job_id", "a"}}), 1);
  EXPECT_EQ(Value(text, "flowstate_job_loss", {{"job_id", "a"}}), 1);
  EXPECT_EQ(Value(text, "flowstate_job_step_duration_seconds_count", {{"job_id", "a"}}), 1);

  // Retention 1: finishing b removes every series of a.
  o->OnStateChange(Job("b", JobState::kFailed, 1.0, 50), JobState::kRunning);
  text = m.Render();
  for (const Sample& s : ParseSamples(text)) {
    EXPECT_NE(s.labels.count("job_id") ? s.labels.at("job_id") : "", "a") << s.name;
  }
  EXPECT_EQ(Value(text, "flowstate_job_steps_total", {{"job_id", "b"}}), 1);
  EXPECT_EQ(Value(text, "flowstate_job_steps_total", {{"job_id", "c"}}), 1);
  EXPECT_EQ(Value(text, "flowstate_job_examples_per_second", {{"job_id", "b"}}), std::nullopt);

  // A resumed job reports throughput again.
  o->OnStateChange(Job("c", JobState::kRunning, 1.0, 0), JobState::kQueued);
  o->OnStep(Job("c", JobState::kRunning, 0.5, 70), 0.01, 10);
  text = m.Render();
  EXPECT_EQ(Value(text, "flowstate_job_examples_per_second", {{"job_id", "c"}}), 70);
  EXPECT_EQ(Value(text, "flowstate_job_steps_total", {{"job_id", "c"}}), 2);
  ExpectPromtoolPasses(text);
}

TEST(Metrics, LabelValuesAreBounded) {
  Metrics m;
  for (int i = 0; i < 150; ++i) m.ObserveHttpRequest("/raw/path/" + std::to_string(i), 200, 0.001);
  m.ObserveHttpRequest("/raw/path/0", 200, 0.001);  // seen before the cap: kept
  m.ObserveHttpRequest("", 999, 0.001);
  std::string text = m.Render();
  EXPECT_EQ(CountSeries(text, "flowstate_http_requests_total"), 102);
  EXPECT_EQ(Value(text, "flowstate_http_requests_total", {{"route", "/raw/path/0"}, {"code", "200"}}), 2);
  EXPECT_EQ(Value(text, "flowstate_http_requests_total", {{"route", "other"}, {"code", "200"}}), 50);
  EXPECT_EQ(Value(text, "flowstate_http_requests_total", {{"route", "other"}, {"code", "0"}}), 1);
}

TEST(Metrics, NanLossIsWrittenAsNaN) {
  Metrics m;
  m.job_observer()->OnStateChange(Job("x", JobState::kRunning), JobState::kQueued);
  m.job_observer()->OnStep(Job("x", JobState::kRunning, std::nan(""), 1), 0.01, 1);
  std::string text = m.Render();
  EXPECT_NE(text.find("flowstate_job_loss{job_id=\"x\"} NaN\n"), std::string::npos) << text;
  ExpectPromtoolPasses(text);
}

TEST(Metrics, OutputIsSorted) {
  Metrics m;
  std::string a = RecordEverything(&m);
  EXPECT_EQ(a, m.Render());
  std::vector<std::string> families;
  std::istringstream in(a);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("# TYPE ", 0) == 0) families.push_back(line.substr(7, line.find(' ', 7) - 7));
  }
  EXPECT_TRUE(std::is_sorted(families.begin(), families.end()));
}

TEST(MetricsPromtool, PassesOnEverything) { Metrics m; ExpectPromtoolPasses(RecordEverything(&m)); }

TEST(MetricsPromtool, PassesWithNothingRecorded) {
  Metrics m;
  ExpectPromtoolPasses(m.Render());
}

// Observer calls come with the job manager's lock held, and the scrape hook
// takes that lock: recording and rendering at once must not deadlock.
TEST(Metrics, ConcurrentRecordingAndScrapes) {
  Metrics m;
  std::mutex manager_mu;
  m.SetScrapeHook([&](Metrics* mm) {
    std::lock_guard<std::mutex> l(manager_mu);
    mm->SetQueueDepth(3);
    mm->SetJobsByState("RUNNING", 4);
  });
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::string id = "job-" + std::to_string(t);
      {
        std::lock_guard<std::mutex> l(manager_mu);
        m.job_observer()->OnStateChange(Job(id, JobState::kRunning), JobState::kQueued);
      }
      for (int i = 0; i < 2000; ++i) {
        {
          std::lock_guard<std::mutex> l(manager_mu);
          m.job_observer()->OnStep(Job(id, JobState::kRunning, 1.0 / (i + 1), 10), 0.001, 8);
        }
        m.ObserveHttpRequest("/v1/jobs/{id}", 200, 0.0001 * t);
        m.ObserveGrpcRequest("/flowstate.v1.Jobs/Get", "OK", 0.0002);
      }
    });
  }
  std::thread scraper([&] {
    while (!stop) m.Render();
  });
  for (std::thread& t : threads) t.join();
  stop = true;
  scraper.join();
  std::string text = m.Render();
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(Value(text, "flowstate_job_steps_total", {{"job_id", "job-" + std::to_string(t)}}), 2000);
  }
  EXPECT_EQ(Value(text, "flowstate_http_requests_total", {{"route", "/v1/jobs/{id}"}, {"code", "200"}}), 8000);
  EXPECT_EQ(Value(text, "flowstate_grpc_request_duration_seconds_count", {{"method", "/flowstate.v1.Jobs/Get"}}),
            8000);
}

}  // namespace
}  // namespace flowstate
