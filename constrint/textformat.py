"""Model text: `parse(text, dialect)` reads a model file into a `Model`.

``dialect="python"`` (the default)
    A statement ends at ``;`` or at the end of a line; parentheses carry it over several lines, as in Python.
    ``#`` starts a comment. Expressions use Python's operators and precedence: ``+ - * // % **`` (constant
    exponent), unary minus, integers and names. A statement is a constraint: a comparison with
    ``== != <= < >= >`` (a chain such as ``1 <= x <= 9`` means each link), ``e in [a, b, c]``,
    ``e in [lo..hi]`` (and ``not in``), ``all_different(a, b, ...)``, ``divides(d, m)``, or these joined by
    ``and``, ``or``, ``not``. At the top level ``NAME == [8, 16, 32]``, ``NAME in [8, 16, 32]`` and
    ``NAME in [lo..hi]`` with constant values declare NAME's domain; a name declared twice keeps its first
    declaration as the domain, and the later ones become constraints.

``dialect="constrint"``
    The files that flashrnn's ConstrINT reads, with ConstrINT's meaning. ``#`` comments; only ``;`` ends a
    statement. A statement is split in this order: ``|`` (or; ``||`` too), ``<=``, ``% ... == 0`` (the left
    side is divisible by the whole right side: ``H % A * B == 0`` means A*B divides H), ``==`` (a
    ``[list]`` side means the other side is one of its values; ``NAME == [list]`` declares NAME's domain),
    ``+``, ``*``, ``^`` (power by an integer). Parentheses are cosmetic: they must balance but do not group,
    so ``(A + B) * C`` means ``A + B * C``. There is no ``-``, ``/``, ``<``, ``>``, ``>=`` or ``!=``.

In both dialects a name without a declared domain is an integer in [1, 2**30], and every constraint is added
under its text as written, which is how `Infeasible.core` names it. Syntax errors raise `ParseError` with the
1-based line and column in the original text.
"""
from __future__ import annotations

import ast
import bisect
import contextlib
import functools
import gc
import io
import keyword
import operator
import re
import tokenize
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence, Union

from .constraints import Constraint
from .errors import ConstrintError, ParseError
from .expr import Expr, IntVar
from .model import Model

DIALECTS = ("python", "constrint")
DEFAULT_DOMAIN = (1, 2**30)
MAX_CLAUSES = 256  # an `or` over `and`s is expanded into this many disjunctions at most
MAX_CONSTANT_BITS = 4096  # a constant power larger than this is refused rather than computed

Value = Union[Expr, int]
Pos = tuple[int, int]  # 1-based line and column
Lookup = Callable[[str, Pos], Value]


def parse(text: str, dialect: str = "python") -> Model:
    """The model written in `text` in `dialect`; raises ParseError (with line and column) on bad text."""
    with _collector_paused():
        return _reader(text, dialect).read()


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused (if it ran) while a model or expression is read: reading allocates
    many small objects, each batch of which starts a collection that walks every object alive, and leaves no cycles to
    collect (the text of a 40 x 40 assignment, 1,600 variables: 0.27 -> 0.17 s to read and solve)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def parse_expression(text: str, model: Model, dialect: str = "python") -> Value:
    """One expression over the existing variables of `model`, e.g. an objective given on a command line."""

    def existing(name: str, pos: Pos) -> Value:
        if name not in model.variables:
            known = ", ".join(list(model.variables)[:12])
            raise ParseError(f"unknown variable {name!r}; the model has {known or 'no variables'}", *pos)
        return model.variables[name]

    with _collector_paused():
        return _reader(text, dialect).expression(existing)


def _reader(text: str, dialect: str) -> _PythonReader | _ConstrintReader:
    if dialect == "python":
        return _PythonReader(text)
    if dialect == "constrint":
        return _ConstrintReader(text)
    raise ConstrintError(f"unknown dialect {dialect!r}; use one of {', '.join(map(repr, DIALECTS))}")


@dataclass(frozen=True)
class _Declared:
    """A declared domain: `values`, or the interval [lo, hi] when `values` is None."""

    lo: int
    hi: int
    values: tuple[int, ...] | None
    pos: Pos


