// `flowstate jobs ...`, `flowstate run ...` and `flowstate cluster`: the command-line client of a
// running `flowstate serve`, over its REST API (server/API.md) with a
// synchronous Boost.Beast client. Each command opens one keep-alive
// connection, makes its requests on it and exits: 0 success, 1 a failure
// (the server's error message, or a connection error), 2 bad usage. `watch`
// follows the job's server-sent events and exits 0 when the job SUCCEEDED,
// 1 when it FAILED or was CANCELLED.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <unistd.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "api/views.h"
#include "api/views_json.h"
#include "cli/commands.h"
#include "cli/plot.h"
#include "cli/progress.h"

namespace flowstate {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Json = nlohmann::ordered_json;

constexpr const char* kJobsUsage =
    "usage: flowstate jobs submit FILE | list [--json] | get ID | watch ID | cancel ID\n"
    "                      | plot ID --out FILE.svg|FILE.png [--server URL] [--token TOKEN]\n"
    "  --server URL   the server's HTTP address (default: $FLOWSTATE_SERVER or\n"
    "                 http://127.0.0.1:8080)\n"
    "  --token TOKEN  bearer token when the server has auth (default: $FLOWSTATE_TOKEN)\n"
    "watch draws a progress bar on a terminal (plain lines otherwise) and exits 0\n"
    "when the job SUCCEEDED, 1 when it FAILED or was CANCELLED.\n"
    "plot draws the job's loss and eval metrics against the step (GET\n"
    "/v1/jobs/ID/history) as SVG or PNG, by the extension of --out.\n";

constexpr const char* kModelsUsage =
    "usage: flowstate models upload FILE.onnx [--name NAME] | list [--json] | get ID | delete ID\n"
    "                        | export JOB_ID --out FILE.onnx [--server URL] [--token TOKEN]\n"
    "upload prints the new model's id (a job names it: \"model\": {\"onnx\": ID, ...});\n"
    "export writes a job's trained model (GET /v1/jobs/JOB_ID/model.onnx).\n";

constexpr const char* kRunUsage =
    "usage: flowstate run GRAPH.json --fetch NAME [--fetch NAME ...] [--feed NAME=JSON ...]\n"
    "                     [--target NAME ...] [--encoding data|nested|b64]\n"
    "                     [--server URL] [--token TOKEN]\n"
    "Creates a session with the graph (a JSON graph, or an object with a \"graph\"),\n"
    "runs it once with the feeds (any tensor encoding: 3, [1,2], {\"dtype\":...};\n"
    "NAME=@FILE reads the JSON from FILE), prints one line per fetch\n"
    "(NAME: TENSOR) and deletes the session.\n";

// The failure of one request, as a message for stderr.
struct Failure {
  std::string message;
};

struct Response {
  int status = 0;
  std::string body;
};

struct Endpoint {
  std::string host;
  std::string port;
  std::string base;  // path prefix, no trailing '/'
  std::string url;
};

std::optional<Endpoint> ParseUrl(const std::string& url, std::string* error) {
  std::string rest = url;
  if (rest.rfind("http://", 0) == 0) {
    rest = rest.substr(7);
  } else if (rest.find("://") != std::string::npos) {
    *error = "--server '" + url + "': only http:// is supported";
    return std::nullopt;
  }
  Endpoint e;
  e.url = url;
  size_t slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  if (slash != std::string::npos) e.base = rest.substr(slash);
  while (!e.base.empty() && e.base.back() == '/') e.base.pop_back();
  size_t colon = hostport.rfind(':');
  if (!hostport.empty() && hostport[0] == '[') {  // [::1]:8080
    size_t close = hostport.find(']');
    if (close == std::string::npos) {
      *error = "--server '" + url + "': bad IPv6 address";
      return std::nullopt;
    }
    e.host = hostport.substr(1, close - 1);
    e.port = close + 1 < hostport.size() && hostport[close + 1] == ':' ? hostport.substr(close + 2) : "80";
  } else if (colon != std::string::npos) {
    e.host = hostport.substr(0, colon);
    e.port = hostport.substr(colon + 1);
  } else {
    e.host = hostport;
    e.port = "80";
  }
  if (e.host.empty() || e.port.empty() ||
      e.port.find_first_not_of("0123456789") != std::string::npos) {
    *error = "--server '" + url + "': expected http://HOST:PORT";
    return std::nullopt;
  }
  return e;
}

// One keep-alive connection to the server; reconnects when the server closed it.
class Client {
 public:
  Client(Endpoint endpoint, std::string token) : ep_(std::move(endpoint)), token_(std::move(token)) {}

