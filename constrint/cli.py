"""The `constrint` command: `constrint solve FILE` prints the solutions of a model file as a table or JSON.

Exit status: 0 solved, 1 infeasible (the minimal core is printed), 2 bad input (an unreadable file, a syntax
error reported as FILE:LINE:COLUMN, a bad option), 3 the time limit ran out, 141 the output pipe closed early.
With --json, the outcome is a JSON object on stdout whose "status" is solved, infeasible, time_limit or bad_input
(messages go to stderr as well).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Iterable, Sequence

from .errors import ConstrintError, Infeasible, ParseError, TimeLimit
from .model import Model, Solution
from .textformat import DIALECTS, parse, parse_expression

EXIT_OK, EXIT_INFEASIBLE, EXIT_BAD_INPUT, EXIT_TIME_LIMIT = 0, 1, 2, 3
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports a pipeline cut short


class _BadOptions(Exception):
    """argparse's complaint about the command line, raised instead of its exit so that --json can report it."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise _BadOptions(f"{self.format_usage().rstrip()}\n{self.prog}: error: {message}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with `argv` (default: sys.argv[1:]); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except _BadOptions as exc:
        return _fail(str(exc), prefix=False, as_json="--json" in argv)
    except SystemExit as exc:  # argparse exits on --help (0)
        return int(exc.code or 0)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_BAD_INPUT
    try:
        return _solve(args)
    except BrokenPipeError:  # the reader of our output went away (`constrint solve ... | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        return EXIT_BROKEN_PIPE


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="constrint", description="Integer constraint solver.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    solve = commands.add_parser(
        "solve", help="solve a model file", description="Solve a model file and print its solutions.",
        epilog="exit status: 0 solved, 1 infeasible (prints a minimal core), 2 bad input, 3 time limit")
    solve.add_argument("file", metavar="FILE", help="model file ('-' reads standard input)")
    solve.add_argument("--dialect", choices=DIALECTS,
                       help="text dialect (default: 'constrint' for a .constrint file, else 'python')")
    solve.add_argument("--prefer", action="append", default=[], type=_preference, metavar="NAME:DIR",
                       help="prefer NAME's min or max value (repeat for a lexicographic order)")
    mode = solve.add_mutually_exclusive_group()
    mode.add_argument("--all", action="store_true", help="print every solution")
    mode.add_argument("--count", action="store_true", help="print the number of solutions")
    mode.add_argument("--minimize", metavar="EXPR", help="print a solution with the least value of EXPR")
    mode.add_argument("--maximize", metavar="EXPR", help="print a solution with the greatest value of EXPR")
    solve.add_argument("--limit", type=_positive_int, metavar="N", help="print at most N solutions")
    solve.add_argument("--time-limit", type=_positive_float, metavar="S",
                       help="give up after S seconds (exit 3; an optimisation prints its best solution so far)")
    solve.add_argument("--json", action="store_true", help="print JSON instead of a table")
    return parser


def _preference(text: str) -> tuple[str, str]:
    name, _, direction = text.rpartition(":")
    if not name or direction not in ("min", "max"):
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME:min or NAME:max")
    return name, direction


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number >= 1")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds > 0")
    return value