class _Builder:
    """Creates each variable at its first use, with its declared domain, and adds named constraints."""

    def __init__(self, domains: dict[str, _Declared]) -> None:
        self.model = Model()
        self.domains = domains

    def var(self, name: str, pos: Pos) -> IntVar:
        if name in self.model.variables:
            return self.model.variables[name]
        spec = self.domains.get(name)
        try:
            if spec is None:
                return self.model.int_var(*DEFAULT_DOMAIN, name)
            if spec.values is not None:
                return self.model.int_var(values=spec.values, name=name)
            return self.model.int_var(spec.lo, spec.hi, name)
        except ConstrintError as exc:
            raise ParseError(str(exc), *(spec.pos if spec else pos)) from None

    def add(self, clause: Sequence[Constraint], name: str, pos: Pos) -> None:
        """Add the disjunction of `clause` (one constraint when it has one item) under `name`."""
        with _located(pos):
            constraint = clause[0] if len(clause) == 1 else self.model.any_of(list(clause))
            self.model.add(constraint, name=name)


@contextlib.contextmanager
def _located(pos: Pos) -> Iterator[None]:
    """Turn a ConstrintError raised while building into a ParseError at `pos`."""
    try:
        yield
    except ParseError:
        raise
    except ConstrintError as exc:
        raise ParseError(str(exc), *pos) from None


def _fold(op: str, a: int, b: int, pos: Pos) -> int:
    """`a op b` for two constants, refusing division by zero and huge powers."""
    if op in ("//", "%") and b == 0:
        raise ParseError(f"division by zero in the constant expression {a} {op} {b}", *pos)
    if op == "**":
        if b < 0:
            raise ParseError(f"negative exponent in {a} ** {b}; use an integer >= 0", *pos)
        if abs(a) > 1 and b * abs(a).bit_length() > MAX_CONSTANT_BITS:
            raise ParseError(f"the constant {a} ** {b} is too large (over {MAX_CONSTANT_BITS} bits)", *pos)
    return _OPERATORS[op](a, b)


def _apply(op: str, a: Value, b: Value, pos: Pos) -> Value:
    if isinstance(a, int) and isinstance(b, int):
        return _fold(op, a, b, pos)
    try:
        return _OPERATORS[op](a, b)
    except ConstrintError as exc:
        raise ParseError(str(exc), *pos) from None


def _compare(a: Value, op: str, b: Value, pos: Pos) -> Constraint:
    if isinstance(a, int) and isinstance(b, int):
        raise ParseError(f"'{a} {op} {b}' compares constants only; a constraint needs a variable", *pos)
    try:
        return _COMPARISONS[op](a, b)
    except ConstrintError as exc:
        raise ParseError(str(exc), *pos) from None


def _clean(segment: str) -> str:
    """Source text on one line: comments dropped, whitespace runs collapsed."""
    return " ".join(re.sub(r"#[^\n]*", "", segment).split())


_OPERATORS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
              "%": operator.mod, "**": operator.pow}
_COMPARISONS = {"==": operator.eq, "!=": operator.ne, "<=": operator.le, "<": operator.lt,
                ">=": operator.ge, ">": operator.gt}
_NEGATION = {"==": "!=", "!=": "==", "<=": ">", "<": ">=", ">=": "<", ">": "<="}

# ---------------------------------------------------------------------------------------------- python

_PY_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}
_PY_COMPARE = {ast.Eq: "==", ast.NotEq: "!=", ast.LtE: "<=", ast.Lt: "<", ast.GtE: ">=", ast.Gt: ">"}
_PY_HINTS = {
    ast.Div: "'/' is not an integer operation; use '//' (floor division)",
    ast.BitXor: "'^' is bitwise xor in the python dialect; use '**' for powers",
    ast.MatMult: "'@' is not an integer operation; use '*'",
    ast.Is: "'is' compares identity; use '=='",
    ast.IsNot: "'is not' compares identity; use '!='",
}
_DOTS_HINT = "'..' only forms an interval, as in 'x in [lo..hi]' with one lo and one hi"
_DOTS = re.compile(r"(?<!\.)\.\.(?!\.)")  # `[lo..hi]` is read as `[lo ,hi]` (same length: columns hold)
_TOO_DEEP = ("the expression nests too deeply (or is too long: Python's parser takes sums of up to about 2,900 terms) "
             "for the python dialect; split it up, or write it in the constrint dialect, which reads sums of any "
             "length")
_INFIX = ("+", "-", "*", "//", "%", "**", "==", "!=", "<=", "<", ">=", ">", "and", "or", "in")
_NO_START = _INFIX[2:] + ("=", ";", ")", "]", ",")  # what cannot begin an expression ('+' and '-' can: unary)

Atom = tuple[Constraint, str]  # a constraint and its text
Clauses = list[list[Atom]]  # a conjunction of disjunctions


def _conjunction(parts: list[Clauses]) -> Clauses:
    return [clause for part in parts for clause in part]


def _disjunction(parts: list[Clauses], pos: Pos) -> Clauses:
    result: Clauses = [[]]
    for part in parts:
        result = [left + right for left in result for right in part]
        if len(result) > MAX_CLAUSES:
            raise ParseError(f"this 'or' of 'and's expands to over {MAX_CLAUSES} disjunctions; split it", *pos)
    return result


