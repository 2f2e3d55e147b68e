"""How the two tiers split the suite's time, from the durations kept in .test_durations.

    python tests/tiers.py              each tier's tests and core-seconds, the fast tier's slowest tests
    python tests/tiers.py --over 5     also every fast-tier test that took more than 5 s

.test_durations is written by `make test-all PYTEST_ARGS=--durations-file=.test_durations` (tests/conftest.py):
each test's setup, call and teardown in seconds, on the machine and load it ran at. Redo it after moving tests
between tiers; a test it does not know counts as 0 s.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAST = "not slow and not smoke"


def collected(marks: str) -> list[str]:
    """The ids of the tests `pytest -m MARKS` would run."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-m", marks],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line for line in out.splitlines() if "::" in line]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--durations", type=Path, default=ROOT / ".test_durations")
    p.add_argument("--over", type=float, default=None, help="list every fast-tier test slower than this (s)")
    p.add_argument("--top", type=int, default=15)
    args = p.parse_args(argv)
    seconds: dict[str, float] = json.loads(args.durations.read_text(encoding="utf-8"))
    fast = collected(FAST)
    slow = collected(f"not ({FAST})")
    for name, ids in (("fast (make test)", fast), ("slow and smoke (make test-all adds)", slow)):
        known = [seconds[i] for i in ids if i in seconds]
        print(
            f"{name}: {len(ids)} tests, {sum(known):.0f} core-seconds ({len(ids) - len(known)} not in {args.durations.name})"
        )
    ranked = sorted(((seconds.get(i, 0.0), i) for i in fast), reverse=True)
    cut = [r for r in ranked if args.over is not None and r[0] > args.over] or ranked[: args.top]
    print("\nthe fast tier's slowest:" if args.over is None else f"\nfast-tier tests over {args.over} s:")
    for s, i in cut:
        print(f"  {s:7.1f} s  {i}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
