#include "tokenizer/jinja_parser.h"

#include <algorithm>
#include <initializer_list>

#include "agentkv/error.h"
#include "tokenizer/jinja_builtins.h"

namespace agentkv::jinja {

namespace {

class Parser {
 public:
  Parser(const LexedTemplate& lexed, const SourceMap& map) : tokens_(lexed.tokens), map_(map) {}

  Body parse_template() {
    std::string end_tag;
    Body body = parse_body({}, end_tag);
    return body;
  }

 private:
  // ---- token helpers ----------------------------------------------------------------------

  const Token& current() const { return tokens_[pos_]; }
  const Token& peek(size_t ahead = 1) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  void advance() {
    if (pos_ + 1 < tokens_.size()) ++pos_;
  }

  [[noreturn]] void fail_at(size_t offset, const std::string& message) const {
    const auto [line, column] = map_.line_column(offset);
    throw Error("chat template syntax error at line " + std::to_string(line) + ", column " +
                std::to_string(column) + ": " + message);
  }
  [[noreturn]] void fail(const std::string& message) const { fail_at(current().offset, message); }

  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::Text: return "template text";
      case TokenKind::VarBegin: return "'{{'";
      case TokenKind::VarEnd: return "'}}'";
      case TokenKind::BlockBegin: return "'{%'";
      case TokenKind::BlockEnd: return "'%}'";
      case TokenKind::Name: return "'" + t.text + "'";
      case TokenKind::String: return "string literal";
      case TokenKind::Integer:
      case TokenKind::Float: return "number";
      case TokenKind::Operator: return "'" + t.text + "'";
      case TokenKind::End: return "end of template";
    }
    return "token";
  }

  bool is_op(const char* op) const { return current().kind == TokenKind::Operator && current().text == op; }
  bool is_name(const char* name) const { return current().kind == TokenKind::Name && current().text == name; }
  bool accept_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool accept_name(const char* name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }
  void expect_op(const char* op) {
    if (!accept_op(op)) fail(std::string("expected '") + op + "', got " + describe(current()));
  }
  std::string expect_name(const char* what) {
    if (current().kind != TokenKind::Name) fail(std::string("expected ") + what + ", got " + describe(current()));
    std::string name = current().text;
    advance();
    return name;
  }
  void expect_block_end() {
    if (current().kind != TokenKind::BlockEnd) fail("expected '%}', got " + describe(current()));
    advance();
  }

  // ---- node construction --------------------------------------------------------------------

