// The chat page served at "/": plain HTML and JavaScript, no external assets. It keeps the
// conversation in the page and streams each answer from /v1/chat/completions.
#pragma once
#include <string>

namespace tq {

const std::string& chat_page_html();

}  // namespace tq
