// The request fields that ask for structured output, in the dialects clients send: OpenAI's
// response_format (json_object, json_schema), vLLM's guided_json / guided_regex / guided_choice /
// guided_grammar and structured_outputs, llama.cpp's grammar and json_schema.
#pragma once
#include <nlohmann/json.hpp>

#include <optional>
#include <string_view>

#include "engine/structured_output.h"

namespace tq {

// The constraint the body asks for, or none. raw_body, when given, is the body as sent: schemas
// keep its key order (properties are generated in the order the schema lists them). Throws
// ApiError (400) naming the field when a field has the wrong shape or two fields ask for
// different constraints.
std::optional<OutputConstraintSpec> parse_output_constraint(const nlohmann::json& body, std::string_view raw_body = {});

}  // namespace tq