  ExprPtr make(ExprKind kind, size_t offset) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->offset = offset;
    return e;
  }
  // Recomputes the height after children were attached and enforces the limit (a deep tree
  // would overflow the stack when evaluated or destroyed).
  ExprPtr finish(ExprPtr e) {
    int height = 1;
    for (const auto& c : e->children)
      if (c) height = std::max(height, c->height + 1);
    for (const auto& [name, c] : e->kwargs) height = std::max(height, c->height + 1);
    e->height = height;
    if (height > Limits::kMaxExprHeight) fail_at(e->offset, "expression nested too deeply");
    return e;
  }
  ExprPtr unary(ExprKind kind, size_t offset, ExprPtr operand) {
    ExprPtr e = make(kind, offset);
    e->children.push_back(std::move(operand));
    return finish(std::move(e));
  }
  ExprPtr binary(ExprKind kind, size_t offset, std::string op, ExprPtr left, ExprPtr right) {
    ExprPtr e = make(kind, offset);
    e->name = std::move(op);
    e->children.push_back(std::move(left));
    e->children.push_back(std::move(right));
    return finish(std::move(e));
  }

  // ---- statements ---------------------------------------------------------------------------

  // Parses until a block tag named in `end_names` (its name is consumed and returned in
  // end_tag; the rest of that tag is left for the caller) or the end of the template.
  Body parse_body(std::initializer_list<const char*> end_names, std::string& end_tag) {
    if (++block_depth_ > Limits::kMaxBlockNesting) fail("blocks nested too deeply");
    Body body;
    while (true) {
      const Token& t = current();
      if (t.kind == TokenKind::End) {
        if (end_names.size() != 0) {
          std::string expected;
          for (const char* name : end_names) expected += (expected.empty() ? "'" : " or '") + std::string(name) + "'";
          fail("unexpected end of template, expected " + expected);
        }
        break;
      }
      if (t.kind == TokenKind::Text) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Text;
        s->offset = t.offset;
        s->text = t.text;
        body.push_back(std::move(s));
        advance();
        continue;
      }
      if (t.kind == TokenKind::VarBegin) {
        auto s = std::make_unique<Stmt>();
        s->kind = StmtKind::Output;
        s->offset = t.offset;
        advance();
        s->expr = parse_tuple(true);
        if (current().kind != TokenKind::VarEnd) fail("expected '}}', got " + describe(current()));
        advance();
        body.push_back(std::move(s));
        continue;
      }
      if (t.kind != TokenKind::BlockBegin) fail("unexpected " + describe(t));
      const size_t tag_offset = t.offset;
      advance();
      if (current().kind != TokenKind::Name) fail("expected a tag name, got " + describe(current()));
      const std::string tag = current().text;
      if (std::any_of(end_names.begin(), end_names.end(), [&](const char* n) { return tag == n; })) {
        advance();
        end_tag = tag;
        --block_depth_;
        return body;
      }
      advance();
      body.push_back(parse_statement(tag, tag_offset));
    }
    --block_depth_;
    return body;
  }

  StmtPtr parse_statement(const std::string& tag, size_t offset) {
    auto s = std::make_unique<Stmt>();
    s->offset = offset;
    std::string end_tag;
    if (tag == "if") {
      s->kind = StmtKind::If;
      // As in Jinja, an if condition cannot itself be an inline "x if y else z".
      ExprPtr condition = parse_tuple(false);
      while (true) {
        expect_block_end();
        Body branch = parse_body({"elif", "else", "endif"}, end_tag);
        s->branches.emplace_back(std::move(condition), std::move(branch));
        if (end_tag == "elif") {
          condition = parse_tuple(false);
          continue;
        }
        if (end_tag == "else") {
          expect_block_end();
          s->else_body = parse_body({"endif"}, end_tag);
        }
        expect_block_end();
        break;
      }
    } else if (tag == "for") {
      s->kind = StmtKind::For;
      s->targets = parse_name_targets();
      if (!accept_name("in")) fail("expected 'in', got " + describe(current()));
      s->expr = parse_tuple(false);
      if (accept_name("if")) s->condition = parse_expression(true);
      if (is_name("recursive")) fail("recursive loops are not supported");
      expect_block_end();
      ++loop_depth_;
      const bool outer_saw_loop = saw_loop_name_;
      saw_loop_name_ = false;
      s->body = parse_body({"else", "endfor"}, end_tag);
      s->uses_loop = saw_loop_name_;
      saw_loop_name_ = outer_saw_loop || saw_loop_name_;
      --loop_depth_;
      if (end_tag == "else") {
        expect_block_end();
        s->else_body = parse_body({"endfor"}, end_tag);
      }
      expect_block_end();
    } else if (tag == "set") {
      parse_set_target(*s);
      if (accept_op("=")) {
        s->kind = StmtKind::Set;
        s->expr = parse_tuple(true);
        expect_block_end();
      } else {
        s->kind = StmtKind::SetBlock;
        if (!s->attribute.empty() || s->targets.size() != 1) fail("a block set needs a single name");
        if (is_op("|")) s->expr = parse_filter_chain(nullptr);
        expect_block_end();
        s->body = parse_body({"endset"}, end_tag);
        expect_block_end();
      }
    } else if (tag == "macro") {
      s->kind = StmtKind::Macro;
      s->name = expect_name("a macro name");
      expect_op("(");
      while (!is_op(")")) {
        std::string param = expect_name("a parameter name");
        ExprPtr default_value;
        if (accept_op("=")) default_value = parse_expression(true);
        s->params.emplace_back(std::move(param), std::move(default_value));
        if (!accept_op(",")) break;
      }
      expect_op(")");
      expect_block_end();
      const int saved_loop_depth = loop_depth_;
      loop_depth_ = 0;
      s->body = parse_body({"endmacro"}, end_tag);
      loop_depth_ = saved_loop_depth;
      if (current().kind == TokenKind::Name) advance();  // {% endmacro name %}
      expect_block_end();
    } else if (tag == "call") {
      s->kind = StmtKind::CallBlock;
      s->name = "caller";
      if (is_op("(")) {
        advance();
        while (!is_op(")")) {
          std::string param = expect_name("a parameter name");
          ExprPtr default_value;
          if (accept_op("=")) default_value = parse_expression(true);
          s->params.emplace_back(std::move(param), std::move(default_value));
          if (!accept_op(",")) break;
        }
        expect_op(")");
      }
      s->expr = parse_expression(true);
      if (s->expr->kind != ExprKind::Call) fail_at(s->expr->offset, "expected a macro call after 'call'");
      expect_block_end();
      const int saved_loop_depth = loop_depth_;
      loop_depth_ = 0;
      s->body = parse_body({"endcall"}, end_tag);
      loop_depth_ = saved_loop_depth;
      expect_block_end();
    } else if (tag == "filter") {
      s->kind = StmtKind::FilterBlock;
      s->expr = parse_filter_chain(nullptr, /*leading_pipe=*/false);
      expect_block_end();
      s->body = parse_body({"endfilter"}, end_tag);
      expect_block_end();
    } else if (tag == "with") {
      s->kind = StmtKind::With;
      while (current().kind == TokenKind::Name) {
        std::string name = expect_name("a name");
        expect_op("=");
        s->params.emplace_back(std::move(name), parse_expression(true));
        if (!accept_op(",")) break;
      }
      expect_block_end();
      s->body = parse_body({"endwith"}, end_tag);
      expect_block_end();
    } else if (tag == "generation") {
      // Hugging Face's marker for assistant tokens; it renders its body unchanged.
      s->kind = StmtKind::Scope;
      expect_block_end();
      s->body = parse_body({"endgeneration"}, end_tag);
      expect_block_end();
    } else if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail_at(offset, "'" + tag + "' outside of a loop");
      s->kind = tag == "break" ? StmtKind::Break : StmtKind::Continue;
      expect_block_end();
    } else if (tag == "elif" || tag == "else" || tag.starts_with("end")) {
      fail_at(offset, "unexpected '" + tag + "'");
    } else if (tag == "include" || tag == "import" || tag == "from" || tag == "extends" ||
               tag == "block" || tag == "autoescape" || tag == "do" || tag == "trans") {
      fail_at(offset, "the '" + tag + "' tag is not supported");
    } else {
      fail_at(offset, "unknown tag '" + tag + "'");
    }
    return s;
  }

  std::vector<std::string> parse_name_targets() {
    std::vector<std::string> names;
    const bool parens = accept_op("(");
    do {
      names.push_back(expect_name("a loop variable name"));
    } while (accept_op(","));
    if (parens) expect_op(")");
    return names;
  }

  void parse_set_target(Stmt& s) {
    if (current().kind == TokenKind::Name && peek().kind == TokenKind::Operator && peek().text == ".") {
      s.targets.push_back(expect_name("a name"));
      advance();  // '.'
      s.attribute = expect_name("an attribute name");
      return;
    }
    s.targets = parse_name_targets();
  }

  // ---- expressions --------------------------------------------------------------------------

  // Comma-separated expressions; more than one (or a trailing comma) makes a tuple.
  ExprPtr parse_tuple(bool with_condexpr) {
    const size_t offset = current().offset;
    std::vector<ExprPtr> items;
    bool saw_comma = false;
    while (true) {
      if (!items.empty()) {
        if (!accept_op(",")) break;
        saw_comma = true;
        if (!starts_expression()) break;
      }
      items.push_back(parse_expression(with_condexpr));
    }
    if (!saw_comma) return std::move(items.front());
    ExprPtr e = make(ExprKind::Tuple, offset);
    e->children = std::move(items);
    return finish(std::move(e));
  }

  bool starts_expression() const {
    const Token& t = current();
    switch (t.kind) {
      case TokenKind::Name:
      case TokenKind::String:
      case TokenKind::Integer:
      case TokenKind::Float: return true;
      case TokenKind::Operator:
        return t.text == "(" || t.text == "[" || t.text == "{" || t.text == "-" || t.text == "+";
      default: return false;
    }
  }

  ExprPtr parse_expression(bool with_condexpr) {
    if (++expr_depth_ > Limits::kMaxExprHeight) fail("expression nested too deeply");
    ExprPtr e = with_condexpr ? parse_condexpr() : parse_or();
    --expr_depth_;
    return e;
  }

  ExprPtr parse_condexpr() {
    const size_t offset = current().offset;
    ExprPtr value = parse_or();
    while (accept_name("if")) {
      ExprPtr condition = parse_or();
      ExprPtr otherwise;
      if (accept_name("else")) otherwise = parse_condexpr();
      ExprPtr e = make(ExprKind::Conditional, offset);
      e->children.push_back(std::move(value));
      e->children.push_back(std::move(condition));
      e->children.push_back(std::move(otherwise));
      value = finish(std::move(e));
    }
    return value;
  }

  ExprPtr parse_or() {
    const size_t offset = current().offset;
    ExprPtr left = parse_and();
    while (accept_name("or")) left = binary(ExprKind::Or, offset, "or", std::move(left), parse_and());
    return left;
  }

  ExprPtr parse_and() {
    const size_t offset = current().offset;
    ExprPtr left = parse_not();
    while (accept_name("and")) left = binary(ExprKind::And, offset, "and", std::move(left), parse_not());
    return left;
  }

  ExprPtr parse_not() {
    const size_t offset = current().offset;
    if (accept_name("not")) {
      if (++expr_depth_ > Limits::kMaxExprHeight) fail("expression nested too deeply");
      ExprPtr operand = parse_not();
      --expr_depth_;
      return unary(ExprKind::Not, offset, std::move(operand));
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const size_t offset = current().offset;
    ExprPtr first = parse_math1();
    ExprPtr e;
    while (true) {
      std::string op;
      if (current().kind == TokenKind::Operator &&
          (is_op("==") || is_op("!=") || is_op("<") || is_op(">") || is_op("<=") || is_op(">="))) {
        op = current().text;
        advance();
      } else if (is_name("in")) {
        op = "in";
        advance();
      } else if (is_name("not") && peek().kind == TokenKind::Name && peek().text == "in") {
        op = "not in";
        advance();
        advance();
      } else {
        break;
      }
      if (!e) {
        e = make(ExprKind::Compare, offset);
        e->children.push_back(std::move(first));
      }
      e->ops.push_back(op);
      e->children.push_back(parse_math1());
    }
    if (!e) return first;
    return finish(std::move(e));
  }

  ExprPtr parse_math1() {
    const size_t offset = current().offset;
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      std::string op = current().text;
      advance();
      left = binary(ExprKind::Binary, offset, op, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    const size_t offset = current().offset;
    ExprPtr left = parse_math2();
    while (accept_op("~")) left = binary(ExprKind::Binary, offset, "~", std::move(left), parse_math2());
    return left;
  }

  ExprPtr parse_math2() {
    const size_t offset = current().offset;
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      std::string op = current().text;
      advance();
      left = binary(ExprKind::Binary, offset, op, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    const size_t offset = current().offset;
    ExprPtr left = parse_unary(true);
    while (accept_op("**")) left = binary(ExprKind::Binary, offset, "**", std::move(left), parse_unary(true));
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    const size_t offset = current().offset;
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const bool negate = is_op("-");
      advance();
      if (++expr_depth_ > Limits::kMaxExprHeight) fail("expression nested too deeply");
      ExprPtr operand = parse_unary(false);
      --expr_depth_;
      node = unary(negate ? ExprKind::Negate : ExprKind::Plus, offset, std::move(operand));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& t = current();
    const size_t offset = t.offset;
    switch (t.kind) {
      case TokenKind::Name: {
        const std::string& n = t.text;
        ExprPtr e = make(ExprKind::Literal, offset);
        if (n == "true" || n == "True") e->literal = Value(true);
        else if (n == "false" || n == "False") e->literal = Value(false);
        else if (n == "none" || n == "None") e->literal = Value::none();
        else {
          e->kind = ExprKind::Name;
          e->name = n;
          if (n == "loop") saw_loop_name_ = true;
        }
        advance();
        return e;
      }
      case TokenKind::String: {
        std::string value;
        while (current().kind == TokenKind::String) {  // adjacent literals concatenate
          value += current().text;
          advance();
        }
        ExprPtr e = make(ExprKind::Literal, offset);
        e->literal = Value(std::move(value));
        return e;
      }
      case TokenKind::Integer: {
        ExprPtr e = make(ExprKind::Literal, offset);
        e->literal = Value(t.int_value);
        advance();
        return e;
      }
      case TokenKind::Float: {
        ExprPtr e = make(ExprKind::Literal, offset);
        e->literal = Value(t.float_value);
        advance();
        return e;
      }
      case TokenKind::Operator:
        if (t.text == "(") return parse_parenthesized();
        if (t.text == "[") return parse_list();
        if (t.text == "{") return parse_dict();
        break;
      default: break;
    }
    fail("unexpected " + describe(t));
  }

  ExprPtr parse_parenthesized() {
    const size_t offset = current().offset;
    advance();  // '('
    if (accept_op(")")) {
      ExprPtr e = make(ExprKind::Tuple, offset);
      return e;
    }
    if (++expr_depth_ > Limits::kMaxExprHeight) fail("expression nested too deeply");
    ExprPtr inner = parse_tuple(true);
    --expr_depth_;
    expect_op(")");
    return inner;
  }

  ExprPtr parse_list() {
    ExprPtr e = make(ExprKind::List, current().offset);
    advance();  // '['
    if (++expr_depth_ > Limits::kMaxExprHeight) fail("expression nested too deeply");
    while (!is_op("]")) {
      e->children.push_back(parse_expression(true));
      if (!accept_op(",")) break;
    }
    --expr_depth_;
    expect_op("]");
    return finish(std::move(e));
  }

  ExprPtr parse_dict() {
    ExprPtr e = make(ExprKind::Dict, current().offset);
    advance();  // '{'
    if (++expr_depth_ > Limits::kMaxExprHeight) fail("expression nested too deeply");
    while (!is_op("}")) {
      e->children.push_back(parse_expression(true));
      expect_op(":");
      e->children.push_back(parse_expression(true));
      if (!accept_op(",")) break;
    }
    --expr_depth_;
    expect_op("}");
    return finish(std::move(e));
  }

  // Postfix nodes report the start of the whole expression ("foo" in foo.bar[0]).
  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      const size_t offset = node->offset;
      if (accept_op(".")) {
        if (current().kind == TokenKind::Name) {
          ExprPtr e = make(ExprKind::GetAttr, offset);
          e->name = current().text;
          advance();
          e->children.push_back(std::move(node));
          node = finish(std::move(e));
        } else if (current().kind == TokenKind::Integer) {
          ExprPtr index = make(ExprKind::Literal, current().offset);
          index->literal = Value(current().int_value);
          advance();
          ExprPtr e = make(ExprKind::GetItem, offset);
          e->children.push_back(std::move(node));
          e->children.push_back(std::move(index));
          node = finish(std::move(e));
        } else {
          fail("expected an attribute name after '.', got " + describe(current()));
        }
      } else if (is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    const size_t offset = node->offset;
    advance();  // '['
    if (++expr_depth_ > Limits::kMaxExprHeight) fail("expression nested too deeply");
    ExprPtr parts[3];
    int colons = 0;
    if (!is_op(":")) parts[0] = parse_expression(true);
    while (colons < 2 && accept_op(":")) {
      ++colons;
      if (!is_op(":") && !is_op("]")) parts[colons] = parse_expression(true);
    }
    --expr_depth_;
    expect_op("]");
    ExprPtr e = make(colons == 0 ? ExprKind::GetItem : ExprKind::Slice, offset);
    e->children.push_back(std::move(node));
    if (colons == 0) {
      e->children.push_back(std::move(parts[0]));
    } else {
      for (auto& part : parts) e->children.push_back(std::move(part));
    }
    return finish(std::move(e));
  }

  // Parses "(args, name=value, ...)" into e->children (after any already there) and e->kwargs.
  void parse_call_args(Expr& e) {
    expect_op("(");
    if (++expr_depth_ > Limits::kMaxExprHeight) fail("expression nested too deeply");
    while (!is_op(")")) {
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      if (current().kind == TokenKind::Name && peek().kind == TokenKind::Operator && peek().text == "=") {
        std::string name = current().text;
        advance();
        advance();
        e.kwargs.emplace_back(std::move(name), parse_expression(true));
      } else {
        if (!e.kwargs.empty()) fail("positional argument after keyword argument");
        e.children.push_back(parse_expression(true));
      }
      if (!accept_op(",")) break;
    }
    --expr_depth_;
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    ExprPtr e = make(ExprKind::Call, callee->offset);
    e->children.push_back(std::move(callee));
    parse_call_args(*e);
    return finish(std::move(e));
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter_chain(std::move(node));
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  // One or more "| name(args)" applied to node (node is null for filter blocks / block sets).
  ExprPtr parse_filter_chain(ExprPtr node, bool leading_pipe = true) {
    bool first = true;
    while (first ? (!leading_pipe || is_op("|")) : is_op("|")) {
      if (!first || leading_pipe) advance();  // '|'
      first = false;
      ExprPtr e = make(ExprKind::Filter, current().offset);
      e->name = expect_name("a filter name");
      while (is_op(".")) {
        advance();
        e->name += "." + expect_name("a filter name");
      }
      if (!is_known_filter(e->name)) fail_at(e->offset, "no filter named '" + e->name + "'");
      e->children.push_back(std::move(node));
      if (is_op("(")) parse_call_args(*e);
      node = finish(std::move(e));
    }
    return node;
  }

  ExprPtr parse_test(ExprPtr node) {
    ExprPtr e = make(ExprKind::Test, current().offset);
    advance();  // 'is'
    if (accept_name("not")) e->negated = true;
    const size_t name_offset = current().offset;
    e->name = expect_name("a test name");
    while (is_op(".")) {
      advance();
      e->name += "." + expect_name("a test name");
    }
    if (!is_known_test(e->name)) fail_at(name_offset, "no test named '" + e->name + "'");
    e->children.push_back(std::move(node));
    if (is_op("(")) {
      parse_call_args(*e);
    } else {
      const Token& t = current();
      const bool starts_argument =
          t.kind == TokenKind::Name || t.kind == TokenKind::String || t.kind == TokenKind::Integer ||
          t.kind == TokenKind::Float || (t.kind == TokenKind::Operator && (t.text == "[" || t.text == "{"));
      if (starts_argument && !is_name("else") && !is_name("or") && !is_name("and")) {
        if (is_name("is")) fail("cannot chain tests with 'is'");
        e->children.push_back(parse_postfix(parse_primary()));
      }
    }
    return finish(std::move(e));
  }

  const std::vector<Token>& tokens_;
  const SourceMap& map_;
  size_t pos_ = 0;
  int block_depth_ = 0;
  int loop_depth_ = 0;
  int expr_depth_ = 0;
  bool saw_loop_name_ = false;
};

}  // namespace

Body parse(const LexedTemplate& lexed, const SourceMap& map) {
  Parser parser(lexed, map);
  return parser.parse_template();
}

}  // namespace agentkv::jinja