  // A whole request and response (60 s timeout).
  Response Do(http::verb method, const std::string& path, const std::string& body = "") {
    for (int attempt = 0;; ++attempt) {
      Connect();
      stream_->expires_after(std::chrono::seconds(60));
      beast::error_code ec;
      http::write(*stream_, MakeRequest(method, path, body), ec);
      http::response_parser<http::string_body> parser;
      parser.body_limit(boost::none);
      if (!ec) http::read(*stream_, buffer_, parser, ec);
      if (ec) {
        Close();
        // A keep-alive connection the server closed since the last request.
        if (attempt == 0 && reused_ && (ec == http::error::end_of_stream ||
                                        ec == asio::error::connection_reset ||
                                        ec == asio::error::broken_pipe)) {
          continue;
        }
        throw Failure{"request to " + ep_.url + path + " failed: " + ec.message()};
      }
      Response r{int(parser.get().result_int()), parser.get().body()};
      reused_ = parser.get().keep_alive();
      if (!reused_) Close();
      return r;
    }
  }

  // GET of a server-sent event stream: calls on_event(event, data) for each
  // event until it returns false or the stream ends. Returns the status and,
  // when it is not 200, the body.
  Response Stream(const std::string& path,
                  const std::function<bool(const std::string&, const std::string&)>& on_event) {
    Connect();
    stream_->expires_never();
    beast::error_code ec;
    http::write(*stream_, MakeRequest(http::verb::get, path, ""), ec);
    if (ec) throw Failure{"request to " + ep_.url + path + " failed: " + ec.message()};
    http::response_parser<http::buffer_body> parser;
    parser.body_limit(boost::none);
    http::read_header(*stream_, buffer_, parser, ec);
    if (ec) throw Failure{"request to " + ep_.url + path + " failed: " + ec.message()};
    Response r{int(parser.get().result_int()), ""};
    std::string pending, event, data;
    bool go_on = true;
    char chunk[16384];
    while (go_on && !parser.is_done()) {
      parser.get().body().data = chunk;
      parser.get().body().size = sizeof(chunk);
      http::read(*stream_, buffer_, parser, ec);
      if (ec == http::error::need_buffer) ec = {};
      if (ec) break;
      size_t n = sizeof(chunk) - parser.get().body().size;
      if (r.status != 200) {
        r.body.append(chunk, n);
        continue;
      }
      pending.append(chunk, n);
      size_t start = 0, nl;
      while (go_on && (nl = pending.find('\n', start)) != std::string::npos) {
        std::string line = pending.substr(start, nl - start);
        start = nl + 1;
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.empty()) {
          if (!data.empty() || !event.empty()) go_on = on_event(event.empty() ? "message" : event, data);
          event.clear();
          data.clear();
        } else if (line[0] == ':') {
          // a comment (keep-alive)
        } else {
          size_t colon = line.find(':');
          std::string field = line.substr(0, colon);
          std::string value = colon == std::string::npos ? "" : line.substr(colon + 1);
          if (!value.empty() && value[0] == ' ') value.erase(0, 1);
          if (field == "event") event = value;
          if (field == "data") data += (data.empty() ? "" : "\n") + value;
        }
      }
      pending.erase(0, start);
    }
    Close();
    if (ec && ec != http::error::end_of_stream && ec != http::error::partial_message) {
      throw Failure{"event stream of " + ep_.url + path + " broke: " + ec.message()};
    }
    return r;
  }

