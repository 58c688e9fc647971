"""CellSpec: a recurrent cell's pointwise step, written once as assignment lists.

Each expression is checked with Python's `ast` when the spec is defined (only the node types and functions
below are accepted), then rendered two ways from the same syntax tree:

- CUDA: `const float NAME = EXPR;` statements (`cuda_forward`, `cuda_backward`) for the fused kernel, which
  includes `cells/ops.cuh` for the functions (and `cell_div` for `/`) and binds the inputs as `const float`
  locals first;
- torch: one Python function per direction, compiled once, evaluated by `torch_forward` / `torch_backward`.

Expression grammar: `+ - * /`, unary minus, parentheses, numeric literals, names, and calls of
`FUNCTIONS`. Literals are rendered as float literals in C (`1` becomes `1.0f`), so `1 / 2` means 0.5 in both.

Names follow the convention (for gates `g` and states `s`):
  forward inputs   `x_g` (gate pre-activation), `s_s` (previous state)
  forward outputs  `y_s` (new state), `a_g` (per-gate value saved for the backward pass)
  backward inputs  `a_g`, `s_s`, `y_s`, `dy_s` (total gradient w.r.t. the new state)
  backward outputs `dx_g` (gradient w.r.t. the pre-activation), `ds_s` (gradient to the previous state through
                   the pointwise step only; the recurrent term R^T dx is added by the caller)
Any other identifier assigned in the list is a local.
"""
from __future__ import annotations

import ast
import copy
import keyword
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor

FUNCTIONS: Mapping[str, tuple[int, str, Callable[..., Tensor]]] = {
    # name: (arity, CUDA function from cells/ops.cuh, torch function)
    "sigmoid": (1, "sigmoid", torch.sigmoid),
    "tanh": (1, "cell_tanh", torch.tanh),
    "exp": (1, "cell_exp", torch.exp),
    "log": (1, "cell_log", torch.log),
    "logsigmoid": (1, "cell_logsigmoid", torch.nn.functional.logsigmoid),
    "maximum": (2, "cell_maximum", torch.maximum),
    "heaviside": (1, "cell_heaviside", lambda x: (x > 0).to(x.dtype)),
}
"""Functions an expression may call. `maximum`, `logsigmoid` and `heaviside` (1 where x > 0, else 0: the
derivative of a maximum) serve stabilised cells such as sLSTM."""

_BINARY_OPS: Mapping[type, str] = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/"}
_UNARY_OPS: Mapping[type, str] = {ast.USub: "-", ast.UAdd: "+"}
_PREFIXES = frozenset({"x", "s", "y", "a", "dy", "dx", "ds"})
_C_FUNCTIONS = frozenset(c_name for _, c_name, _ in FUNCTIONS.values())
_C_RESERVED = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline int long "
    "register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while "
    "bool true false class namespace template this new delete operator".split()
)


class CellSpecError(ValueError):
    """A cell definition is malformed: a bad expression, an undefined name or a missing output."""


def _check_identifier(name: str, where: str) -> None:
    if not name.isidentifier() or not name.isascii() or keyword.iskeyword(name):
        raise CellSpecError(f"{where}: {name!r} is not a plain identifier (letters, digits, underscore)")
    if name in _C_RESERVED or name in FUNCTIONS or name in _C_FUNCTIONS or name.startswith("__"):
        raise CellSpecError(f"{where}: {name!r} is reserved (a C keyword, a function name, or starts with '__')")


def _parse(expr: str, where: str) -> ast.expr:
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise CellSpecError(f"{where}: cannot parse {expr!r}: {exc.msg}") from None
    for node in ast.walk(tree):
        if isinstance(node, (ast.Expression, ast.Load)) or type(node) in _BINARY_OPS or type(node) in _UNARY_OPS:
            continue
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPS:
            continue
        if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY_OPS:
            continue
        if isinstance(node, ast.Name):
            continue
        if isinstance(node, ast.Constant) and type(node.value) in (int, float):
            if abs(node.value) > 3.0e38 or not math.isfinite(node.value):
                raise CellSpecError(f"{where}: literal {node.value!r} in {expr!r} is outside the float32 range")
            continue
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else None
            if name not in FUNCTIONS:
                raise CellSpecError(
                    f"{where}: call of {ast.unparse(node.func)!r} in {expr!r}; allowed functions: {sorted(FUNCTIONS)}"
                )
            arity = FUNCTIONS[name][0]
            if node.keywords or len(node.args) != arity:
                raise CellSpecError(f"{where}: {name}() takes {arity} positional argument(s) in {expr!r}")
            continue
        kind = type(node.op).__name__ if isinstance(node, (ast.BinOp, ast.UnaryOp)) else type(node).__name__
        raise CellSpecError(
            f"{where}: {kind} {ast.unparse(node)!r} is not allowed in {expr!r}; "
            "use + - * /, parentheses, numbers, names and " + ", ".join(sorted(FUNCTIONS))
        )
    return tree.body


