"""How ``allgpu doctor --log`` generalises to rounds of pasted logs it has not seen, rather than how it fits them.

Three measurements, all from the committed references (``doctor_logs/real_threads.jsonl``) and the cache of texts
(:mod:`doctor_log_cache`; never committed):

* ``misses``: rounds 8-18 at their first scoring, re-run with the readers each was first scored with (the package
  taken from that commit with ``git archive``; the hits must equal the recorded figures), and their misses counted
  by the class written by hand in ``doctor_logs/first_misses_r8_13.jsonl`` and ``first_misses_r14_18.jsonl`` (ids
  and classes only): no cause named
  while the text carries the settled cause's words (``cue-present``), a message threads settle several ways or
  whose words point at another cause (``ambiguous``), no GPU message at all (``no-gpu-message``), a wrong first
  cause the text could have told (``wrong-readable``) or could not (``wrong-ambiguous``).
* ``fallbacks``: what a last fallback would have done on each round's first-scoring logs that named no cause:
  the hand-written lexicon (:mod:`allgpu.doctor.log_cues`; written after these logs were read, so not held out),
  and a fitted one, a multinomial naive Bayes over words and word pairs, scored leave-one-round-out (fitted on
  every other round's texts and labels, applied to the left-out round), abstaining below a posterior threshold.
  Its weights are refitted here from the cache on each run and never committed.
* the same naive Bayes alone, leave-one-round-out, on every round, and fitted only on the rounds before each
  (what the readers had when that round was first scored): what a fitted reader does without the readers.
* ``packages``: how often a paste carries both an exception raised inside a package (a Python traceback) and a
  package listing (pip/conda lines, ``pip show``, collect_env's ``[pip3]`` lines) that could say which build of that
  package is installed: the most a reader of an exception's package against the listed packages could name.

    python benchmarks/doctor_generalisation.py            # all three
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import tempfile
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from doctor_log_cache import cache_dir, load, references  # noqa: E402
from doctor_log_eval import FIRST_SCORES  # noqa: E402

from allgpu.doctor.log_cues import read_cues  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
CLASSES = [Path(__file__).resolve().parent / "doctor_logs" / name
           for name in ("first_misses_r8_13.jsonl", "first_misses_r14_18.jsonl")]
# The readers each round was first scored with (docs/doctor.md's table: round 13 on, the readers landed before the
# commit that drew the round).
FIRST_READERS = {8: "971788a", 9: "831e550", 10: "77983fa", 11: "b35b007", 12: "4ba2a97", 13: "e18a79e",
                 14: "b6330c7", 15: "2b45a37", 16: "1a318c9", 17: "34b8ab5", 18: "f3d64a0"}
# Rounds still held out (doctor_log_eval scores them live) with their first scoring.
HELD_OUT_FIRST = {18: (12, 24)}
FIRST = {**HELD_OUT_FIRST, **FIRST_SCORES}
SPAN = f"{min(FIRST_READERS)}-{max(FIRST_READERS)}"
THRESHOLDS = (0.9, 0.99)
_RUN = """
import json, sys
sys.path.insert(0, sys.argv[1])
from pathlib import Path
from allgpu.doctor.log_reader import read_log
from allgpu.doctor.verdict import verdict_from_log
ids = json.load(sys.stdin)
print(json.dumps({i: list(verdict_from_log(read_log((Path(sys.argv[2]) / (i + '.log')).read_text(
    encoding='utf-8'))).cause_ids) for i in ids}))
