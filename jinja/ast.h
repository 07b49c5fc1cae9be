// Syntax tree of a parsed Jinja template. Every node records its template line for errors.
#pragma once
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "jinja/value.h"

namespace tq::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct KeywordArg {
  std::string name;
  ExprPtr value;
};

struct LiteralExpr {
  Value value;
};
struct NameExpr {
  std::string name;
};
struct ListExpr {
  std::vector<ExprPtr> items;
};
struct TupleExpr {
  std::vector<ExprPtr> items;
};
struct DictExpr {
  std::vector<std::pair<ExprPtr, ExprPtr>> entries;
};
struct AttributeExpr {  // object.name
  ExprPtr object;
  std::string name;
};
struct ItemExpr {  // object[index]; index may be a SliceExpr
  ExprPtr object;
  ExprPtr index;
};
struct SliceExpr {  // start:stop:step, each part optional (null)
  ExprPtr start;
  ExprPtr stop;
  ExprPtr step;
};
struct CallExpr {
  ExprPtr callee;
  std::vector<ExprPtr> args;
  std::vector<KeywordArg> kwargs;
};
// operand | name(args). The operand is null in the filter section of {% filter %} and
// {% set x | f %} blocks, where the block body is the input.
struct FilterExpr {
  ExprPtr operand;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<KeywordArg> kwargs;
};
struct TestExpr {  // operand is name(args); `is not` wraps it in a kNot UnaryExpr
  ExprPtr operand;
  std::string name;
  std::vector<ExprPtr> args;
  std::vector<KeywordArg> kwargs;
};

enum class UnaryOp { kNot, kNegate, kPlus };
struct UnaryExpr {
  UnaryOp op;
  ExprPtr operand;
};

enum class BinaryOp { kAdd, kSubtract, kMultiply, kDivide, kFloorDivide, kModulo, kPower, kAnd, kOr };
struct BinaryExpr {
  BinaryOp op;
  ExprPtr left;
  ExprPtr right;
};
struct ConcatExpr {  // a ~ b ~ c
  std::vector<ExprPtr> parts;
};

enum class CompareOp { kEqual, kNotEqual, kLess, kLessEqual, kGreater, kGreaterEqual, kIn, kNotIn };
struct CompareExpr {  // Python chained comparison: first op1 x op2 y ...
  ExprPtr first;
  std::vector<std::pair<CompareOp, ExprPtr>> rest;
};
struct ConditionalExpr {  // if_true if condition else if_false (if_false may be null)
  ExprPtr condition;
  ExprPtr if_true;
  ExprPtr if_false;
};

struct Expr {
  int line = 0;
  std::variant<LiteralExpr, NameExpr, ListExpr, TupleExpr, DictExpr, AttributeExpr, ItemExpr, SliceExpr,
               CallExpr, FilterExpr, TestExpr, UnaryExpr, BinaryExpr, ConcatExpr, CompareExpr,
               ConditionalExpr>
      node;
};

// Left side of {% set %}, {% for %} and {% with %}: a name, ns.attribute, or a tuple of targets.
struct Target {
  enum class Kind { kName, kNamespaceAttribute, kTuple };
  Kind kind = Kind::kName;
  std::string name;       // the variable (the namespace variable for kNamespaceAttribute)
  std::string attribute;  // kNamespaceAttribute only
  std::vector<Target> elements;  // kTuple only
  int line = 0;
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct MacroParam {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct TextStmt {
  std::string text;
};
struct PrintStmt {
  ExprPtr expr;
};
struct IfStmt {
  std::vector<std::pair<ExprPtr, Body>> branches;  // if + elifs
  Body else_body;
};
// Frames (see resolve_scopes in parse.h) carry the names jinja2 binds to "undefined" on entry.
using NameList = std::vector<std::string>;

struct ForStmt {
  Target target;
  ExprPtr iterable;
  ExprPtr filter;  // `for x in xs if cond`, may be null
  Body body;
  Body else_body;
  NameList body_undefined_on_entry;
  NameList else_undefined_on_entry;
};
struct SetStmt {
  Target target;
  ExprPtr value;
};
struct SetBlockStmt {  // {% set x | filters %}body{% endset %}
  Target target;
  ExprPtr filter;  // FilterExpr chain with a null innermost operand, or null
  Body body;
  NameList undefined_on_entry;
};
struct MacroStmt {
  std::string name;
  std::vector<MacroParam> params;
  Body body;
  NameList undefined_on_entry;
};
struct CallBlockStmt {  // {% call(params) macro(args) %}body{% endcall %}: body becomes `caller`
  std::vector<MacroParam> caller_params;
  ExprPtr call;
  Body body;
  NameList undefined_on_entry;
};
struct FilterBlockStmt {
  ExprPtr filter;  // FilterExpr chain with a null innermost operand
  Body body;
  NameList undefined_on_entry;
};
struct WithStmt {
  std::vector<std::pair<Target, ExprPtr>> assignments;
  Body body;
  NameList undefined_on_entry;
};
struct ScopeStmt {  // a body rendered in its own scope: transformers' {% generation %} block
  Body body;
  NameList undefined_on_entry;
};
struct BreakStmt {};
struct ContinueStmt {};

struct Stmt {
  int line = 0;
  std::variant<TextStmt, PrintStmt, IfStmt, ForStmt, SetStmt, SetBlockStmt, MacroStmt, CallBlockStmt,
               FilterBlockStmt, WithStmt, ScopeStmt, BreakStmt, ContinueStmt>
      node;
};

struct TemplateAst {
  Body body;
  NameList undefined_on_entry;
};

}  // namespace tq::jinja
