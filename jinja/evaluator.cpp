#include "jinja/runtime.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "jinja/template_error.h"

namespace tq::jinja {
namespace {

class Scope {
 public:
  explicit Scope(std::shared_ptr<Scope> parent) : parent_(std::move(parent)) {}

  // This scope, then the enclosing ones.
  const Value* find(std::string_view name) const {
    for (const Scope* scope = this; scope != nullptr; scope = scope->parent_.get()) {
      if (const Value* value = scope->variables_.find(name)) return value;
    }
    return nullptr;
  }
  void set(std::string name, Value value) { variables_.set(std::move(name), std::move(value)); }
  void clear() { variables_ = Dict(); }

 private:
  std::shared_ptr<Scope> parent_;
  Dict variables_;
};

using ScopePtr = std::shared_ptr<Scope>;

void bind_undefined(Scope& scope, const NameList& names) {
  for (const std::string& name : names) scope.set(name, Value::undefined(fmt::format("'{}' is undefined", name)));
}

// Guards the C++ stack against runaway recursive macros (Python would hit its recursion limit).
constexpr int kMaxMacroDepth = 200;

enum class Flow { kNormal, kBreak, kContinue };

class Evaluator {
 public:
  explicit Evaluator(ObjectArena& arena) : arena_(arena) {}
  // A macro holds on to the scope it was defined in, which holds the macro: clearing every
  // scope at the end breaks these cycles.
  ~Evaluator() {
    for (const ScopePtr& scope : scopes_) scope->clear();
  }

