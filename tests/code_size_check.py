#!/usr/bin/env python3
"""The size limits of docs/architecture.md, checked at every test run (issue 47): no class or struct
in src/ or include/agentkv/ declares more than MAX_PUBLIC public member functions (each overload
counts; constructors, destructors, deleted functions and assignment operators do not), and no file
under src/server/ has more than MAX_SERVER_LINES lines. A god class or a god file grows one method
or one route at a time; this fails the step that crosses the line, naming it.

    tests/code_size_check.py REPO_ROOT          # exit 1 and one line per offender
    tests/code_size_check.py --self-test        # the counter on a few known shapes

The counter reads declarations, not a parse: comments are removed, member function bodies and
nested types are skipped by brace depth, and a public declaration is one with a parameter list.
"""

import os
import re
import sys

MAX_PUBLIC = 25
MAX_SERVER_LINES = 700


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def class_bodies(text):
    """(name, is_struct, body) for every class / struct definition, nested ones included."""
    for m in re.finditer(r"\b(class|struct)\s+(\w+)(\s+final)?\s*(:[^{;()]*)?\{", text):
        depth, j = 1, m.end()
        while depth and j < len(text):
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        yield m.group(2), m.group(1) == "struct", text[m.end():j - 1]


def public_functions(name, is_struct, body):
    """Names of the public member functions a class body declares."""
    access = "public" if is_struct else "private"
    declarations, statement, depth, i = [], "", 0, 0
    while i < len(body):
        c = body[i]
        if depth == 0 and not statement.strip():
            m = re.match(r"\s*(public|private|protected)\s*:", body[i:])
            if m:
                access = m.group(1)
                i += m.end()
                continue
        if c == "{":
            if depth == 0:
                if access == "public":
                    declarations.append(statement)
                statement = ""
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == ";" and depth == 0:
            if access == "public":
                declarations.append(statement)
            statement = ""
        elif depth == 0:
            statement += c
        i += 1
    names = []
    for d in declarations:
        d = " ".join(d.split())
        while "operator" not in d and re.search(r"<[^<>]*>", d):  # template arguments: std::function<void()>
            d = re.sub(r"<[^<>]*>", "", d)
        if "(" not in d or re.match(r"^(using|typedef|friend|static_assert|enum|struct|class|template\s*<[^>]*>\s*(struct|class))\b", d):
            continue
        head = d.split("(")[0].strip()
        if not head or "=" in head or "~" in head or "operator=" in d.replace(" ", "").split("(")[0]:
            continue  # a data member initialised by a call, a destructor, an assignment
        fn = head.split()[-1].lstrip("*&")
        if fn == name or re.search(r"=\s*delete\s*$", d):
            continue
        names.append(fn)
    return names


def offenders(root):
    found = []
    for top in ("src", os.path.join("include", "agentkv")):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                if f.endswith(".h"):
                    with open(path, errors="replace") as fh:
                        text = strip_comments(fh.read())
                    for name, is_struct, body in class_bodies(text):
                        n = len(public_functions(name, is_struct, body))
                        if n > MAX_PUBLIC:
                            found.append("%s: %s declares %d public member functions (at most %d)" % (rel, name, n, MAX_PUBLIC))
                if rel.startswith(os.path.join("src", "server")) and f.endswith((".h", ".cpp")):
                    with open(path, errors="replace") as fh:
                        n = sum(1 for _ in fh)
                    if n > MAX_SERVER_LINES:
                        found.append("%s: %d lines (a src/server/ file has at most %d)" % (rel, n, MAX_SERVER_LINES))
    return found


def self_test():
    sample = strip_comments("""
    class A final : public B {
     public:
      A(int x);
      ~A();
      A(const A&) = delete;
      A& operator=(const A&) = delete;
      int f() const { if (x) { return 1; } return 0; }  // a body with braces
      void g(int);
      void g(double);  // an overload counts
      template <typename F> void each(F&& f) { f(); }
      static constexpr int kN = 3;
      std::function<void()> hook = make();
      struct Inner { void h(); };
     private:
      void hidden();
    };
    struct S { int a = 0; bool ok() const; };
    """)
    got = {name: public_functions(name, is_struct, body) for name, is_struct, body in class_bodies(sample)}
    assert got["A"] == ["f", "g", "g", "each"], got["A"]
    assert got["Inner"] == ["h"], got["Inner"]
    assert got["S"] == ["ok"], got["S"]
    print("self-test passed")


if __name__ == "__main__":
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        self_test()
        sys.exit(0)
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    bad = offenders(sys.argv[1])
    for line in bad:
        print(line)
    print("%d offender(s)" % len(bad))
    sys.exit(1 if bad else 0)
