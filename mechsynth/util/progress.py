"""Progress of a long loop (training, probing every checkpoint), for a person watching."""

from __future__ import annotations

import sys
from typing import Optional


class Progress:
    """A tqdm bar on a terminal; elsewhere (a log file, CI) one plain line per ~5% of training, not a
    carriage return per step."""

    def __init__(self, total: Optional[int], start: int, enabled: bool):
        # total None (a loop of yours of unknown length): a bar without an end; plain lines at doubling steps
        self.total, self.enabled, self.tty = total, enabled, sys.stderr.isatty()
        self.every = max(1, total // 20) if total is not None else 0
        self.next = start + self.every if total is not None else max(1, 2 * start)
        self.bar = None
        if enabled and self.tty:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, initial=start, unit="step", dynamic_ncols=True)

    def update(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def show(self, step: int, **values: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix(**values)
        elif self.enabled and (step >= self.next or step == self.total):
            self.next = step + self.every if self.total is not None else 2 * step
            print(
                f"step {step}{'' if self.total is None else f'/{self.total}'}  "
                + "  ".join(f"{k} {v}" for k, v in values.items()),
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