class _NotConstant(Exception):
    pass


def _constant_only(name: str, pos: Pos) -> Value:
    raise _NotConstant(name)


@contextlib.contextmanager
def _not_too_deep(pos: Pos) -> Iterator[None]:
    """Turn a RecursionError (an expression nested thousands of levels deep) into a ParseError at `pos`."""
    try:
        yield
    except RecursionError:
        raise ParseError(_TOO_DEEP, *pos) from None


def _expected(source: str) -> tuple[str, int, int] | None:
    """What was expected where Python's parser says only 'invalid syntax', as (message, line, 0-based column) at
    the first token that cannot follow the one before it; None when no token is found out of place."""
    before = None
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type in (tokenize.NL, tokenize.COMMENT):
                continue
            end = token.type in (tokenize.NEWLINE, tokenize.ENDMARKER)
            text = token.string
            if before is not None and before.string in _INFIX and (end or text in _NO_START):
                found = "" if end else f", found {text!r}"
                return f"expected an expression after {before.string!r}{found}", *token.start
            if text == ";" and (before is None or before.string == ";" or before.type == tokenize.NEWLINE):
                return "empty statement: expected a constraint before ';'", *token.start
            if _is_operand(token) and before is not None and (_is_operand(before) or before.string in (")", "]")):
                return f"expected an operator between {before.string!r} and {text!r}", *token.start
            before = token
    except (tokenize.TokenError, SyntaxError):
        pass
    return None


def _is_operand(token: tokenize.TokenInfo) -> bool:
    return token.type == tokenize.NUMBER or (token.type == tokenize.NAME and not keyword.iskeyword(token.string))


_INTERVAL_LINE = re.compile(  # a whole line `NAME in [lo..hi]` of decimal integers (_PythonReader.intervals)
    r"([A-Za-z_][A-Za-z0-9_]*)[ \t\f]+in[ \t\f]*\[[ \t\f]*([-+]?)[ \t\f]*(0|[1-9][0-9]*)[ \t\f]*\.\.[ \t\f]*([-+]?)"
    r"[ \t\f]*(0|[1-9][0-9]*)[ \t\f]*\][ \t\f]*")


