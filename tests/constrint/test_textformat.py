"""The text format: both dialects, checked against the same models built in Python and against brute force."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from constrint import ConstrintError, Infeasible, Model, ParseError, parse
from constrint.textformat import DEFAULT_DOMAIN, parse_expression


def solution_set(model: Model) -> set[tuple[tuple[str, int], ...]]:
    return {tuple(sorted(s.items())) for s in model.solutions()}


def brute_force(domains: dict[str, range | list[int]], predicate) -> set[tuple[tuple[str, int], ...]]:
    names = sorted(domains)
    found = set()
    for values in itertools.product(*(domains[n] for n in names)):
        env = dict(zip(names, values))
        if predicate(env):
            found.add(tuple(sorted(env.items())))
    return found


def domain_of(model: Model, name: str):
    d = model.variables[name].domain
    return (d.lo, d.hi) if d.values is None else list(d.values)


# ------------------------------------------------------------------------------------------------ python


def test_python_domains_and_default_domain():
    m = parse("a == [8, 16, 32]\n[1, 2] == b\nc in [3, 5]\nd in [2..9]\ne in [2**3..2**5 - 1]\nf <= 7")
    assert domain_of(m, "a") == [8, 16, 32]
    assert domain_of(m, "b") == [1, 2]
    assert domain_of(m, "c") == [3, 5]
    assert domain_of(m, "d") == (2, 9)
    assert domain_of(m, "e") == (8, 31)
    assert domain_of(m, "f") == DEFAULT_DOMAIN == (1, 2**30)
    assert [str(c) for c in m.constraints] == ["f <= 7"]  # declarations are domains, not constraints


def test_python_declaration_after_use_sets_the_domain_and_a_second_one_is_a_constraint():
    m = parse("x * y == 12\nx == [1, 2, 3, 4]\ny in [1..6]\nx in [3..10]")
    assert list(m.variables) == ["x", "y"]
    assert domain_of(m, "x") == [1, 2, 3, 4]
    # both halves of the interval are constraints named as written
    assert [str(c) for c in m.constraints] == ["x * y == 12", "x in [3..10]", "x in [3..10]"]
    assert solution_set(m) == {(("x", 3), ("y", 4)), (("x", 4), ("y", 3))}


def test_python_statements_comments_semicolons_indentation_and_continuation():
    text = """
        # a model kept in an indented string
        x in [0..20]; y in [0..20]   # two declarations on one line
        (x + y
            == 10)                   # parentheses carry a statement over lines
        x - y >= 4 ;
    """
    m = parse(text)
    assert [str(c) for c in m.constraints] == ["x + y == 10", "x - y >= 4"]
    assert solution_set(m) == brute_force({"x": range(21), "y": range(21)},
                                          lambda v: v["x"] + v["y"] == 10 and v["x"] - v["y"] >= 4)


@pytest.mark.parametrize("expr, fn", [
    ("x + y * 2 == 10", lambda x, y: x + y * 2 == 10),
    ("(x + y) * 2 == 10", lambda x, y: (x + y) * 2 == 10),
    ("x - y - 1 == 2", lambda x, y: x - y - 1 == 2),
    ("x - (y - 1) == 2", lambda x, y: x - (y - 1) == 2),
    ("-x + y ** 2 == 7", lambda x, y: -x + y**2 == 7),
    ("-x ** 2 + 20 == y", lambda x, y: -x**2 + 20 == y),
    ("2 ** 3 * x // y == 4", lambda x, y: y != 0 and 2**3 * x // y == 4),
    ("x % y == 1", lambda x, y: y != 0 and x % y == 1),
    ("x // (y - 3) >= 2", lambda x, y: y != 3 and x // (y - 3) >= 2),
    ("x * y % 7 + 1 <= 2", lambda x, y: x * y % 7 + 1 <= 2),
    ("x != y", lambda x, y: x != y),
    ("x < y", lambda x, y: x < y),
    ("x > +y", lambda x, y: x > y),
    ("1 <= x < y <= 4", lambda x, y: 1 <= x < y <= 4),
    ("x in [-3..y + 1]", lambda x, y: -3 <= x <= y + 1),
    ("x in [2**1 - 4..-1]", lambda x, y: -2 <= x <= -1),
])
def test_python_operators_follow_python_precedence(expr, fn):
    m = parse(f"x in [-6..6]; y in [-6..6]\n{expr}")
    expected = brute_force({"x": range(-6, 7), "y": range(-6, 7)}, lambda v: fn(v["x"], v["y"]))
    assert solution_set(m) == expected
    assert expected  # each case has solutions, so the comparison is not vacuous


@pytest.mark.parametrize("expr, fn", [
    ("x == 1 or y == 2", lambda x, y: x == 1 or y == 2),
    ("x == 1 and y == 2 or x == 3", lambda x, y: (x == 1 and y == 2) or x == 3),
    ("(x < 2 or x > 4) and (y < 2 or y > 4)", lambda x, y: (x < 2 or x > 4) and (y < 2 or y > 4)),
    ("not x == 3", lambda x, y: x != 3),
    ("not (x <= 2 or y >= 3)", lambda x, y: not (x <= 2 or y >= 3)),
    ("not 1 < x < 4", lambda x, y: not 1 < x < 4),
    ("x + y in [3, 7]", lambda x, y: x + y in (3, 7)),
    ("x * y not in [0, 4]", lambda x, y: x * y not in (0, 4)),
    ("x - y in [1..2]", lambda x, y: 1 <= x - y <= 2),
    ("x not in [1..4]", lambda x, y: not 1 <= x <= 4),
    ("not x + y in [2..8]", lambda x, y: not 2 <= x + y <= 8),
    ("x in [1..y]", lambda x, y: 1 <= x <= y),
    ("x == [1, y]", lambda x, y: x in (1, y)),
    ("all_different(x, y, 3)", lambda x, y: len({x, y, 3}) == 3),
    ("all_different([x, y])", lambda x, y: x != y),
    ("divides(y, x + 1)", lambda x, y: y != 0 and (x + 1) % y == 0),
])
def test_python_logic_membership_and_calls(expr, fn):
    m = parse(f"x in [0..5]; y in [0..5]; {expr}")
    expected = brute_force({"x": range(6), "y": range(6)}, lambda v: fn(v["x"], v["y"]))
    assert solution_set(m) == expected
    assert expected


def test_python_round_trip_matches_a_model_built_in_python():
    text = """
    BM == [16, 32, 64, 128]; BN == [16, 32, 64, 128]; WARPS in [1..8]
    K == 256
    BM * BN <= 64 * 32 * WARPS
    divides(BM * BN // 256, WARPS * 32) or WARPS == 1
    K % (BM // 16) == 0
    """
    parsed = parse(text)
    m = Model()
    bm = m.int_var(values=[16, 32, 64, 128], name="BM")
    bn = m.int_var(values=[16, 32, 64, 128], name="BN")
    warps = m.int_var(1, 8, "WARPS")
    k = m.int_var(*DEFAULT_DOMAIN, "K")
    m.add(k == 256)
    m.add(bm * bn <= 64 * 32 * warps)
    m.add(m.any_of([m.divides(bm * bn // 256, warps * 32), warps == 1]))
    m.add(k % (bm // 16) == 0)
    assert list(parsed.variables) == list(m.variables)
    assert solution_set(parsed) == solution_set(m)
    assert len(solution_set(m)) > 10
    prefer = [("BM", "max"), ("BN", "max"), ("WARPS", "min")]
    assert dict(parsed.solve(prefer=prefer)) == dict(m.solve(prefer=prefer))


def test_python_infeasible_core_names_constraints_as_written():
    m = parse("x in [1..100]\nx % 7 == 0   # multiple of seven\ny == x + 1\n(x >=\n  50)\nx <= 55\nx != 63")
    with pytest.raises(Infeasible) as info:
        m.solve()
    assert sorted(str(c) for c in info.value.core) == ["x % 7 == 0", "x <= 55", "x >= 50"]
    assert "x % 7 == 0" in str(info.value)


def test_python_or_of_ands_is_split_into_named_disjunctions():
    m = parse("x in [0..9]; y in [0..9]\n(x == 1 and y == 2) or x == 3")
    assert sorted(str(c) for c in m.constraints) == ["x == 1 or x == 3", "y == 2 or x == 3"]


@pytest.mark.parametrize("text, line, column, fragment", [
    ("x == 1\ny = 3", 2, 1, "write '=='"),
    ("x == 1\n   x + * 2 == 1", 2, 8, "expected an expression after '+', found '*'"),
    ("x / 2 == 1", 1, 1, "'//'"),
    ("x ^ 2 == 4", 1, 1, "'**'"),
    ("x == 1.5", 1, 6, "not an integer"),
    ("x == True", 1, 6, "not an integer"),
    ("2 ** x == 4", 1, 1, "constant"),
    ("x ** -1 == 4", 1, 1, "negative"),
    ("x == 4 // 0", 1, 6, "division by zero"),
    ("(x + 1 <= 3", 1, 1, "never closed"),
    ("foo(x)", 1, 1, "all_different"),
    ("divides(x)", 1, 1, "2 arguments"),
    ("x + 1", 1, 1, "must be a constraint"),
    ("3 <= 4", 1, 1, "constants only"),
    ("x in [3..1]", 1, 1, "lo=3 > hi=1"),
    ("x == []", 1, 6, "empty"),
    ("x in y", 1, 1, "list"),
    ("x is 3", 1, 1, "'=='"),
    ("x == [1..3, 5]", 1, 6, "interval"),
    ("x @ y == 1", 1, 1, "'*'"),
    ("not all_different(x, y)", 1, 5, "'not'"),
    ("é == 1\nx ==== 2", 2, 5, "expected an expression after '==', found '=='"),
    ("x in [1..3, 5]", 1, 6, "interval"),
    ("x == 1..3", 1, 7, "interval"),
    ("x in [1..2..3]", 1, 6, "interval"),
    ("  y == 2\n\tx <> 2", 2, 4, "invalid syntax"),
    ("x + y == ", 1, 10, "expected an expression after '=='"),
    ("x in [1..9]\n  y ==\nx >= 2", 2, 7, "expected an expression after '=='"),
    ("x + * 2 == 3", 1, 5, "expected an expression after '+', found '*'"),
    ("x in [1..10];; x>=2", 1, 14, "empty statement: expected a constraint before ';'"),
    ("x + y == 3 3", 1, 12, "expected an operator between '3' and '3'"),
    ("x in [0..9]\nx <== 3", 2, 5, "expected an expression after '<=', found '='"),
    ("x in [0..9]\n  x <= 3\0", 2, 9, "NUL character"),
    ("x == 3\0", 1, 7, "NUL character"),
])
def test_python_errors_name_line_and_column(text, line, column, fragment):
    with pytest.raises(ParseError) as info:
        parse(text)
    assert (info.value.line, info.value.column) == (line, column)
    assert fragment in str(info.value)
    assert str(info.value).startswith(f"line {line}, column {column}:")


def test_parse_expression_locates_errors_as_a_file_does():
    m = parse("x in [1..9]")
    for text, column in (("x +", 4), ("  x *", 6), ("x + * 2", 5)):
        with pytest.raises(ParseError) as info:
            parse_expression(text, m)
        assert (info.value.line, info.value.column) == (1, column)
        assert "expected an expression after" in info.value.message


def test_sums_of_thousands_of_terms_parse():
    n = 1000
    m = parse("\n".join(f"x{i} in [0..1]" for i in range(n)) + "\n" + " + ".join(f"x{i}" for i in range(n)) + " == 1")
    assert sum(m.solve().values()) == 1
    n = 10_000
    total = " + ".join(f"X{i}" for i in range(n)) + " <= 10000"
    m = parse(total + ";", "constrint")
    assert m.solve() == {f"X{i}": 1 for i in range(n)}
    with pytest.raises(ParseError, match="sums of up to about 2,900 terms.*constrint dialect"):
        parse(total)  # beyond Python's parser: the error says which dialect reads it


@pytest.mark.parametrize("expression", ["(" * 5000 + "x" + ")" * 5000, "-" * 5000 + "x",
                                        " + ".join(["x"] * 10_000)])  # beyond what Python's parser takes
def test_python_expressions_nested_too_deeply_are_parse_errors(expression):
    with pytest.raises(ParseError, match="nests too deeply"):
        parse(f"x in [1..3]\n{expression} == 1")
    with pytest.raises(ParseError, match="nests too deeply"):
        parse_expression(expression, parse("x in [1..3]"))


def test_a_run_of_signs_is_one_negation_or_none():
    m = parse("x in [1..3]\ny in [-3..3]\ny == " + "-" * 2001 + "x")
    assert sorted(s["y"] for s in m.solutions()) == [-3, -2, -1]


def test_unknown_dialect_lists_the_valid_ones():
    with pytest.raises(ConstrintError, match="'python', 'constrint'"):
        parse("x == 1", dialect="minizinc")


def test_parse_expression_reads_existing_variables_only():
    m = parse("x in [1..9]; y in [1..9]; x + y == 10")
    assert m.maximize(parse_expression("x * 2 - y", m)).objective == 17
    assert m.minimize(parse_expression("x ** 2 + y", m)).objective == 10
    assert str(parse_expression("x * y ^ 2 + 1", m, "constrint")) == "x * y ** 2 + 1"
    with pytest.raises(ParseError, match="unknown variable 'z'"):
        parse_expression("x + z", m)
    with pytest.raises(ParseError, match="'<=' cannot appear in an expression"):
        parse_expression("x <= y", m, "constrint")


# ------------------------------------------------------------------------------------------------ constrint


def test_constrint_divisibility_takes_the_whole_right_side():
    parsed = parse("H == 96; A == [1, 2, 3, 4, 6, 8]; B == [1, 2, 4, 8, 16];\nH % A * B == 0;", "constrint")
    expected = brute_force({"H": [96], "A": [1, 2, 3, 4, 6, 8], "B": [1, 2, 4, 8, 16]},
                           lambda v: v["H"] % (v["A"] * v["B"]) == 0)
    assert solution_set(parsed) == expected
    # the left side is a whole sum too: (A + B) is divisible by C
    parsed = parse("A == [1, 2, 3, 4, 5]; B == [1, 2, 3]; C == [2, 3];\nA + B % C == 0;", "constrint")
    assert solution_set(parsed) == brute_force({"A": range(1, 6), "B": range(1, 4), "C": [2, 3]},
                                               lambda v: (v["A"] + v["B"]) % v["C"] == 0)


def test_constrint_split_order_or_le_eq_sum_product_power():
    text = """
    A == [1, 2, 3, 4, 5, 6]; B == [1, 2, 3, 4, 5, 6]; C == [1, 2, 3];
    A * B ^ 2 <= 20 | A + B == 11 ;      # '|' before '<=' before '+' before '*' before '^'
    A + B * C <= 3 * C + 4 || C == 1;
    """
    parsed = parse(text, "constrint")
    expected = brute_force(
        {"A": range(1, 7), "B": range(1, 7), "C": range(1, 4)},
        lambda v: (v["A"] * v["B"] ** 2 <= 20 or v["A"] + v["B"] == 11)
        and (v["A"] + v["B"] * v["C"] <= 3 * v["C"] + 4 or v["C"] == 1))
    assert solution_set(parsed) == expected
    assert expected


def test_constrint_parentheses_are_cosmetic():
    grouped = parse("A == [1, 2, 3]; B == [1, 2, 3]; C == [1, 2, 3];\n(A + B) * C == 7;", "constrint")
    flat = parse("A == [1, 2, 3]; B == [1, 2, 3]; C == [1, 2, 3];\nA + B * C == 7;", "constrint")
    assert solution_set(grouped) == solution_set(flat) == brute_force(
        {"A": range(1, 4), "B": range(1, 4), "C": range(1, 4)}, lambda v: v["A"] + v["B"] * v["C"] == 7)


def test_constrint_statements_span_lines_and_keep_their_text():
    text = """# tile model
    HEAD_DIM == 64 ;
    WARPS == [ 1, 2, 4, 8 ];   # warps per block
    TILE2 == [16, 32];
    WARPS * TILE2   # product over
        == HEAD_DIM ;
    """
    parsed = parse(text, "constrint")
    assert [str(c) for c in parsed.constraints] == ["HEAD_DIM == 64", "WARPS * TILE2 == HEAD_DIM"]
    assert domain_of(parsed, "WARPS") == [1, 2, 4, 8]
    assert domain_of(parsed, "HEAD_DIM") == DEFAULT_DOMAIN
    assert solution_set(parsed) == {(("HEAD_DIM", 64), ("TILE2", 16), ("WARPS", 4)),
                                    (("HEAD_DIM", 64), ("TILE2", 32), ("WARPS", 2))}


def test_constrint_lists_declare_domains_or_state_membership():
    text = "X * Y == [6, 8];\nX == [1, 2, 3, 4];\n[1, 2, 3] == Y;\nX == [2, 3, 4, 5];"
    parsed = parse(text, "constrint")
    assert domain_of(parsed, "X") == [1, 2, 3, 4] and domain_of(parsed, "Y") == [1, 2, 3]
    assert [str(c) for c in parsed.constraints] == ["X * Y == [6, 8]", "X == [2, 3, 4, 5]"]
    assert solution_set(parsed) == {(("X", 2), ("Y", 3)), (("X", 3), ("Y", 2)), (("X", 4), ("Y", 2))}


def test_constrint_round_trip_matches_python_dialect_and_model():
    constrint_text = """
    WARP == 32; SMS == 108; HEAD_DIM == 768; GATES == 4;
    TILE_H == [8, 16, 32]; 
    GATES * HEAD_DIM % (BLOCKS * TILE_H) == 0;
    BLOCKS <= SMS;
    HEAD_DIM * WARPS_H <= 1024 * BLOCKS;
    HEAD_DIM % WARPS_H * TILE_H == 0;
    BLOCKS * WARPS_H ^ 2 + 1 <= 2 * SMS;
    """
    python_text = """
    WARP == 32; SMS == 108; HEAD_DIM == 768; GATES == 4
    TILE_H == [8, 16, 32]
    divides(BLOCKS * TILE_H, GATES * HEAD_DIM)
    BLOCKS <= SMS
    HEAD_DIM * WARPS_H <= 1024 * BLOCKS
    HEAD_DIM % (WARPS_H * TILE_H) == 0
    BLOCKS * WARPS_H ** 2 + 1 <= 2 * SMS
    """
    a, b = parse(constrint_text, "constrint"), parse(python_text)
    assert list(a.variables) == list(b.variables)
    sols = solution_set(a)
    assert sols == solution_set(b) and len(sols) > 3
    prefer = [("BLOCKS", "max"), ("TILE_H", "max")]
    assert dict(a.solve(prefer=prefer)) == dict(b.solve(prefer=prefer))


def test_constrint_infeasible_core_uses_statement_text():
    text = "N == 2976;\nT == [54];\nN % (T) == 0 ;\nN <= 4000;"
    with pytest.raises(Infeasible) as info:
        parse(text, "constrint").solve()
    assert [str(c) for c in info.value.core] == ["N == 2976", "N % (T) == 0"]


@pytest.mark.parametrize("text, line, column, fragment", [
    ("A - B == 1;", 1, 3, "no '-'"),
    ("A == 1;\n  A >= B;", 2, 5, "'<='"),
    ("A < B;", 1, 3, "no '<'"),
    ("A / 2 == B;", 1, 3, "no '/'"),
    ("A != B;", 1, 3, "'!='"),
    ("A = B;", 1, 3, "'=='"),
    ("A % B == 1;", 1, 3, "A % B == 0"),
    ("A <= B <= C;", 1, 8, "one '<='"),
    ("A == B == C;", 1, 8, "one '=='"),
    ("A + == 3;", 1, 3, "missing after '+'"),
    ("A * * B == 3;", 1, 3, "missing after '*'"),
    ("A B == 3;", 1, 3, "operator between"),
    ("X == 1;\n(A == 3;", 2, 1, "never closed"),
    ("A == 3);", 1, 7, "no matching"),
    ("A ^ B == 3;", 1, 3, "integer exponent"),
    ("A ^ 2 ^ 2 == 3;", 1, 3, "integer exponent"),
    ("A * [1, 2] == 3;", 1, 5, "stand alone"),
    ("A;", 1, 1, "needs '<='"),
    ("A == [];", 1, 6, "integers separated"),
    ("A == [1, B];", 1, 6, "integers separated"),
    ("1 <= 2;", 1, 3, "constants only"),
    ("A == 2 ^ 9999;", 1, 8, "too large"),
    ("A == $;", 1, 6, "unexpected '$'"),
])
def test_constrint_errors_name_line_and_column(text, line, column, fragment):
    with pytest.raises(ParseError) as info:
        parse(text, "constrint")
    assert (info.value.line, info.value.column) == (line, column)
    assert fragment in str(info.value)


def test_constrint_newlines_do_not_end_statements():
    with pytest.raises(ParseError) as info:
        parse("A == 1\nB == 2;", "constrint")
    # one statement 'A == 1 B == 2', which fails: the error points at where the ';' is missing
    assert (info.value.line, info.value.column) == (1, 7)
    assert "missing ';' after '1' at the end of line 1" in str(info.value)


def test_python_value_lists_are_sets_and_later_lists_are_membership():
    m = parse("x == [32, 8, 8, 16]\r\nx == [16, 32, 64]\r\ny in [x]\r\n")
    assert domain_of(m, "x") == [8, 16, 32]
    assert [str(c) for c in m.constraints] == ["x == [16, 32, 64]", "y in [x]"]
    assert solution_set(m) == {(("x", 16), ("y", 16)), (("x", 32), ("y", 32))}


def test_constrint_names_numbers_and_single_value_lists():
    m = parse("TILE_2 == [ 16 ];\nBIG == 1073741824;\nTILE_2 * N2 <= 64 ;", "constrint")
    assert domain_of(m, "TILE_2") == [16]
    assert m.count() == 4  # N2 in 1..4, BIG fixed
    assert m.solve(prefer=[("N2", "max")])["BIG"] == 2**30


def test_constrint_missing_semicolon_between_statements_is_named():
    with pytest.raises(ParseError) as info:
        parse("X == [1, 2]\nY == [3]", "constrint")
    assert str(info.value) == "line 1, column 12: missing ';' after ']' at the end of line 1: statements end with ';'"
    assert parse("X == [\n1, 2\n];\nX <= 3\n+ 0;", "constrint").count() == 2  # a statement may span lines


@pytest.mark.parametrize("text, column", [("A <= 1 |;", 27), ("| A <= 1;", 20), ("A <= 1 | | 2 <= A;", 27),
                                          ("|;", 20)])
def test_constrint_alternatives_may_not_be_empty(text, column):
    with pytest.raises(ParseError, match=r"'\|' needs a relation on each side") as err:
        parse("A == [0, 1, 2, 3]; " + text, "constrint")
    assert (err.value.line, err.value.column) == (1, column)


def test_reading_pauses_the_garbage_collector_and_restores_it(monkeypatch):
    """parse and parse_expression pause the cyclic collector while they read (textformat._collector_paused) and
    restore its state, also when the text is bad, and leave a collector paused by the caller paused."""
    import gc

    import constrint.textformat as textformat

    during = []
    read, expression = textformat._PythonReader.read, textformat._PythonReader.expression

    def spy(self):
        during.append(gc.isenabled())
        return read(self)

    def expression_spy(self, lookup):
        during.append(gc.isenabled())
        return expression(self, lookup)

    monkeypatch.setattr(textformat._PythonReader, "read", spy)
    monkeypatch.setattr(textformat._PythonReader, "expression", expression_spy)
    assert gc.isenabled()
    model = parse("x in [1..3]\ny in [1..3]\nx + y == 4\n")
    assert model.count() == 3 and gc.isenabled()
    assert str(parse_expression("x + 2 * y", model)) and gc.isenabled()
    with pytest.raises(ParseError):
        parse("x in [1..3]\nx +* 2 == 4\n")
    assert gc.isenabled()
    gc.disable()
    try:
        parse("x in [1..3]\n")
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert during == [False, False, False, False]


# ---------------------------------------------------------------------------- python: declarations read fast

def _reading(text: str):
    """What parse makes of `text`: every variable's name and domain in order, every constraint's label and text;
    or the ParseError's message and place."""
    try:
        m = parse(text)
    except ParseError as exc:
        return "error", exc.message, exc.line, exc.column
    return ([(name, domain_of(m, name)) for name in m.variables], [(str(c), c.text()) for c in m.constraints])


_GAP = st.sampled_from(["", " ", "  ", "\t", "\f"])
_NAME = st.sampled_from(["x", "y", "z1", "_w", "in", "if", "x0"])
_BOUND = st.tuples(st.sampled_from(["", "-", "+", "- "]), st.sampled_from(["0", "1", "7", "12", "007", "2**3"]))


@st.composite
def _interval_line(draw) -> str:
    (sign_lo, lo), (sign_hi, hi) = draw(_BOUND), draw(_BOUND)
    g = [draw(_GAP) for _ in range(6)]
    dots = draw(st.sampled_from(["..", "...", ". ."]))
    return f"{g[0]}{draw(_NAME)} in{g[1] or ' '}[{g[2]}{sign_lo}{lo}{g[3]}{dots}{g[4]}{sign_hi}{hi}]{g[5]}"


_COMMENTS = st.sampled_from(["a", "(", "'"])
_OTHER_LINES = st.sampled_from([
    "", "# a comment with 'quotes'", "x + y <= 9", "x == [1, 2, 3]", "[0, 4] == y", "z1 in [2, 5]",
    "(x +", "y in [0..3])", "x + \\", "x * 2 >= y  # (", "x in [1..4]; y <= 3", "s = 'x in [0..1]'",
    "x in [0..2] or y in [1..2]", "_w in [0..1] and x <= 5",
])
_commented = st.builds(lambda line, comment: f"{line}  # {comment}", _interval_line(), _COMMENTS)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_interval_line(), _OTHER_LINES, _commented), max_size=8), st.sampled_from(["\n", "\r\n"]))
def test_python_declarations_read_without_the_parser_read_as_with_it(lines, newline):
    """Lines `NAME in [lo..hi]` are read without Python's parser (_PythonReader.intervals); any text reads the same
    with and without that path: the same variables, domains and constraints in the same order, or the same error at
    the same place (brackets open across lines, continued lines, keywords, leading zeros, signs, duplicates)."""
    import constrint.textformat as textformat

    text = newline.join(lines)
    fast = _reading(text)
    intervals = textformat._PythonReader.intervals
    textformat._PythonReader.intervals = lambda self: {}
    try:
        assert _reading(text) == fast, text
    finally:
        textformat._PythonReader.intervals = intervals


def test_python_interval_lines_take_the_fast_path():
    """The lines that `intervals` reads: whole-line interval declarations outside brackets and continued lines."""
    from constrint.textformat import _PythonReader

    text = "x in [0..3]\n  y in [ -2 .. +5 ]  # y\n(z +\nw in [0..1])\nv + \\\nu in [0..1]\nif in [0..1]\nt in [01..2]"
    assert _PythonReader(text).intervals() == {1: ("x", 0, 3), 2: ("y", -2, 5)}
    assert _PythonReader("x in [0..3]\ns = 'a'\ny in [0..1]").intervals() == {1: ("x", 0, 3)}  # none past a quote
