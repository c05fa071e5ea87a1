"""Catch the classic multiprocessing mistake before it turns into "a process died during startup".

The Engine starts its worker processes with the spawn method, which re-imports the user's script in
each of them. A script that creates the Engine at its top level, outside `if __name__ == "__main__":`,
would create it again in every worker. We say so, with the line, before starting anything.
"""

from __future__ import annotations

import ast
import multiprocessing
import sys
from typing import Optional, Tuple

ADVICE = (
    "The Engine starts worker processes with multiprocessing's spawn method, which re-imports your script "
    'in each of them. Put the code that creates the Engine under `if __name__ == "__main__":`.'
)


def check_main_guard() -> None:
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(
            f"Engine() was called while a worker process was importing your script. {ADVICE}"
        )
    where = _unguarded_top_level_call()
    if where is not None:
        raise RuntimeError(
            f"Engine() is called at the top level of {where[0]} (line {where[1]}). {ADVICE}"
        )


def _unguarded_top_level_call() -> Optional[Tuple[str, int]]:
    """(file, line) when the main script's own top-level code is running this call outside a main guard."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if not path or not path.endswith(".py"):
        return None  # an interactive session, python -c, or a tool's entry point
    frame = sys._getframe(1)
    while frame is not None and not (
        frame.f_globals is vars(main) and frame.f_code.co_name == "<module>"
    ):
        frame = frame.f_back
    if frame is None:
        return None  # not called from the script's top level (a function, a thread, a test runner)
    line = frame.f_lineno
    try:
        with open(path) as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.If)
            and _is_main_test(node.test)
            and node.lineno <= line <= (node.end_lineno or line)
        ):
            return None
    return path, line


def _is_main_test(test: ast.expr) -> bool:
    if not (isinstance(test, ast.Compare) and len(test.comparators) == 1):
        return False
    sides = [test.left, test.comparators[0]]
    names = [s.id for s in sides if isinstance(s, ast.Name)]
    consts = [s.value for s in sides if isinstance(s, ast.Constant)]
    return names == ["__name__"] and consts == ["__main__"]
