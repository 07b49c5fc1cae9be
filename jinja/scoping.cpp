#include "jinja/parse.h"

#include <map>
#include <set>
#include <string>

namespace tq::jinja {
namespace {

// How a frame binds a name when it is entered (jinja2's VAR_LOAD_* kinds).
enum class Binding {
  kParameter,  // loop target, macro parameter, with-target: set on entry
  kResolve,    // looked up in the template context
  kAlias,      // the enclosing frame's variable
  kUndefined,  // undefined until assigned in this frame
};

// One frame's symbol table, built in source order like jinja2's Symbols.
class Symbols {
 public:
  explicit Symbols(const Symbols* parent) : parent_(parent) {}

  bool mentions(const std::string& name) const {
    for (const Symbols* symbols = this; symbols != nullptr; symbols = symbols->parent_) {
      if (symbols->bindings_.count(name)) return true;
    }
    return false;
  }

  void load(const std::string& name) {
    if (!mentions(name)) bindings_[name] = Binding::kResolve;
  }

  void store(const std::string& name) {
    stores_.insert(name);
    if (bindings_.count(name)) return;
    bindings_[name] = (parent_ != nullptr && parent_->mentions(name)) ? Binding::kAlias : Binding::kUndefined;
  }

  void declare_parameter(const std::string& name) {
    stores_.insert(name);
    bindings_[name] = Binding::kParameter;
  }

  // After the branches of an if (each analysed on a copy of this table): a name first assigned
  // inside a branch cannot start undefined; it falls back to the outer value or the context.
  void merge_branches(const std::vector<Symbols>& branches) {
    std::set<std::string> branch_stores;
    for (const Symbols& branch : branches) {
      for (const std::string& name : branch.stores_) {
        if (!stores_.count(name)) branch_stores.insert(name);
      }
    }
    for (const Symbols& branch : branches) {
      for (const auto& [name, binding] : branch.bindings_) bindings_[name] = binding;
      stores_.insert(branch.stores_.begin(), branch.stores_.end());
    }
    for (const std::string& name : branch_stores) {
      bindings_[name] = (parent_ != nullptr && parent_->mentions(name)) ? Binding::kAlias : Binding::kResolve;
    }
  }

  NameList undefined_names() const {
    NameList names;
    for (const auto& [name, binding] : bindings_) {
      if (binding == Binding::kUndefined) names.push_back(name);
    }
    return names;
  }