 private:
  http::request<http::string_body> MakeRequest(http::verb method, const std::string& path,
                                               const std::string& body) {
    http::request<http::string_body> req{method, ep_.base + path, 11};
    req.set(http::field::host, ep_.host + ":" + ep_.port);
    req.set(http::field::user_agent, "flowstate-cli");
    req.keep_alive(true);
    if (!token_.empty()) req.set(http::field::authorization, "Bearer " + token_);
    if (method == http::verb::post || method == http::verb::put) {
      req.set(http::field::content_type, "application/json");
      req.body() = body;
      req.prepare_payload();
    }
    return req;
  }

  void Connect() {
    if (stream_) {
      reused_ = true;
      return;
    }
    reused_ = false;
    beast::error_code ec;
    tcp::resolver resolver(ioc_);
    auto results = resolver.resolve(ep_.host, ep_.port, ec);
    if (ec) throw Failure{"cannot resolve " + ep_.host + ": " + ec.message()};
    stream_.emplace(ioc_);
    stream_->expires_after(std::chrono::seconds(10));
    stream_->connect(results, ec);
    if (ec) {
      stream_.reset();
      throw Failure{"cannot connect to " + ep_.url + ": " + ec.message()};
    }
    stream_->socket().set_option(tcp::no_delay(true), ec);
    buffer_.clear();
  }

  void Close() {
    if (!stream_) return;
    beast::error_code ec;
    stream_->socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.reset();
    buffer_.clear();
  }

  Endpoint ep_;
  std::string token_;
  asio::io_context ioc_;
  std::optional<beast::tcp_stream> stream_;
  beast::flat_buffer buffer_;
  bool reused_ = false;
};

// "HTTP 404 NOT_FOUND: no job 'job-9'" from an error response.
std::string ErrorMessage(const Response& r) {
  std::string msg = "HTTP " + std::to_string(r.status);
  Json j = Json::parse(r.body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    const Json& e = j["error"];
    if (e.contains("code") && e["code"].is_string()) msg += " " + e["code"].get<std::string>();
    if (e.contains("message") && e["message"].is_string()) msg += ": " + e["message"].get<std::string>();
    if (e.contains("node") && e["node"].is_string() && !e["node"].get<std::string>().empty()) {
      msg += " (node '" + e["node"].get<std::string>() + "')";
    }
  } else if (!r.body.empty()) {
    msg += ": " + r.body.substr(0, 400);
  }
  return msg;
}

Json ParseOk(const Response& r, int want = 200) {
  if (r.status != want && !(want == 200 && r.status / 100 == 2)) throw Failure{ErrorMessage(r)};
  Json j = Json::parse(r.body, nullptr, false);
  if (j.is_discarded()) throw Failure{"the server answered HTTP " + std::to_string(r.status) + " with a body that is not JSON"};
  return j;
}

std::string Str(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : "";
}

// "job-1  fashion-mlp  RUNNING  step 612/1407  loss 0.3712"
std::string Summary(const JobInfo& job) {
  std::string s = job.id + "  " + job.name + "  " + std::string(JobStateName(job.state));
  char buf[128];
  std::snprintf(buf, sizeof(buf), "  step %lld/%lld", (long long)job.step, (long long)job.total_steps);
  s += buf;
  if (std::isfinite(job.loss)) {
    std::snprintf(buf, sizeof(buf), "  loss %.4f", job.loss);
    s += buf;
  }
  if (!job.error.empty()) s += "  error: " + job.error;
  return s;
}

