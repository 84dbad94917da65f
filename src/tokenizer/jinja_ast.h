// Syntax tree of a parsed chat template. Nodes keep the source offset they start at so that
// runtime errors can name a line and column.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace agentkv::jinja {

enum class ExprKind {
  Literal,      // literal
  Name,         // name
  List,         // children: items
  Tuple,        // children: items
  Dict,         // children: key0, value0, key1, value1, ...
  GetAttr,      // children[0].name
  GetItem,      // children[0][children[1]]
  Slice,        // children[0][children[1]:children[2]:children[3]] (parts may be null)
  Call,         // children[0](children[1..], kwargs)
  Filter,       // children[0] | name(children[1..], kwargs); children[0] null in filter blocks
  Test,         // children[0] is [not] name(children[1..], kwargs)
  Not,          // not children[0]
  Negate,       // -children[0]
  Plus,         // +children[0]
  Binary,       // children[0] <name> children[1]: + - * / // % ** ~
  And,          // children[0] and children[1]
  Or,           // children[0] or children[1]
  Compare,      // children[0] ops[0] children[1] ops[1] ... (==, !=, <, <=, >, >=, in, not in)
  Conditional,  // children[0] if children[1] else children[2] (else part may be null)
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  ExprKind kind = ExprKind::Literal;
  size_t offset = 0;
  int height = 1;
  Value literal;
  std::string name;
  bool negated = false;  // Test: "is not"
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // Compare
};

enum class StmtKind {
  Text,         // text
  Output,       // {{ expr }}
  If,           // branches (condition, body)..., else_body
  For,          // for targets in expr [if condition]: body else else_body
  Set,          // set targets = expr, or set targets[0].attribute = expr
  SetBlock,     // set targets[0] [| filter expr] %} body {% endset
  Macro,        // macro name(params) body
  CallBlock,    // call(params) expr: body becomes caller(params) for the called macro
  FilterBlock,  // filter expr (a Filter chain on a null operand) body
  With,         // with assignments: body
  Scope,        // body rendered as is ({% generation %})
  Break,
  Continue,
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  StmtKind kind = StmtKind::Text;
  size_t offset = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::pair<ExprPtr, Body>> branches;
  Body body;
  Body else_body;
  std::vector<std::string> targets;
  std::string attribute;  // Set on a namespace attribute
  std::string name;       // Macro
  std::vector<std::pair<std::string, ExprPtr>> params;  // Macro parameters / With assignments
  bool uses_loop = true;  // For: the body mentions `loop` (else the loop object is not built)
};

}  // namespace agentkv::jinja
