"""A calculator the LLM can trust more than its own arithmetic.

Expressions are evaluated by `simpleeval` with a deliberately small surface: numbers, the
arithmetic operators and a whitelist of math functions and constants. There is no attribute
access, no subscripts, no strings and no names beyond the whitelist, and every operation that
could grow without bound (powers, products, factorials, rounding) is capped, so a hostile or
confused expression such as `9**9**9` fails fast instead of eating the CPU or the memory.
"""

from __future__ import annotations

import ast
import math
import threading
from collections.abc import Callable, Mapping
from typing import Any

import simpleeval

from app.tools.base import Tool, ToolResult

MAX_EXPRESSION_CHARS = 300
MAX_RESULT_BITS = 4096  # about 1233 decimal digits: more than anyone wants read aloud
MAX_FACTORIAL = 300
MAX_ROUND_DIGITS = 15

Number = int | float


class _TooBig(ValueError):
    pass


def _check_int(value: Number) -> Number:
    if isinstance(value, int) and value.bit_length() > MAX_RESULT_BITS:
        raise _TooBig("the result is too large")
    return value


def _power(a: Number, b: Number) -> Number:
    """`a ** b` refused *before* computing when the result could not fit the cap."""
    ints = isinstance(a, int) and isinstance(b, int)
    if ints and b > 0 and abs(a) > 1 and b * math.log2(abs(a)) > MAX_RESULT_BITS:
        raise _TooBig("the power is too large")
    return _check_int(a**b)


def _multiply(a: Number, b: Number) -> Number:
    if isinstance(a, int) and isinstance(b, int) and (
        a.bit_length() + b.bit_length() > MAX_RESULT_BITS + 1
    ):
        raise _TooBig("the product is too large")
    return a * b


def _factorial(n: Number) -> int:
    if isinstance(n, float) and n.is_integer():
        n = int(n)
    if not isinstance(n, int) or n < 0:
        raise ValueError("factorial needs a whole number >= 0")
    if n > MAX_FACTORIAL:
        raise _TooBig(f"factorial is limited to n <= {MAX_FACTORIAL}")
    return math.factorial(n)


def _round(x: Number, ndigits: int = 0) -> Number:
    """Python's round() builds 10**-ndigits for ints: an unbounded ndigits is a CPU bomb."""
    if not isinstance(ndigits, int) or abs(ndigits) > MAX_ROUND_DIGITS:
        raise ValueError(f"round() digits must be a whole number within ±{MAX_ROUND_DIGITS}")
    return round(x, ndigits) if ndigits else round(x)


def _log(x: Number, base: Number | None = None) -> float:
    return math.log(x) if base is None else math.log(x, base)


_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt, "cbrt": lambda x: math.copysign(abs(x) ** (1 / 3), x),
    "exp": math.exp, "log": _log, "ln": math.log, "log10": math.log10, "log2": math.log2,
    "sin": math.sin, "cos": math.cos, "tan": math.tan,
    "asin": math.asin, "acos": math.acos, "atan": math.atan, "atan2": math.atan2,
    "sinh": math.sinh, "cosh": math.cosh, "tanh": math.tanh,
    "degrees": math.degrees, "radians": math.radians, "hypot": math.hypot,
    "abs": abs, "round": _round, "floor": math.floor, "ceil": math.ceil,
    "min": min, "max": max, "factorial": _factorial, "pow": _power,
}
_NAMES: dict[str, float] = {"pi": math.pi, "e": math.e, "tau": math.tau}
_OPERATORS: dict[type, Callable[..., Any]] = {
    ast.Add: lambda a, b: _check_int(a + b), ast.Sub: lambda a, b: _check_int(a - b),
    ast.Mult: _multiply, ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b,
    ast.Mod: lambda a, b: a % b, ast.Pow: _power,
    ast.USub: lambda a: -a, ast.UAdd: lambda a: +a,
}
# Only these syntax nodes are evaluated; anything else (attributes, subscripts, strings,
# comparisons, lambdas, f-strings, keywords...) is refused by simpleeval itself.
_ALLOWED_NODES = (ast.Name, ast.UnaryOp, ast.BinOp, ast.Call, ast.Constant)


