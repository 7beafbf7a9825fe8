"""Regenerate docs/mlflow_compare.png and docs/mlflow_trials.png: a real small sweep in MLflow's UI,
as a researcher looks at one: acc_3x against the searched parameters across all trials (parallel
coordinates), and the trials' table that `sweeper ui NAME` opens (the sweep's saved view).

    .venv/bin/python docs/screenshots.py                       # a fresh sweep, then the screenshot
    .venv/bin/python docs/screenshots.py --tracking-uri http://127.0.0.1:5000 --experiment NAME
                                                               # the screenshot of a sweep already logged there

    a throwaway `mlflow server` on 127.0.0.1 (SQLite, served artifacts)
    ->  `sweeper launch` of search_spaces/smoke.yaml, widened (--samples trials of up to --steps steps)
    ->  headless Chromium (Debian's chromium + chromedriver, driven by selenium as tests/test_mlflow_ui.py
        does) on MLflow's compare page of every trial run: the parallel-coordinates plot with the
        searched parameters and the metric  ->  docs/mlflow_compare.png; the address `sweeper ui`
        prints  ->  docs/mlflow_trials.png
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from conftest import start_mlflow_server, stop  # noqa: E402  the tests' real MLflow server
from core.tool_cli import Parser, run_tool  # noqa: E402
from sweeper.cli_types import positive_int  # noqa: E402

OUT = ROOT / "docs" / "mlflow_compare.png"
TABLE_OUT = ROOT / "docs" / "mlflow_trials.png"


def widened_space(path: Path, samples: int, steps: int) -> dict:
    """smoke.yaml with more trials and steps: enough spread in acc_3x to compare, minutes on 2 cores."""
    space = yaml.safe_load((ROOT / "search_spaces" / "smoke.yaml").read_text())
    space.update(name="compare", description="smoke.yaml widened for the README's MLflow screenshot (docs/screenshots.py)")
    space["budget"].update(num_samples=samples, max_steps=steps, eval_every=max(10, steps // 10))
    space["space"]["dat.switch_step"].update(high=steps, step=steps // 6)
    space["scheduler"]["grace_period"] = max(10, steps // 10)
    path.write_text(yaml.safe_dump(space, sort_keys=False))
    return space


def run_sweep(workdir: Path, uri: str, samples: int, steps: int) -> tuple[str, list[str], str]:
    space = widened_space(workdir / "compare.yaml", samples, steps)
    cmd = [sys.executable, "-m", "sweeper.cli", "launch", str(workdir / "compare.yaml"), "--storage",
           str(workdir / "sweeps"), "--tracking-uri", uri, "--progress", "lines"]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=workdir, check=True)
    return space["name"], list(space["space"]), space["metric"]


def browser(size: str = "1400,790"):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (chromium and chromedriver):
        sys.exit("Debian's chromium and chromium-driver are needed: apt-get install chromium chromium-driver")
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--window-size={size}", "--hide-scrollbars"):
        opts.add_argument(flag)
    return webdriver.Chrome(service=Service(chromedriver), options=opts)


def wait_for(driver, texts: list[str], timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        body = driver.find_element("tag name", "body").text
        if all(t in body for t in texts):
            return
        time.sleep(0.5)
    raise SystemExit(f"the page never showed {texts}; it showed: {body[:1500]}")


def screenshot(uri: str, experiment: str, params: list[str], metric: str, out: Path) -> None:
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    trials = [r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("role") == "trial"]
    ids = ",".join(f'"{r.info.run_id}"' for r in trials)
    driver = browser()
    try:
        driver.get(f'{uri}/#/compare-runs?runs=[{ids}]&experiments=["{exp.experiment_id}"]')
        wait_for(driver, ["Parallel Coordinates Plot", metric])
        choose(driver, params, metric)
        time.sleep(2)  # the plot redraws
        driver.save_screenshot(str(out))
    finally:
        driver.quit()
    print(f"{out}: {len(trials)} trials of `{experiment}`, {metric} against {', '.join(params)}")


def table_screenshot(uri: str, experiment: str, params: list[str], out: Path) -> None:
    """The runs table at the address `sweeper ui NAME` prints: best first, the searched parameters as columns."""
    from sweeper.adapters.mlflow_store import experiment_url

    driver = browser("2200,900")  # wide enough that the grid draws the parameter and status columns
    try:
        driver.get(experiment_url(uri, experiment))
        wait_for(driver, ["Training runs", "Sort: acc_3x", params[0]])
        for close in driver.find_elements("css selector", "button[data-component-id='mlflow.assistant.chat_panel.close']"):
            close.click()  # the assistant side panel
        time.sleep(2)
        driver.save_screenshot(str(out))
    finally:
        driver.quit()
    print(f"{out}: the trials' table of `{experiment}`")


def choose(driver, params: list[str], metric: str) -> None:
    """The plot's controls: exactly the searched parameters and the metric (MLflow preselects up
    to three parameters that differ and the first metric, `step`)."""
    from selenium.webdriver.common.keys import Keys

    for close in driver.find_elements("css selector", "button[data-component-id='mlflow.assistant.chat_panel.close']"):
        close.click()  # the assistant side panel
    for mode in driver.find_elements("xpath", "//*[normalize-space(text())='Model training']"):
        mode.click()  # the sidebar's mode: training runs, not GenAI
        break
    driver.find_element("css selector", "button[data-testid='clear-button']").click()
    boxes = driver.find_elements("css selector", "input[role=combobox]")  # Parameters:, Metrics:
    for box, keys in ((boxes[0], params), (boxes[1], [metric])):
        for key in keys:
            box.click()
            box.send_keys(key)
            option = f".du-bois-light-select-item-option[title='{key}']"
            wait = time.time() + 10
            while not driver.find_elements("css selector", option) and time.time() < wait:
                time.sleep(0.2)
            driver.find_element("css selector", option).click()
            box.send_keys(Keys.ESCAPE)  # its list would cover the next control
    chosen = [e.text for e in driver.find_elements("css selector", ".du-bois-light-select-selection-item-content")]
    if chosen != [*params, metric]:
        raise SystemExit(f"the plot's controls hold {chosen}, not {[*params, metric]}")


def main() -> int:
    ap = Parser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=positive_int, default=12, help="trials of the sweep (default 12)")
    ap.add_argument("--steps", type=positive_int, default=120, help="training steps of a trial at most (default 120)")
    ap.add_argument("--tracking-uri", help="an MLflow server that already holds the sweep (no sweep is run)")
    ap.add_argument("--experiment", default="compare", help="its experiment (with --tracking-uri)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"the PNG (default {OUT.relative_to(ROOT)})")
    args = ap.parse_args()
    if args.tracking_uri:
        space = yaml.safe_load((ROOT / "search_spaces" / "smoke.yaml").read_text())
        screenshot(args.tracking_uri, args.experiment, list(space["space"]), space["metric"], args.out)
        table_screenshot(args.tracking_uri, args.experiment, list(space["space"]), TABLE_OUT)
        return 0
    with tempfile.TemporaryDirectory(prefix="screenshots") as tmp:
        workdir = Path(tmp)
        (workdir / "mlflow").mkdir()
        uri, server = start_mlflow_server(workdir / "mlflow", f"sqlite:///{workdir / 'mlflow' / 'mlflow.db'}")
        try:
            name, params, metric = run_sweep(workdir, uri, args.samples, args.steps)
            screenshot(uri, name, params, metric, args.out)
            table_screenshot(uri, name, params, TABLE_OUT)
        finally:
            stop(server)
    return 0


if __name__ == "__main__":
    run_tool(main)
