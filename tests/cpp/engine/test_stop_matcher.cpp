// Tests for engine/stop_matcher: streamed stop-string matching and the stop-token check.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "engine/stop_matcher.h"
#include "errors/error.h"

namespace tq {
namespace {

struct StreamOutcome {
  std::vector<std::string>
      chunks;        // what each push emitted, then what flush emitted (if not stopped)
  std::string text;  // everything emitted
  bool stopped = false;
  std::string stop_string;
};

StreamOutcome stream(const std::vector<std::string>& stops,
                     const std::vector<std::string>& pieces) {
  StopMatcher matcher(stops);
  StreamOutcome outcome;
  for (const std::string& piece : pieces) {
    StopMatchResult result = matcher.push(piece);
    outcome.chunks.push_back(result.text);
    outcome.text += result.text;
    if (result.stopped) {
      outcome.stopped = true;
      outcome.stop_string = result.stop_string;
      return outcome;
    }
  }
  outcome.chunks.push_back(matcher.flush());
  outcome.text += outcome.chunks.back();
  return outcome;
}

std::vector<std::string> bytes_of(const std::string& text) {
  std::vector<std::string> pieces;
  for (char c : text) pieces.emplace_back(1, c);
  return pieces;
}

// True if text is a sequence of complete UTF-8 characters.
bool complete_utf8(const std::string& text) {
  size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const size_t length = lead < 0x80             ? 1
                          : (lead & 0xE0) == 0xC0 ? 2
                          : (lead & 0xF0) == 0xE0 ? 3
                                                  : 4;
    if (i + length > text.size()) return false;
    for (size_t j = 1; j < length; ++j) {
      if ((static_cast<unsigned char>(text[i + j]) & 0xC0) != 0x80) return false;
    }
    i += length;
  }
  return true;
}

TEST(StopMatcherTest, NoStopEmitsEverythingByFlush) {
  const StreamOutcome outcome = stream({"xyz", "</s>"}, {"Hello", " wor", "ld <", "/y"});
  EXPECT_FALSE(outcome.stopped);
  EXPECT_EQ(outcome.text, "Hello world </y");
  // "<" could start "</s>", so it waits; "</y" cannot, so it is released.
  EXPECT_EQ(outcome.chunks, (std::vector<std::string>{"Hello", " wor", "ld ", "</y", ""}));
}

TEST(StopMatcherTest, HeldBackPrefixIsReleasedByFlush) {
  const StreamOutcome outcome = stream({"</s>"}, {"answer </"});
  EXPECT_FALSE(outcome.stopped);
  EXPECT_EQ(outcome.chunks, (std::vector<std::string>{"answer ", "</"}));
}

TEST(StopMatcherTest, NoStopStringsPassesTextThrough) {
  StopMatcher matcher({});
  const StopMatchResult result = matcher.push("anything at all");
  EXPECT_EQ(result.text, "anything at all");
  EXPECT_FALSE(result.stopped);
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopMatcherTest, StopStringSplitAcrossManyPushes) {
  const StreamOutcome outcome = stream({"<|end|>"}, {"abc<", "|", "en", "d", "|>tail", "more"});
  EXPECT_TRUE(outcome.stopped);
  EXPECT_EQ(outcome.stop_string, "<|end|>");
  EXPECT_EQ(outcome.text, "abc");
  EXPECT_EQ(outcome.chunks, (std::vector<std::string>{"abc", "", "", "", ""}));
}

TEST(StopMatcherTest, StopStringFedByteByByte) {
  const StreamOutcome outcome = stream({"STOP"}, bytes_of("one two STOthree STOP four"));
  EXPECT_TRUE(outcome.stopped);
  EXPECT_EQ(outcome.text, "one two STOthree ");
}

TEST(StopMatcherTest, FalseStartIsReleasedWhenItStopsMatching) {
  const StreamOutcome outcome = stream({"<|end|>"}, {"a<|e", "x", "y"});
  EXPECT_FALSE(outcome.stopped);
  EXPECT_EQ(outcome.chunks, (std::vector<std::string>{"a", "<|ex", "y", ""}));
}

TEST(StopMatcherTest, OverlappingPrefixes) {
  // "aab" with stop "ab": the first "a" is released once the second "a" shows it cannot start "ab".
  StreamOutcome outcome = stream({"ab"}, {"a", "a", "b"});
  EXPECT_TRUE(outcome.stopped);
  EXPECT_EQ(outcome.chunks, (std::vector<std::string>{"", "a", ""}));
  EXPECT_EQ(outcome.text, "a");

  // Self-overlapping stop string: "aaab" with stop "aab" must match at offset 1.
  outcome = stream({"aab"}, bytes_of("aaab"));
  EXPECT_TRUE(outcome.stopped);
  EXPECT_EQ(outcome.text, "a");
  outcome = stream({"aab"}, {"aaab"});
  EXPECT_TRUE(outcome.stopped);
  EXPECT_EQ(outcome.text, "a");

  // "ababac" with stop "abac": the first "ab" is released once "abab" rules it out.
  outcome = stream({"abac"}, bytes_of("ababac!"));
  EXPECT_TRUE(outcome.stopped);
  EXPECT_EQ(outcome.text, "ab");
}

TEST(StopMatcherTest, EarliestOfSeveralStopStringsWins) {
  StreamOutcome outcome = stream({"STOP", "END"}, {"abc END def STOP"});
  EXPECT_TRUE(outcome.stopped);
  EXPECT_EQ(outcome.stop_string, "END");
  EXPECT_EQ(outcome.text, "abc ");

  // Same start: the first listed wins; the emitted text is the same either way.
  outcome = stream({"abc", "ab"}, {"xabcd"});
  EXPECT_EQ(outcome.stop_string, "abc");
  EXPECT_EQ(outcome.text, "x");

  // Streamed: the shorter one completes first and ends generation.
  outcome = stream({"abcd", "bc"}, bytes_of("xabcd"));
  EXPECT_EQ(outcome.stop_string, "bc");
  EXPECT_EQ(outcome.text, "xa");
}

TEST(StopMatcherTest, HoldsOnlyWhatCouldStillMatch) {
  StopMatcher matcher({"<|im_end|>", "\n\n"});
  EXPECT_EQ(matcher.push("line\n").text, "line");
  EXPECT_EQ(matcher.held_back(), "\n");
  EXPECT_EQ(matcher.push("x<|im").text, "\nx");
  EXPECT_EQ(matcher.held_back(), "<|im");
  const StopMatchResult result = matcher.push("_end|>");
  EXPECT_TRUE(result.stopped);
  EXPECT_EQ(result.text, "");
  EXPECT_EQ(result.stop_string, "<|im_end|>");
}

TEST(StopMatcherTest, AfterStopEverythingIsDropped) {
  StopMatcher matcher({"##"});
  const StopMatchResult first = matcher.push("done## trailing");
  EXPECT_TRUE(first.stopped);
  EXPECT_EQ(first.text, "done");
  EXPECT_TRUE(matcher.stopped());
  const StopMatchResult later = matcher.push("more text");
  EXPECT_TRUE(later.stopped);
  EXPECT_EQ(later.text, "");
  EXPECT_EQ(later.stop_string, "##");
  EXPECT_EQ(matcher.flush(), "");
}

TEST(StopMatcherTest, Utf8StopStringSplitInsideCharacters) {
  // "。" is 3 bytes; fed byte by byte, no emitted chunk may end inside a character.
  const std::string text = "你好。世界";
  const StreamOutcome outcome = stream({"。"}, bytes_of(text));
  EXPECT_TRUE(outcome.stopped);
  EXPECT_EQ(outcome.text, "你好");
  for (const std::string& chunk : outcome.chunks) EXPECT_TRUE(complete_utf8(chunk)) << chunk;

  const StreamOutcome multi = stream({"世界"}, {"你好\xE4", "\xB8\x96\xE7", "\x95\x8C!"});
  EXPECT_TRUE(multi.stopped);
  EXPECT_EQ(multi.text, "你好");
}

TEST(StopMatcherTest, Utf8TextWithoutStopIsEmittedInWholeCharacters) {
  const std::string text = "café — naïve 😀 end";
  const StreamOutcome outcome = stream({"STOP"}, bytes_of(text));
  EXPECT_FALSE(outcome.stopped);
  EXPECT_EQ(outcome.text, text);
  for (const std::string& chunk : outcome.chunks) EXPECT_TRUE(complete_utf8(chunk)) << chunk;

  StopMatcher matcher({});
  EXPECT_EQ(matcher.push("caf\xC3").text, "caf");
  EXPECT_EQ(matcher.push("\xA9!").text, "\xC3\xA9!");
  EXPECT_EQ(matcher.push("\xF0\x9F").text, "");
  EXPECT_EQ(matcher.flush(), "\xF0\x9F");  // an incomplete tail still comes out at the end
}

TEST(StopMatcherTest, MalformedUtf8IsNotHeldForever) {
  StopMatcher matcher({});
  EXPECT_EQ(matcher.push("a\x80\x80\x80\x80").text, "a\x80\x80\x80\x80");
  EXPECT_EQ(matcher.push("b\xFF").text, "b\xFF");
}

TEST(StopMatcherTest, EmptyStopStringThrows) { EXPECT_THROW(StopMatcher({"ok", ""}), Error); }

TEST(StopTokenTest, EosAndStopTokenIds) {
  SamplingParams params;
  params.stop_token_ids = {7, 9};
  const std::vector<int32_t> eos = {2, 151645};
  EXPECT_TRUE(is_stop_token(2, params, eos));
  EXPECT_TRUE(is_stop_token(151645, params, eos));
  EXPECT_TRUE(is_stop_token(9, params, eos));
  EXPECT_FALSE(is_stop_token(3, params, eos));

  params.ignore_eos = true;  // EOS no longer stops; explicit stop_token_ids still do
  EXPECT_FALSE(is_stop_token(2, params, eos));
  EXPECT_TRUE(is_stop_token(7, params, eos));
  EXPECT_FALSE(is_stop_token(7, SamplingParams{}, {}));
}

}  // namespace
}  // namespace tq