def _number_constant(node: ast.Constant) -> Number:
    value = node.value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise simpleeval.FeatureNotAvailable("only numbers are allowed")
    return value


def _make_evaluator() -> simpleeval.SimpleEval:
    evaluator = simpleeval.SimpleEval(operators=dict(_OPERATORS), functions=dict(_FUNCTIONS),
                                      names=dict(_NAMES))
    evaluator.nodes = {node: handler for node, handler in evaluator.nodes.items()
                       if node in _ALLOWED_NODES}
    evaluator.nodes[ast.Constant] = _number_constant
    return evaluator


def _normalise(expression: str) -> str:
    """Spoken and typed maths uses ^, × and ÷; Python does not."""
    return (expression.replace("^", "**").replace("×", "*").replace("÷", "/")
            .replace("−", "-"))


def format_number(value: Number) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("the result is not a number")
    if isinstance(value, int):
        return str(value)
    if not math.isfinite(value):
        raise ValueError("the result is not a finite number")
    if value.is_integer() and abs(value) < 1e16:
        return str(int(value))
    return f"{value:.12g}"


class CalculatorTool(Tool):
    """Exact arithmetic for the LLM, which is unreliable at it."""

    name = "calculator"
    description = (
        "Evaluate an arithmetic expression exactly. Supports + - * / // % ** (or ^), "
        "parentheses, the constants pi, e, tau and the functions sqrt, cbrt, exp, log(x[, base]), "
        "ln, log10, log2, sin, cos, tan, asin, acos, atan, atan2, sinh, cosh, tanh, degrees, "
        "radians, hypot, abs, round(x[, digits]), floor, ceil, min, max, factorial, pow. "
        "Angles are in radians. Example: sqrt(2) * 3^4 / 7"
    )
    parameters: Mapping[str, Any] = {
        "type": "object",
        "properties": {
            "expression": {
                "type": "string",
                "description": "The expression, e.g. '(17.5 * 12) / 3' or 'sin(pi / 6)'",
            },
        },
        "required": ["expression"],
    }

    def run(self, arguments: Mapping[str, Any], cancel: threading.Event | None = None
            ) -> ToolResult:
        expression = arguments.get("expression")
        if not isinstance(expression, str) or not expression.strip():
            return self._error("'expression' must be a non-empty string")
        if len(expression) > MAX_EXPRESSION_CHARS:
            return self._error(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
        expression = expression.strip()
        try:
            source = _normalise(expression)
            # mode="eval" accepts one expression only: no statements, no "1; 2".
            tree = ast.parse(source, mode="eval")
            value = _make_evaluator().eval(source, previously_parsed=tree.body)
            text = format_number(value)
        except simpleeval.FunctionNotDefined as exc:
            return self._error(f"unknown function {exc.func_name!r}")
        except simpleeval.NameNotDefined as exc:
            return self._error(f"unknown name {exc.name!r}")
        except (simpleeval.InvalidExpression, SyntaxError):
            return self._error(f"cannot evaluate {expression!r}: only numbers, arithmetic "
                               "and the listed math functions are allowed")
        except ZeroDivisionError:
            return self._error("division by zero")
        except OverflowError:
            return self._error("the result is too large")
        except (ValueError, TypeError, ArithmeticError) as exc:
            return self._error(f"cannot evaluate {expression!r}: {exc}")
        except (RecursionError, MemoryError):
            return self._error("the expression is too deeply nested")
        return ToolResult(self.name, f"{expression} = {text}", source="calculator")

    def _error(self, message: str) -> ToolResult:
        return ToolResult(self.name, "", source="calculator", error=message)
