#include "jinja/parse.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>

#include "jinja/runtime.h"
#include "jinja/template_error.h"

namespace tq::jinja {
namespace {

template <typename Node>
ExprPtr make_expr(int line, Node node) {
  auto expr = std::make_unique<Expr>();
  expr->line = line;
  expr->node = std::move(node);
  return expr;
}

template <typename Node>
StmtPtr make_stmt(int line, Node node) {
  auto stmt = std::make_unique<Stmt>();
  stmt->line = line;
  stmt->node = std::move(node);
  return stmt;
}

bool is_constant_name(std::string_view name) {
  return name == "true" || name == "false" || name == "True" || name == "False" || name == "none" ||
         name == "None";
}

std::string describe(const Token& token) {
  switch (token.type) {
    case TokenType::kData: return "template data";
    case TokenType::kVariableBegin: return "begin of print statement";
    case TokenType::kVariableEnd: return "end of print statement";
    case TokenType::kBlockBegin: return "begin of statement block";
    case TokenType::kBlockEnd: return "end of statement block";
    case TokenType::kString: return "string literal";
    case TokenType::kEnd: return "end of template";
    default: return token.text;
  }
}

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Body parse() {
    Body body = subparse({});
    if (current().type != TokenType::kEnd) fail("unexpected '{}'", describe(current()));
    return body;
  }

