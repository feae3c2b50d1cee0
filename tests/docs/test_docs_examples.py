"""Every Python block of README.md and doc/*.md runs as written.

The blocks of one file run in order in one namespace (a later block may use what an earlier
one defined), in a temporary working directory, so the examples must be self-contained: they
use the embedded data set or data they make.
"""
import os
import re
from pathlib import Path

import pytest

from _reference import ROOT  # noqa: E402 - the repository root

FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)


def _documents():
    docs = [ROOT / "README.md"] + sorted((ROOT / "doc").rglob("*.md"))
    return [d for d in docs if d.is_file()]


def python_blocks(path):
    """(line number, source) of every ```python block of the Markdown file ``path``."""
    text = path.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 2, m.group(1)) for m in FENCE.finditer(text)]


def test_the_documents_have_examples():
    counts = {d.name: len(python_blocks(d)) for d in _documents()}
    assert counts["README.md"] >= 3 and counts["index.md"] >= 3, counts


def test_block_extraction():
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        md = Path(tmp) / "x.md"
        md.write_text("a\n```python\nx = 1\n```\n```bash\nls\n```\n```python\ny = x + 1\n```\n")
        assert python_blocks(md) == [(3, "x = 1\n"), (9, "y = x + 1\n")]


@pytest.mark.parametrize("doc", _documents(), ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(doc, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {"__name__": "__docs__"}
    for line, source in python_blocks(doc):
        code = compile(source, f"{doc.relative_to(ROOT)}:{line}", "exec")
        try:
            exec(code, namespace)
        except Exception as exc:
            raise AssertionError(f"the Python block at {doc.name} line {line} fails: "
                                 f"{type(exc).__name__}: {exc}") from exc