"""


def first_scoring(rows: list[dict]) -> dict[str, list[str]]:
    """Each log of rounds 8-18 read by the readers it was first scored with; checked against the recorded figures."""
    out: dict[str, list[str]] = {}
    for number, commit in FIRST_READERS.items():
        ids = [r["id"] for r in rows if r.get("round") == number]
        with tempfile.TemporaryDirectory() as tmp:
            archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "allgpu"], capture_output=True,
                                     check=True).stdout
            subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
            done = subprocess.run([sys.executable, "-c", _RUN, tmp, str(cache_dir())], input=json.dumps(ids),
                                  capture_output=True, text=True, check=True)
        named = json.loads(done.stdout)
        cause = {r["id"]: r["cause"] for r in rows}
        hits = sum(named[i][:1] == [cause[i]] for i in ids)
        if (hits, len(ids)) != FIRST[number]:
            raise SystemExit(f"round {number} at {commit}: {hits}/{len(ids)}, recorded {FIRST[number]}")
        out.update(named)
    return out


def misses(rows: list[dict], first: dict[str, list[str]]) -> None:
    classes = {c["id"]: c for path in CLASSES for c in map(json.loads, path.read_text().splitlines())}
    cause = {r["id"]: r["cause"] for r in rows}
    wrong = [i for i in first if first[i][:1] != [cause[i]]]
    if set(wrong) != set(classes):
        raise SystemExit(f"classes file and first-scoring misses differ: {sorted(set(wrong) ^ set(classes))}")
    table: dict[int, Counter] = defaultdict(Counter)
    for i in wrong:
        table[classes[i]["round"]][classes[i]["class"]] += 1
    kinds = ("cue-present", "wrong-readable", "ambiguous", "wrong-ambiguous", "no-gpu-message")
    print(f"first-scoring misses, rounds {SPAN} ({len(first)} logs, {len(wrong)} missed):")
    print("round " + " ".join(f"{k:>15}" for k in kinds))
    for number in sorted(table):
        print(f"{number:5d} " + " ".join(f"{table[number][k]:15d}" for k in kinds))
    total = Counter(classes[i]["class"] for i in wrong)
    print("all   " + " ".join(f"{total[k]:15d}" for k in kinds))
    readable = total["cue-present"] + total["wrong-readable"]
    hits = len(first) - len(wrong)
    print(f"ceiling if every readable miss were read: {(hits + readable) / len(first):.2f} "
          f"({hits} + {readable} of {len(first)}); the rest need what the log does not say")


def tokens(text: str) -> set[str]:
    """Words (digits folded) and adjacent word pairs, each once."""
    words = re.findall(r"[a-z_][a-z0-9_+]*", re.sub(r"\d+", "0", text.lower()))[:4000]
    return set(words) | {a + " " + b for a, b in zip(words, words[1:])}


class NaiveBayes:
    """Multinomial naive Bayes over the token sets, Laplace smoothing, class priors from the training rows."""

    def __init__(self, docs: list[tuple[set[str], str]]) -> None:
        self.counts: dict[str, Counter] = defaultdict(Counter)
        self.docs = Counter(label for _, label in docs)
        for toks, label in docs:
            self.counts[label].update(toks)
        self.vocab = {t for c in self.counts.values() for t in c}
        self.totals = {label: sum(c.values()) for label, c in self.counts.items()}

    def posterior(self, toks: set[str]) -> list[tuple[str, float]]:
        n, v = sum(self.docs.values()), len(self.vocab) + 1
        logp = {label: math.log(self.docs[label] / n) + sum(
            math.log((self.counts[label][t] + 1) / (self.totals[label] + v)) for t in toks if t in self.vocab)
            for label in self.counts}
        top = max(logp.values())
        z = sum(math.exp(x - top) for x in logp.values())
        return sorted(((label, math.exp(x - top) / z) for label, x in logp.items()), key=lambda kv: -kv[1])


def loro(rows: list[dict], texts: dict[str, str], first: dict[str, list[str]]) -> None:
    toks = {r["id"]: tokens(texts[r["id"]]) for r in rows}
    rounds = sorted({r["round"] for r in rows})
    alone, fallback = Counter(), {t: Counter() for t in THRESHOLDS}
    lexicon = Counter()
    print("leave-one-round-out naive Bayes (fitted on the other rounds; weights never committed):")
    for number in rounds:
        test = [r for r in rows if r["round"] == number]
        model = NaiveBayes([(toks[r["id"]], r["cause"]) for r in rows if r["round"] != number])
        post = {r["id"]: model.posterior(toks[r["id"]]) for r in test}
        hit = sum(post[r["id"]][0][0] == r["cause"] for r in test)
        alone.update(hits=hit, logs=len(test))
        line = f"  round {number:2d}: alone {hit}/{len(test)} = {hit / len(test):.2f}"
        if number in FIRST_READERS:
            empty = [r for r in test if not first[r["id"]]]
            for t in THRESHOLDS:
                named = [r for r in empty if post[r["id"]][0][1] >= t]
                right = sum(post[r["id"]][0][0] == r["cause"] for r in named)
                fallback[t].update(right=right, wrong=len(named) - right, empty=len(empty))
                line += f"; fallback p>={t}: +{right} right, {len(named) - right} wrong of {len(empty)} unnamed"
            cues = [(r, read_cues(texts[r["id"]].splitlines()).cause) for r in empty]
            right = sum(c == r["cause"] for r, c in cues)
            lexicon.update(right=right, wrong=sum(c is not None for _, c in cues) - right)
        print(line)
    print(f"naive Bayes alone, every round left out in turn: {alone['hits']}/{alone['logs']} = "
          f"{alone['hits'] / alone['logs']:.2f}")
    base = sum(FIRST[n][0] for n in FIRST_READERS)
    logs = sum(FIRST[n][1] for n in FIRST_READERS)
    print(f"rounds {SPAN} first scoring: {base}/{logs} = {base / logs:.2f}")
    for t, c in fallback.items():
        print(f"  + naive Bayes fallback (p >= {t}, left-out round): {base + c['right']}/{logs} = "
              f"{(base + c['right']) / logs:.2f} ({c['right']} right, {c['wrong']} wrong of {c['empty']} unnamed)")
    print(f"  + hand lexicon fallback (not held out): {base + lexicon['right']}/{logs} = "
          f"{(base + lexicon['right']) / logs:.2f} ({lexicon['right']} right, {lexicon['wrong']} wrong)")


def forward(rows: list[dict], texts: dict[str, str]) -> None:
    """Naive Bayes fitted only on the rounds before each round (what the readers had at its first scoring)."""
    toks = {r["id"]: tokens(texts[r["id"]]) for r in rows}
    total = Counter()
    parts = []
    for number in sorted({r["round"] for r in rows})[1:]:
        test = [r for r in rows if r["round"] == number]
        model = NaiveBayes([(toks[r["id"]], r["cause"]) for r in rows if r["round"] < number])
        hit = sum(model.posterior(toks[r["id"]])[0][0] == r["cause"] for r in test)
        total.update(hits=hit, logs=len(test), late_hits=hit * (number >= 8), late=len(test) * (number >= 8))
        parts.append(f"{number}: {hit}/{len(test)}")
    print("naive Bayes alone, fitted on the earlier rounds only: " + ", ".join(parts))
    last = max(r["round"] for r in rows)
    print(f"  rounds 2-{last}: {total['hits']}/{total['logs']} = {total['hits'] / total['logs']:.2f}; rounds 8-{last}: "
          f"{total['late_hits']}/{total['late']} = {total['late_hits'] / total['late']:.2f}")


# A Python traceback; a package listing line: "name==1.2", "name  1.2  build  channel" (pip/conda list), collect_env's
# "[pip3] name==1.2", pip show's "Name:"/"Version:" pair.
_TRACEBACK = re.compile(r'Traceback \(most recent call last\)|^\s*File "', re.M)
_LISTED = re.compile(r"^\s*(?:\[(?:pip3?|conda)\]\s*)?(?:Name:\s*)?[A-Za-z][\w.-]*?(?:\s*==\s*|\s+|\s*\n\s*Version:\s*)"
                     r"v?\d[\w.+-]*", re.M)


def packages(rows: list[dict], texts: dict[str, str], first: dict[str, list[str]]) -> None:
    """How many pastes carry an exception raised inside a package and a listing of the installed packages: the logs
    a reader of the exception's package against the listed builds could read at all."""
    cause = {r["id"]: r["cause"] for r in rows}
    both = [i for i in texts if _TRACEBACK.search(texts[i]) and _LISTED.search(texts[i])]
    missed = [i for i in both if i in first and first[i][:1] != [cause[i]]]
    print(f"pastes with a traceback: {sum(bool(_TRACEBACK.search(t)) for t in texts.values())}, with a package "
          f"listing: {sum(bool(_LISTED.search(t)) for t in texts.values())}, with both: {len(both)} of {len(texts)}; "
          f"first-scoring misses of rounds {SPAN} with both: {len(missed)} of "
          f"{sum(first[i][:1] != [cause[i]] for i in first)} ({', '.join(missed) or 'none'})")


def main() -> int:
    rows = references()
    texts = load(rows)
    first = first_scoring(rows)
    misses(rows, first)
    loro(rows, texts, first)
    forward(rows, texts)
    packages(rows, texts, first)
    return 0


if __name__ == "__main__":
    sys.exit(main())
