"""One module per verb of the `sweeper` command line; each exposes `run(args) -> int`.

The parser itself (sweeper/cli.py) imports none of them: a verb's module is imported when
the verb runs, so `sweeper --help` never pays for torch, Ray, Optuna or MLflow.
"""
