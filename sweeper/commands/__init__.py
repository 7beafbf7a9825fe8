"""One module per verb of the `sweeper` command line; each exposes
`run(options: Options) -> int`, `Options` a frozen dataclass that `cli.py` fills from the parsed arguments.

The parser itself (sweeper/cli.py) imports none of them: a verb's module is imported when
the verb runs, so `sweeper --help` never pays for torch, Ray, Optuna or MLflow.
"""
