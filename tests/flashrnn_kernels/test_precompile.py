"""runtime.compile.precompile against a fake `cupy` whose RawModule records each compile in a file: every distinct
source is compiled once, in spawned worker processes (two or more sources) or in the calling process (one)."""
from __future__ import annotations

import collections
import hashlib
import sys
import textwrap

import pytest

from flashrnn_kernels.runtime import compile as compile_module

FAKE_CUPY = textwrap.dedent('''
    """A stand-in for CuPy's RawModule: compile() records the source in $FAKE_CUPY_OUT, named by its hash."""
    import hashlib, os, types, uuid

    class RawModule:
        def __init__(self, code, options, backend):
            self.code = code

        def compile(self):
            name = hashlib.sha256(self.code.encode()).hexdigest()[:16]
            with open(os.path.join(os.environ["FAKE_CUPY_OUT"], f"{name}.{uuid.uuid4().hex}"), "w") as f:
                f.write(self.code)

    class _Device:
        compute_capability = "90"

    cuda = types.SimpleNamespace(Device=_Device, compiler=types.SimpleNamespace(CompileException=RuntimeError))
''')


@pytest.fixture
def fake_cupy(tmp_path, monkeypatch):
    (tmp_path / "cupy.py").write_text(FAKE_CUPY)
    out = tmp_path / "compiled"
    out.mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))  # spawned workers start with the parent's sys.path
    monkeypatch.setenv("FAKE_CUPY_OUT", str(out))
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    monkeypatch.setattr(compile_module, "_modules", {})
    return out


def _compiled(out) -> dict[str, int]:
    """source hash -> how many times it was compiled."""
    return dict(collections.Counter(path.name.split(".")[0] for path in out.iterdir()))


def _key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()[:16]


def test_every_distinct_source_compiles_once_in_workers(fake_cupy):
    sources = [f"// kernel {i}\n" for i in range(5)]
    compile_module.precompile(sources + sources[:2], workers=2)
    assert _compiled(fake_cupy) == {_key(s): 1 for s in sources}
    assert not compile_module._modules, "the workers compile, the calling process only reads the cache later"


def test_one_source_compiles_in_the_calling_process(fake_cupy):
    compile_module.precompile(["// only\n", "// only\n"])
    assert _compiled(fake_cupy) == {_key("// only\n"): 1}
    assert len(compile_module._modules) == 1