def _solve(args: argparse.Namespace) -> int:
    objective = args.minimize if args.minimize is not None else args.maximize
    if args.prefer and objective is not None:
        return _fail("--prefer cannot be combined with --minimize or --maximize", as_json=args.json)
    if args.limit is not None and (args.count or objective is not None):
        return _fail("--limit goes with listing solutions, not with --count, --minimize or --maximize",
                     as_json=args.json)
    dialect = args.dialect or ("constrint" if Path(args.file).suffix == ".constrint" else "python")
    try:
        text = sys.stdin.read() if args.file == "-" else Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return _fail(f"cannot read {args.file}: {exc}", as_json=args.json)
    try:
        model = parse(text, dialect)
    except ParseError as exc:
        return _parse_failure(args.file, exc, args.json)
    try:
        expr = None if objective is None else parse_expression(objective, model, dialect)
    except ParseError as exc:
        return _parse_failure("--minimize" if args.minimize is not None else "--maximize", exc, args.json)
    start = time.perf_counter()
    try:
        if args.count:
            return _report_count(model.count(time_limit=args.time_limit), args.json)
        if args.all or args.limit is not None:
            found = model.solutions(limit=args.limit, prefer=args.prefer or None, time_limit=args.time_limit)
            if _report_many(model, found, args.json) == 0:  # proven: explain it (in the time left)
                raise model._infeasible(start, args.time_limit)
            return EXIT_OK
        if expr is not None:
            optimise = model.minimize if args.minimize is not None else model.maximize
            return _report_one(optimise(expr, time_limit=args.time_limit), args.json)
        return _report_one(model.solve(prefer=args.prefer or None, time_limit=args.time_limit), args.json)
    except Infeasible as exc:
        core = list(dict.fromkeys(str(c) for c in exc.core))  # an interval gives two halves, one text
        if args.json:
            _print_json({"status": "infeasible", "core": core, **({"reason": exc.reason} if exc.reason else {})})
        elif exc.reason:
            print(f"infeasible: {exc.reason}")
        else:
            print("infeasible: these constraints cannot all hold (a minimal set):")
            for line in core or ["(the variable domains alone)"]:
                print(f"  {line}")
        return EXIT_INFEASIBLE
    except TimeLimit as exc:
        best = exc.best  # an optimisation's best solution so far
        if args.json:
            found = {} if best is None else {"solution": dict(best), "objective": best.objective}
            _print_json({"status": "time_limit", "message": str(exc), **found})
        elif best is not None:
            print("best solution found (not proven optimal):")
            _report_one(best, False)
        return _fail(f"time limit of {args.time_limit} s reached: {exc}", code=EXIT_TIME_LIMIT)
    except ConstrintError as exc:
        return _fail(str(exc), as_json=args.json)


def _parse_failure(source: str, exc: ParseError, as_json: bool) -> int:
    """A syntax error in `source` (the file, or the option holding an expression), as SOURCE:LINE:COLUMN."""
    return _fail(f"{source}:{exc.line}:{exc.column}: {exc.message}", prefix=False, as_json=as_json,
                 source=source, line=exc.line, column=exc.column)


def _fail(message: str, *, code: int = EXIT_BAD_INPUT, prefix: bool = True, as_json: bool = False,
          **fields: object) -> int:
    """Print `message` on stderr and return `code`; with `as_json` (--json, where every outcome is reported on
    stdout, as infeasible and time-limit ones are) print {"status": "bad_input", "message": ..., **fields} too."""
    if as_json:
        _print_json({"status": "bad_input", "message": message, **fields})
    print(f"constrint: {message}" if prefix else message, file=sys.stderr)
    return code


def _print_json(payload: dict) -> None:
    print(json.dumps(payload, indent=2))


def _report_count(count: int, as_json: bool) -> int:
    if as_json:
        _print_json({"status": "solved", "count": count})
    else:
        print(count)
    return EXIT_OK


def _report_one(solution: Solution, as_json: bool) -> int:
    if as_json:
        payload: dict = {"status": "solved", "solution": dict(solution)}
        if solution.objective is not None:
            payload["objective"] = solution.objective
        _print_json(payload)
        return EXIT_OK
    names = list(solution)
    width = max([len("variable")] + [len(n) for n in names])
    print(f"{'variable':<{width}}  value")
    print(f"{'-' * width}  -----")
    for name in names:
        print(f"{name:<{width}}  {solution[name]}")
    if solution.objective is not None:
        print(f"objective: {solution.objective}")
    return EXIT_OK


def _report_many(model: Model, solutions: Iterable[Solution], as_json: bool) -> int:
    """Print `solutions` (as they come, for a table) and return how many there were."""
    if as_json:
        found = [dict(s) for s in solutions]
        if found:
            _print_json({"status": "solved", "count": len(found), "solutions": found})
        return len(found)
    names = list(model.variables)
    widths = [max(len(n), len(str(v.domain.lo)), len(str(v.domain.hi))) for n, v in model.variables.items()]
    count = 0
    for solution in solutions:
        if count == 0:
            print("  ".join(f"{n:>{w}}" for n, w in zip(names, widths)))
            print("  ".join("-" * w for w in widths))
        print("  ".join(f"{solution[n]:>{w}}" for n, w in zip(names, widths)))
        count += 1
    if count:
        print(f"({count} solution{'s' if count != 1 else ''})")
    return count
