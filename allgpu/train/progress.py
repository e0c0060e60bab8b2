"""Progress display and callbacks for ``fit``: a rich progress bar on replica 0 only."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Column
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn


class Callback:
    """Base for ``fit`` callbacks (Keras's ``tf.keras.callbacks.Callback``). Runs on every replica;
    check ``strategy.is_chief`` for work that only replica 0 should do."""

    def on_train_begin(self, logs: dict) -> None: ...
    def on_epoch_begin(self, epoch: int, logs: dict) -> None: ...
    def on_train_batch_end(self, step: int, logs: dict) -> None: ...
    def on_epoch_end(self, epoch: int, logs: dict) -> None: ...
    def on_train_end(self, logs: dict) -> None: ...


class EpochProgress:
    """One line per epoch (a bar while it runs), shown by replica 0 when ``enabled``; silent elsewhere."""

    def __init__(self, enabled: bool, epochs: int, steps: int | None):
        self.enabled = enabled
        self.epochs = epochs
        self.steps = steps
        # In a Jupyter kernel, plain text lines: rich's Jupyter display needs ipywidgets (without it the epochs
        # showed as empty displays under an "install ipywidgets" warning), and a replica allgpu.launch forked from
        # the kernel cannot send displays at all (ipykernel drops them); terminal control codes would show as text.
        jupyter = "ipykernel" in sys.modules
        self.console = Console(stderr=True, **({"force_jupyter": False, "force_terminal": False} if jupyter else {}))
        self._progress: Progress | None = None
        self._task = None

    def start_epoch(self, epoch: int) -> None:
        if not self.enabled:
            return
        self._progress = Progress(
            TextColumn(f"epoch {epoch + 1}/{self.epochs}", table_column=Column(no_wrap=True)),
            BarColumn(bar_width=10), MofNCompleteColumn(table_column=Column(no_wrap=True)),
            # The metrics wrap rather than squeeze the step count and time into "16…" on an 80-column log.
            TextColumn("{task.fields[info]}", table_column=Column(overflow="fold")),
            console=self.console, transient=False,
        )
        self._progress.start()
        self._task = self._progress.add_task("train", total=self.steps, info="")

    def advance(self, info: str = "") -> None:
        if self._progress is not None:
            self._progress.update(self._task, advance=1, info=info)

    def end_epoch(self, summary: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, info=summary)
            self._progress.stop()
            self._progress = None
