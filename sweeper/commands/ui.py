"""`sweeper ui [NAME]`: the MLflow UI on the tracking store in use, at the sweep's runs."""

from __future__ import annotations

import argparse

from sweeper.adapters import mlflow_tracking as tracking
from sweeper.serve import serve_until_stopped


def run(args: argparse.Namespace) -> int:
    uri = tracking.resolve_uri(args.tracking_uri)
    tracking.preflight(uri, source=tracking.uri_source(args.tracking_uri))
    if uri.startswith("http"):
        url = tracking.experiment_url(uri, args.name) if args.name else None
        print(f"MLflow UI: {url or uri}")
        if url:
            print(f"as charts: {tracking.charts_url(url)}")
        return 0
    address = f"http://{args.host}:{args.port}"
    proc = tracking.serve_ui(uri, args.host, args.port)
    return serve_until_stopped(proc, f"{address}/health", "mlflow ui", args.port, lambda: banner(uri, args.name, address))


def banner(uri: str, name: str | None, address: str) -> str:
    url = tracking.experiment_url(uri, name, address) if name else None
    charts = f"\nas charts: {tracking.charts_url(url)}" if url else ""
    return f"MLflow UI on {uri}: {url or address}  (Ctrl-C to stop){charts}"
