// tqserve bench serve: load an OpenAI-compatible server (tqserve, llama-server, vLLM) the way
// `vllm bench serve` does with its random dataset: N requests of I random token ids each,
// asking for exactly O tokens (ignore_eos), streamed, at most C in flight. Reports TTFT, TPOT
// and ITL (mean, median, p99) and request and token throughput; --json prints one object.
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <random>
#include <regex>
#include <thread>

#include "cli/commands.h"
#include "errors/error.h"

namespace tq {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct BenchServeFlags {
  std::string url = "http://127.0.0.1:8000";
  std::string model;  // empty: the first of /v1/models
  std::string api_key;
  int num_prompts = 100;
  int concurrency = 0;  // 0: all at once
  int input_len = 128;
  int output_len = 128;
  int token_min = 1000, token_max = 20000;  // random prompt ids are drawn from [min, max)
  uint64_t seed = 0;
  bool json = false;
};

struct RequestResult {
  bool ok = false;
  std::string error;
  double ttft = 0, e2e = 0;
  int output_tokens = 0;
  std::vector<double> itl;  // seconds between consecutive token-bearing chunks
};

struct Summary {
  double mean = 0, median = 0, p99 = 0;
};

Summary summarize(std::vector<double> v) {
  Summary s;
  if (v.empty()) return s;
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / v.size();
  const auto pct = [&](double q) {
    const double pos = q * (v.size() - 1);
    const size_t lo = size_t(pos), hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (pos - lo);
  };
  s.median = pct(0.5);
  s.p99 = pct(0.99);
  return s;
}

struct Target {
  std::string scheme_host_port;
  std::string base_path;  // e.g. "" or "/prefix"
};

Target parse_url(const std::string& url) {
  static const std::regex re(R"(^(https?://[^/]+)(/.*)?$)");
  std::smatch m;
  if (!std::regex_match(url, m, re)) fail("--url '{}' is not an http://host:port URL", url);
  std::string path = m[2].str();
  while (!path.empty() && path.back() == '/') path.pop_back();
  if (path.size() >= 3 && path.compare(path.size() - 3, 3, "/v1") == 0) path.resize(path.size() - 3);
  return {m[1].str(), path};
}

httplib::Headers auth_headers(const BenchServeFlags& f) {
  httplib::Headers h;
  if (!f.api_key.empty()) h.emplace("Authorization", "Bearer " + f.api_key);
  return h;
}

std::string first_model(const Target& t, const BenchServeFlags& f) {
  httplib::Client cli(t.scheme_host_port);
  cli.set_read_timeout(30, 0);
  auto res = cli.Get((t.base_path + "/v1/models").c_str(), auth_headers(f));
  if (!res) fail("cannot reach {}: {}", f.url, httplib::to_string(res.error()));
  if (res->status != 200) fail("{}/v1/models answered {}: {}", f.url, res->status, res->body);
  const json j = json::parse(res->body, nullptr, false);
  if (j.is_discarded() || !j.contains("data") || j["data"].empty()) fail("{}/v1/models lists no model", f.url);
  return j["data"][0].value("id", "");
}

RequestResult run_one(const Target& t, const BenchServeFlags& f, const std::string& model,
                      const std::vector<int>& prompt) {
  RequestResult r;
  json body = {{"model", model},          {"prompt", prompt},      {"max_tokens", f.output_len},
               {"temperature", 0},        {"ignore_eos", true},    {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  httplib::Client cli(t.scheme_host_port);
  cli.set_read_timeout(600, 0);
  cli.set_write_timeout(60, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = t.base_path + "/v1/completions";
  req.headers = auth_headers(f);
  req.headers.emplace("Content-Type", "application/json");
  req.body = body.dump();
  const auto start = Clock::now();
  auto last = start;
  bool first = true;
  int chunks_with_text = 0, usage_tokens = -1;
  std::string buffer;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buffer.append(data, len);
    size_t cut;
    while ((cut = buffer.find("\n\n")) != std::string::npos) {
      const std::string event = buffer.substr(0, cut);
      buffer.erase(0, cut + 2);
      if (event.rfind("data: ", 0) != 0) continue;
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") continue;
      const json j = json::parse(payload, nullptr, false);
      if (j.is_discarded()) continue;
      if (j.contains("usage") && j["usage"].is_object()) usage_tokens = j["usage"].value("completion_tokens", -1);
      if (j.contains("error")) {
        r.error = j["error"].dump();
        continue;
      }
      if (!j.contains("choices") || j["choices"].empty()) continue;
      const std::string text = j["choices"][0].value("text", std::string());
      if (text.empty()) continue;
      const auto now = Clock::now();
      if (first) {
        r.ttft = std::chrono::duration<double>(now - start).count();
        first = false;
      } else {
        r.itl.push_back(std::chrono::duration<double>(now - last).count());
      }
      last = now;
      ++chunks_with_text;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err = httplib::Error::Success;
  const bool sent = cli.send(req, res, err);
  r.e2e = std::chrono::duration<double>(Clock::now() - start).count();
  if (!sent) {
    r.error = httplib::to_string(err);
  } else if (res.status != 200) {
    r.error = fmt::format("HTTP {}", res.status);
  } else if (r.error.empty() && !first) {
    r.ok = true;
    r.output_tokens = usage_tokens >= 0 ? usage_tokens : chunks_with_text;
  } else if (r.error.empty()) {
    r.error = "no tokens streamed";
  }
  return r;
}

int run_bench_serve(const BenchServeFlags& f) {
  if (f.num_prompts < 1 || f.input_len < 1 || f.output_len < 1) fail("--num-prompts, --input-len and --output-len must be positive");
  if (f.token_min < 0 || f.token_max <= f.token_min) fail("--token-range must be MIN,MAX with 0 <= MIN < MAX");
  const Target target = parse_url(f.url);
  const std::string model = f.model.empty() ? first_model(target, f) : f.model;
  std::mt19937_64 rng(f.seed);
  std::uniform_int_distribution<int> id(f.token_min, f.token_max - 1);
  std::vector<std::vector<int>> prompts(f.num_prompts, std::vector<int>(f.input_len));
  for (auto& p : prompts)
    for (int& t : p) t = id(rng);

  const int concurrency = f.concurrency > 0 ? std::min(f.concurrency, f.num_prompts) : f.num_prompts;
  std::vector<RequestResult> results(f.num_prompts);
  std::atomic<int> next{0};
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (int w = 0; w < concurrency; ++w)
    workers.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < f.num_prompts;) results[i] = run_one(target, f, model, prompts[i]);
    });
  for (auto& w : workers) w.join();
  const double duration = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<double> ttft, tpot, itl;
  int completed = 0;
  long long output_tokens = 0;
  std::string first_error;
  for (const RequestResult& r : results) {
    if (!r.ok) {
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    ++completed;
    output_tokens += r.output_tokens;
    ttft.push_back(r.ttft * 1e3);
    if (r.output_tokens > 1) tpot.push_back((r.e2e - r.ttft) / (r.output_tokens - 1) * 1e3);
    for (double x : r.itl) itl.push_back(x * 1e3);
  }
  const Summary s_ttft = summarize(ttft), s_tpot = summarize(tpot), s_itl = summarize(itl);
  const double req_tput = completed / duration, out_tput = output_tokens / duration;
  const double total_tput = (double(completed) * f.input_len + output_tokens) / duration;
  if (f.json) {
    const auto js = [](const Summary& s) { return json{{"mean", s.mean}, {"median", s.median}, {"p99", s.p99}}; };
    json j = {{"url", f.url},
              {"model", model},
              {"num_prompts", f.num_prompts},
              {"concurrency", concurrency},
              {"input_len", f.input_len},
              {"output_len", f.output_len},
              {"completed", completed},
              {"failed", f.num_prompts - completed},
              {"duration_s", duration},
              {"request_throughput", req_tput},
              {"output_throughput", out_tput},
              {"total_token_throughput", total_tput},
              {"ttft_ms", js(s_ttft)},
              {"tpot_ms", js(s_tpot)},
              {"itl_ms", js(s_itl)}};
    if (!first_error.empty()) j["first_error"] = first_error;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("============ Serving Benchmark Result ============\n");
    std::printf("%-40s %d\n%-40s %d\n", "Successful requests:", completed, "Failed requests:", f.num_prompts - completed);
    std::printf("%-40s %d\n%-40s %.2f\n", "Maximum request concurrency:", concurrency, "Benchmark duration (s):", duration);
    std::printf("%-40s %lld\n", "Total generated tokens:", output_tokens);
    std::printf("%-40s %.2f\n%-40s %.2f\n%-40s %.2f\n", "Request throughput (req/s):", req_tput,
                "Output token throughput (tok/s):", out_tput, "Total token throughput (tok/s):", total_tput);
    const auto block = [](const char* title, const char* key, const Summary& s) {
      std::printf("--------------- %s ---------------\n", title);
      std::printf("Mean %-35s %.2f\nMedian %-33s %.2f\nP99 %-36s %.2f\n", key, s.mean, key, s.median, key, s.p99);
    };
    block("Time to First Token", "TTFT (ms):", s_ttft);
    block("Time per Output Token (excl. 1st token)", "TPOT (ms):", s_tpot);
    block("Inter-token Latency", "ITL (ms):", s_itl);
    if (!first_error.empty()) std::printf("first error: %s\n", first_error.c_str());
  }
  return completed == f.num_prompts ? 0 : 1;
}

}  // namespace

void register_bench(CLI::App& app, std::function<int()>& action) {
  CLI::App* bench = app.add_subcommand("bench", "benchmarks: a running server (serve), one sequence's decode (decode)");
  bench->require_subcommand(1);
  add_bench_decode(bench, action);
  auto f = std::make_shared<BenchServeFlags>();
  CLI::App* serve = bench->add_subcommand("serve", "load an OpenAI-compatible server (as `vllm bench serve`)");
  serve->add_option("--url", f->url, "server base URL")->capture_default_str();
  serve->add_option("--model", f->model, "model id (default: the first of /v1/models)");
  serve->add_option("--api-key", f->api_key, "Bearer key");
  serve->add_option("--num-prompts", f->num_prompts, "requests")->capture_default_str()->check(CLI::Range(1, 1000000));
  serve->add_option("--concurrency", f->concurrency, "requests in flight at most (default: all)")->check(CLI::Range(0, 100000));
  serve->add_option("--input-len", f->input_len, "prompt tokens per request")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  serve->add_option("--output-len", f->output_len, "tokens generated per request")->capture_default_str()->check(CLI::Range(1, 1 << 20));
  serve->add_option("--seed", f->seed, "seed of the random prompts")->capture_default_str();
  serve->add_option("--token-min", f->token_min, "smallest random prompt token id")->capture_default_str();
  serve->add_option("--token-max", f->token_max, "random prompt token ids are below this")->capture_default_str();
  serve->add_flag("--json", f->json, "print one JSON object");
  serve->callback([f, &action] { action = [f] { return run_bench_serve(*f); }; });
}

}  // namespace tq
