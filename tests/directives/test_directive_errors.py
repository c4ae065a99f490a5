"""The directive front end: every invalid program is a DirectiveError at the right place.

Each test states the message, the line, and the column (as the text the caret must point at),
and checks that the formatted error quotes the source line with a caret under that column.
"""

from __future__ import annotations

import textwrap

import pytest

from streammap.directives import param_values, parse_program, read_program
from streammap.errors import DirectiveError, StreamMapError

KERNELS = '''\
# @stream param
N = 8
# @stream kernel(out=8*N)
def f(x, k=0):
    return x
# @stream kernel
def src():
    return 1
# @stream kernel(flops=n)
def g(x, n):
    return x
'''
GRAPH_LINE = KERNELS.count("\n") + 2      # line of `def main():` in graph() programs
BODY = GRAPH_LINE + 1                      # line of the first statement of its body


def write(tmp_path, text: str, name: str = "prog.py"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def error_of(tmp_path, text: str, **kwargs) -> DirectiveError:
    path = write(tmp_path, text)
    with pytest.raises(DirectiveError) as info:
        parse_program(path, **kwargs)
    return info.value


def graph(body: str) -> str:
    """A program with the kernels above and a graph function with ``body``."""
    return KERNELS + "# @stream graph\ndef main():\n" + textwrap.indent(
        textwrap.dedent(body).strip("\n"), "    ") + "\n"


def check(err: DirectiveError, message: str, line: int, at: str | None, hint: str | None = None):
    """``message`` is in the error, which points at ``line`` and at the text ``at`` on it."""
    assert message in err.message, err.format()
    assert err.line == line, err.format()
    if at is None:
        return
    col = err.source_line.index(at) + 1
    assert err.col == col, err.format()
    text = err.format()
    first, quoted, caret = text.splitlines()[:3]
    assert first == f"{err.path}:{line}:{col}: error: {err.message}"
    assert quoted == "    " + err.source_line
    assert caret == "    " + " " * (col - 1) + "^"
    if hint is not None:
        assert hint in err.hint, err.format()


# -- directives ------------------------------------------------------------------------------------

def test_unknown_directive_suggests_the_closest(tmp_path):
    err = error_of(tmp_path, graph("return f(src())") + "# @stream kernal\ndef h(): pass\n")
    check(err, "unknown directive 'kernal'", BODY + 1, "kernal", hint="did you mean 'kernel'?")


def test_unknown_clause_lists_the_clauses(tmp_path):
    err = error_of(tmp_path, '''
        # @stream param
        N = 8
        # @stream kernel(flops=2*N, flop=2*N)
        def h(x):
            return x
        ''')
    check(err, "unknown clause 'flop' in kernel directive", 3, "flop=",
          hint="kernel clauses are flops, bytes, mem, out, device, split, share, stateful, retries")


@pytest.mark.parametrize("directive, at", [
    ("kernel(flops=)", ")"),
    ("kernel flops=3", "flops"),
    ("kernel(flops=1 bytes=2)", "1 bytes"),
])
def test_malformed_clause_syntax(tmp_path, directive, at):
    err = error_of(tmp_path, f"# @stream {directive}\ndef h(x):\n    return x\n")
    check(err, "malformed directive", 1, at)


def test_an_unclosed_parenthesis_is_malformed_when_no_comment_line_continues_it(tmp_path):
    err = error_of(tmp_path, "# @stream kernel(flops=2\ndef h(x):\n    return x\n")
    check(err, "malformed directive: '(' was never closed", 1, "(")


@pytest.mark.parametrize("clause, message", [
    ("share=2", "share must be a number with 1e-06 <= share <= 1, got 2"),
    ("share=0", "share must be a number with 1e-06 <= share <= 1, got 0"),
    ("retries=-1", "retries must be an int in 0..1000, got -1"),
    ("retries=1.5", "retries must be an int in 0..1000, got 1.5"),
    ("split=1.5", "split must be an int axis, got 1.5"),
    ("stateful=1", "stateful must be True or False, got 1"),
    ("device=3", "device must be a non-empty string, got 3"),
    ("flops=-1", "flops must be a non-negative number, got -1"),
    ("out='big'", "out must be a non-negative number, got 'big'"),
])
def test_bad_clause_values(tmp_path, clause, message):
    err = error_of(tmp_path, f"# @stream kernel({clause})\ndef h(x):\n    return x\n")
    value = clause.split("=", 1)[1]
    check(err, message, 1, value)


def test_a_clause_value_that_depends_on_params_is_checked_with_their_values(tmp_path):
    src = '''
        # @stream param
        S = 1
        # @stream kernel(share=S / 2)
        def h():
            return 0
        # @stream graph
        def main():
            return h()
        '''
    assert parse_program(write(tmp_path, src)).nodes["h@prog.py:8"]["share"] == 0.5
    err = error_of(tmp_path, src, overrides={"S": 4})
    check(err, "share must be a number with 1e-06 <= share <= 1, got 2.0", 3, "S / 2")


@pytest.mark.parametrize("expr, message, at", [
    ("__import__('os')", "call to '__import__' is not allowed in clause 'flops'", "__import__"),
    ("N.bit_length", "attribute access is not allowed in clause 'flops'", "N.bit"),
    ("(lambda: 1)()", "call to 'lambda: 1' is not allowed", "(lambda"),
    ("(lambda: 1)", "a lambda is not allowed in clause 'flops'", "lambda"),
    ("[N][0]", "a list is not allowed", "[N]"),
    ("[i for i in range(3)]", "a list comprehension is not allowed", "[i"),
    ("open('x').read()", "call to 'open('x').read' is not allowed", "open"),
    ("max(N, key=abs)", "keyword arguments are not allowed in a call to max()", "key="),
    ("b'x'", "a constant of type bytes is not allowed", "b'x'"),
    ("N @ N", "the @ operator is not allowed", "N @"),
])
def test_unsafe_expressions_in_clauses(tmp_path, expr, message, at):
    err = error_of(tmp_path, f"# @stream param\nN = 8\n# @stream kernel(flops={expr})\n"
                             "def h(x):\n    return x\n")
    check(err, message, 3, at)


def test_unknown_name_in_a_clause(tmp_path):
    err = error_of(tmp_path, "# @stream param\nN = 8\n# @stream kernel(flops=M * 2)\n"
                             "def h(x):\n    return x\n")
    check(err, "unknown name 'M' in clause 'flops' of kernel 'h'", 3, "M * 2",
          hint="clauses may use params (N), the arguments of h (x)")


def test_a_module_global_without_a_compile_time_value_cannot_be_used_in_a_clause(tmp_path):
    err = error_of(tmp_path, "SIZE = len(open('f'))\n# @stream kernel(flops=SIZE)\n"
                             "def h(x):\n    return x\n")
    check(err, "'SIZE' in clause 'flops' of kernel 'h' has no compile-time value: its value "
               "(prog.py:1) is not a compile-time expression: call to 'open' is not allowed", 2,
          "SIZE)", hint="compute anything else inside a kernel")


def test_empty_directive_and_unknown_pragma(tmp_path):
    check(error_of(tmp_path, "# @stream\ndef h(): pass\n"), "empty directive", 1, "#")
    check(error_of(tmp_path, "# @streams kernel\ndef h(): pass\n"),
          "unknown pragma '@streams'", 1, "#")


def test_clauses_are_name_value_and_given_once(tmp_path):
    check(error_of(tmp_path, "# @stream kernel(2)\ndef h(): pass\n"),
          "clauses of the kernel directive are written name=value", 1, "2")
    check(error_of(tmp_path, "# @stream kernel(flops=1, flops=2)\ndef h(): pass\n"),
          "clause 'flops' is given twice", 1, "flops=2")
    check(error_of(tmp_path, "# @stream param(x=1)\nN = 1\n"),
          "unknown clause 'x' in param directive", 1, "x=1")
    check(error_of(tmp_path, "# @stream pipeline\ndef p(i): pass\n"),
          "pipeline directive needs an items clause", 1, "pipeline")


# -- where directives may stand --------------------------------------------------------------------

def test_kernel_directive_above_an_assignment(tmp_path):
    err = error_of(tmp_path, "# @stream kernel(flops=1)\nX = 3\n")
    check(err, "kernel directive must be directly above a module-level def, not an assignment",
          1, "kernel")


def test_kernel_directive_above_a_class(tmp_path):
    err = error_of(tmp_path, "# @stream kernel\nclass Filter:\n    pass\n")
    check(err, "kernel directive must be directly above a module-level def, not a class",
          1, "kernel")


def test_graph_directive_above_an_async_def(tmp_path):
    err = error_of(tmp_path, "# @stream graph\nasync def main():\n    pass\n")
    check(err, "graph directive must be directly above a module-level def, not an async def",
          1, "graph")


def test_orphan_directive_at_the_end_of_the_file(tmp_path):
    err = error_of(tmp_path, graph("return f(src())") + "\n# @stream kernel\n")
    check(err, "directive at the end of the file applies to nothing", BODY + 2, "#")


def test_a_blank_line_detaches_a_directive(tmp_path):
    err = error_of(tmp_path, "# @stream kernel\n\ndef h(x):\n    return x\n")
    check(err, "directive is not directly above a statement (line 2 is blank)", 1, "#")


def test_directive_inside_a_function_body(tmp_path):
    err = error_of(tmp_path, '''
        def helper():
            # @stream kernel
            def inner(x):
                return x
            return inner
        ''')
    check(err, "directive inside the body of function 'helper'", 2, "#")


def test_directive_after_the_last_statement_of_a_function_body(tmp_path):
    err = error_of(tmp_path, "def helper():\n    return 1\n    # @stream param\nN = 3\n")
    check(err, "directive inside the body of function 'helper'", 3, "#")


def test_directive_inside_a_class_or_a_module_level_block(tmp_path):
    check(error_of(tmp_path, "class C:\n    # @stream kernel\n    def m(self):\n        pass\n"),
          "directive inside class 'C'", 2, "#")
    check(error_of(tmp_path, "if True:\n    # @stream param\n    N = 3\n"),
          "directive inside a module-level 'if' statement", 2, "#")


def test_a_directive_must_be_on_its_own_line(tmp_path):
    err = error_of(tmp_path, "N = 3  # @stream param\n")
    check(err, "a directive must be on its own line", 1, "# @stream")


def test_two_directives_on_one_statement(tmp_path):
    err = error_of(tmp_path, "# @stream kernel\n# @stream graph\ndef h():\n    return h()\n")
    check(err, "a second directive ('graph')", 2, "graph")


def test_param_directive_must_be_above_an_assignment(tmp_path):
    check(error_of(tmp_path, "# @stream param\ndef N():\n    return 3\n"),
          "param directive must be directly above an assignment `NAME = EXPR`, not a def",
          1, "param")
    check(error_of(tmp_path, "# @stream param\nA = B = 3\n"),
          "param directive must be directly above an assignment", 1, "param")
    check(error_of(tmp_path, "# @stream param\nA, B = 1, 2\n"),
          "param directive must be directly above an assignment", 1, "param")


@pytest.mark.parametrize("value, message, at", [
    ("int(os.environ['N'])", "attribute access is not allowed in the value of param 'N'", "os."),
    ("load()", "call to 'load' is not allowed in the value of param 'N'", "load"),
    ("os.cpu_count()", "call to 'os.cpu_count' is not allowed", "os."),
    ("LIMIT * 2", "'LIMIT' in the value of param 'N' is not a param", "LIMIT"),
    ("M + 1", "param 'M' is used in the value of param 'N' before it is declared (line 6)", "M"),
    ("(1, 2)", "param 'N' must be a number, a string, a bool or None (got tuple)", "(1"),
    ("1 / 0", "cannot evaluate the value of param 'N': division by zero", "1 /"),
])
def test_param_values_must_be_constant_expressions(tmp_path, value, message, at):
    err = error_of(tmp_path, f"import os\nLIMIT = 4\n# @stream param\nN = {value}\n"
                             "# @stream param\nM = 2\n")
    check(err, message, 4, at)


@pytest.mark.parametrize("value, message", [
    ("10 ** 10 ** 10", "10 ** 10000000000 is too large"),
    ("1 << 10 ** 9", "shift by 1000000000 is too large"),
    ("'a' * 10 ** 9", "repetition is too long"),
    ("(-8) ** 0.5", "gives a complex number"),
    ("round(1.5, 10 ** 9)", "round() digits must be within"),
    ("'%0999999999d' % 1", "string formatting with % is not allowed"),
])
def test_expressions_cannot_exhaust_time_or_memory(tmp_path, value, message):
    err = error_of(tmp_path, f"# @stream param\nN = {value}\n")
    check(err, message, 2, value.split(" ")[0][:3])


def test_duplicate_param_and_duplicate_kernel(tmp_path):
    check(error_of(tmp_path, "# @stream param\nN = 1\n# @stream param\nN = 2\n"),
          "duplicate param 'N' (first declared on line 2)", 4, "N")
    check(error_of(tmp_path, "# @stream kernel\ndef h(): pass\n# @stream kernel\ndef h(): pass\n"),
          "duplicate kernel 'h' (first defined on line 2)", 4, "def")


def test_a_file_that_is_not_python(tmp_path):
    err = error_of(tmp_path, "# @stream param\nN = 3\ndef broken(:\n    pass\n")
    check(err, "invalid Python syntax", 3, ":")


def test_a_missing_file(tmp_path):
    with pytest.raises(DirectiveError, match="cannot read program"):
        parse_program(tmp_path / "nope.py")


# -- entry points and overrides --------------------------------------------------------------------

def test_no_graph_function(tmp_path):
    err = error_of(tmp_path, KERNELS)
    assert err.message == "no `# @stream graph` function in this file"
    assert err.path.endswith("prog.py") and err.line is None


def test_several_graph_functions_need_an_entry(tmp_path):
    src = graph("return f(src())") + "# @stream graph\ndef other():\n    return src()\n"
    err = error_of(tmp_path, src)
    assert err.message == "several graph functions (main, other): choose one as the entry point"
    err = error_of(tmp_path, src, entry="missing")
    assert err.message == "no graph function 'missing' in this file"
    assert "main, other" in err.hint


def test_an_override_of_an_unknown_param_lists_the_params(tmp_path):
    err = error_of(tmp_path, graph("return f(src())"), overrides={"M": 3})
    assert err.message == "unknown param 'M' in overrides"
    assert err.line is None and err.hint == "params of this program: N"
    with pytest.raises(DirectiveError, match="unknown param 'M'"):
        param_values(write(tmp_path, KERNELS), {"M": 1})


@pytest.mark.parametrize("value, message", [
    ("gpu", "unknown name 'gpu'"),
    ("1 +", "invalid syntax"),
    ("__import__('os')", "call to '__import__' is not allowed"),
    ([1, 2], "must be a number, a string, a bool or None (got list)"),
])
def test_bad_override_values(tmp_path, value, message):
    err = error_of(tmp_path, graph("return f(src())"), overrides={"N": value})
    assert message in err.message and err.line is None


# -- the graph body --------------------------------------------------------------------------------

@pytest.mark.parametrize("body, message, at", [
    ("x = np.zeros(3)", "call to 'np.zeros' is not a kernel call", "np."),
    ("x = src()\nprint(x)", "call to 'print' is not a kernel call", "print"),
    ("x = src()\nwhile True:\n    x = f(x)", "'while' loops are not allowed", "while"),
    ("with open('a') as fh:\n    x = src()", "'with' statements are not allowed", "with"),
    ("import os\nx = src()", "imports are not allowed in a graph body", "import"),
    ("try:\n    x = src()\nexcept Exception:\n    pass", "'try' is not allowed", "try"),
    ("global N\nx = src()", "'global' is not allowed", "global"),
    ("x = src()\ndel x", "'del' is not allowed", "del"),
    ("def inner():\n    pass", "a nested def is not allowed", "def"),
    ("x = src()\ny = f(x.T)", "attribute access is not allowed in a graph body", "x.T"),
    ("y = f(lambda: 1)", "a lambda is not allowed in a graph body", "lambda"),
    ("y = [f(i) for i in range(2)]\nz = {i: 1 for i in range(2)}",
     "a dict comprehension is not allowed", "{i"),
    ("x = src()\nreturn {1: x}", "keys of a returned dict must be constant strings", "1:"),
    ("ys = [src()]\nys.append(src()).x", "attribute access is not allowed", "ys."),
    ("x = src()\ny = x.copy()", "call to 'x.copy' is not a kernel call", "x.copy"),
    ("x = src()\nbreak", "'break' outside a loop", "break"),
    ("x = range(3)", "range(...) is allowed only as the iterable", "range"),
    ("x = src()\nif False:\n    print(x)", "call to 'print' is not a kernel call", "print"),
])
def test_only_the_graph_language_is_allowed(tmp_path, body, message, at):
    err = error_of(tmp_path, "import numpy as np\n" + graph(body))
    line = BODY + 1 + next(i for i, text in enumerate(body.splitlines()) if at in text)
    check(err, message, line, at)


@pytest.mark.parametrize("body, message, at", [
    ("x = src()\nfor i in range(len(x)):\n    x = f(x)",
     "'x' is a task result, known only when the graph runs; it cannot be used in a range() bound",
     "x)"),
    ("x = src()\nys = [f(x) for i in range(x)]", "'x' is a task result", "x)]"),
    ("ys = [src() for i in range(3)]\nfor i, y in enumerate(ys):\n    f(y)",
     "loops in a graph body iterate over range(...), not 'enumerate(ys)'", "enumerate"),
    ("ys = [src() for i in range(3)]\nfor y in ys:\n    f(y)",
     "loops in a graph body iterate over range(...), not 'ys'", "ys:"),
    ("for i in range(2.5):\n    f(i)", "a range() bound must be an int, got 2.5", "2.5"),
    ("x = src()\nif x:\n    f(x)", "it cannot be used in an if condition", "x:"),
    ("x = src()\ny = f(x, x + 1)", "'x' is a task result", "x + 1"),
])
def test_control_flow_must_be_static(tmp_path, body, message, at):
    err = error_of(tmp_path, graph(body))
    line = BODY + next(i for i, text in enumerate(body.splitlines()) if at in text)
    check(err, message, line, at, hint="static values are constants, params, loop variables"
          if "task result" in message else None)


def test_a_name_used_before_it_is_assigned(tmp_path):
    err = error_of(tmp_path, graph("y = f(x)\nx = src()\nreturn y"))
    check(err, "name 'x' is used before it is assigned", BODY, "x)")


def test_unknown_names_and_uncalled_kernels_in_a_graph_body(tmp_path):
    check(error_of(tmp_path, graph("return f(missing)")), "unknown name 'missing'",
          BODY, "missing")
    check(error_of(tmp_path, graph("k = f\nreturn src()")),
          "kernel 'f' is used without being called", BODY, "f")
    check(error_of(tmp_path, "import numpy as np\n" + graph("return f(np)")),
          "'np' is a module global without a compile-time value: it is bound by an import "
          "(prog.py:1)", BODY + 1, "np)")


@pytest.mark.parametrize("call, message, at", [
    ("f(src(), 1, 2)", "kernel 'f' takes 2 positional arguments but 3 were given", "f(src"),
    ("f(src(), z=1)", "kernel 'f' got an unexpected keyword argument 'z'", "z=1"),
    ("f()", "kernel 'f' is missing argument 'x'", "f()"),
    ("f(src(), 1, k=2)", "kernel 'f' got multiple values for argument 'k'", "k=2"),
    ("g(src())", "kernel 'g' is missing argument 'n'", "g("),
])
def test_kernel_calls_bind_like_python(tmp_path, call, message, at):
    err = error_of(tmp_path, graph(f"return {call}"))
    check(err, message, BODY, at, hint="kernel ")


def test_a_clause_cannot_use_an_array_argument(tmp_path):
    err = error_of(tmp_path, graph("x = src()\nreturn g(x, x)"))
    check(err, "kernel 'g': clause 'flops' uses argument 'n', which is a task result (an array) "
               "at this call", BODY + 1, "g(x")


def test_a_clause_value_computed_from_arguments_is_checked_at_each_call(tmp_path):
    err = error_of(tmp_path, graph("x = src()\ny = g(x, 2)\nreturn g(y, -1)"))
    check(err, "kernel 'g': flops must be a non-negative number, got -1 for this call",
          BODY + 2, "g(y")


def test_a_clause_that_fails_for_some_arguments_names_the_call(tmp_path):
    err = error_of(tmp_path, '''
        # @stream kernel(flops=100 // n)
        def h(n):
            return n
        # @stream graph
        def main():
            return [h(n) for n in range(3)]
        ''')
    check(err, "cannot evaluate clause 'flops' of kernel 'h'", 1, "100 //")
    assert "the call at prog.py:6:13" in err.hint


def test_a_default_that_is_not_static_cannot_feed_a_clause(tmp_path):
    err = error_of(tmp_path, '''
        import numpy as np
        # @stream kernel(flops=dtype)
        def h(x, dtype=np.float32):
            return x
        # @stream graph
        def main():
            return h(1)
        ''')
    check(err, "uses argument 'dtype', whose default is not static", 3, "np.float32")


def test_static_index_out_of_range(tmp_path):
    err = error_of(tmp_path, graph("ys = [src() for i in range(8)]\nreturn f(ys[9])"))
    check(err, "index 9 is out of range for 'ys' (a static list of 8 items)", BODY + 1, "9]")


def test_task_results_cannot_be_indexed_or_starred(tmp_path):
    check(error_of(tmp_path, graph("x = src()\nreturn f(x[0])")),
          "'x' is a task result and cannot be indexed", BODY + 1, "x[0]")
    check(error_of(tmp_path, graph("x = src()\nreturn f(*x)")),
          "'*x' unpacks a task result", BODY + 1, "*x")


def test_unpacking_a_static_list_needs_the_right_length(tmp_path):
    err = error_of(tmp_path, graph("a, b = [src(), src(), src()]\nreturn f(a)"))
    check(err, "cannot unpack 3 values into 2 names", BODY, "a, b")


def test_an_empty_graph(tmp_path):
    err = error_of(tmp_path, graph("x = 1\nreturn x"))
    check(err, "graph function 'main' calls no kernel", GRAPH_LINE, "def main")


def test_a_graph_function_argument_needs_a_static_default(tmp_path):
    src = KERNELS + "# @stream graph\ndef main(n):\n    return f(n)\n"
    check(error_of(tmp_path, src), "argument 'n' of graph function 'main' has no default",
          GRAPH_LINE, "def")


def test_runaway_unrolling_is_refused(tmp_path):
    err = error_of(tmp_path, graph("x = src()\nfor i in range(10 ** 7):\n    pass\nreturn x"))
    check(err, "the graph unrolls to more than 1000000 loop iterations", BODY + 1, "for")


def test_errors_are_stream_map_errors_and_read_program_reports_them_too(tmp_path):
    path = write(tmp_path, "# @stream kernel(share=2)\ndef h(): pass\n")
    with pytest.raises(StreamMapError) as info:
        read_program(path)
    assert isinstance(info.value, DirectiveError)
    assert info.value.location() == f"{path}:1:24"


def test_pipeline_items_and_index(tmp_path):
    kernel = "# @stream kernel\ndef k(i):\n    return i\n"
    check(error_of(tmp_path, kernel + "# @stream pipeline(items=-1)\ndef p(i):\n    return k(i)\n"),
          "items must be an int >= 0, got -1", 4, "-1")
    check(error_of(tmp_path, kernel + "# @stream pipeline(items=2)\ndef p():\n    return k(0)\n"),
          "pipeline function 'p' must take the item index as its first argument", 5, "def")