// The job of a 2xx response body (api/views_json.h's reader, as every
// client of the view reads it).
JobInfo JobOf(const Response& r, int want = 200) {
  Json j = ParseOk(r, want);
  StatusOr<JobInfo> job = JobInfoFromJson(r.body);
  if (!job.ok()) throw Failure{"the server's job is not one: " + job.status().message()};
  return *job;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Failure{"cannot read " + path};
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The flags every client command takes; the rest stay in `args`.
struct Common {
  std::string server;
  std::string token;
  std::vector<std::string> args;
};

// Splits --server/--token (also --flag=value) out of argv. Returns false
// (with a message) on a flag without its value.
bool ParseCommon(int argc, char** argv, Common* c, std::string* error) {
  const char* env_server = std::getenv("FLOWSTATE_SERVER");
  const char* env_token = std::getenv("FLOWSTATE_TOKEN");
  c->server = env_server && *env_server ? env_server : "http://127.0.0.1:8080";
  c->token = env_token ? env_token : "";
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    bool consumed = false;
    for (std::string f : {"--server", "--token"}) {
      std::string* dst = f == "--server" ? &c->server : &c->token;
      if (a == f) {
        if (i + 1 >= argc) {
          *error = f + " needs a value";
          return false;
        }
        *dst = argv[++i];
        consumed = true;
      } else if (a.rfind(f + "=", 0) == 0) {
        *dst = a.substr(f.size() + 1);
        consumed = true;
      }
      if (consumed) break;
    }
    if (!consumed) c->args.push_back(a);
  }
  return true;
}

int Usage(const char* usage, const std::string& error) {
  if (!error.empty()) std::fprintf(stderr, "flowstate: %s\n", error.c_str());
  std::fputs(usage, stderr);
  return 2;
}

bool WantsHelp(const std::vector<std::string>& args) {
  for (const std::string& a : args) {
    if (a == "-h" || a == "--help") return true;
  }
  return false;
}

int Watch(Client& client, const std::string& id) {
  ProgressPrinter progress(stdout);
  std::optional<JobInfo> last;
  int64_t plain_epoch = -1;
  std::optional<JobState> shown_state;
  Response r = client.Stream("/v1/jobs/" + id + "/events", [&](const std::string& event,
                                                               const std::string& data) {
    StatusOr<JobEvent> e = JobEventDataFromJson(data);
    if (!e.ok()) return true;
    const JobInfo& job = e->info;
    last = job;
    int64_t epochs = std::max<int64_t>(job.epochs, 1);
    if (event == "step") {
      if (!progress.is_terminal() && job.epoch != plain_epoch) {
        // Plain output: a line when an epoch starts (the printer adds one every 5 s).
        char line[160];
        std::snprintf(line, sizeof(line), "epoch %lld/%lld step %lld/%lld loss %.4f %.0f ex/s",
                      (long long)(job.epoch + 1), (long long)epochs, (long long)job.step,
                      (long long)job.total_steps, job.loss, job.examples_per_sec);
        progress.Line(line);
        plain_epoch = job.epoch;
      }
      // The bar is the job's progress over all its steps; the ETA is the
      // server's, from the job's own training rate (known from its first step).
      progress.Update(job.epoch, epochs, job.step, job.total_steps, job.loss, job.examples_per_sec,
                      job.eta_seconds >= 0 ? job.eta_seconds : std::nan(""));
    } else if (event == "eval") {
      progress.Metrics(job.epoch, epochs, job.metrics);
    } else if (event == "checkpoint" || event == "resume") {
      progress.Line(event + ": " + (e->message.empty() ? Summary(job) : e->message));
    }
    if (shown_state != job.state) {
      progress.Line(Summary(job));
      shown_state = job.state;
    }
    return !IsTerminal(job.state);
  });
  if (r.status != 200) throw Failure{ErrorMessage(r)};
  if (!last || !IsTerminal(last->state)) {
    throw Failure{"the event stream of " + id + " ended before the job finished"};
  }
  if (last->state == JobState::kSucceeded) return 0;
  std::fprintf(stderr, "flowstate: job %s %s%s\n", id.c_str(), std::string(JobStateName(last->state)).c_str(),
               last->error.empty() ? "" : (": " + last->error).c_str());
  return 1;
}

