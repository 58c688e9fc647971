"""The `constrint solve` command line, run through `main(argv)` on model files written to a temporary folder."""
from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from constrint import Model
from constrint.cli import EXIT_BAD_INPUT, EXIT_INFEASIBLE, EXIT_OK, EXIT_TIME_LIMIT, main

from constrint_knapsack import hard_knapsack

TILES = """
# two tile sizes under a product bound
x == [8, 16, 32]
y in [1..10]
x * y <= 64
"""
# x = 8: y in 1..8, x = 16: y in 1..4, x = 32: y in 1..2
TILE_SOLUTIONS = [(8, y) for y in range(1, 9)] + [(16, y) for y in range(1, 5)] + [(32, 1), (32, 2)]


@pytest.fixture
def tiles(tmp_path):
    path = tmp_path / "tiles.py"
    path.write_text(TILES)
    return str(path)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_solve_prints_a_table_of_the_first_solution(capsys, tiles):
    code, out, err = run(capsys, "solve", tiles)
    assert code == EXIT_OK and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["variable", "value"]
    assert [line.split() for line in lines[2:]] == [["x", "8"], ["y", "1"]]


def test_json_with_lexicographic_preferences(capsys, tiles):
    code, out, _ = run(capsys, "solve", tiles, "--prefer", "x:max", "--prefer", "y:max", "--json")
    assert code == EXIT_OK
    assert json.loads(out) == {"status": "solved", "solution": {"x": 32, "y": 2}}
    code, out, _ = run(capsys, "solve", tiles, "--prefer", "y:max", "--prefer", "x:max", "--json")
    assert json.loads(out)["solution"] == {"x": 8, "y": 8}


def test_count(capsys, tiles):
    assert run(capsys, "solve", tiles, "--count") == (EXIT_OK, f"{len(TILE_SOLUTIONS)}\n", "")
    code, out, _ = run(capsys, "solve", tiles, "--count", "--json")
    assert json.loads(out) == {"status": "solved", "count": len(TILE_SOLUTIONS)}


def test_all_prints_every_solution_once(capsys, tiles):
    code, out, _ = run(capsys, "solve", tiles, "--all")
    assert code == EXIT_OK
    lines = out.splitlines()
    assert lines[0].split() == ["x", "y"]
    rows = [tuple(map(int, line.split())) for line in lines[2:-1]]
    assert sorted(rows) == TILE_SOLUTIONS and len(set(rows)) == len(rows)
    assert lines[-1] == f"({len(TILE_SOLUTIONS)} solutions)"
    code, out, _ = run(capsys, "solve", tiles, "--all", "--json")
    payload = json.loads(out)
    assert payload["count"] == len(TILE_SOLUTIONS)
    assert sorted((s["x"], s["y"]) for s in payload["solutions"]) == TILE_SOLUTIONS


def test_limit_lists_the_preferred_solutions_first(capsys, tiles):
    code, out, _ = run(capsys, "solve", tiles, "--limit", "3", "--prefer", "x:max", "--prefer", "y:max", "--json")
    assert code == EXIT_OK
    assert [(s["x"], s["y"]) for s in json.loads(out)["solutions"]] == [(32, 2), (32, 1), (16, 4)]


def test_minimize_and_maximize_print_the_objective(capsys, tiles):
    code, out, _ = run(capsys, "solve", tiles, "--maximize", "x + y", "--json")
    assert code == EXIT_OK
    assert json.loads(out) == {"status": "solved", "solution": {"x": 32, "y": 2}, "objective": 34}
    code, out, _ = run(capsys, "solve", tiles, "--minimize", "(x - 20) ** 2 + y")
    assert code == EXIT_OK
    assert out.splitlines()[-1] == "objective: 17"  # x = 16, y = 1
    assert [line.split() for line in out.splitlines()[2:4]] == [["x", "16"], ["y", "1"]]


def test_infeasible_exits_1_and_prints_the_minimal_core(capsys, tmp_path):
    path = tmp_path / "bad.py"
    path.write_text("n == 2976\nt == [54]\nn % t == 0  # 2976 = 2^5 * 3 * 31\nn <= 4000\nu in [1..9]\n")
    code, out, _ = run(capsys, "solve", str(path))
    assert code == EXIT_INFEASIBLE
    assert out.splitlines()[0].startswith("infeasible")
    assert [line.strip() for line in out.splitlines()[1:]] == ["n == 2976", "n % t == 0"]
    code, out, _ = run(capsys, "solve", str(path), "--json")
    assert code == EXIT_INFEASIBLE
    assert json.loads(out) == {"status": "infeasible", "core": ["n == 2976", "n % t == 0"]}
    code, out, _ = run(capsys, "solve", str(path), "--all")
    assert code == EXIT_INFEASIBLE and "n % t == 0" in out


