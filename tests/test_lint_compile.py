"""Files ``ast.parse`` accepts but ``compile()`` refuses are E999, exactly where and as CPython says."""

import pytest

from allgpu.lint import check_source

REFUSED = [
    "return 1\n", "yield 1\n", "await x\n", "break\n", "for i in x:\n    pass\nelse:\n    continue\n",
    "nonlocal x\n", "def f(a, a):\n    pass\n", "import os\nfrom __future__ import annotations\n",
    "class A:\n    return 1\n", "async def f():\n    g = lambda: await x\n",
    "def f():\n    return [(yield i) for i in x]\n", "def f(a):\n    global a\n", "*a, *b = c\n",
    "from __future__ import braces\n", "from __future__ import nosuchthing\n", "__debug__ = 1\n",
    "import tensorflow as tf\nstrategy = tf.distribute.MirroredStrategy()\nif strategy:\n    return\n",
]
ACCEPTED = [
    "for i in x:\n    try:\n        pass\n    finally:\n        break\n",
    '"""doc"""\nfrom __future__ import annotations\nimport os\n',
    "async def f():\n    return [await y for y in x]\n",
    "def g():\n    x = 1\n    def h():\n        nonlocal x\n    return lambda: (yield)\n",
    "a, *b = c\nfor i in x:\n    while y:\n        continue\n",
    "class A:\n    def f(self):\n        yield from g()\n",
]


@pytest.mark.parametrize("src", REFUSED)
def test_compile_refused_is_e999_at_cpythons_line(src):
    with pytest.raises(SyntaxError) as exc:
        compile(src, "x.py", "exec")
    found = check_source(src, "x.py")
    assert [(f.rule_id, f.line) for f in found] == [("E999", exc.value.lineno)]
    assert exc.value.msg in found[0].message and "does not compile" in found[0].message


@pytest.mark.parametrize("src", ACCEPTED)
def test_compile_accepted_is_not_e999(src):
    compile(src, "x.py", "exec")
    assert [f for f in check_source(src, "x.py") if f.rule_id == "E999"] == []


def test_notebook_allows_top_level_await_but_not_return():
    import json
    nb = lambda *cells: json.dumps({"cells": [{"cell_type": "code", "source": c} for c in cells]})  # noqa: E731
    assert check_source(nb("import asyncio", "await asyncio.sleep(0)"), "n.ipynb") == []
    [f] = check_source(nb("x = 1", "return x"), "n.ipynb")
    assert (f.rule_id, f.cell, f.line) == ("E999", 2, 1)


def test_code_before_a_syntax_error_is_still_checked():
    src = "import torch\nmodel = torch.nn.DataParallel(net)\n\ndef f():\n    x = 1\n    print 'py2'\n"
    found = check_source(src, "x.py")
    assert [(f.rule_id, f.line) for f in found] == [("PT001", 2), ("E999", 6)]
    assert "lines 4-6 were not checked (lines 1-3 were)" in found[1].message and "Fix: " in found[1].message


def test_nothing_parses_before_the_error():
    [f] = check_source("print 'x'\nimport torch\n", "x.py")
    assert f.rule_id == "E999" and "nothing in the file was checked" in f.message


def test_a_file_that_does_not_compile_is_checked_whole():
    src = "import torch\nreturn 1\nmodel = torch.nn.DataParallel(net)\n"
    found = check_source(src, "x.py")
    assert [(f.rule_id, f.line) for f in found] == [("E999", 2), ("PT001", 3)]
    assert "the rest of the file was checked" in found[0].message