// `jobs plot`: the job (for the title) and its history, drawn to `out`.
int Plot(Client& client, const std::string& id, const std::string& out) {
  JobInfo job = JobOf(client.Do(http::verb::get, "/v1/jobs/" + id));
  Response r = client.Do(http::verb::get, "/v1/jobs/" + id + "/history");
  ParseOk(r);
  StatusOr<JobHistory> history = JobHistoryFromJson(r.body);
  if (!history.ok()) throw Failure{"the server's job history is not one: " + history.status().message()};
  std::string title = "Job " + (job.name.empty() ? id : job.name + " (" + id + ")") + " - " +
                      std::string(JobStateName(job.state)) + ", step " + std::to_string(job.step);
  Status s = WriteHistoryPlot(*history, title, out);
  if (!s.ok()) {
    std::fprintf(stderr, "flowstate: %s\n", s.message().c_str());
    return 1;
  }
  std::fprintf(stderr, "wrote %s: %zu step points, %zu evaluations\n", out.c_str(), history->steps.size(),
               history->evals.size());
  return 0;
}

}  // namespace

int JobsCommand(int argc, char** argv) {
  Common c;
  std::string error;
  if (!ParseCommon(argc, argv, &c, &error)) return Usage(kJobsUsage, error);
  if (WantsHelp(c.args)) {
    std::fputs(kJobsUsage, stdout);
    return 0;
  }
  if (c.args.empty()) return Usage(kJobsUsage, "jobs: missing subcommand");
  std::string sub = c.args[0];
  std::vector<std::string> rest(c.args.begin() + 1, c.args.end());
  bool json_out = false;
  std::string out_path;  // plot --out
  std::vector<std::string> positional;
  for (size_t i = 0; i < rest.size(); ++i) {
    const std::string& a = rest[i];
    if (a == "--json") {
      json_out = true;
    } else if (sub == "plot" && (a == "--out" || a.rfind("--out=", 0) == 0)) {
      if (a == "--out" && i + 1 >= rest.size()) return Usage(kJobsUsage, "jobs plot: --out needs a file");
      out_path = a == "--out" ? rest[++i] : a.substr(6);
    } else if (a.size() > 1 && a[0] == '-') {
      return Usage(kJobsUsage, "jobs " + sub + ": unknown flag '" + a + "'");
    } else {
      positional.push_back(a);
    }
  }
  size_t want = sub == "list" ? 0 : 1;
  if (sub != "submit" && sub != "list" && sub != "get" && sub != "watch" && sub != "cancel" &&
      sub != "plot") {
    return Usage(kJobsUsage, "jobs: unknown subcommand '" + sub + "'");
  }
  if (positional.size() != want) {
    return Usage(kJobsUsage, "jobs " + sub + (want ? ": expected one argument" : ": takes no argument"));
  }
  if (sub == "plot" && out_path.empty()) return Usage(kJobsUsage, "jobs plot: --out FILE.svg|FILE.png is required");
  if (sub == "plot" && !CheckPlotPath(out_path).ok()) {
    return Usage(kJobsUsage, "jobs plot: --out " + CheckPlotPath(out_path).message());
  }
  std::optional<Endpoint> ep = ParseUrl(c.server, &error);
  if (!ep) return Usage(kJobsUsage, error);
  Client client(*ep, c.token);
  try {
    if (sub == "plot") return Plot(client, positional[0], out_path);
    if (sub == "submit") {
      std::string body = ReadFile(positional[0]);
      Response r = client.Do(http::verb::post, "/v1/jobs", body);
      JobInfo job = JobOf(r, 201);
      if (json_out) {
        std::printf("%s\n", ParseOk(r, 201).dump(2).c_str());
      } else {
        std::printf("%s\n", job.id.c_str());
        std::fprintf(stderr, "submitted %s\n", Summary(job).c_str());
      }
    } else if (sub == "list") {
      Response r = client.Do(http::verb::get, "/v1/jobs");
      Json list = ParseOk(r);
      if (json_out) {
        std::printf("%s\n", list.dump(2).c_str());
      } else {
        StatusOr<std::vector<JobInfo>> jobs = JobInfoListFromJson(r.body);
        if (!jobs.ok()) throw Failure{"the server's job list is not one: " + jobs.status().message()};
        for (const JobInfo& job : *jobs) std::printf("%s\n", Summary(job).c_str());
      }
    } else if (sub == "get") {
      Json job = ParseOk(client.Do(http::verb::get, "/v1/jobs/" + positional[0]));
      std::printf("%s\n", job.dump(2).c_str());
    } else if (sub == "cancel") {
      Response r = client.Do(http::verb::post, "/v1/jobs/" + positional[0] + "/cancel", "{}");
      JobInfo job = JobOf(r);
      std::printf("%s\n", json_out ? ParseOk(r).dump(2).c_str() : Summary(job).c_str());
    } else {
      return Watch(client, positional[0]);
    }
  } catch (const Failure& f) {
    std::fprintf(stderr, "flowstate: %s\n", f.message.c_str());
    return 1;
  }
  return 0;
}