def test_interval_halves_appear_once_in_the_core(capsys, tmp_path):
    path = tmp_path / "twice.py"
    path.write_text("x in [1..10]\nx in [20..30]\n")
    code, out, _ = run(capsys, "solve", str(path), "--json")
    assert code == EXIT_INFEASIBLE
    assert json.loads(out)["core"] == ["x in [20..30]"]


def test_constrint_dialect_from_suffix_or_flag(capsys, tmp_path):
    text = "H == 96;\nT == [8, 16, 32];\nH % T * W == 0;\nW <= 4;\n"
    path = tmp_path / "model.constrint"
    path.write_text(text)
    code, out, _ = run(capsys, "solve", str(path), "--count")
    assert (code, out) == (EXIT_OK, "9\n")  # T*W divides 96: T=8: W in 1..4, T=16: 1..3, T=32: 1, 3
    other = tmp_path / "model.txt"
    other.write_text(text)
    assert run(capsys, "solve", str(other), "--dialect", "constrint", "--count") == (EXIT_OK, "9\n", "")
    # read as python, '%' binds like '*': (H % T) * W == 0 holds for no W >= 1 unless T divides H
    assert run(capsys, "solve", str(other), "--count") == (EXIT_OK, "12\n", "")


def test_parse_error_exits_2_with_file_line_column(capsys, tmp_path):
    path = tmp_path / "broken.py"
    path.write_text("x == [1, 2]\ny == x +* 2\n")
    code, out, err = run(capsys, "solve", str(path))
    assert code == EXIT_BAD_INPUT and out == ""
    assert err.startswith(f"{path}:2:9: ") and "expected an expression after '+', found '*'" in err
    path.write_text("x == 1\ny = 2\n")
    code, _, err = run(capsys, "solve", str(path))
    assert code == EXIT_BAD_INPUT and err.startswith(f"{path}:2:1: ")


def test_all_reports_a_model_it_proved_infeasible_without_searching_again(capsys, tmp_path, monkeypatch):
    path = tmp_path / "pigeons.py"
    names = [f"x{i}" for i in range(10)]
    path.write_text("\n".join(f"{n} in [1..9]" for n in names) + f"\nall_different({', '.join(names)})\n")
    code, out, _ = run(capsys, "solve", str(path), "--all", "--time-limit", "3")
    assert code == EXIT_INFEASIBLE and out.splitlines()[1].strip().startswith("all_different(x0")

    def solve_again(*args, **kwargs):
        raise AssertionError("the listing proved already that there is no solution")

    monkeypatch.setattr(Model, "solve", solve_again)
    code, out, _ = run(capsys, "solve", str(path), "--all", "--json")
    assert code == EXIT_INFEASIBLE and json.loads(out)["status"] == "infeasible"


def test_json_reports_bad_input_on_stdout_too(capsys, tmp_path, tiles):
    path = tmp_path / "broken.py"
    path.write_text("x == [1, 2]\ny == x +* 2\n")
    code, out, err = run(capsys, "solve", str(path), "--json")
    message = f"{path}:2:9: expected an expression after '+', found '*'"
    assert (code, err) == (EXIT_BAD_INPUT, message + "\n")
    assert json.loads(out) == {"status": "bad_input", "message": message, "source": str(path), "line": 2,
                               "column": 9}
    code, out, err = run(capsys, "solve", tiles, "--minimize", "x +", "--json")
    assert code == EXIT_BAD_INPUT and err.startswith("--minimize:1:4: expected an expression after '+'")
    assert json.loads(out)["column"] == 4
    code, out, err = run(capsys, "solve", tiles, "--count", "--limit", "2", "--json")
    assert code == EXIT_BAD_INPUT and json.loads(out)["status"] == "bad_input" and "--limit" in err
    # options argparse itself rejects: the same JSON, argparse's usage and message on stderr
    code, out, err = run(capsys, "solve", tiles, "--json", "--limit", "0")
    report = json.loads(out)
    assert code == EXIT_BAD_INPUT and report["status"] == "bad_input"
    assert "whole number >= 1" in report["message"] and err.startswith("usage: constrint solve")
    code, out, err = run(capsys, "solve", tiles, "--bogus")
    assert code == EXIT_BAD_INPUT and out == "" and "unrecognized arguments: --bogus" in err


