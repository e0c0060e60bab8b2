"""``allgpu migrate SCRIPT...``: move TensorFlow ``tf.distribute`` / ``tf.keras`` scripts to allgpu + Keras 3 on PyTorch.

Prints a unified diff per script and a note per change, fix and thing not converted (with the line and why);
``--write`` applies the result (atomically). Exit code: 0 everything converted, 1 something was not converted or
``allgpu lint`` finds an error in the result or a file among several could not be read (the others are
migrated), 2 usage error (the file, or every file, missing or unparsable: nothing migrated).
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class MigrateConfig:
    paths: tuple[str, ...]
    write: bool
    diff: bool


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "migrate",
        help="rewrite a tf.distribute / tf.keras script or notebook for allgpu and Keras 3 on PyTorch (a diff)",
        description="Rewrite what has a direct equivalent (tf.distribute strategies and cluster resolvers, tf.keras, "
                    "tf.train checkpoints, the tf.GradientTape step, imports); list everything else with its line "
                    "and why. Prints a unified diff; --write applies it. See docs/migrate.md.")
    p.add_argument("paths", nargs="+", metavar="PATH",
                   help="Python scripts or Jupyter notebooks (.ipynb), or folders (their .py and .ipynb files, "
                        "recursively)")
    p.add_argument("--write", action="store_true", help="replace each script with its migrated version (atomic)")
    p.add_argument("--no-diff", action="store_true", help="print only the notes, not the diff")
    return p


def _scripts(paths: list[str]) -> tuple[str, ...]:
    """Each path as given; a folder becomes its ``.py`` and ``.ipynb`` files, recursively, sorted (hidden folders,
    such as ``.ipynb_checkpoints``, skipped)."""
    out: list[str] = []
    for path in paths:
        folder = Path(path)
        if folder.is_dir():
            out += sorted(str(p) for p in folder.rglob("*") if p.suffix in (".py", ".ipynb") and p.is_file()
                          and not any(part.startswith(".") for part in p.relative_to(folder).parts))
        else:
            out.append(path)
    return tuple(out)


def run(args: argparse.Namespace) -> int:
    from allgpu.errors import MigrateInputError
    from allgpu.migrate import migrate_file

    cfg = MigrateConfig(_scripts(args.paths), args.write, not args.no_diff)
    if not cfg.paths:
        print(f"allgpu migrate: no .py or .ipynb file under {', '.join(map(repr, args.paths))}: nothing to migrate",
              file=sys.stderr)
    complete, failed = True, 0
    for path in cfg.paths:
        try:
            migration = migrate_file(path, write=cfg.write)
        except MigrateInputError as exc:
            if len(cfg.paths) == 1:
                raise  # the one script cannot be read: a usage error (exit 2, from main); nothing ran
            print(f"allgpu migrate: {type(exc).__name__}: {exc}; the other files go on", file=sys.stderr)
            failed += 1
            continue
        if cfg.diff:
            sys.stdout.write(migration.diff())
        sys.stderr.write(migration.report(written=cfg.write and migration.changed))
        if cfg.write and migration.changed:
            print(f"{path}: written", file=sys.stderr)
        complete = complete and migration.complete
    if failed:
        print(f"allgpu migrate: {failed} of {len(cfg.paths)} file(s) could not be migrated (their lines above)",
              file=sys.stderr)
        return 2 if failed == len(cfg.paths) else 1
    return 0 if complete else 1