namespace {

std::string PercentEncode(const std::string& s) {
  std::string out;
  for (unsigned char ch : s) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~') {
      out += char(ch);
    } else {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", ch);
      out += buf;
    }
  }
  return out;
}

// "model-1  cnn  84912 bytes  opset 14  20586 parameters"
std::string ModelSummary(const Json& m) {
  return Str(m, "model_id") + "  " + Str(m, "name") + "  " + std::to_string(m.value("bytes", int64_t{0})) +
         " bytes  opset " + std::to_string(m.value("opset", int64_t{0})) + "  " +
         std::to_string(m.value("parameters", int64_t{0})) + " parameters";
}

}  // namespace

int ModelsCommand(int argc, char** argv) {
  Common c;
  std::string error;
  if (!ParseCommon(argc, argv, &c, &error)) return Usage(kModelsUsage, error);
  if (WantsHelp(c.args)) {
    std::fputs(kModelsUsage, stdout);
    return 0;
  }
  if (c.args.empty()) return Usage(kModelsUsage, "models: missing subcommand");
  const std::string sub = c.args[0];
  bool json_out = false;
  std::string name, out_path;
  std::vector<std::string> positional;
  for (size_t i = 1; i < c.args.size(); ++i) {
    const std::string& a = c.args[i];
    if (a == "--json") {
      json_out = true;
    } else if ((a == "--name" && sub == "upload") || (a == "--out" && sub == "export")) {
      if (i + 1 >= c.args.size()) return Usage(kModelsUsage, "models " + sub + ": " + a + " needs a value");
      (a == "--name" ? name : out_path) = c.args[++i];
    } else if (a.size() > 1 && a[0] == '-') {
      return Usage(kModelsUsage, "models " + sub + ": unknown flag '" + a + "'");
    } else {
      positional.push_back(a);
    }
  }
  if (sub != "upload" && sub != "list" && sub != "get" && sub != "delete" && sub != "export") {
    return Usage(kModelsUsage, "models: unknown subcommand '" + sub + "'");
  }
  const size_t want = sub == "list" ? 0 : 1;
  if (positional.size() != want) {
    return Usage(kModelsUsage, "models " + sub + (want ? ": expected one argument" : ": takes no argument"));
  }
  if (sub == "export" && out_path.empty()) return Usage(kModelsUsage, "models export: --out FILE.onnx is required");
  std::optional<Endpoint> ep = ParseUrl(c.server, &error);
  if (!ep) return Usage(kModelsUsage, error);
  Client client(*ep, c.token);
  try {
    if (sub == "upload") {
      std::string path = "/v1/models" + (name.empty() ? "" : "?name=" + PercentEncode(name));
      Json m = ParseOk(client.Do(http::verb::post, path, ReadFile(positional[0])), 201);
      std::printf("%s\n", json_out ? m.dump(2).c_str() : Str(m, "model_id").c_str());
      if (!json_out) std::fprintf(stderr, "uploaded %s\n", ModelSummary(m).c_str());
    } else if (sub == "list") {
      Json list = ParseOk(client.Do(http::verb::get, "/v1/models"));
      if (json_out) {
        std::printf("%s\n", list.dump(2).c_str());
      } else {
        for (const Json& m : list.value("models", Json::array())) std::printf("%s\n", ModelSummary(m).c_str());
      }
    } else if (sub == "get") {
      std::printf("%s\n", ParseOk(client.Do(http::verb::get, "/v1/models/" + positional[0])).dump(2).c_str());
    } else if (sub == "delete") {
      ParseOk(client.Do(http::verb::delete_, "/v1/models/" + positional[0]));
      std::printf("deleted %s\n", positional[0].c_str());
    } else {
      Response r = client.Do(http::verb::get, "/v1/jobs/" + positional[0] + "/model.onnx");
      if (r.status != 200) throw Failure{ErrorMessage(r)};
      std::ofstream out(out_path, std::ios::binary);
      out.write(r.body.data(), std::streamsize(r.body.size()));
      out.close();
      if (!out) throw Failure{"cannot write " + out_path};
      std::fprintf(stderr, "wrote %s (%zu bytes)\n", out_path.c_str(), r.body.size());
    }
  } catch (const Failure& f) {
    std::fprintf(stderr, "flowstate: %s\n", f.message.c_str());
    return 1;
  }
  return 0;
}