class _PythonReader:
    def __init__(self, text: str) -> None:
        lines = text.replace("\r\n", "\n").split("\n")
        self.indent: list[int] = []
        plain, prepared, codes = [], [], []
        self.dots: list[tuple[int, int]] = []  # (line, byte column) of each `..`
        for number, line in enumerate(lines, 1):
            body = line.lstrip(" \t\f")  # statements may be indented (a model kept in an indented string)
            self.indent.append(len(line) - len(body))
            code, hash_, comment = body.partition("#")
            codes.append(code)
            plain.append(body)
            self.dots += [(number, len(code[: m.start()].encode())) for m in _DOTS.finditer(code)]
            prepared.append(_DOTS.sub(" ,", code) + hash_ + comment)
        self.lines = prepared
        self.plain = [line.encode() for line in plain]  # as written, less indentation: for constraint names
        self.source = "\n".join(prepared)
        self.codes = codes

    def intervals(self) -> dict[int, tuple[str, int, int]]:
        """{line: (name, lo, hi)} of the lines that are a declaration `NAME in [lo..hi]` alone, with decimal integers,
        outside any bracket or continued line (and before any quote, past which brackets are not counted): read
        without Python's parser and the walk of its tree, which took a third of the time of reading a model that
        declares many variables (a 15 x 15 assignment, 225 of its 255 lines: 8.1 -> 5.5 ms with its objective)."""
        found, depth, continued = {}, 0, False
        if not self.dots:
            return found
        for number, code in enumerate(self.codes, 1):
            if not code:
                continue
            if "'" in code or '"' in code:
                break
            if depth == 0 and not continued:
                match = _INTERVAL_LINE.fullmatch(code)
                if match is not None and not keyword.iskeyword(match[1]):
                    lo, hi = int(match[3]), int(match[5])
                    found[number] = (match[1], -lo if match[2] == "-" else lo, -hi if match[4] == "-" else hi)
                    continue
            depth += code.count("(") + code.count("[") + code.count("{") - code.count(")") - code.count("]") \
                - code.count("}")
            continued = code.endswith("\\", 0, len(code.rstrip()))
        return found

    def read(self) -> Model:
        fast = self.intervals()
        statements: list[ast.AST | int] = []  # nodes, and the numbers of the lines in `fast`, in the text's order
        for stmt in self._tree("exec", blank=fast).body:
            if not isinstance(stmt, ast.Expr):
                hint = "; write '==' for equality" if isinstance(stmt, (ast.Assign, ast.AugAssign)) else ""
                raise ParseError(f"only constraints may stand here, not a Python {type(stmt).__name__} "
                                 f"statement{hint}", *self.pos(stmt))
            statements.append(stmt.value)
        if fast:
            statements = sorted(statements + list(fast), key=lambda n: n if isinstance(n, int) else n.lineno)
        domains: dict[str, _Declared] = {}
        chosen: dict[int, str] = {}
        for index, node in enumerate(statements):
            if isinstance(node, int):  # a declaration of `fast`; a name declared before makes it a constraint
                name, lo, hi = fast[node]
                if name not in domains:
                    domains[name] = _Declared(lo, hi, None, (node, self.indent[node - 1] + 1))
                    chosen[index] = name
                else:
                    statements[index] = self._line_tree(node)
                continue
            with _not_too_deep(self.pos(node)):
                declared = self._declaration(node)
            if declared is not None and declared[0] not in domains:
                domains[declared[0]] = declared[1]
                chosen[index] = declared[0]
        self.builder = _Builder(domains)
        for index, node in enumerate(statements):
            if index in chosen:
                self.builder.var(chosen[index], domains[chosen[index]].pos)
                continue
            with _not_too_deep(self.pos(node)):
                clauses = self._clauses(node, False)
            for clause in clauses:
                name = self.text(node) if len(clauses) == 1 else " or ".join(text for _, text in clause)
                self.builder.add([c for c, _ in clause], name, self.pos(node))
        return self.builder.model

    def expression(self, lookup: Lookup) -> Value:
        body = self._tree("eval").body
        with _not_too_deep(self.pos(body)):
            return self._expr(body, lookup)

    def _line_tree(self, number: int) -> ast.AST:
        """The expression of line `number` alone (a line `intervals` found), placed at its line."""
        node = ast.parse(self.lines[number - 1], mode="eval").body
        return ast.increment_lineno(node, number - 1)

    def _tree(self, mode: str, blank: dict[int, tuple[str, int, int]] | None = None) -> ast.AST:
        """The text's syntax tree in `mode`, the lines in `blank` left empty."""
        source = self.source
        if blank:
            source = "\n".join("" if number in blank else line for number, line in enumerate(self.lines, 1))
        if "\0" in self.source:  # Python's parser refuses it, at a position of its own (3.11: the line before)
            before = self.source.split("\0")[0]
            line = before.count("\n") + 1
            column = self.indent[line - 1] + len(before.rsplit("\n", 1)[-1]) + 1
            raise ParseError("a NUL character (\\x00) cannot stand in a model: the text must be plain text", line,
                             column)
        try:
            return ast.parse(source, mode=mode)
        except SyntaxError as exc:
            line = min(max(exc.lineno or 1, 1), len(self.lines))
            offset = exc.offset if exc.offset and exc.offset > 0 else len(self.lines[line - 1]) + 1  # eval: 0 at end
            message, pos = exc.msg, (line, self.indent[line - 1] + offset)
            if message == "too many nested parentheses":
                message = f"the expression nests too deeply ({message})"
            elif message.startswith("invalid syntax") and (found := _expected(self.source)) is not None:
                at_line = min(found[1], len(self.lines))
                at = (at_line, self.indent[at_line - 1] + found[2] + 1)
                if at <= pos:  # not beyond where Python's parser stopped
                    message, pos = found[0], at
            raise ParseError(message, *pos) from None
        except RecursionError:  # no position: blame the longest line
            line = max(range(len(self.lines)), key=lambda i: len(self.lines[i])) + 1
            raise ParseError(_TOO_DEEP, line, self.indent[line - 1] + 1) from None

    def pos(self, node: ast.AST) -> Pos:
        line, offset = node.lineno, node.col_offset  # a byte offset into the line
        if not self.lines[line - 1].isascii():
            offset = len(self.lines[line - 1].encode()[:offset].decode(errors="ignore"))
        return line, self.indent[line - 1] + offset + 1

    def text(self, node: ast.AST) -> str:
        return _clean(self._segment(node, node))

    def _declaration(self, node: ast.AST) -> tuple[str, _Declared] | None:
        """(name, domain) when `node` is `NAME == [values]`, `NAME in [values]` or `NAME in [lo..hi]`."""
        if not isinstance(node, ast.Compare) or len(node.ops) != 1:
            return None
        left, op, right = node.left, node.ops[0], node.comparators[0]
        if isinstance(op, ast.Eq) and isinstance(left, ast.List):
            left, right = right, left
        if not (isinstance(op, (ast.Eq, ast.In)) and isinstance(left, ast.Name) and isinstance(right, ast.List)):
            return None
        bounds = self._interval(right)
        if bounds is not None:
            lo, hi = (self._constant(b) for b in bounds)
            if lo is None or hi is None:
                return None
            return left.id, _Declared(lo, hi, None, self.pos(node))
        values = [self._constant(v) for v in right.elts]
        if not values or None in values:
            return None
        return left.id, _Declared(min(values), max(values), tuple(values), self.pos(node))

    def _constant(self, node: ast.AST) -> int | None:
        try:
            value = self._expr(node, _constant_only)
        except _NotConstant:
            return None
        return value if isinstance(value, int) else None

    def _interval(self, node: ast.List) -> tuple[ast.AST, ast.AST] | None:
        """(lo, hi) when `node` was written `[lo..hi]`; None for a list of values."""
        dots = self._dots_in(node)
        if not dots:
            return None
        lo, hi = (node.elts + [node, node])[:2]
        if len(dots) > 1 or len(node.elts) != 2 or not (lo.end_lineno, lo.end_col_offset) <= dots[0] < (
                hi.lineno, hi.col_offset):
            raise ParseError(_DOTS_HINT, *self.pos(node))
        return lo, hi

    def _refuse_dots(self, node: ast.AST) -> None:
        """Raise at the first `..` inside `node`, which did not form an interval."""
        for line, column in self._dots_in(node):
            raise ParseError(_DOTS_HINT, *self.pos(ast.Constant(value=0, lineno=line, col_offset=column)))

    def _dots_in(self, node: ast.AST) -> list[tuple[int, int]]:
        """The `..` inside `node`, as (line, byte column)."""
        first = bisect.bisect_left(self.dots, (node.lineno, node.col_offset))
        last = bisect.bisect_left(self.dots, (node.end_lineno, node.end_col_offset))
        return self.dots[first:last]

    def _expr(self, node: ast.AST, lookup: Lookup) -> Value:
        pos = self.pos(node)
        if isinstance(node, ast.Constant):
            if type(node.value) is int:
                return node.value
            raise ParseError(f"{node.value!r} is not an integer; models hold integers only", *pos)
        if isinstance(node, ast.Name):
            return lookup(node.id, pos)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            negate = False  # a run of signs is one negation or none, however long
            while isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
                negate ^= isinstance(node.op, ast.USub)
                node = node.operand
            value = self._expr(node, lookup)
            return -value if negate else value
        if isinstance(node, ast.BinOp):
            chain = []  # the left operands down from `node` (a long sum), walked without recursion
            while isinstance(node, ast.BinOp):
                if type(node.op) not in _PY_BINOPS:
                    raise ParseError(_PY_HINTS.get(type(node.op), "unsupported operator; use + - * // % **"),
                                     *self.pos(node))
                chain.append(node)
                node = node.left
            value = self._expr(node, lookup)
            for link in reversed(chain):
                value = _apply(_PY_BINOPS[type(link.op)], value, self._expr(link.right, lookup), self.pos(link))
            return value
        if isinstance(node, ast.Call):
            raise ParseError(f"{self.text(node)!r} is a call; all_different(...) and divides(d, m) are the only "
                             f"ones, and each is a whole constraint", *pos)
        self._refuse_dots(node)
        what = "a constraint" if isinstance(node, (ast.Compare, ast.BoolOp)) else "this syntax"
        raise ParseError(f"expected an integer expression, found {what} ({self.text(node)!r})", *pos)

    def _clauses(self, node: ast.AST, negate: bool) -> Clauses:
        """`node` (negated when `negate`) as a conjunction of disjunctions of atomic constraints."""
        pos = self.pos(node)
        if isinstance(node, ast.BoolOp):
            parts = [self._clauses(v, negate) for v in node.values]
            return _conjunction(parts) if isinstance(node.op, ast.And) != negate else _disjunction(parts, pos)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return self._clauses(node.operand, not negate)
        if isinstance(node, ast.Compare):
            links, left = [], node.left
            for op, right in zip(node.ops, node.comparators):
                links.append(self._link(node, left, op, right, negate))
                left = right
            return _disjunction(links, pos) if negate else _conjunction(links)
        if isinstance(node, ast.Call):
            if negate:
                raise ParseError(f"'not' cannot negate {self.text(node.func)}(...)", *pos)
            return [[(self._call(node), self.text(node))]]
        self._refuse_dots(node)
        raise ParseError(f"a statement must be a constraint (a comparison, 'in', all_different or divides), "
                         f"found {self.text(node)!r}", *pos)

    def _link(self, node: ast.Compare, left: ast.AST, op: ast.cmpop, right: ast.AST, negate: bool) -> Clauses:
        """One link `left op right` of a comparison chain, its atoms named by the link's text."""
        pos = self.pos(left)
        if type(op) in _PY_HINTS:
            raise ParseError(_PY_HINTS[type(op)], *pos)
        text = self.text(node) if len(node.ops) == 1 else _clean(self._segment(left, right))
        lookup = self.builder.var
        if isinstance(op, (ast.Eq, ast.NotEq)) and isinstance(left, ast.List) and not isinstance(right, ast.List):
            left, right = right, left
        if not (isinstance(op, (ast.In, ast.NotIn)) or isinstance(right, ast.List)):
            symbol = _PY_COMPARE[type(op)]
            a, b = self._expr(left, lookup), self._expr(right, lookup)
            atoms = [_compare(a, _NEGATION[symbol] if negate else symbol, b, pos)]
            conjunction = True
        elif not isinstance(right, ast.List) or isinstance(left, ast.List):
            raise ParseError(f"'{self.text(node)}': a membership test needs an expression and a list "
                             f"[a, b, c] or [lo..hi]", *pos)
        else:
            inside = isinstance(op, (ast.In, ast.Eq)) != negate
            value = self._expr(left, lookup)
            bounds = self._interval(right)
            if bounds is not None:
                lo, hi = (self._expr(b, lookup) for b in bounds)
                atoms = [_compare(lo, "<=", value, pos), _compare(value, "<=", hi, pos)] if inside else \
                    [_compare(value, "<", lo, pos), _compare(value, ">", hi, pos)]
            else:
                if not right.elts:
                    raise ParseError("an empty list has no values; give at least one", *self.pos(right))
                atoms = [_compare(value, "==" if inside else "!=", self._expr(v, lookup), pos) for v in right.elts]
            conjunction = (bounds is not None) == inside  # every atom must hold, else one of them
        named = [(c, c.text() if negate else text) for c in atoms]
        return [[atom] for atom in named] if conjunction else [named]

    def _segment(self, first: ast.AST, last: ast.AST) -> str:
        """The text as written from the start of `first` to the end of `last`."""
        lines = self.plain[first.lineno - 1: last.end_lineno]
        if len(lines) == 1:
            return lines[0][first.col_offset: last.end_col_offset].decode()
        inner = [lines[0][first.col_offset:], *lines[1:-1], lines[-1][: last.end_col_offset]]
        return b"\n".join(inner).decode()

    def _call(self, node: ast.Call) -> Constraint:
        pos = self.pos(node)
        name = node.func.id if isinstance(node.func, ast.Name) else self.text(node.func)
        if node.keywords or name not in ("all_different", "divides"):
            raise ParseError(f"unknown call {name}(...); the python dialect knows all_different(a, b, ...) "
                             f"and divides(d, m) with positional arguments", *pos)
        args = node.args
        if name == "all_different" and len(args) == 1 and isinstance(args[0], (ast.List, ast.Tuple)):
            args = args[0].elts
        values = [self._expr(a, self.builder.var) for a in args]
        with _located(pos):
            if name == "divides":
                if len(values) != 2:
                    raise ParseError(f"divides takes 2 arguments (divisor, multiple), got {len(values)}", *pos)
                return self.builder.model.divides(*values)
            return self.builder.model.all_different(values)