 private:
  // ---- token stream -------------------------------------------------------------------------
  const Token& current() const { return tokens_[pos_]; }
  const Token& peek() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  const Token& advance() {
    const Token& token = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return token;
  }
  bool at_operator(std::string_view op) const {
    return current().type == TokenType::kOperator && current().text == op;
  }
  bool at_name(std::string_view name) const {
    return current().type == TokenType::kName && current().text == name;
  }
  bool skip_operator(std::string_view op) {
    if (!at_operator(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    advance();
    return true;
  }
  void expect_operator(std::string_view op) {
    if (!skip_operator(op)) fail("expected '{}', got '{}'", op, describe(current()));
  }
  void expect_type(TokenType type, std::string_view what) {
    if (current().type != type) fail("expected {}, got '{}'", what, describe(current()));
    advance();
  }
  std::string expect_name() {
    if (current().type != TokenType::kName) fail("expected a name, got '{}'", describe(current()));
    return advance().text;
  }

  template <typename... Args>
  [[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) const {
    throw TemplateError(fmt::format(format, std::forward<Args>(args)...), current().line);
  }

  // ---- statements ---------------------------------------------------------------------------
  // Parses template content until a block tag whose name is in `end_names` (left unconsumed).
  Body subparse(std::initializer_list<std::string_view> end_names) {
    Body body;
    while (true) {
      const Token& token = current();
      if (token.type == TokenType::kEnd) {
        if (end_names.size() > 0) {
          std::string expected;
          for (auto name : end_names) expected += (expected.empty() ? "'" : " or '") + std::string(name) + "'";
          fail("unexpected end of template: expected {} to close the open block", expected);
        }
        return body;
      }
      if (token.type == TokenType::kData) {
        body.push_back(make_stmt(token.line, TextStmt{token.text}));
        advance();
      } else if (token.type == TokenType::kVariableBegin) {
        int line = advance().line;
        ExprPtr expr = parse_tuple(true, {}, false);
        expect_type(TokenType::kVariableEnd, "'}}'");
        body.push_back(make_stmt(line, PrintStmt{std::move(expr)}));
      } else if (token.type == TokenType::kBlockBegin) {
        advance();
        if (current().type == TokenType::kName &&
            std::find(end_names.begin(), end_names.end(), current().text) != end_names.end()) {
          return body;
        }
        parse_statement(body);
        expect_type(TokenType::kBlockEnd, "'%}'");
      } else {
        fail("unexpected '{}'", describe(token));
      }
    }
  }

  // The body of a block statement: `%}` then content up to one of `end_names`. With
  // drop_needle the end tag's name is consumed (its `%}` is left for the caller).
  Body parse_statements(std::initializer_list<std::string_view> end_names, bool drop_needle) {
    skip_operator(":");
    expect_type(TokenType::kBlockEnd, "'%}'");
    Body body = subparse(end_names);
    if (drop_needle) advance();
    return body;
  }

  void parse_statement(Body& body) {
    if (current().type != TokenType::kName) fail("tag name expected");
    int line = current().line;
    std::string tag = current().text;
    if (tag == "if") return body.push_back(parse_if());
    if (tag == "for") return body.push_back(parse_for());
    if (tag == "set") return body.push_back(parse_set());
    if (tag == "macro") return body.push_back(parse_macro());
    if (tag == "call") return body.push_back(parse_call_block());
    if (tag == "filter") return body.push_back(parse_filter_block());
    if (tag == "with") return body.push_back(parse_with());
    if (tag == "generation") {
      advance();
      // transformers implements it as a call block: a separate function, outside any loop.
      int saved_loop_depth = std::exchange(loop_depth_, 0);
      Body inner = parse_statements({"endgeneration"}, true);
      loop_depth_ = saved_loop_depth;
      return body.push_back(make_stmt(line, ScopeStmt{std::move(inner), {}}));
    }
    if (tag == "print") {
      advance();
      bool first = true;
      while (current().type != TokenType::kBlockEnd) {
        if (!first) expect_operator(",");
        first = false;
        body.push_back(make_stmt(line, PrintStmt{parse_expression(true)}));
      }
      return;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail("'{}' outside of a loop", tag);
      advance();
      if (tag == "break") return body.push_back(make_stmt(line, BreakStmt{}));
      return body.push_back(make_stmt(line, ContinueStmt{}));
    }
    if (tag == "extends" || tag == "include" || tag == "import" || tag == "from" || tag == "block") {
      fail("unsupported tag '{{% {} %}}': chat templates are rendered standalone, without loading other templates", tag);
    }
    if (tag == "autoescape") fail("unsupported tag '{{% autoescape %}}'");
    fail("unknown tag '{}'", tag);
  }

  StmtPtr parse_if() {
    int line = advance().line;
    IfStmt node;
    while (true) {
      ExprPtr condition = parse_tuple(false, {}, false);
      Body branch = parse_statements({"elif", "else", "endif"}, false);
      node.branches.emplace_back(std::move(condition), std::move(branch));
      std::string next = advance().text;
      if (next == "elif") continue;
      if (next == "else") node.else_body = parse_statements({"endif"}, true);
      break;
    }
    return make_stmt(line, std::move(node));
  }

  StmtPtr parse_for() {
    int line = advance().line;
    ForStmt node;
    node.target = parse_assign_target(true, false, {"in"});
    if (!skip_name("in")) fail("expected 'in' in for loop, got '{}'", describe(current()));
    node.iterable = parse_tuple(false, {"recursive"}, false);
    if (skip_name("if")) node.filter = parse_expression(true);
    if (at_name("recursive")) fail("unsupported: recursive for loops");
    ++loop_depth_;
    node.body = parse_statements({"endfor", "else"}, false);
    --loop_depth_;
    if (advance().text == "else") node.else_body = parse_statements({"endfor"}, true);
    return make_stmt(line, std::move(node));
  }

  StmtPtr parse_set() {
    int line = advance().line;
    Target target = parse_assign_target(true, true, {});
    if (skip_operator("=")) return make_stmt(line, SetStmt{std::move(target), parse_tuple(true, {}, false)});
    ExprPtr filter = at_operator("|") ? parse_filter(nullptr, false) : nullptr;
    Body body = parse_statements({"endset"}, true);
    return make_stmt(line, SetBlockStmt{std::move(target), std::move(filter), std::move(body), {}});
  }

  std::vector<MacroParam> parse_signature() {
    std::vector<MacroParam> params;
    expect_operator("(");
    while (!at_operator(")")) {
      if (!params.empty()) expect_operator(",");
      MacroParam param;
      param.name = parse_assign_target(false, false, {}).name;
      if (skip_operator("=")) {
        param.default_value = parse_expression(true);
      } else if (!params.empty() && params.back().default_value) {
        fail("non-default argument follows default argument");
      }
      params.push_back(std::move(param));
    }
    expect_operator(")");
    return params;
  }

  StmtPtr parse_macro() {
    int line = advance().line;
    MacroStmt node;
    node.name = parse_assign_target(false, false, {}).name;
    node.params = parse_signature();
    int saved_loop_depth = std::exchange(loop_depth_, 0);  // a macro body is not inside the loop
    node.body = parse_statements({"endmacro"}, true);
    loop_depth_ = saved_loop_depth;
    return make_stmt(line, std::move(node));
  }

  StmtPtr parse_call_block() {
    int line = advance().line;
    CallBlockStmt node;
    if (at_operator("(")) node.caller_params = parse_signature();
    node.call = parse_expression(true);
    if (!std::holds_alternative<CallExpr>(node.call->node)) fail("expected call");
    int saved_loop_depth = std::exchange(loop_depth_, 0);
    node.body = parse_statements({"endcall"}, true);
    loop_depth_ = saved_loop_depth;
    return make_stmt(line, std::move(node));
  }

  StmtPtr parse_filter_block() {
    int line = advance().line;
    ExprPtr filter = parse_filter(nullptr, true);
    Body body = parse_statements({"endfilter"}, true);
    return make_stmt(line, FilterBlockStmt{std::move(filter), std::move(body), {}});
  }

  StmtPtr parse_with() {
    int line = advance().line;
    WithStmt node;
    while (current().type != TokenType::kBlockEnd) {
      if (!node.assignments.empty()) expect_operator(",");
      Target target = parse_assign_target(true, false, {});
      expect_operator("=");
      node.assignments.emplace_back(std::move(target), parse_expression(true));
    }
    node.body = parse_statements({"endwith"}, true);
    return make_stmt(line, std::move(node));
  }

  // ---- assignment targets -------------------------------------------------------------------
  Target parse_assign_target(bool with_tuple, bool with_namespace,
                             std::initializer_list<std::string_view> extra_end_names) {
    if (!with_tuple) return parse_target_primary(false);
    std::vector<Target> elements;
    bool is_tuple = false;
    while (true) {
      if (!elements.empty()) expect_operator(",");
      if (is_tuple_end(extra_end_names)) break;
      elements.push_back(parse_target_primary(with_namespace));
      if (!at_operator(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (elements.empty()) fail("expected an assignment target, got '{}'", describe(current()));
      return std::move(elements.front());
    }
    Target tuple;
    tuple.kind = Target::Kind::kTuple;
    tuple.line = current().line;
    tuple.elements = std::move(elements);
    return tuple;
  }

  Target parse_target_primary(bool with_namespace) {
    Target target;
    target.line = current().line;
    if (at_operator("(")) {
      advance();
      target = parse_assign_target(true, false, {});
      expect_operator(")");
      return target;
    }
    if (current().type != TokenType::kName || is_constant_name(current().text)) {
      fail("can't assign to '{}'", describe(current()));
    }
    target.name = advance().text;
    if (with_namespace && at_operator(".")) {
      advance();
      target.kind = Target::Kind::kNamespaceAttribute;
      target.attribute = expect_name();
    }
    return target;
  }

  // ---- expressions --------------------------------------------------------------------------
  bool is_tuple_end(std::initializer_list<std::string_view> extra_end_names) const {
    const Token& token = current();
    if (token.type == TokenType::kVariableEnd || token.type == TokenType::kBlockEnd ||
        (token.type == TokenType::kOperator && token.text == ")")) {
      return true;
    }
    return token.type == TokenType::kName &&
           std::find(extra_end_names.begin(), extra_end_names.end(), token.text) != extra_end_names.end();
  }

  // Comma-separated expressions form a tuple; a single expression is returned as is.
  ExprPtr parse_tuple(bool with_conditional, std::initializer_list<std::string_view> extra_end_names,
                      bool explicit_parentheses) {
    int line = current().line;
    std::vector<ExprPtr> items;
    bool is_tuple = false;
    while (true) {
      if (!items.empty()) expect_operator(",");
      if (is_tuple_end(extra_end_names)) break;
      items.push_back(parse_expression(with_conditional));
      if (!at_operator(",")) break;
      is_tuple = true;
    }
    if (!is_tuple) {
      if (!items.empty()) return std::move(items.front());
      if (!explicit_parentheses) fail("expected an expression, got '{}'", describe(current()));
    }
    return make_expr(line, TupleExpr{std::move(items)});
  }

  ExprPtr parse_expression(bool with_conditional) {
    return with_conditional ? parse_conditional() : parse_or();
  }

  ExprPtr parse_conditional() {
    int line = current().line;
    ExprPtr expr = parse_or();
    while (skip_name("if")) {
      ExprPtr condition = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_conditional() : nullptr;
      expr = make_expr(line, ConditionalExpr{std::move(condition), std::move(expr), std::move(otherwise)});
      line = current().line;
    }
    return expr;
  }

  ExprPtr parse_or() {
    int line = current().line;
    ExprPtr left = parse_and();
    while (skip_name("or")) left = make_expr(line, BinaryExpr{BinaryOp::kOr, std::move(left), parse_and()});
    return left;
  }

  ExprPtr parse_and() {
    int line = current().line;
    ExprPtr left = parse_not();
    while (skip_name("and")) left = make_expr(line, BinaryExpr{BinaryOp::kAnd, std::move(left), parse_not()});
    return left;
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      int line = advance().line;
      return make_expr(line, UnaryExpr{UnaryOp::kNot, parse_not()});
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    int line = current().line;
    ExprPtr first = parse_math1();
    std::vector<std::pair<CompareOp, ExprPtr>> rest;
    while (true) {
      static const std::pair<std::string_view, CompareOp> kOperators[] = {
          {"==", CompareOp::kEqual}, {"!=", CompareOp::kNotEqual}, {"<", CompareOp::kLess},
          {"<=", CompareOp::kLessEqual}, {">", CompareOp::kGreater}, {">=", CompareOp::kGreaterEqual}};
      auto op = std::find_if(std::begin(kOperators), std::end(kOperators),
                             [&](const auto& entry) { return at_operator(entry.first); });
      if (op != std::end(kOperators)) {
        advance();
        rest.emplace_back(op->second, parse_math1());
      } else if (skip_name("in")) {
        rest.emplace_back(CompareOp::kIn, parse_math1());
      } else if (at_name("not") && peek().type == TokenType::kName && peek().text == "in") {
        advance();
        advance();
        rest.emplace_back(CompareOp::kNotIn, parse_math1());
      } else {
        break;
      }
    }
    if (rest.empty()) return first;
    return make_expr(line, CompareExpr{std::move(first), std::move(rest)});
  }

  ExprPtr parse_math1() {
    int line = current().line;
    ExprPtr left = parse_concat();
    while (at_operator("+") || at_operator("-")) {
      BinaryOp op = advance().text == "+" ? BinaryOp::kAdd : BinaryOp::kSubtract;
      left = make_expr(line, BinaryExpr{op, std::move(left), parse_concat()});
    }
    return left;
  }

  ExprPtr parse_concat() {
    int line = current().line;
    std::vector<ExprPtr> parts;
    parts.push_back(parse_math2());
    while (skip_operator("~")) parts.push_back(parse_math2());
    if (parts.size() == 1) return std::move(parts.front());
    return make_expr(line, ConcatExpr{std::move(parts)});
  }

  ExprPtr parse_math2() {
    int line = current().line;
    ExprPtr left = parse_pow();
    while (at_operator("*") || at_operator("/") || at_operator("//") || at_operator("%")) {
      std::string op = advance().text;
      BinaryOp binary = op == "*" ? BinaryOp::kMultiply : op == "/" ? BinaryOp::kDivide
                        : op == "//" ? BinaryOp::kFloorDivide : BinaryOp::kModulo;
      left = make_expr(line, BinaryExpr{binary, std::move(left), parse_pow()});
    }
    return left;
  }

  ExprPtr parse_pow() {
    int line = current().line;
    ExprPtr left = parse_unary(true);
    while (skip_operator("**")) left = make_expr(line, BinaryExpr{BinaryOp::kPower, std::move(left), parse_unary(true)});
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    int line = current().line;
    ExprPtr node;
    if (skip_operator("-")) {
      node = make_expr(line, UnaryExpr{UnaryOp::kNegate, parse_unary(false)});
    } else if (skip_operator("+")) {
      node = make_expr(line, UnaryExpr{UnaryOp::kPlus, parse_unary(false)});
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& token = current();
    int line = token.line;
    switch (token.type) {
      case TokenType::kName: {
        std::string name = advance().text;
        if (name == "true" || name == "True") return make_expr(line, LiteralExpr{Value::boolean(true)});
        if (name == "false" || name == "False") return make_expr(line, LiteralExpr{Value::boolean(false)});
        if (name == "none" || name == "None") return make_expr(line, LiteralExpr{Value::none()});
        return make_expr(line, NameExpr{std::move(name)});
      }
      case TokenType::kString: {
        std::string text;
        while (current().type == TokenType::kString) text += advance().text;  // "a" "b" == "ab"
        return make_expr(line, LiteralExpr{Value::string(std::move(text))});
      }
      case TokenType::kInteger: return make_expr(line, LiteralExpr{Value::integer(advance().integer)});
      case TokenType::kFloat: return make_expr(line, LiteralExpr{Value::floating(advance().floating)});
      case TokenType::kOperator:
        if (token.text == "(") {
          advance();
          ExprPtr inner = parse_tuple(true, {}, true);
          expect_operator(")");
          return inner;
        }
        if (token.text == "[") return parse_list();
        if (token.text == "{") return parse_dict();
        break;
      default: break;
    }
    fail("unexpected '{}'", describe(token));
  }

  ExprPtr parse_list() {
    int line = advance().line;
    ListExpr list;
    while (!at_operator("]")) {
      if (!list.items.empty()) expect_operator(",");
      if (at_operator("]")) break;
      list.items.push_back(parse_expression(true));
    }
    expect_operator("]");
    return make_expr(line, std::move(list));
  }

  ExprPtr parse_dict() {
    int line = advance().line;
    DictExpr dict;
    while (!at_operator("}")) {
      if (!dict.entries.empty()) expect_operator(",");
      if (at_operator("}")) break;
      ExprPtr key = parse_expression(true);
      expect_operator(":");
      dict.entries.emplace_back(std::move(key), parse_expression(true));
    }
    expect_operator("}");
    return make_expr(line, std::move(dict));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (at_operator(".") || at_operator("[")) {
        node = parse_subscript(std::move(node));
      } else if (at_operator("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (at_operator("|")) {
        node = parse_filter(std::move(node), false);
      } else if (at_name("is")) {
        node = parse_test(std::move(node));
      } else if (at_operator("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const Token& token = advance();
    int line = token.line;
    if (token.text == ".") {
      const Token& attribute = advance();
      if (attribute.type == TokenType::kName) return make_expr(line, AttributeExpr{std::move(node), attribute.text});
      if (attribute.type != TokenType::kInteger) fail("expected name or number after '.'");
      return make_expr(line, ItemExpr{std::move(node), make_expr(line, LiteralExpr{Value::integer(attribute.integer)})});
    }
    std::vector<ExprPtr> args;
    while (!at_operator("]")) {
      if (!args.empty()) expect_operator(",");
      args.push_back(parse_subscribed());
    }
    expect_operator("]");
    ExprPtr index = args.size() == 1 ? std::move(args.front()) : make_expr(line, TupleExpr{std::move(args)});
    return make_expr(line, ItemExpr{std::move(node), std::move(index)});
  }

  ExprPtr parse_subscribed() {
    int line = current().line;
    SliceExpr slice;
    if (!at_operator(":")) {
      ExprPtr start = parse_expression(true);
      if (!at_operator(":")) return start;
      slice.start = std::move(start);
    }
    advance();  // the first ':'
    if (!at_operator("]") && !at_operator(",") && !at_operator(":")) slice.stop = parse_expression(true);
    if (skip_operator(":")) {
      if (!at_operator("]") && !at_operator(",")) slice.step = parse_expression(true);
    }
    return make_expr(line, std::move(slice));
  }

  void parse_call_args(std::vector<ExprPtr>& args, std::vector<KeywordArg>& kwargs) {
    int line = current().line;
    expect_operator("(");
    bool need_comma = false;
    while (!at_operator(")")) {
      if (need_comma) {
        expect_operator(",");
        if (at_operator(")")) break;
      }
      if (at_operator("*") || at_operator("**")) fail("unsupported: *args / **kwargs in calls");
      if (current().type == TokenType::kName && peek().type == TokenType::kOperator && peek().text == "=") {
        std::string name = advance().text;
        advance();
        kwargs.push_back(KeywordArg{std::move(name), parse_expression(true)});
      } else {
        if (!kwargs.empty()) throw TemplateError("invalid syntax for function call expression", line);
        args.push_back(parse_expression(true));
      }
      need_comma = true;
    }
    expect_operator(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    int line = current().line;
    CallExpr call;
    call.callee = std::move(callee);
    parse_call_args(call.args, call.kwargs);
    return make_expr(line, std::move(call));
  }

  std::string parse_dotted_name() {
    std::string name = expect_name();
    while (skip_operator(".")) name += "." + expect_name();
    return name;
  }

  ExprPtr parse_filter(ExprPtr node, bool start_inline) {
    while (at_operator("|") || start_inline) {
      if (!start_inline) advance();
      start_inline = false;
      int line = current().line;
      FilterExpr filter;
      filter.operand = std::move(node);
      filter.name = parse_dotted_name();
      if (!is_known_filter(filter.name)) throw TemplateError(fmt::format("no filter named '{}'", filter.name), line);
      if (at_operator("(")) parse_call_args(filter.args, filter.kwargs);
      node = make_expr(line, std::move(filter));
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    int line = advance().line;  // `is`
    bool negated = skip_name("not");
    TestExpr test;
    test.operand = std::move(node);
    test.name = parse_dotted_name();
    if (!is_known_test(test.name)) throw TemplateError(fmt::format("no test named '{}'", test.name), line);
    const Token& token = current();
    bool starts_argument =
        token.type == TokenType::kName || token.type == TokenType::kString ||
        token.type == TokenType::kInteger || token.type == TokenType::kFloat ||
        (token.type == TokenType::kOperator && (token.text == "[" || token.text == "{"));
    if (at_operator("(")) {
      parse_call_args(test.args, test.kwargs);
    } else if (starts_argument && !at_name("else") && !at_name("or") && !at_name("and")) {
      if (at_name("is")) fail("you cannot chain multiple tests with is");
      test.args.push_back(parse_postfix(parse_primary()));
    }
    ExprPtr result = make_expr(line, std::move(test));
    if (negated) result = make_expr(line, UnaryExpr{UnaryOp::kNot, std::move(result)});
    return result;
  }

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int loop_depth_ = 0;  // {% break %} / {% continue %} are only valid inside a for body
};

}  // namespace

TemplateAst parse_template(std::string_view source) {
  TemplateAst ast;
  ast.body = Parser(tokenize(source)).parse();
  resolve_scopes(ast);
  return ast;
}

}  // namespace tq::jinja