  ScopePtr new_scope(const ScopePtr& parent) {
    scopes_.push_back(std::make_shared<Scope>(parent));
    return scopes_.back();
  }

  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const StmtPtr& stmt : body) {
      Flow flow = exec(*stmt, scope, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

 private:
  // ---- statements ---------------------------------------------------------------------------
  // A new scope for a frame, with the names jinja2 binds to undefined on entry (resolve_scopes in parse.h).
  ScopePtr enter_frame(const ScopePtr& parent, const NameList& undefined_on_entry) {
    ScopePtr scope = new_scope(parent);
    bind_undefined(*scope, undefined_on_entry);
    return scope;
  }

  Flow exec(const Stmt& stmt, const ScopePtr& scope, std::string& out) {
    try {
      return std::visit([&](const auto& node) { return run(node, stmt.line, scope, out); }, stmt.node);
    } catch (TemplateError& error) {
      error.set_line_if_unknown(stmt.line);
      throw;
    }
  }

  Flow run(const TextStmt& node, int, const ScopePtr&, std::string& out) {
    check_string_size(out.size() + node.text.size(), "the rendered text");
    out += node.text;
    return Flow::kNormal;
  }

  Flow run(const PrintStmt& node, int, const ScopePtr& scope, std::string& out) {
    append_str(out, eval(*node.expr, scope));
    return Flow::kNormal;
  }

  // out += str(value), without copying strings; out (rendered text or a ~ chain) stays bounded.
  static void append_str(std::string& out, const Value& value) {
    if (value.is_string()) {
      check_string_size(out.size() + value.as_string().size(), "the rendered text");
      out += value.as_string();
    } else {
      std::string text = to_str(value);
      check_string_size(out.size() + text.size(), "the rendered text");
      out += text;
    }
  }

  Flow run(const IfStmt& node, int, const ScopePtr& scope, std::string& out) {
    for (const auto& [condition, body] : node.branches) {
      if (truthy(eval(*condition, scope))) return exec_body(body, scope, out);
    }
    return exec_body(node.else_body, scope, out);
  }

  Flow run(const ForStmt& node, int, const ScopePtr& scope, std::string& out) {
    std::vector<Value> items = iterate(eval(*node.iterable, scope));
    if (node.filter) {
      std::vector<Value> kept;
      for (Value& item : items) {
        ScopePtr probe = new_scope(scope);
        assign(node.target, item, *probe);
        if (truthy(eval(*node.filter, probe))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec_body(node.else_body, enter_frame(scope, node.else_undefined_on_entry), out);
      return Flow::kNormal;
    }
    auto last_changed_values = std::make_shared<std::optional<std::vector<Value>>>();
    for (size_t i = 0; i < items.size(); ++i) {
      ScopePtr iteration = enter_frame(scope, node.body_undefined_on_entry);
      assign(node.target, items[i], *iteration);
      iteration->set("loop", make_loop_object(items, i, last_changed_values));
      if (exec_body(node.body, iteration, out) == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Flow run(const SetStmt& node, int, const ScopePtr& scope, std::string&) {
    assign(node.target, eval(*node.value, scope), *scope);
    return Flow::kNormal;
  }

  // {% break %} / {% continue %} inside set, filter and with blocks act on the enclosing loop
  // (jinja2 inlines these bodies), abandoning the block's output or assignment.
  Flow run(const SetBlockStmt& node, int, const ScopePtr& scope, std::string&) {
    std::string captured;
    Flow flow = exec_body(node.body, enter_frame(scope, node.undefined_on_entry), captured);
    if (flow != Flow::kNormal) return flow;
    Value value = Value::string(std::move(captured));
    if (node.filter) value = apply_filter_chain(*node.filter, value, scope);
    assign(node.target, value, *scope);
    return Flow::kNormal;
  }

  Flow run(const MacroStmt& node, int, const ScopePtr& scope, std::string&) {
    scope->set(node.name, make_macro(node.name, node.params, node.body, node.undefined_on_entry, scope));
    return Flow::kNormal;
  }

  Flow run(const CallBlockStmt& node, int, const ScopePtr& scope, std::string& out) {
    const auto& call = std::get<CallExpr>(node.call->node);
    Value callee = eval(*call.callee, scope);
    CallArgs args = eval_args(call.args, call.kwargs, scope);
    args.keyword.emplace_back("caller",
                              make_macro("caller", node.caller_params, node.body, node.undefined_on_entry, scope));
    out += to_str(call_value(callee, args));
    return Flow::kNormal;
  }

  Flow run(const FilterBlockStmt& node, int, const ScopePtr& scope, std::string& out) {
    ScopePtr inner = enter_frame(scope, node.undefined_on_entry);
    std::string captured;
    Flow flow = exec_body(node.body, inner, captured);
    if (flow != Flow::kNormal) return flow;
    out += to_str(apply_filter_chain(*node.filter, Value::string(std::move(captured)), inner));
    return Flow::kNormal;
  }

  Flow run(const WithStmt& node, int, const ScopePtr& scope, std::string& out) {
    ScopePtr inner = enter_frame(scope, node.undefined_on_entry);
    for (const auto& [target, value] : node.assignments) assign(target, eval(*value, scope), *inner);
    return exec_body(node.body, inner, out);
  }

  Flow run(const ScopeStmt& node, int, const ScopePtr& scope, std::string& out) {
    exec_body(node.body, enter_frame(scope, node.undefined_on_entry), out);
    return Flow::kNormal;
  }

  Flow run(const BreakStmt&, int, const ScopePtr&, std::string&) { return Flow::kBreak; }
  Flow run(const ContinueStmt&, int, const ScopePtr&, std::string&) { return Flow::kContinue; }

  void assign(const Target& target, const Value& value, Scope& scope) {
    switch (target.kind) {
      case Target::Kind::kName:
        scope.set(target.name, value);
        return;
      case Target::Kind::kNamespaceAttribute: {
        const Value* found = scope.find(target.name);
        if (found == nullptr || !found->is_object() || found->as_object().type_name != "Namespace") {
          raise_error("cannot assign attribute on non-namespace object");
        }
        found->as_object().attributes.set(target.attribute, value);
        return;
      }
      case Target::Kind::kTuple: {
        std::vector<Value> items = iterate(value);
        size_t expected = target.elements.size();
        if (items.size() < expected) {
          raise_error("ValueError: not enough values to unpack (expected {}, got {})", expected, items.size());
        }
        if (items.size() > expected) raise_error("ValueError: too many values to unpack (expected {})", expected);
        for (size_t i = 0; i < expected; ++i) assign(target.elements[i], items[i], scope);
        return;
      }
    }
  }

  Value make_loop_object(const std::vector<Value>& items, size_t index,
                         const std::shared_ptr<std::optional<std::vector<Value>>>& last_changed_values) {
    auto loop = arena_.make("LoopContext");
    auto size = static_cast<int64_t>(items.size());
    auto position = static_cast<int64_t>(index);
    Dict& attributes = loop->attributes;
    attributes.set("index0", Value::integer(position));
    attributes.set("index", Value::integer(position + 1));
    attributes.set("revindex0", Value::integer(size - position - 1));
    attributes.set("revindex", Value::integer(size - position));
    attributes.set("first", Value::boolean(index == 0));
    attributes.set("last", Value::boolean(position == size - 1));
    attributes.set("length", Value::integer(size));
    attributes.set("depth", Value::integer(1));
    attributes.set("depth0", Value::integer(0));
    attributes.set("previtem", index > 0 ? items[index - 1] : Value::undefined("there is no previous item"));
    attributes.set("nextitem", position + 1 < size ? items[index + 1] : Value::undefined("there is no next item"));
    attributes.set("cycle", Value::function("cycle", [index](const CallArgs& args) {
      if (args.positional.empty()) raise_error("TypeError: no items for cycling given");
      return args.positional[index % args.positional.size()];
    }));
    attributes.set("changed", Value::function("changed", [last_changed_values](const CallArgs& args) {
      auto& last = *last_changed_values;
      bool changed = !last.has_value() || last->size() != args.positional.size() ||
                     !std::equal(last->begin(), last->end(), args.positional.begin(), equals);
      if (changed) last = args.positional;
      return Value::boolean(changed);
    }));
    return Value::object(std::move(loop));
  }

  Value make_macro(const std::string& name, const std::vector<MacroParam>& params, const Body& body,
                   const NameList& undefined_on_entry, const ScopePtr& closure) {
    return Value::function(name, [this, name, &params, &body, &undefined_on_entry, closure](const CallArgs& args) {
      if (args.positional.size() > params.size()) {
        raise_error("TypeError: macro '{}' takes not more than {} argument(s)", name, params.size());
      }
      ScopePtr scope = enter_frame(closure, undefined_on_entry);
      for (const auto& entry : args.keyword) {
        // Plain references, not structured bindings: clang before 16 cannot capture those.
        const std::string& keyword = entry.first;
        const Value& value = entry.second;
        bool is_param = std::any_of(params.begin(), params.end(), [&](const MacroParam& p) { return p.name == keyword; });
        if (!is_param && keyword != "caller") {
          raise_error("TypeError: macro '{}' takes no keyword argument '{}'", name, keyword);
        }
        if (keyword == "caller") scope->set("caller", value);
      }
      for (size_t i = 0; i < params.size(); ++i) {
        const MacroParam& param = params[i];
        auto keyword = std::find_if(args.keyword.begin(), args.keyword.end(),
                                    [&](const auto& entry) { return entry.first == param.name; });
        if (i < args.positional.size()) {
          if (keyword != args.keyword.end()) {
            raise_error("TypeError: macro '{}' got multiple values for argument '{}'", name, param.name);
          }
          scope->set(param.name, args.positional[i]);
        } else if (keyword != args.keyword.end()) {
          scope->set(param.name, keyword->second);
        } else if (param.default_value) {
          scope->set(param.name, eval(*param.default_value, scope));
        } else {
          scope->set(param.name, Value::undefined(fmt::format("parameter '{}' was not provided", param.name)));
        }
      }
      if (macro_depth_ >= kMaxMacroDepth) raise_error("maximum recursion depth exceeded in macro '{}'", name);
      ++macro_depth_;
      struct DepthRestore {
        int& depth;
        ~DepthRestore() { --depth; }
      } restore{macro_depth_};
      std::string out;
      exec_body(body, scope, out);
      return Value::string(std::move(out));
    });
  }

  // ---- expressions --------------------------------------------------------------------------
  Value eval(const Expr& expr, const ScopePtr& scope) {
    try {
      return std::visit([&](const auto& node) { return evaluate(node, expr.line, scope); }, expr.node);
    } catch (TemplateError& error) {
      error.set_line_if_unknown(expr.line);
      throw;
    }
  }

  CallArgs eval_args(const std::vector<ExprPtr>& positional, const std::vector<KeywordArg>& keyword,
                     const ScopePtr& scope) {
    CallArgs args;
    for (const ExprPtr& arg : positional) args.positional.push_back(eval(*arg, scope));
    for (const KeywordArg& arg : keyword) args.keyword.emplace_back(arg.name, eval(*arg.value, scope));
    return args;
  }

  static Value call_value(const Value& callee, const CallArgs& args) {
    if (callee.is_undefined()) raise_undefined(callee);
    if (!callee.is_function()) raise_error("TypeError: '{}' object is not callable", type_name(callee));
    return callee.as_function().call(args);
  }

  Value apply_filter_chain(const Expr& chain, const Value& input, const ScopePtr& scope) {
    const auto& filter = std::get<FilterExpr>(chain.node);
    Value operand = filter.operand ? apply_filter_chain(*filter.operand, input, scope) : input;
    try {
      return apply_filter(filter.name, operand, eval_args(filter.args, filter.kwargs, scope));
    } catch (TemplateError& error) {
      error.set_line_if_unknown(chain.line);
      throw;
    }
  }

  Value evaluate(const LiteralExpr& node, int, const ScopePtr&) { return node.value; }

  Value evaluate(const NameExpr& node, int, const ScopePtr& scope) {
    if (const Value* value = scope->find(node.name)) return *value;
    return Value::undefined(fmt::format("'{}' is undefined", node.name));
  }

  Value evaluate(const ListExpr& node, int, const ScopePtr& scope) {
    std::vector<Value> items;
    for (const ExprPtr& item : node.items) items.push_back(eval(*item, scope));
    return Value::list(std::move(items));
  }

  Value evaluate(const TupleExpr& node, int, const ScopePtr& scope) {
    std::vector<Value> items;
    for (const ExprPtr& item : node.items) items.push_back(eval(*item, scope));
    return Value::tuple(std::move(items));
  }

  Value evaluate(const DictExpr& node, int, const ScopePtr& scope) {
    Dict dict;
    for (const auto& [key_expr, value_expr] : node.entries) {
      Value key = eval(*key_expr, scope);
      if (!key.is_string()) raise_error("unsupported: dict keys must be strings, got {}", type_name(key));
      dict.set(key.as_string(), eval(*value_expr, scope));
    }
    return Value::dict(std::move(dict));
  }

  Value evaluate(const AttributeExpr& node, int, const ScopePtr& scope) {
    return get_attribute(eval(*node.object, scope), node.name);
  }

  Value evaluate(const ItemExpr& node, int, const ScopePtr& scope) {
    Value object = eval(*node.object, scope);
    if (const auto* slice = std::get_if<SliceExpr>(&node.index->node)) {
      auto bound = [&](const ExprPtr& part) -> std::optional<Value> {
        if (!part) return std::nullopt;
        return eval(*part, scope);
      };
      std::optional<Value> start = bound(slice->start), stop = bound(slice->stop), step = bound(slice->step);
      return get_slice(object, start, stop, step);
    }
    return get_item(object, eval(*node.index, scope));
  }

  Value evaluate(const SliceExpr&, int, const ScopePtr&) {
    raise_error("a slice is only valid inside []");
  }

  Value evaluate(const CallExpr& node, int, const ScopePtr& scope) {
    Value callee = eval(*node.callee, scope);
    return call_value(callee, eval_args(node.args, node.kwargs, scope));
  }

  Value evaluate(const FilterExpr& node, int line, const ScopePtr& scope) {
    Value operand = node.operand ? eval(*node.operand, scope) : Value();
    return apply_filter(node.name, operand, eval_args(node.args, node.kwargs, scope));
  }

  Value evaluate(const TestExpr& node, int, const ScopePtr& scope) {
    Value operand = eval(*node.operand, scope);
    return Value::boolean(apply_test(node.name, operand, eval_args(node.args, node.kwargs, scope)));
  }

  Value evaluate(const UnaryExpr& node, int, const ScopePtr& scope) {
    Value operand = eval(*node.operand, scope);
    switch (node.op) {
      case UnaryOp::kNot: return Value::boolean(!truthy(operand));
      case UnaryOp::kNegate: return negate(operand);
      case UnaryOp::kPlus: return unary_plus(operand);
    }
    return operand;
  }

  Value evaluate(const BinaryExpr& node, int, const ScopePtr& scope) {
    Value left = eval(*node.left, scope);
    // `and` / `or` short-circuit and yield an operand, as in Python.
    if (node.op == BinaryOp::kAnd) return truthy(left) ? eval(*node.right, scope) : left;
    if (node.op == BinaryOp::kOr) return truthy(left) ? left : eval(*node.right, scope);
    Value right = eval(*node.right, scope);
    switch (node.op) {
      case BinaryOp::kAdd: return add(left, right);
      case BinaryOp::kSubtract: return subtract(left, right);
      case BinaryOp::kMultiply: return multiply(left, right);
      case BinaryOp::kDivide: return true_divide(left, right);
      case BinaryOp::kFloorDivide: return floor_divide(left, right);
      case BinaryOp::kModulo: return modulo(left, right);
      case BinaryOp::kPower: return power(left, right);
      default: break;
    }
    raise_error("internal error: unknown binary operator");
  }

  Value evaluate(const ConcatExpr& node, int, const ScopePtr& scope) {
    std::string out;
    for (const ExprPtr& part : node.parts) append_str(out, eval(*part, scope));
    return Value::string(std::move(out));
  }

  Value evaluate(const CompareExpr& node, int, const ScopePtr& scope) {
    Value left = eval(*node.first, scope);
    for (const auto& [op, right_expr] : node.rest) {
      Value right = eval(*right_expr, scope);
      if (!compare(op, left, right)) return Value::boolean(false);
      left = std::move(right);
    }
    return Value::boolean(true);
  }

  static bool compare(CompareOp op, const Value& left, const Value& right) {
    switch (op) {
      case CompareOp::kEqual: return equals(left, right);
      case CompareOp::kNotEqual: return !equals(left, right);
      case CompareOp::kLess: return less_than(left, right, "<");
      case CompareOp::kLessEqual: return !less_than(right, left, "<=");
      case CompareOp::kGreater: return less_than(right, left, ">");
      case CompareOp::kGreaterEqual: return !less_than(left, right, ">=");
      case CompareOp::kIn: return contains(right, left);
      case CompareOp::kNotIn: return !contains(right, left);
    }
    return false;
  }

  Value evaluate(const ConditionalExpr& node, int line, const ScopePtr& scope) {
    if (truthy(eval(*node.condition, scope))) return eval(*node.if_true, scope);
    if (node.if_false) return eval(*node.if_false, scope);
    return Value::undefined(fmt::format(
        "the inline if-expression on line {} evaluated to false and no else section was defined.", line));
  }

  ObjectArena& arena_;
  std::vector<ScopePtr> scopes_;
  int macro_depth_ = 0;
};

}  // namespace

std::string render_template(const TemplateAst& ast, const Dict& context) {
  ObjectArena arena;  // declared first: the scopes' functions refer to it until they are gone
  Evaluator evaluator(arena);
  ScopePtr globals = evaluator.new_scope(nullptr);
  Dict functions = make_global_functions(arena);
  for (const auto& [name, function] : functions.entries()) globals->set(name, function);
  for (const auto& [name, value] : context.entries()) globals->set(name, value);
  bind_undefined(*globals, ast.undefined_on_entry);
  std::string out;
  evaluator.exec_body(ast.body, globals, out);
  return out;
}

}  // namespace tq::jinja