 private:
  const Symbols* parent_;
  std::map<std::string, Binding> bindings_;
  std::set<std::string> stores_;
};

// Records the names an expression reads.
void visit_expr(const Expr* expr, Symbols& symbols);

void visit_exprs(const std::vector<ExprPtr>& exprs, Symbols& symbols) {
  for (const ExprPtr& expr : exprs) visit_expr(expr.get(), symbols);
}

void visit_keywords(const std::vector<KeywordArg>& kwargs, Symbols& symbols) {
  for (const KeywordArg& arg : kwargs) visit_expr(arg.value.get(), symbols);
}

void visit_expr(const Expr* expr, Symbols& symbols) {
  if (expr == nullptr) return;
  std::visit(
      [&](const auto& node) {
        using Node = std::decay_t<decltype(node)>;
        if constexpr (std::is_same_v<Node, NameExpr>) {
          symbols.load(node.name);
        } else if constexpr (std::is_same_v<Node, ListExpr> || std::is_same_v<Node, TupleExpr>) {
          visit_exprs(node.items, symbols);
        } else if constexpr (std::is_same_v<Node, DictExpr>) {
          for (const auto& [key, value] : node.entries) {
            visit_expr(key.get(), symbols);
            visit_expr(value.get(), symbols);
          }
        } else if constexpr (std::is_same_v<Node, AttributeExpr>) {
          visit_expr(node.object.get(), symbols);
        } else if constexpr (std::is_same_v<Node, ItemExpr>) {
          visit_expr(node.object.get(), symbols);
          visit_expr(node.index.get(), symbols);
        } else if constexpr (std::is_same_v<Node, SliceExpr>) {
          visit_expr(node.start.get(), symbols);
          visit_expr(node.stop.get(), symbols);
          visit_expr(node.step.get(), symbols);
        } else if constexpr (std::is_same_v<Node, CallExpr>) {
          visit_expr(node.callee.get(), symbols);
          visit_exprs(node.args, symbols);
          visit_keywords(node.kwargs, symbols);
        } else if constexpr (std::is_same_v<Node, FilterExpr> || std::is_same_v<Node, TestExpr>) {
          visit_expr(node.operand.get(), symbols);
          visit_exprs(node.args, symbols);
          visit_keywords(node.kwargs, symbols);
        } else if constexpr (std::is_same_v<Node, UnaryExpr>) {
          visit_expr(node.operand.get(), symbols);
        } else if constexpr (std::is_same_v<Node, BinaryExpr>) {
          visit_expr(node.left.get(), symbols);
          visit_expr(node.right.get(), symbols);
        } else if constexpr (std::is_same_v<Node, ConcatExpr>) {
          visit_exprs(node.parts, symbols);
        } else if constexpr (std::is_same_v<Node, CompareExpr>) {
          visit_expr(node.first.get(), symbols);
          for (const auto& [op, operand] : node.rest) visit_expr(operand.get(), symbols);
        } else if constexpr (std::is_same_v<Node, ConditionalExpr>) {
          visit_expr(node.condition.get(), symbols);
          visit_expr(node.if_true.get(), symbols);
          visit_expr(node.if_false.get(), symbols);
        }
      },
      expr->node);
}

void store_target(const Target& target, Symbols& symbols, bool as_parameter) {
  switch (target.kind) {
    case Target::Kind::kName:
      as_parameter ? symbols.declare_parameter(target.name) : symbols.store(target.name);
      return;
    case Target::Kind::kNamespaceAttribute:
      symbols.load(target.name);  // ns.attr = ... reads ns
      return;
    case Target::Kind::kTuple:
      for (const Target& element : target.elements) store_target(element, symbols, as_parameter);
      return;
  }
}

void visit_statements(const Body& body, Symbols& symbols);

// jinja2 models `if/elif/else` as an If whose elif branches are nested Ifs, merged as three
// tables: body, elifs, else.
void visit_if(const IfStmt& node, size_t branch, Symbols& symbols) {
  visit_expr(node.branches[branch].first.get(), symbols);
  Symbols body = symbols;
  visit_statements(node.branches[branch].second, body);
  Symbols elifs = symbols;
  Symbols otherwise = symbols;
  if (branch == 0) {
    for (size_t i = 1; i < node.branches.size(); ++i) visit_if(node, i, elifs);
    visit_statements(node.else_body, otherwise);
  }
  symbols.merge_branches({body, elifs, otherwise});
}

// The statements of one frame; nested frames are analysed separately (see resolve_frames).
void visit_statement(const Stmt& stmt, Symbols& symbols) {
  std::visit(
      [&](const auto& node) {
        using Node = std::decay_t<decltype(node)>;
        if constexpr (std::is_same_v<Node, PrintStmt>) {
          visit_expr(node.expr.get(), symbols);
        } else if constexpr (std::is_same_v<Node, IfStmt>) {
          visit_if(node, 0, symbols);
        } else if constexpr (std::is_same_v<Node, ForStmt>) {
          visit_expr(node.iterable.get(), symbols);
        } else if constexpr (std::is_same_v<Node, SetStmt>) {
          visit_expr(node.value.get(), symbols);
          store_target(node.target, symbols, false);
        } else if constexpr (std::is_same_v<Node, SetBlockStmt>) {
          store_target(node.target, symbols, false);
        } else if constexpr (std::is_same_v<Node, MacroStmt>) {
          symbols.store(node.name);
        } else if constexpr (std::is_same_v<Node, CallBlockStmt>) {
          visit_expr(node.call.get(), symbols);
        } else if constexpr (std::is_same_v<Node, FilterBlockStmt>) {
          visit_expr(node.filter.get(), symbols);
        } else if constexpr (std::is_same_v<Node, WithStmt>) {
          for (const auto& [target, value] : node.assignments) visit_expr(value.get(), symbols);
        }
      },
      stmt.node);
}

void visit_statements(const Body& body, Symbols& symbols) {
  for (const StmtPtr& stmt : body) visit_statement(*stmt, symbols);
}

void resolve_frames(Body& body, const Symbols& enclosing);

// Analyses a nested frame whose parent is `enclosing`, then the frames nested in it.
template <typename Prepare>
NameList resolve_frame(Body& body, const Symbols& enclosing, Prepare prepare) {
  Symbols symbols(&enclosing);
  prepare(symbols);
  resolve_frames(body, symbols);
  return symbols.undefined_names();
}

void declare_macro_params(const std::vector<MacroParam>& params, Symbols& symbols) {
  for (const MacroParam& param : params) symbols.declare_parameter(param.name);
  for (const MacroParam& param : params) visit_expr(param.default_value.get(), symbols);
}

// Finds the frames directly nested in `body` (looking through if branches, which are not
// frames) and resolves each against `enclosing`, the fully analysed frame around them.
void resolve_frames(Body& body, const Symbols& enclosing) {
  for (StmtPtr& stmt : body) {
    std::visit(
        [&](auto& node) {
          using Node = std::decay_t<decltype(node)>;
          if constexpr (std::is_same_v<Node, IfStmt>) {
            for (auto& branch : node.branches) resolve_frames(branch.second, enclosing);
            resolve_frames(node.else_body, enclosing);
          } else if constexpr (std::is_same_v<Node, ForStmt>) {
            node.body_undefined_on_entry = resolve_frame(node.body, enclosing, [&](Symbols& symbols) {
              store_target(node.target, symbols, true);
              visit_statements(node.body, symbols);
            });
            node.else_undefined_on_entry = resolve_frame(node.else_body, enclosing, [&](Symbols& symbols) {
              visit_statements(node.else_body, symbols);
            });
          } else if constexpr (std::is_same_v<Node, MacroStmt> || std::is_same_v<Node, CallBlockStmt>) {
            const std::vector<MacroParam>* params;
            if constexpr (std::is_same_v<Node, MacroStmt>) {
              params = &node.params;
            } else {
              params = &node.caller_params;
            }
            node.undefined_on_entry = resolve_frame(node.body, enclosing, [&](Symbols& symbols) {
              declare_macro_params(*params, symbols);
              visit_statements(node.body, symbols);
            });
          } else if constexpr (std::is_same_v<Node, FilterBlockStmt>) {
            node.undefined_on_entry = resolve_frame(node.body, enclosing, [&](Symbols& symbols) {
              visit_statements(node.body, symbols);
              visit_expr(node.filter.get(), symbols);
            });
          } else if constexpr (std::is_same_v<Node, SetBlockStmt> || std::is_same_v<Node, ScopeStmt>) {
            node.undefined_on_entry = resolve_frame(node.body, enclosing, [&](Symbols& symbols) {
              visit_statements(node.body, symbols);
            });
          } else if constexpr (std::is_same_v<Node, WithStmt>) {
            node.undefined_on_entry = resolve_frame(node.body, enclosing, [&](Symbols& symbols) {
              for (const auto& [target, value] : node.assignments) store_target(target, symbols, true);
              visit_statements(node.body, symbols);
            });
          }
        },
        stmt->node);
  }
}

}  // namespace

void resolve_scopes(TemplateAst& ast) {
  Symbols root(nullptr);
  visit_statements(ast.body, root);
  resolve_frames(ast.body, root);
  ast.undefined_on_entry = root.undefined_names();
}

}  // namespace tq::jinja
