"""What docker/cluster.sh asks the running cluster, from the host (this project's venv).

    python docker/cluster_check.py nodes DASHBOARD                 -> the number of ALIVE nodes
    python docker/cluster_check.py report DASHBOARD SWEEP_DIR MLFLOW_URI
        -> the nodes, where each trial ran, the MLflow runs; exit 1 unless every node ran a trial
           and MLflow holds the parent run and one run per trial

Where a trial ran is read twice, independently: Ray's state API (the node of each actor of the
trainable) and the sweep's ledger on the shared volume (each trial's `node_ip`, from the IP Ray
Tune writes into every result; the head is 127.0.0.2, the worker 127.0.0.3). Ray's token comes from
$RAY_AUTH_TOKEN with RAY_AUTH_MODE=token, as for `sweeper submit`.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

TRAINABLE = "ImplicitFunc"  # the actor class Ray Tune runs a function trainable in (tests/test_cluster.py)


def alive_nodes(dashboard: str) -> list:
    from ray.util.state import list_nodes

    return list_nodes(address=dashboard, filters=[("state", "=", "ALIVE")], timeout=10)


def count_nodes(dashboard: str) -> int:
    try:
        return len(alive_nodes(dashboard))
    except Exception:  # the state API is not up yet
        return 0


def report(dashboard: str, sweep_dir: Path, mlflow_uri: str) -> int:
    from mlflow import MlflowClient
    from ray.util.state import list_actors

    nodes = alive_nodes(dashboard)
    role = {n.node_id: ("head" if n.is_head_node else "worker") for n in nodes}
    by_ip = {n.node_ip: role[n.node_id] for n in nodes}
    print(f"nodes: {len(nodes)} alive")
    for n in sorted(nodes, key=lambda n: not n.is_head_node):
        print(f"  {role[n.node_id]:6} {n.node_ip:10} {n.node_id[:12]}  CPU {n.resources_total.get('CPU', 0):g}")

    actors = [a for a in list_actors(address=dashboard, detail=True, limit=10000) if a.class_name == TRAINABLE]
    per_node = Counter(role.get(a.node_id, a.node_id[:12]) for a in actors)
    print("trial actors per node (Ray state API): " + ", ".join(f"{k} {v}" for k, v in sorted(per_node.items())))

    import optuna

    summary = json.loads((sweep_dir / "summary.json").read_text())
    study = optuna.load_study(study_name=summary["name"], storage=f"sqlite:///{sweep_dir / 'optuna.db'}")
    print(f"trials ({sweep_dir}/optuna.db, the sweep's ledger):")
    ran_on = Counter()
    for t in study.trials:
        if "duplicate_of" in t.user_attrs:
            continue
        ip = t.user_attrs.get("node_ip")
        where = by_ip.get(ip, str(ip))  # None: the trial never reported
        ran_on[where] += 1
        last = max(t.intermediate_values, default=None)
        print(f"  t{t.number:04d}  {where:6} ({ip})  {t.state.name}  step {last}  "
              f"acc_3x {t.intermediate_values.get(last, float('nan')):.3f}  {t.params}")
    print("trials per node (ledger): " + ", ".join(f"{k} {v}" for k, v in sorted(ran_on.items())))

    client = MlflowClient(mlflow_uri)
    exp = client.get_experiment_by_name(summary["name"])
    runs = client.search_runs([exp.experiment_id]) if exp else []
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    print(f"mlflow {mlflow_uri}: experiment {summary['name']}: {len(parents)} parent run, "
          f"{len(runs) - len(parents)} trial runs; summary.json: {len(summary['trials'])} trials, "
          f"best {summary['metric']} {summary['best']['score']:.3f}")

    every_node = set(role.values())
    ok = set(ran_on) == every_node and set(per_node) == every_node and len(nodes) >= 2
    ok &= len(parents) == 1 and len(runs) - 1 == len(summary["trials"])
    print("OK: trials ran on every node and MLflow holds every run" if ok else "FAILED: see above")
    return 0 if ok else 1


def main(argv: list[str]) -> int:
    if argv[:1] == ["nodes"] and len(argv) == 2:
        print(count_nodes(argv[1]))
        return 0
    if argv[:1] == ["report"] and len(argv) == 4:
        return report(argv[1], Path(argv[2]), argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
