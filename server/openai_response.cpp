#include "server/openai_response.h"

#include <fmt/format.h>

#include <functional>

#include "server/tool_calls.h"

namespace tq {

using nlohmann::json;

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

ResponseBuilder::ResponseBuilder(const ApiRequest& request, const ServedModel& model, std::string id, int64_t created)
    : request_(request), model_(model), id_(std::move(id)), created_(created) {
  for (size_t p = 0; p < request.prompts.size(); ++p)
    for (int i = 0; i < request.candidates_per_prompt(); ++i) {
      Choice choice;
      choice.prompt_index = static_cast<int>(p);
      choices_.push_back(std::move(choice));
    }
}

std::string ResponseBuilder::token_string(TokenId id) const { return model_.tokenizer->token_bytes(id); }

std::string ResponseBuilder::prompt_text(int prompt_index) const {
  return model_.tokenizer->decode(request_.prompts[prompt_index], false);
}

void ResponseBuilder::add(int index, const RequestOutput& out) {
  Choice& c = choices_[index];
  if (!out.prompt_logprobs.empty()) c.prompt_logprobs = out.prompt_logprobs;
  if (!request_.max_tokens_zero) {
    c.text += out.new_text;
    c.ids.insert(c.ids.end(), out.new_ids.begin(), out.new_ids.end());
    c.logprobs.insert(c.logprobs.end(), out.new_logprobs.begin(), out.new_logprobs.end());
  }
  if (out.finish != FinishReason::none) c.finish = request_.max_tokens_zero ? FinishReason::length : out.finish;
}

int ResponseBuilder::prompt_tokens() const {
  int total = 0;
  for (const auto& p : request_.prompts) total += static_cast<int>(p.size());
  return total;
}

int ResponseBuilder::completion_tokens() const {
  int total = 0;
  for (const Choice& c : choices_) total += static_cast<int>(c.ids.size());
  return total;
}

json ResponseBuilder::usage() const {
  return {{"prompt_tokens", prompt_tokens()},
          {"completion_tokens", completion_tokens()},
          {"total_tokens", prompt_tokens() + completion_tokens()}};
}

namespace {
json finish_json(FinishReason r) {
  return r == FinishReason::none ? json(nullptr) : json(finish_reason_name(r));
}
json top_map(const SampleResult& lp, const std::function<std::string(TokenId)>& str) {
  json top = json::object();
  for (const auto& [id, logprob] : lp.top) {
    const std::string s = str(id);
    if (!top.contains(s)) top[s] = logprob;
  }
  return top;
}
json byte_list(const std::string& s) {
  json b = json::array();
  for (unsigned char ch : s) b.push_back(int(ch));
  return b;
}
}  // namespace

json ResponseBuilder::completion_logprobs(const std::vector<TokenId>& ids, const std::vector<SampleResult>& lps,
                                          bool first_is_prompt_start, size_t offset) const {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  const auto str = [this](TokenId id) { return token_string(id); };
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string s = token_string(ids[i]);
    tokens.push_back(s);
    offsets.push_back(offset);
    offset += s.size();
    if (i == 0 && first_is_prompt_start) {  // nothing precedes the first prompt token
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
    } else {
      token_logprobs.push_back(i < lps.size() ? json(lps[i].logprob) : json(nullptr));
      top.push_back(i < lps.size() ? top_map(lps[i], str) : json(nullptr));
    }
  }
  return {{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

json ResponseBuilder::chat_logprobs(const std::vector<TokenId>& ids, const std::vector<SampleResult>& lps) const {
  json content = json::array();
  for (size_t i = 0; i < ids.size() && i < lps.size(); ++i) {
    const std::string s = token_string(ids[i]);
    json top = json::array();
    for (const auto& [id, logprob] : lps[i].top) {
      const std::string ts = token_string(id);
      top.push_back({{"token", ts}, {"logprob", logprob}, {"bytes", byte_list(ts)}});
    }
    content.push_back({{"token", s}, {"logprob", lps[i].logprob}, {"bytes", byte_list(s)}, {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json ResponseBuilder::chunk(int index, const json& choice_fields) const {
  json choice = choice_fields;
  choice["index"] = index;
  return {{"id", id_},
          {"object", request_.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created_},
          {"model", model_.name},
          {"choices", json::array({choice})}};
}

json ResponseBuilder::tool_call_list(int index, const std::vector<json>& calls, bool with_index, size_t first) const {
  // Ids are the same in a stream and a whole response: the response id, the choice, the call.
  const std::string base = id_.substr(id_.find('-') + 1);
  json list = json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    json call = {{"id", fmt::format("call_{}_{}_{}", base, index, first + k)},
                 {"type", "function"},
                 {"function", {{"name", calls[k]["name"]}, {"arguments", calls[k]["arguments"]}}}};
    if (with_index) call["index"] = first + k;
    list.push_back(std::move(call));
  }
  return list;
}

namespace {
bool is_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\r' || ch == '\n'; }
}  // namespace

// Content goes out as it comes, up to where a tool call may begin (and without the whitespace
// around it, which the whole response trims); each call goes out in one delta as soon as its
// closing tag is written (the text up to a closing tag parses to the same first calls as the whole
// answer does), the rest when the answer is finished, so that the stream reassembles to exactly
// the whole response.
std::vector<std::string> ResponseBuilder::stream_tool_chunks(int index, const RequestOutput& out, const json& finish) {
  Choice& c = choices_[index];
  std::vector<std::string> events;
  size_t lead = 0;
  while (lead < c.text.size() && is_space(c.text[lead])) ++lead;
  size_t end = tool_call_safe_prefix(c.text);
  while (end > lead && is_space(c.text[end - 1])) --end;
  std::string release;
  if (end > lead + c.content_sent) {
    release = c.text.substr(lead + c.content_sent, end - lead - c.content_sent);
    c.content_sent = end - lead;
  }
  std::vector<json> calls;
  if (!finish.is_null()) {
    const ParsedToolCalls parsed = parse_tool_calls(c.text);
    calls = parsed.calls;
    const std::string sent = c.text.substr(lead, c.content_sent);
    if (parsed.content.size() > sent.size() && parsed.content.compare(0, sent.size(), sent) == 0)
      release += parsed.content.substr(sent.size());
  } else if (const size_t closed = tool_calls_closed_prefix(c.text); closed > c.closed_seen) {
    c.closed_seen = closed;  // parsed again only when another call has closed
    calls = parse_tool_calls(c.text.substr(0, closed)).calls;
  }
  calls.erase(calls.begin(), calls.begin() + std::min(calls.size(), c.calls_sent));
  const bool lp_wanted = request_.logprobs >= 0 && !out.new_ids.empty();
  if (!release.empty() || lp_wanted) {
    const json lp = lp_wanted ? chat_logprobs(out.new_ids, out.new_logprobs) : json(nullptr);
    events.push_back(dump_json(chunk(index, {{"delta", {{"content", release}}}, {"logprobs", lp}, {"finish_reason", nullptr}})));
  }
  const json list = tool_call_list(index, calls, true, c.calls_sent);
  c.calls_sent += calls.size();
  for (const json& call : list)
    events.push_back(dump_json(chunk(index, {{"delta", {{"tool_calls", json::array({call})}}},
                                             {"logprobs", nullptr}, {"finish_reason", nullptr}})));
  if (!finish.is_null()) {
    const json reason = c.calls_sent > 0 && c.finish == FinishReason::stop ? json("tool_calls") : finish;
    events.push_back(dump_json(chunk(index, {{"delta", json::object()}, {"logprobs", nullptr}, {"finish_reason", reason}})));
  }
  return events;
}

std::vector<std::string> ResponseBuilder::stream_chunks(int index, const RequestOutput& out) {
  Choice& c = choices_[index];
  std::vector<std::string> events;
  const bool drop = request_.max_tokens_zero;
  const std::string text = drop ? std::string() : out.new_text;
  const std::vector<TokenId> ids = drop ? std::vector<TokenId>() : out.new_ids;
  const json finish = finish_json(out.finish == FinishReason::none ? FinishReason::none : c.finish);
  if (request_.chat) {
    if (!c.started) {
      c.started = true;
      events.push_back(dump_json(chunk(index, {{"delta", {{"role", "assistant"}, {"content", ""}}},
                                               {"logprobs", nullptr}, {"finish_reason", nullptr}})));
    }
    if (request_.tool_calls) {
      auto more = stream_tool_chunks(index, out, finish);
      events.insert(events.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
      return events;
    }
    if (!text.empty() || !ids.empty()) {
      json lp = request_.logprobs >= 0 ? chat_logprobs(ids, out.new_logprobs) : json(nullptr);
      events.push_back(dump_json(chunk(index, {{"delta", {{"content", text}}}, {"logprobs", lp}, {"finish_reason", nullptr}})));
    }
    if (!finish.is_null())
      events.push_back(dump_json(chunk(index, {{"delta", json::object()}, {"logprobs", nullptr}, {"finish_reason", finish}})));
    return events;
  }
  std::string prefix;
  json lp = nullptr;
  if (!c.started) {
    c.started = true;
    if (request_.echo) {
      prefix = prompt_text(c.prompt_index);
      if (request_.logprobs >= 0) lp = completion_logprobs(request_.prompts[c.prompt_index], out.prompt_logprobs, true, 0);
    }
  }
  if (request_.logprobs >= 0 && !ids.empty()) {
    const size_t offset = c.text.size() - text.size() + (request_.echo ? prompt_text(c.prompt_index).size() : 0);
    json gen = completion_logprobs(ids, out.new_logprobs, false, offset);
    if (lp.is_null()) {
      lp = gen;
    } else {
      for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
        for (const json& v : gen[key]) lp[key].push_back(v);
    }
  }
  if (!prefix.empty() || !text.empty() || !ids.empty() || !finish.is_null())
    events.push_back(dump_json(chunk(index, {{"text", prefix + text}, {"logprobs", lp}, {"finish_reason", finish}})));
  return events;
}

std::vector<std::string> ResponseBuilder::stream_end() const {
  if (!request_.include_usage) return {};
  json j = {{"id", id_},
            {"object", request_.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", model_.name},
            {"choices", json::array()},
            {"usage", usage()}};
  return {dump_json(j)};
}

std::vector<size_t> ResponseBuilder::returned_choices() const {
  std::vector<size_t> out;
  const size_t per_prompt = size_t(request_.candidates_per_prompt());
  for (size_t first = 0; first < choices_.size(); first += per_prompt) {
    std::vector<std::pair<double, size_t>> ranked;  // (log-probability of the candidate's tokens, index)
    for (size_t i = first; i < first + per_prompt; ++i) {
      double sum = 0;
      for (const SampleResult& lp : choices_[i].logprobs) sum += lp.logprob;
      ranked.emplace_back(sum, i);
    }
    if (request_.best_of > request_.n)  // most likely first; equal ones in candidate order
      std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
    for (int k = 0; k < request_.n; ++k) out.push_back(ranked[size_t(k)].second);
  }
  return out;
}

json ResponseBuilder::response() const {
  json choices = json::array();
  const std::vector<size_t> returned = returned_choices();
  for (size_t i = 0; i < returned.size(); ++i) {
    const Choice& c = choices_[returned[i]];
    if (request_.chat) {
      json message = {{"role", "assistant"}, {"content", c.text}};
      json finish = finish_json(c.finish);
      if (request_.tool_calls) {
        const ParsedToolCalls parsed = parse_tool_calls(c.text);
        if (!parsed.calls.empty()) {
          message["content"] = parsed.content.empty() ? json(nullptr) : json(parsed.content);
          message["tool_calls"] = tool_call_list(int(i), parsed.calls, false);
          if (c.finish == FinishReason::stop) finish = "tool_calls";
        } else {
          message["content"] = parsed.content;
        }
      }
      choices.push_back({{"index", i},
                         {"message", message},
                         {"logprobs", request_.logprobs >= 0 ? chat_logprobs(c.ids, c.logprobs) : json(nullptr)},
                         {"finish_reason", finish}});
      continue;
    }
    std::string text = c.text;
    json lp = nullptr;
    if (request_.echo) {
      const std::string prompt = prompt_text(c.prompt_index);
      text = prompt + text;
      if (request_.logprobs >= 0) {
        std::vector<TokenId> ids = request_.prompts[c.prompt_index];
        std::vector<SampleResult> lps = c.prompt_logprobs;
        lps.resize(ids.size());
        ids.insert(ids.end(), c.ids.begin(), c.ids.end());
        lps.insert(lps.end(), c.logprobs.begin(), c.logprobs.end());
        lp = completion_logprobs(ids, lps, true, 0);
      }
    } else if (request_.logprobs >= 0) {
      lp = completion_logprobs(c.ids, c.logprobs, false, 0);
    }
    choices.push_back({{"index", i}, {"text", text}, {"logprobs", lp}, {"finish_reason", finish_json(c.finish)}});
  }
  return {{"id", id_},
          {"object", request_.chat ? "chat.completion" : "text_completion"},
          {"created", created_},
          {"model", model_.name},
          {"choices", choices},
          {"usage", usage()}};
}

}  // namespace tq
