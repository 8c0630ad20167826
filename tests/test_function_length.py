"""No function or method of ``src/benchmaker`` is longer than 120 lines (issue 35: a longer one is
split by what it does, each part named for it). Read with ``ast``: a nested function counts within
its enclosing one and on its own."""

from __future__ import annotations

import ast

import support

LIMIT = 120


def test_no_function_over_120_lines():
    long = []
    for path in sorted((support.ROOT / "src" / "benchmaker").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > LIMIT:
                    long.append(f"{path.relative_to(support.ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, f"functions over {LIMIT} lines (split each by what it does): {long}"