# ---------------------------------------------------------------------------------------------- constrint


_TOKEN = re.compile(r"(?P<skip>\s+|#[^\n]*)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<int>[0-9]+)"
                    r"|(?P<op>\|\||<=|==|[;|%+*^()\[\],])")
_CONSTRINT_HINTS = {
    "-": "the constrint dialect has no '-'; move the term to the other side",
    "/": "the constrint dialect has no '/'; multiply the other side instead",
    "<": "the constrint dialect has no '<'; write 'a + 1 <= b'",
    ">": "the constrint dialect has no '>' or '>='; swap the sides and use '<='",
    "!": "the constrint dialect has no '!='; use dialect='python'",
    "=": "a single '=' is no operator; write '=='",
}


@dataclass(frozen=True)
class _Token:
    kind: str  # "name", "int" or "op"
    text: str
    start: int
    end: int


class _ConstrintReader:
    def __init__(self, text: str) -> None:
        self.text = text.replace("\r\n", "\n")
        self.line_starts = [0] + [i + 1 for i, ch in enumerate(self.text) if ch == "\n"]
        self.tokens = self._tokenize()
        self.lookup: Lookup = _constant_only
        self.model = Model()

    def pos(self, token: _Token) -> Pos:
        line = bisect.bisect_right(self.line_starts, token.start)
        return line, token.start - self.line_starts[line - 1] + 1

    def _tokenize(self) -> list[_Token]:
        tokens, at = [], 0
        while at < len(self.text):
            match = _TOKEN.match(self.text, at)
            if match is None:
                bad = _Token("op", self.text[at], at, at + 1)
                hint = _CONSTRINT_HINTS.get(bad.text, "use names, integers, [lists] and ; | <= == % + * ^ ( )")
                raise ParseError(f"unexpected {bad.text!r}: {hint}", *self.pos(bad))
            if match.lastgroup != "skip":
                tokens.append(_Token(match.lastgroup, match.group(), at, match.end()))
            at = match.end()
        return tokens

    def read(self) -> Model:
        statements = []
        current: list[_Token] = []
        for token in self.tokens + [_Token("op", ";", len(self.text), len(self.text))]:
            if token.text != ";":
                current.append(token)
                continue
            self._check_parens(current)
            body = [t for t in current if t.text not in ("(", ")")]
            if body:
                text = _clean(self.text[current[0].start: current[-1].end])
                statements.append((body, text, self.pos(current[0])))
            current = []
        domains: dict[str, _Declared] = {}
        chosen: dict[int, str] = {}
        for index, (body, _, pos) in enumerate(statements):
            declared = self._declaration(body)
            if declared is not None and declared[0] not in domains:
                name, values = declared
                domains[name] = _Declared(min(values), max(values), values, pos)
                chosen[index] = name
        builder = _Builder(domains)
        self.lookup, self.model = builder.var, builder.model
        for index, (body, text, pos) in enumerate(statements):
            if index in chosen:
                builder.var(chosen[index], pos)
                continue
            try:
                builder.add(self._statement(body), text, pos)
            except ParseError as exc:
                raise self._missing_semicolon(body) or exc from None
        return builder.model

    def _missing_semicolon(self, body: list[_Token]) -> ParseError | None:
        """An error asking for ';' where a line of the statement ends a term and the next line begins one."""
        for a, b in zip(body, body[1:]):
            ends, begins = a.kind != "op" or a.text == "]", b.kind != "op" or b.text == "["
            if ends and begins and self.pos(a)[0] < self.pos(b)[0]:
                end = self.pos(_Token("op", "", a.end, a.end))
                return ParseError(f"missing ';' after {a.text!r} at the end of line {end[0]}: statements end with ';'",
                                  *end)
        return None

    def expression(self, lookup: Lookup) -> Value:
        self._check_parens(self.tokens)
        body = [t for t in self.tokens if t.text not in ("(", ")")]
        for token in body:
            if token.text in (";", "|", "||", "<=", "==", "%", "[", "]", ","):
                raise ParseError(f"{token.text!r} cannot appear in an expression; use + * ^", *self.pos(token))
        self.lookup = lookup
        end = _Token("op", "", len(self.text), len(self.text))
        return self._sum(body, end)

    def _check_parens(self, tokens: list[_Token]) -> None:
        open_: list[_Token] = []
        for token in tokens:
            if token.text == "(":
                open_.append(token)
            elif token.text == ")":
                if not open_:
                    raise ParseError("')' has no matching '('", *self.pos(token))
                open_.pop()
        if open_:
            raise ParseError("'(' is never closed in this statement", *self.pos(open_[-1]))

    def _declaration(self, body: list[_Token]) -> tuple[str, tuple[int, ...]] | None:
        """(name, values) when the statement is exactly `NAME == [values]` or `[values] == NAME`."""
        if len(body) >= 5 and body[0].kind == "name" and body[1].text == "==" and self._is_list(body[2:]):
            return body[0].text, self._list(body[2:])
        if len(body) >= 5 and body[-1].kind == "name" and body[-2].text == "==" and self._is_list(body[:-2]):
            return body[-1].text, self._list(body[:-2])
        return None

    @staticmethod
    def _is_list(tokens: list[_Token]) -> bool:
        inner = tokens[1:-1]
        return (len(tokens) >= 3 and tokens[0].text == "[" and tokens[-1].text == "]" and len(inner) % 2 == 1
                and all(t.kind == "int" if i % 2 == 0 else t.text == "," for i, t in enumerate(inner)))

    def _list(self, tokens: list[_Token]) -> tuple[int, ...]:
        """The integers of `[a, b, c]`, which must be all of `tokens`."""
        if not self._is_list(tokens):
            raise ParseError("a list is '[' integers separated by ',' ']' standing alone on one side of '=='",
                             *self.pos(tokens[0]))
        return tuple(int(t.text) for t in tokens[1:-1:2])

    def _statement(self, body: list[_Token]) -> list[Constraint]:
        """The disjunction a statement states: its '|' parts, each a relation."""
        clause: list[Constraint] = []
        pieces = self._split(body, ("|", "||"))
        for part, sep in pieces:
            if not part and len(pieces) > 1:
                mark = sep or pieces[1][1]
                raise ParseError(f"'{mark.text}' needs a relation on each side: write A {mark.text} B", *self.pos(mark))
            if part:
                clause += self._relation(part)
        return clause

    @staticmethod
    def _split(tokens: list[_Token], seps: tuple[str, ...]) -> list[tuple[list[_Token], _Token | None]]:
        """Pieces of `tokens` between separators, each with the separator before it (None for the first)."""
        pieces: list[tuple[list[_Token], _Token | None]] = [([], None)]
        for token in tokens:
            if token.text in seps:
                pieces.append(([], token))
            else:
                pieces[-1][0].append(token)
        return pieces

    def _relation(self, tokens: list[_Token]) -> list[Constraint]:
        first = tokens[0]
        for sep in ("<=", "%", "=="):
            marks = [t for t in tokens if t.text == sep]
            if not marks:
                continue
            if sep == "<=":
                if len(marks) > 1:
                    raise ParseError("a relation has one '<='", *self.pos(marks[1]))
                (left, _), (right, mark) = self._split(tokens, ("<=",))
                return [_compare(self._sum(left, mark), "<=", self._sum(right, mark), self.pos(mark))]
            if sep == "%":
                tail = tokens[-2:]
                if (len(marks) > 1 or [t.text for t in tail] != ["==", "0"]
                        or sum(t.text == "==" for t in tokens) != 1):
                    raise ParseError("'%' only states divisibility here: write 'A % B == 0'", *self.pos(marks[0]))
                (left, _), (right, mark) = self._split(tokens[:-2], ("%",))
                divisor, multiple = self._sum(right, mark), self._sum(left, mark)
                with _located(self.pos(mark)):
                    return [self.model.divides(divisor, multiple)]
            if len(marks) > 1:
                raise ParseError("a relation has one '=='", *self.pos(marks[1]))
            (left, _), (right, mark) = self._split(tokens, ("==",))
            if left and left[0].text == "[":
                left, right = right, left
            if right and right[0].text == "[":
                values = self._list(right)
                value = self._sum(left, mark)
                return [_compare(value, "==", v, self.pos(mark)) for v in values]
            return [_compare(self._sum(left, mark), "==", self._sum(right, mark), self.pos(mark))]
        raise ParseError("a statement needs '<=', '==' or '% ... == 0'", *self.pos(first))

    def _sum(self, tokens: list[_Token], at: _Token) -> Value:
        return self._chain(tokens, at, "+", self._product)

    def _product(self, tokens: list[_Token], at: _Token) -> Value:
        return self._chain(tokens, at, "*", self._power)

    def _chain(self, tokens: list[_Token], at: _Token, op: str,
               inner: Callable[[list[_Token], _Token], Value]) -> Value:
        if not tokens:
            raise ParseError(f"a term is missing after {at.text!r}" if at.text else "a term is missing",
                             *self.pos(at))
        pieces = self._split(tokens, (op,))
        values = [inner(piece, mark or at) for piece, mark in pieces]
        return functools.reduce(lambda a, b: _apply(op, a, b, self.pos(tokens[0])), values)

    def _power(self, tokens: list[_Token], at: _Token) -> Value:
        pieces = self._split(tokens, ("^",))
        if len(pieces) == 1:
            return self._leaf(tokens, at)
        (base, _), (exponent, mark) = pieces[0], pieces[1]
        if len(pieces) > 2 or len(exponent) != 1 or exponent[0].kind != "int":
            raise ParseError("'^' takes one integer exponent, as in 'X ^ 2'", *self.pos(mark))
        return _apply("**", self._leaf(base, mark), int(exponent[0].text), self.pos(mark))

    def _leaf(self, tokens: list[_Token], at: _Token) -> Value:
        if not tokens:
            raise ParseError(f"a term is missing after {at.text!r}" if at.text else "a term is missing",
                             *self.pos(at))
        if len(tokens) == 1 and tokens[0].kind == "int":
            return int(tokens[0].text)
        if len(tokens) == 1 and tokens[0].kind == "name":
            return self.lookup(tokens[0].text, self.pos(tokens[0]))
        if tokens[0].text == "[":
            raise ParseError("a [list] may only stand alone on one side of '=='", *self.pos(tokens[0]))
        bad = tokens[1] if len(tokens) > 1 else tokens[0]
        raise ParseError(f"unexpected {bad.text!r}: expected an operator between terms", *self.pos(bad))
