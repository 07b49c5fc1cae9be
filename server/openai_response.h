// The OpenAI response schema: engine outputs of one HTTP request's choices become a
// text_completion / chat.completion object, or the chunks of its server-sent-event stream.
#pragma once
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "engine/request.h"
#include "server/openai_request.h"

namespace tq {

class ResponseBuilder {
 public:
  // id: "cmpl-..." / "chatcmpl-..."; choices = prompts x candidates_per_prompt().
  ResponseBuilder(const ApiRequest& request, const ServedModel& model, std::string id, int64_t created);

  int num_choices() const { return static_cast<int>(choices_.size()); }
  // Adds one engine output of choice `index` to the totals.
  void add(int index, const RequestOutput& out);
  // Streaming: the chunks (JSON texts, one per SSE event) this output adds; call after add().
  std::vector<std::string> stream_chunks(int index, const RequestOutput& out);
  // Streaming: the usage chunk (only with stream_options.include_usage), else nothing.
  std::vector<std::string> stream_end() const;
  // The whole response (non-streaming).
  nlohmann::json response() const;
  // Tokens used so far.
  int prompt_tokens() const;
  int completion_tokens() const;

 private:
  struct Choice {
    int prompt_index = 0;
    std::string text;
    std::vector<TokenId> ids;
    std::vector<SampleResult> logprobs;
    std::vector<SampleResult> prompt_logprobs;
    FinishReason finish = FinishReason::none;
    bool started = false;  // streaming: first chunk sent
    size_t content_sent = 0;  // streaming with tools: how much of the answer's content went out
    size_t calls_sent = 0;    // streaming with tools: how many calls went out
    size_t closed_seen = 0;   // streaming with tools: text up to the last closing tag parsed so far
  };

  // The choices a whole response returns, in order: all of them, or with best_of > n the n
  // candidates of each prompt whose tokens have the highest log-probability.
  std::vector<size_t> returned_choices() const;
  nlohmann::json usage() const;
  nlohmann::json chunk(int index, const nlohmann::json& choice_fields) const;
  // Completions' logprobs object for tokens [ids] with their logprob entries; offset: the text
  // offset of the first token.
  nlohmann::json completion_logprobs(const std::vector<TokenId>& ids, const std::vector<SampleResult>& lps,
                                     bool first_is_prompt_start, size_t offset) const;
  nlohmann::json chat_logprobs(const std::vector<TokenId>& ids, const std::vector<SampleResult>& lps) const;
  // With tools: the message fields (content, tool_calls) and finish reason of a finished answer.
  // calls[k] gets the id and (with_index) the stream index first + k.
  nlohmann::json tool_call_list(int index, const std::vector<nlohmann::json>& calls, bool with_index,
                                size_t first = 0) const;
  std::vector<std::string> stream_tool_chunks(int index, const RequestOutput& out, const nlohmann::json& finish);
  std::string token_string(TokenId id) const;
  std::string prompt_text(int prompt_index) const;

  const ApiRequest& request_;
  const ServedModel& model_;
  std::string id_;
  int64_t created_;
  std::vector<Choice> choices_;
};

// A JSON text for the wire: invalid UTF-8 (a token that ends mid-character) becomes U+FFFD.
std::string dump_json(const nlohmann::json& j);

}  // namespace tq
