"""Would a frequency prior help ``allgpu doctor --log`` where a message is settled several ways? Measured
leave-one-round-out on the rounds of real pastes already scored once.

The prior: per *basis* of a verdict (the pattern, wording family's sign or reading its first finding rests on), how
often the threads settled each cause among the causes that verdict named (our own labels,
``doctor_logs/real_threads.jsonl``; texts from the cache, :mod:`doctor_log_cache`). Applied to a log, it moves first
the cause its basis was settled as most often (at least ``MIN_SETTLED`` times and strictly more than the verdict's
first cause), unless the log supports the first cause beyond the basis (another message or setting for it).

Leave-one-round-out: the counts from every other round (read by the current readers), applied to the left-out
round, read (a) by the current readers and (b) by the readers it was first scored with (rounds 8-14, the package taken
from that commit with ``git archive``; each round's recorded first-scoring hits are checked), each against no prior.
The key is the basis alone (``--key basis``) or the basis with the cause the readers named first (``basis-first``).

    python benchmarks/doctor_priors.py                   # the table of ambiguous bases and both measurements
    python benchmarks/doctor_priors.py --key basis-first
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doctor_log_cache import cache_dir, load, references  # noqa: E402
from doctor_log_eval import FIRST_SCORES, TUNED_ON  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
FIRST_READERS = {8: "971788a", 9: "831e550", 10: "77983fa", 11: "b35b007", 12: "4ba2a97", 13: "e18a79e",
                 14: "b6330c7"}
MIN_SETTLED = 2
# Read every log with the readers under argv[1], recording the basis of the verdict's first finding (the source of
# its strongest evidence) and whether the log supports that cause beyond it (more than one distinct source).
_RUN = """
import json, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from allgpu.doctor import verdict
from allgpu.doctor.log_reader import read_log
seen = []
original = verdict._with_candidates
def recording(scores, ranked, out):
    if ranked:
        items = scores.weights[ranked[0]]
        seen.append((max(items, key=lambda w: w[0])[1], len({s for _, s, _ in items}) > 1))
    return original(scores, ranked, out)
verdict._with_candidates = recording
out = {}
for i in json.load(sys.stdin):
    seen.clear()
    named = verdict.verdict_from_log(read_log((Path(sys.argv[2]) / (i + '.log')).read_text(encoding='utf-8')))
    out[i] = [list(named.cause_ids)] + list(seen[-1] if seen else (None, False))
print(json.dumps(out))
"""


def read_with(package: str, ids: list[str]) -> dict[str, tuple[list[str], str | None, bool]]:
    done = subprocess.run([sys.executable, "-c", _RUN, package, str(cache_dir())], input=json.dumps(ids),
                          capture_output=True, text=True, check=True)
    return {i: tuple(v) for i, v in json.loads(done.stdout).items()}


def read_at(commit: str, ids: list[str]) -> dict[str, tuple[list[str], str | None, bool]]:
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "allgpu"], capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        return read_with(tmp, ids)


def key(reading: tuple[list[str], str | None, bool], kind: str) -> str | None:
    named, basis, _ = reading
    if basis is None or not named:
        return None
    return basis if kind == "basis" else f"{basis}>{named[0]}"


def counts(rows: list[dict], readings: dict, kind: str) -> dict[str, Counter]:
    """key -> settled cause -> logs (the settled cause among the causes the verdict named)."""
    table: dict[str, Counter] = defaultdict(Counter)
    for row in rows:
        k = key(readings[row["id"]], kind)
        if k and row["cause"] in readings[row["id"]][0]:
            table[k][row["cause"]] += 1
    return table


def rerank(reading: tuple[list[str], str | None, bool], table: dict[str, Counter], kind: str) -> list[str]:
    named, _, decided = reading
    c = table.get(key(reading, kind) or "", Counter())
    if len(named) < 2 or not c or decided:
        return named
    best = max(named, key=lambda x: (c[x], -named.index(x)))
    if best == named[0] or c[best] < MIN_SETTLED or c[best] <= c[named[0]]:
        return named
    return [best] + [x for x in named if x != best]


def loro(rows: list[dict], current: dict, scored: dict, kind: str, label: str) -> None:
    total = Counter()
    print(f"leave-one-round-out, {label}:")
    for number in sorted({r["round"] for r in rows if r["id"] in scored}):
        test = [r for r in rows if r["round"] == number]
        table = counts([r for r in rows if r["round"] != number], current, kind)
        before = {r["id"]: scored[r["id"]][0][:1] for r in test}
        after = {r["id"]: rerank(scored[r["id"]], table, kind)[:1] for r in test}
        right = [r["id"] for r in test if after[r["id"]] == [r["cause"]] != before[r["id"]]]
        wrong = [r["id"] for r in test if before[r["id"]] == [r["cause"]] != after[r["id"]]]
        other = sum(after[i] != before[i] for i in before) - len(right) - len(wrong)
        hits = sum(before[r["id"]] == [r["cause"]] for r in test)
        total.update(logs=len(test), hits=hits, right=len(right), wrong=len(wrong), other=other)
        print(f"  round {number:2d}: {hits}/{len(test)} -> {hits + len(right) - len(wrong)}/{len(test)} "
              f"(made right: {', '.join(right) or '-'}; made wrong: {', '.join(wrong) or '-'}; "
              f"wrong to another wrong: {other})")
    print(f"  all: {total['hits']}/{total['logs']} -> {total['hits'] + total['right'] - total['wrong']}/"
          f"{total['logs']}: {total['right']} made right, {total['wrong']} made wrong, {total['other']} wrong to "
          "another wrong")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--key", choices=("basis", "basis-first"), default="basis")
    args = parser.parse_args()
    rows = [dict(r, round=r.get("round", 1)) for r in references() if r.get("round", 1) in TUNED_ON]
    load(rows)  # checks the cache (sha256) before anything is read
    current = read_with(str(REPO), [r["id"] for r in rows])
    print(f"bases settled several ways (all {len(rows)} logs, current readers, key {args.key}):")
    for k, c in sorted(counts(rows, current, args.key).items()):
        if len(c) > 1:
            print(f"  {k}: {dict(c.most_common())}")
    loro(rows, current, current, args.key, "the current readers")
    first = {}
    for number, commit in FIRST_READERS.items():
        ids = [r["id"] for r in rows if r["round"] == number]
        got = read_at(commit, ids)
        cause = {r["id"]: r["cause"] for r in rows}
        hits = sum(got[i][0][:1] == [cause[i]] for i in ids)
        if (hits, len(ids)) != FIRST_SCORES[number]:
            raise SystemExit(f"round {number} at {commit}: {hits}/{len(ids)}, recorded {FIRST_SCORES[number]}")
        first.update(got)
    loro(rows, current, first, args.key, "rounds 8-14 read by the readers of their first scoring")
    return 0


if __name__ == "__main__":
    sys.exit(main())