def _names(node: ast.expr) -> set[str]:
    called = {id(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)}
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and id(n) not in called}


def _to_c(node: ast.expr) -> str:
    """Fully parenthesised C expression of a validated tree."""
    if isinstance(node, ast.Constant):
        return f"{float(node.value)!r}f"
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.UnaryOp):
        return f"({_UNARY_OPS[type(node.op)]}{_to_c(node.operand)})"
    if isinstance(node, ast.BinOp):
        if isinstance(node.op, ast.Div):  # ops.cuh's division without the IEEE slow-path branch
            return f"cell_div({_to_c(node.left)}, {_to_c(node.right)})"
        return f"({_to_c(node.left)} {_BINARY_OPS[type(node.op)]} {_to_c(node.right)})"
    call = node  # validated: the only remaining node type
    assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
    return f"{FUNCTIONS[call.func.id][1]}({', '.join(_to_c(arg) for arg in call.args)})"


def _like(value: Tensor | float, like: Tensor) -> Tensor:
    if isinstance(value, Tensor) and value.shape == like.shape and value.dtype == like.dtype:
        return value
    return torch.as_tensor(value, dtype=like.dtype, device=like.device).expand_as(like).clone()


@dataclass(frozen=True)
class _Program:
    """One validated assignment list: parsed trees and the compiled torch function."""

    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    trees: tuple[tuple[str, ast.expr], ...]
    function: Callable[..., tuple[Tensor, ...]]

    def cuda(self) -> str:
        return "\n".join(f"const float {name} = {_to_c(tree)};" for name, tree in self.trees)

    def run(self, values: Mapping[str, Tensor], where: str) -> dict[str, Tensor]:
        missing = [name for name in self.inputs if name not in values]
        unknown = [name for name in values if name not in self.inputs]
        if missing or unknown:
            raise KeyError(f"{where}: expected inputs {list(self.inputs)}; missing {missing}, unexpected {unknown}")
        results = self.function(*(values[name] for name in self.inputs))
        like = values[self.inputs[0]]  # an output computed from literals only (e.g. "0") becomes a full tensor
        return {name: _like(value, like) for name, value in zip(self.outputs, results)}