constexpr const char* kClusterUsage =
    "usage: flowstate cluster [--json] [--server URL] [--token T]\n"
    "The tasks of the server's cluster (GET /v1/cluster): name, address, state,\n"
    "incarnation, last heartbeat, devices; the server's own task is marked \"self\".\n";

int ClusterCommand(int argc, char** argv) {
  Common c;
  std::string error;
  if (!ParseCommon(argc, argv, &c, &error)) return Usage(kClusterUsage, error);
  if (WantsHelp(c.args)) {
    std::fputs(kClusterUsage, stdout);
    return 0;
  }
  bool json_out = false;
  for (const std::string& a : c.args) {
    if (a != "--json") return Usage(kClusterUsage, "cluster: unexpected argument '" + a + "'");
    json_out = true;
  }
  std::optional<Endpoint> ep = ParseUrl(c.server, &error);
  if (!ep) return Usage(kClusterUsage, error);
  Client client(*ep, c.token);
  try {
    Response r = client.Do(http::verb::get, "/v1/cluster");
    Json j = ParseOk(r);
    if (json_out) {
      std::printf("%s\n", j.dump(2).c_str());
      return 0;
    }
    StatusOr<ClusterInfo> cluster = ClusterInfoFromJson(r.body);
    if (!cluster.ok()) throw Failure{"the server's cluster is not one: " + cluster.status().message()};
    const Json& tasks = j["tasks"];
    for (size_t i = 0; i < cluster->tasks.size(); ++i) {
      const TaskInfo& t = cluster->tasks[i];
      // "/job:worker/replica:0/task:1  10.0.0.2:50051  UP  incarnation 5a0c…  heartbeat 0.4 s ago  1 device(s)"
      std::string line = t.name() + "  " + (t.address.empty() ? "-" : t.address) + "  " +
                         std::string(TaskStateName(t.state));
      line += "  incarnation " + (t.incarnation != 0 ? FormatIncarnation(t.incarnation) : std::string("-"));
      const Json& age = tasks[i]["heartbeat_age_seconds"];
      char buf[64];
      if (age.is_number()) {
        std::snprintf(buf, sizeof(buf), "  heartbeat %.1f s ago", age.get<double>());
        line += buf;
      } else {
        line += "  never heard from";
      }
      line += "  " + std::to_string(t.devices.size()) + " device(s)";
      if (t.is_self) line += "  (self)";
      if (!t.error.empty()) line += "  error: " + t.error;
      std::printf("%s\n", line.c_str());
    }
  } catch (const Failure& f) {
    std::fprintf(stderr, "flowstate: %s\n", f.message.c_str());
    return 1;
  }
  return 0;
}