def test_an_undefined_objective_is_reported_as_the_reason(capsys, tiles):
    code, out, _ = run(capsys, "solve", tiles, "--minimize", "x // 0")
    assert code == EXIT_INFEASIBLE and out.startswith("infeasible: the objective x // 0 is undefined")
    code, out, _ = run(capsys, "solve", tiles, "--minimize", "x // 0", "--json")
    assert json.loads(out)["reason"].startswith("the objective x // 0 is undefined")


def test_bad_objective_and_options_exit_2(capsys, tiles):
    code, _, err = run(capsys, "solve", tiles, "--minimize", "x + z")
    assert code == EXIT_BAD_INPUT and err.startswith("--minimize:1:5: unknown variable 'z'")
    code, _, err = run(capsys, "solve", tiles, "--prefer", "x:up")
    assert code == EXIT_BAD_INPUT and "NAME:min or NAME:max" in err
    code, _, err = run(capsys, "solve", tiles, "--prefer", "z:max")
    assert code == EXIT_BAD_INPUT and "'z'" in err
    code, _, err = run(capsys, "solve", tiles, "--all", "--count")
    assert code == EXIT_BAD_INPUT and "not allowed with" in err
    code, _, err = run(capsys, "solve", tiles, "--count", "--limit", "2")
    assert code == EXIT_BAD_INPUT and "--limit" in err
    code, _, err = run(capsys, "solve", tiles, "--maximize", "x", "--prefer", "y:min")
    assert code == EXIT_BAD_INPUT and "--prefer" in err
    code, _, err = run(capsys, "solve", tiles, "--limit", "0")
    assert code == EXIT_BAD_INPUT and ">= 1" in err
    code, _, err = run(capsys, "solve", tiles, "--time-limit", "-1")
    assert code == EXIT_BAD_INPUT and "> 0" in err
    code, _, err = run(capsys, "solve", tiles + ".missing")
    assert code == EXIT_BAD_INPUT and "cannot read" in err
    assert run(capsys)[0] == EXIT_BAD_INPUT
    assert run(capsys, "solve", "--help")[0] == EXIT_OK


def test_time_limit_exits_3(capsys, tmp_path):
    # 10**12 solutions tied by one sum: counting them one by one cannot finish in 50 ms
    names = [f"x{i}" for i in range(12)]
    path = tmp_path / "many.py"
    path.write_text("\n".join(f"{n} in [1..10]" for n in names) + "\n" + " + ".join(names) + " != 7\n")
    code, _, err = run(capsys, "solve", str(path), "--count", "--time-limit", "0.05")
    assert code == EXIT_TIME_LIMIT and "time limit" in err
    code, out, _ = run(capsys, "solve", str(path), "--count", "--time-limit", "0.05", "--json")
    assert code == EXIT_TIME_LIMIT and json.loads(out)["status"] == "time_limit"


def test_optimisation_past_its_time_limit_prints_the_best_solution_found(capsys, tmp_path):
    knapsack = hard_knapsack()
    path = tmp_path / "knapsack.py"
    path.write_text(knapsack.text)
    code, out, err = run(capsys, "solve", str(path), "--maximize", knapsack.objective, "--time-limit", "0.3")
    assert code == EXIT_TIME_LIMIT and "not proven optimal" in out and "objective:" in out and "time limit" in err
    code, out, _ = run(capsys, "solve", str(path), "--maximize", knapsack.objective, "--time-limit", "0.3", "--json")
    report = json.loads(out)
    assert code == EXIT_TIME_LIMIT and report["status"] == "time_limit"
    assert report["objective"] == knapsack.value(report["solution"]) > 0 and knapsack.fits(report["solution"])


def test_reads_standard_input(capsys, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO("a in [1..3]; b in [1..3]; a + b == 5\n"))
    code, out, _ = run(capsys, "solve", "-", "--count")
    assert (code, out) == (EXIT_OK, "2\n")


def test_python_dash_m_runs_the_same_command(tiles):
    done = subprocess.run([sys.executable, "-m", "constrint", "solve", tiles, "--count"],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (0, f"{len(TILE_SOLUTIONS)}\n")


def test_output_pipe_closed_early_exits_quietly(tmp_path):
    path = tmp_path / "many.py"
    path.write_text("a in [1..100]; b in [1..100]\n")  # 10,000 rows: more than a pipe buffer holds
    proc = subprocess.Popen([sys.executable, "-m", "constrint", "solve", str(path), "--all"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().split() == [b"a", b"b"]
    proc.stdout.close()
    assert proc.wait(timeout=60) == 141
    assert proc.stderr.read() == b""
