"""The reproductions of the seed papers' results: each `python -m experiments.NAME` trains its runs, judges them by
experiments/rules/NAME.py (committed before the runs) and writes assets/NAME.json and its figures."""