int RunCommand(int argc, char** argv) {
  Common c;
  std::string error;
  if (!ParseCommon(argc, argv, &c, &error)) return Usage(kRunUsage, error);
  if (WantsHelp(c.args)) {
    std::fputs(kRunUsage, stdout);
    return 0;
  }
  std::string graph_path, encoding = "data";
  std::vector<std::pair<std::string, std::string>> feeds;  // name, JSON text or @file
  std::vector<std::string> fetches, targets;
  for (size_t i = 0; i < c.args.size(); ++i) {
    const std::string& a = c.args[i];
    auto value = [&](std::string* out) {
      if (i + 1 >= c.args.size()) {
        error = a + " needs a value";
        return false;
      }
      *out = c.args[++i];
      return true;
    };
    std::string v;
    if (a == "--feed") {
      if (!value(&v)) return Usage(kRunUsage, error);
      size_t eq = v.find('=');
      if (eq == std::string::npos || eq == 0) return Usage(kRunUsage, "--feed '" + v + "': expected NAME=JSON");
      feeds.emplace_back(v.substr(0, eq), v.substr(eq + 1));
    } else if (a == "--fetch") {
      if (!value(&v)) return Usage(kRunUsage, error);
      fetches.push_back(v);
    } else if (a == "--target") {
      if (!value(&v)) return Usage(kRunUsage, error);
      targets.push_back(v);
    } else if (a == "--encoding") {
      if (!value(&encoding)) return Usage(kRunUsage, error);
      if (encoding != "data" && encoding != "nested" && encoding != "b64") {
        return Usage(kRunUsage, "--encoding '" + encoding + "': expected data, nested or b64");
      }
    } else if (a.size() > 1 && a[0] == '-') {
      return Usage(kRunUsage, "run: unknown flag '" + a + "'");
    } else if (graph_path.empty()) {
      graph_path = a;
    } else {
      return Usage(kRunUsage, "run: more than one graph file ('" + a + "')");
    }
  }
  if (graph_path.empty()) return Usage(kRunUsage, "run: missing GRAPH.json");
  if (fetches.empty() && targets.empty()) return Usage(kRunUsage, "run: give at least one --fetch");
  std::optional<Endpoint> ep = ParseUrl(c.server, &error);
  if (!ep) return Usage(kRunUsage, error);

  Json graph, run = Json::object();
  try {
    graph = Json::parse(ReadFile(graph_path), nullptr, false);
    if (graph.is_discarded() || !graph.is_object()) {
      std::fprintf(stderr, "flowstate: %s is not a JSON object\n", graph_path.c_str());
      return 2;
    }
    if (!graph.contains("graph")) graph = Json{{"graph", graph}};
    run["feeds"] = Json::object();
    for (const auto& [name, text] : feeds) {
      std::string t = !text.empty() && text[0] == '@' ? ReadFile(text.substr(1)) : text;
      Json value = Json::parse(t, nullptr, false);
      if (value.is_discarded()) {
        std::fprintf(stderr, "flowstate: --feed %s: not JSON: %s\n", name.c_str(), t.c_str());
        return 2;
      }
      run["feeds"][name] = value;
    }
  } catch (const Failure& f) {
    std::fprintf(stderr, "flowstate: %s\n", f.message.c_str());
    return 2;
  }
  run["fetches"] = fetches;
  if (!targets.empty()) run["targets"] = targets;
  run["encoding"] = encoding;

  Client client(*ep, c.token);
  std::string session;
  int rc = 0;
  try {
    Json created = ParseOk(client.Do(http::verb::post, "/v1/sessions", graph.dump()), 201);
    session = Str(created, "session_id");
    if (session.empty()) throw Failure{"the server returned no session_id"};
    Json out = ParseOk(client.Do(http::verb::post, "/v1/sessions/" + session + "/run", run.dump()));
    const Json& outputs = out.contains("outputs") ? out["outputs"] : Json::object();
    for (auto& [name, tensor] : outputs.items()) {
      std::printf("%s: %s\n", name.c_str(), tensor.dump().c_str());
    }
  } catch (const Failure& f) {
    std::fprintf(stderr, "flowstate: %s\n", f.message.c_str());
    rc = 1;
  }
  if (!session.empty()) {
    try {
      Response r = client.Do(http::verb::delete_, "/v1/sessions/" + session);
      if (r.status != 200) {
        std::fprintf(stderr, "flowstate: deleting %s: %s\n", session.c_str(), ErrorMessage(r).c_str());
        rc = 1;
      }
    } catch (const Failure& f) {
      std::fprintf(stderr, "flowstate: deleting %s: %s\n", session.c_str(), f.message.c_str());
      rc = 1;
    }
  }
  return rc;
}

}  // namespace flowstate