class _DivisionAsCall(ast.NodeTransformer):
    """`a / b` as `__div(a, b)` in the torch text, as the C text calls cell_div: Python's number / tensor multiplies
    by the tensor's reciprocal (two roundings), and number / number raises where C gives inf."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        self.generic_visit(node)
        if isinstance(node.op, ast.Div):
            return ast.Call(ast.Name("__div", ast.Load()), [node.left, node.right], [])
        return node


def _accept_numbers(function: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """`function` also called on literals (e.g. tanh(2)): numbers become 0-d tensors, which do not promote."""

    def call(*args):
        return function(*(a if isinstance(a, Tensor) else torch.tensor(float(a), dtype=torch.float64) for a in args))

    return call


def _build(assignments, inputs, outputs, where) -> _Program:
    defined = set(inputs)
    trees = []
    for item in assignments:
        if not (isinstance(item, tuple) and len(item) == 2 and all(isinstance(part, str) for part in item)):
            raise CellSpecError(f"{where}: each assignment must be a (name, expression) pair of str, got {item!r}")
        name, expr = item
        _check_identifier(name, where)
        if name in _PREFIXES or name.isupper():
            raise CellSpecError(
                f"{where}: {name!r} is reserved: bare prefixes {sorted(_PREFIXES)} name the kernel's per-gate and "
                "per-state arrays, upper-case names its compile-time constants"
            )
        if name in defined:
            raise CellSpecError(f"{where}: {name!r} is assigned twice or shadows an input; names are single-assignment")
        tree = _parse(expr, f"{where} {name}")
        undefined = sorted(_names(tree) - defined)
        if undefined:
            raise CellSpecError(
                f"{where} {name} = {expr!r}: undefined name(s) {undefined}; known here: {sorted(defined)}"
            )
        defined.add(name)
        trees.append((name, tree))
    missing = [name for name in outputs if name not in defined or name in inputs]
    if missing:
        raise CellSpecError(f"{where}: must assign {missing}")
    lines = [f"def __cell_step({', '.join(inputs)}):"]
    lines += [f"    {name} = {ast.unparse(_DivisionAsCall().visit(copy.deepcopy(tree)))}" for name, tree in trees]
    lines.append(f"    return ({', '.join(outputs)},)")
    namespace = {name: _accept_numbers(torch_fn) for name, (_, _, torch_fn) in FUNCTIONS.items()}
    namespace["__div"] = _accept_numbers(torch.div)
    exec(compile("\n".join(lines), f"<cell {where}>", "exec"), namespace)  # validated arithmetic only
    return _Program(tuple(inputs), tuple(outputs), tuple(trees), namespace["__cell_step"])


@dataclass(frozen=True)
class CellSpec:
    """A recurrent cell: gate and state names plus its pointwise forward and backward step.

    `gates` orders the G axis of Wx, R and b; `states` orders the S axis of the states (states[0] is the output
    h). `forward` / `backward` are ordered (name, expression) assignments (see the module docstring).
    """

    name: str
    gates: tuple[str, ...]
    states: tuple[str, ...]
    forward: tuple[tuple[str, str], ...]
    backward: tuple[tuple[str, str], ...]
    _forward: _Program = field(init=False, repr=False, compare=False)
    _backward: _Program = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        where = f"cell {self.name!r}"
        if not self.gates or not self.states:
            raise CellSpecError(f"{where}: needs at least one gate and one state, got {self.gates}, {self.states}")
        for label, names in (("gates", self.gates), ("states", self.states)):
            if not isinstance(names, tuple) or len(set(names)) != len(names):
                raise CellSpecError(f"{where}: {label} must be a tuple of distinct names, got {names!r}")
            for name in names:
                _check_identifier(name, f"{where} {label}")
        g, s = self.gates, self.states
        forward = _build(
            self.forward,
            inputs=[f"x_{n}" for n in g] + [f"s_{n}" for n in s],
            outputs=[f"y_{n}" for n in s] + [f"a_{n}" for n in g],
            where=f"{where} forward",
        )
        backward = _build(
            self.backward,
            inputs=[f"a_{n}" for n in g] + [f"s_{n}" for n in s] + [f"y_{n}" for n in s] + [f"dy_{n}" for n in s],
            outputs=[f"dx_{n}" for n in g] + [f"ds_{n}" for n in s],
            where=f"{where} backward",
        )
        object.__setattr__(self, "_forward", forward)
        object.__setattr__(self, "_backward", backward)

    def __reduce__(self):
        """Pickled and copied by definition (the compiled step functions are rebuilt): a registered cell comes back as
        the registry's own object, which the dispatch recognises by identity."""
        return _cell, (self.name, self.gates, self.states, self.forward, self.backward)

    @property
    def gate_count(self) -> int:
        """G: the number of gates (pre-activations per hidden unit)."""
        return len(self.gates)

    @property
    def state_count(self) -> int:
        """S: the number of recurrent states (h first)."""
        return len(self.states)

    def cuda_forward(self) -> str:
        """C statements of the forward step; expects `const float` inputs x_<gate>, s_<state> in scope."""
        return self._forward.cuda()

    def cuda_backward(self) -> str:
        """C statements of the backward step; expects a_<gate>, s_<state>, y_<state>, dy_<state> in scope."""
        return self._backward.cuda()

    def torch_forward(
        self, x: Mapping[str, Tensor], s: Mapping[str, Tensor]
    ) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """New states and saved gate values from pre-activations `x` (by gate) and previous states `s`."""
        values = {f"x_{n}": t for n, t in x.items()} | {f"s_{n}": t for n, t in s.items()}
        out = self._forward.run(values, f"{self.name} forward")
        return {n: out[f"y_{n}"] for n in self.states}, {n: out[f"a_{n}"] for n in self.gates}

    def torch_backward(
        self,
        a: Mapping[str, Tensor],
        s: Mapping[str, Tensor],
        y: Mapping[str, Tensor],
        dy: Mapping[str, Tensor],
    ) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        """Gradients w.r.t. the pre-activations (by gate) and the previous states (pointwise path only)."""
        values = (
            {f"a_{n}": t for n, t in a.items()}
            | {f"s_{n}": t for n, t in s.items()}
            | {f"y_{n}": t for n, t in y.items()}
            | {f"dy_{n}": t for n, t in dy.items()}
        )
        out = self._backward.run(values, f"{self.name} backward")
        return {n: out[f"dx_{n}"] for n in self.gates}, {n: out[f"ds_{n}"] for n in self.states}


def _cell(name: str, gates: tuple[str, ...], states: tuple[str, ...], forward: tuple[tuple[str, str], ...],
          backward: tuple[tuple[str, str], ...]) -> CellSpec:
    """The CellSpec of this definition: the registered one where it is that cell's, else a new one (CellSpec's
    __reduce__)."""
    from . import CELLS  # the registry imports this module

    registered = CELLS.get(name)
    definition = (name, gates, states, forward, backward)
    if registered is not None and definition == (registered.name, registered.gates, registered.states,
                                                 registered.forward, registered.backward):
        return registered
    return CellSpec(*definition)
