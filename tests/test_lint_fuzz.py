"""1,000 files made by mutating the labelled cases: the linter never raises, and never calls a file Python
compiles "uncompilable". Mutations (seeded): truncation, random bytes, deep nesting, 1 MB lines, line shuffles."""

import random
from pathlib import Path

import pytest

from allgpu.lint import RULES, check_path

CASES = Path(__file__).parent / "lint_cases"
N_FILES = 1000
_PUNCT = b" ()[]{}:.,=+*\n\tabcxyz019'\"#@\\"


def _sources() -> list[tuple[str, bytes]]:
    return [(p.suffix, p.read_bytes()) for p in sorted(CASES.glob("*")) if p.suffix in (".py", ".ipynb")]


def _truncate(rng, data: bytes) -> bytes:
    return data[: rng.randrange(len(data) + 1)]


def _random_bytes(rng, data: bytes) -> bytes:
    buf = bytearray(data)
    for _ in range(rng.randint(1, 12)):
        if buf:  # mostly characters that keep the file decodable, so the rules run on the damaged code
            buf[rng.randrange(len(buf))] = rng.randrange(256) if rng.random() < 0.3 else rng.choice(_PUNCT)
    if rng.random() < 0.3:
        buf[rng.randrange(len(buf) + 1):0] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 64)))
    return bytes(buf)


def _deep(rng, data: bytes) -> bytes:
    text = data.decode("utf-8", "replace")
    kind = rng.randrange(5)
    depth = rng.choice([30, 100, 250, 1000, 5000])
    if kind == 0:  # nested blocks around the whole file
        lines = [" " * i + "if x:" for i in range(min(depth, 200))]
        body = "\n".join(" " * min(depth, 200) + ln for ln in text.splitlines())
        return ("\n".join(lines) + "\n" + body + "\n").encode()
    if kind == 1:  # nested brackets
        return (text + "\ny = " + "(" * depth + "1" + ")" * depth + "\n").encode()
    if kind == 2:  # nested calls on a model, the shape rules look at
        return (text + "\nmodel = " + "f(" * depth + "tf.keras.Sequential()" + ")" * depth + "\n").encode()
    if kind == 3:  # nested functions
        out = [" " * i + f"def f{i}():" for i in range(min(depth, 150))]
        out.append(" " * min(depth, 150) + "return tf.keras.Model()")
        return (text + "\n" + "\n".join(out) + "\n").encode()
    return (text + "\nx = " + "[" * depth + "]" * depth + "\n").encode()


def _mb_line(rng, data: bytes) -> bytes:
    text = data.decode("utf-8", "replace")
    size = 1 << 20
    kind = rng.randrange(4)
    if kind == 0:
        line = "s = '" + "a" * size + "'"
    elif kind == 1:
        line = "x = [" + "1, " * (size // 3) + "]"
    elif kind == 2:
        line = "x = 1" + " + 1" * (size // 4)
    else:
        line = "y = a" + ".b" * (size // 2)
    return (text + "\n" + line + "\n").encode()


def _lines(rng, data: bytes) -> bytes:
    lines = data.split(b"\n")
    op = rng.randrange(3)
    if op == 0:
        rng.shuffle(lines)
    elif op == 1 and lines:
        del lines[rng.randrange(len(lines))]
    else:
        lines.insert(rng.randrange(len(lines) + 1), rng.choice([b"\treturn", b"break", b"  else:", b"%%bash", b"}"]))
    return b"\n".join(lines)


MUTATIONS = [(_truncate, 350), (_random_bytes, 300), (_deep, 150), (_lines, 180), (_mb_line, 20)]


def _mutants(seed: int = 11):
    rng = random.Random(seed)
    sources = _sources()
    for mutate, count in MUTATIONS:
        for i in range(count):
            suffix, data = rng.choice(sources)
            yield f"{mutate.__name__}_{i}{suffix}", mutate(rng, data)


def test_mutation_plan_makes_1000_files():
    assert sum(n for _, n in MUTATIONS) == N_FILES


@pytest.mark.timeout(600)
def test_no_crash_on_1000_mutated_files(tmp_path):
    crashes, false_e999 = [], []
    for name, data in _mutants():
        path = tmp_path / name
        path.write_bytes(data)
        try:
            found = check_path(path)
        except Exception as exc:  # noqa: BLE001 -- any exception is the failure being tested for
            crashes.append(f"{name}: {type(exc).__name__}: {exc}"[:300])
            continue
        assert all(f.rule_id in RULES and f.line >= 1 for f in found), name
        if path.suffix == ".py" and any("does not compile" in f.message for f in found):
            try:
                compile(data, name, "exec")
            except (SyntaxError, ValueError, RecursionError, MemoryError):
                pass
            else:
                false_e999.append(name)
        path.unlink()
    assert crashes == []
    assert false_e999 == []
