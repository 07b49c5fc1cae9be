#include "jinja/template.h"

#include <variant>

#include "errors/error.h"
#include "jinja/ast.h"
#include "jinja/json.h"
#include "jinja/parse.h"
#include "jinja/runtime.h"
#include "jinja/template_error.h"

namespace tq::jinja {
namespace {

[[noreturn]] void rethrow_as_user_error(const TemplateError& error) {
  if (error.line() > 0) fail("chat template line {}: {}", error.line(), error.what());
  fail("chat template: {}", error.what());
}

Dict context_variables(const nlohmann::ordered_json& context) {
  if (!context.is_object() && !context.is_null()) fail("chat template: the context must be a JSON object");
  Dict variables;
  try {
    if (context.is_object()) {
      for (auto it = context.begin(); it != context.end(); ++it) variables.set(it.key(), from_json(it.value()));
    }
  } catch (const TemplateError& error) {
    rethrow_as_user_error(error);
  }
  return variables;
}

}  // namespace

struct Template::Parsed {
  TemplateAst ast;
};

Template::Template(const std::string& source) : parsed_(std::make_unique<Parsed>()) {
  try {
    parsed_->ast = parse_template(source);
  } catch (const TemplateError& error) {
    rethrow_as_user_error(error);
  }
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const nlohmann::ordered_json& context) const {
  Dict variables = context_variables(context);
  try {
    return render_template(parsed_->ast, variables);
  } catch (const TemplateError& error) {
    rethrow_as_user_error(error);
  } catch (const std::bad_variant_access& error) {
    // A value of an unexpected type reached code that did not check it: a bug in this
    // interpreter, reported as a failed render rather than taking the caller down.
    fail("chat template: internal error while rendering: {}", error.what());
  }
}

std::string render(const std::string& source, const nlohmann::ordered_json& context) {
  return Template(source).render(context);
}

}  // namespace tq::jinja
