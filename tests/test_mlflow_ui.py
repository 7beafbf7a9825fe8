"""The MLflow UI in a real headless Chromium: the sweep's parent run, its nested trials, a comparison.

Needs Debian's `chromium` and `chromium-driver` (the README's test command installs them when
it can); never downloads a browser.
"""

import os
import shutil
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

pytestmark = pytest.mark.integration
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
SCREENSHOT = os.environ.get("SWEEPER_UI_SCREENSHOT")  # set to also save the comparison, e.g. docs/mlflow_compare.png


@pytest.fixture
def browser():
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("Debian's chromium and chromium-driver are not installed (make test installs them as root)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", "--window-size=1600,1000"):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    yield driver
    driver.quit()


def wait_for_text(driver, texts, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        body = driver.find_element("tag name", "body").text
        if all(t in body for t in texts):
            return body
        time.sleep(0.5)
    raise AssertionError(f"page never showed {texts}; it showed: {body[:1500]}")


def wait_for_element(driver, css, timeout=60):
    """The first element matching `css` once the page has rendered it (the run table renders after its text)."""
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(expected_conditions.element_to_be_clickable(("css selector", css)))


def test_ui_shows_the_sweep_nested_trials_and_compares_two(smoke_sweep, mlflow_server, browser, tmp_path):
    client = MlflowClient(mlflow_server)
    exp = client.get_experiment_by_name("smoke")
    runs = client.search_runs([exp.experiment_id])
    parent = next(r for r in runs if r.data.tags.get("role") == "sweep")
    children = sorted((r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id),
                      key=lambda r: -r.data.metrics.get("acc_3x", 0))
    assert len(children) == 6

    # the experiment page lists the parent run; expanding it shows its trials
    browser.get(f"{mlflow_server}/#/experiments/{exp.experiment_id}/runs")
    body = wait_for_text(browser, ["smoke", "matching runs"])
    assert children[0].data.tags["trial_id"] not in body  # the trials are folded under their parent
    expander = wait_for_element(browser, "button[data-component-id*='runnamecellrenderer']")
    expander.click()
    wait_for_text(browser, [c.data.tags["trial_id"] for c in children])

    # the compare view of the two best trials
    ids = [c.info.run_id for c in children[:2]]
    browser.get(f'{mlflow_server}/#/compare-runs?runs=["{ids[0]}","{ids[1]}"]&experiments=["{exp.experiment_id}"]')
    body = wait_for_text(browser, [children[0].data.tags["trial_id"], children[1].data.tags["trial_id"], "dat.switch_step"])
    assert "acc_3x" in body
    for close in browser.find_elements("css selector", "button[aria-label='Close']"):  # the assistant side panel
        try:
            close.click()
        except Exception:  # noqa: BLE001 - cosmetic only
            pass
    shot = tmp_path / "compare.png"
    browser.save_screenshot(str(shot))
    assert shot.stat().st_size > 20_000
    if SCREENSHOT:
        Path(SCREENSHOT).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)


def test_sweeper_ui_lands_on_the_trials_best_first(smoke_sweep, mlflow_server, browser):
    from sweeper.adapters.mlflow_store import charts_url, experiment_url

    client = MlflowClient(mlflow_server)
    exp = client.get_experiment_by_name("smoke")
    trials = sorted((r for r in client.search_runs([exp.experiment_id]) if r.data.tags.get("role") == "trial"),
                    key=lambda r: -r.data.metrics["acc_3x"])
    ids = [r.data.tags["trial_id"] for r in trials]

    url = experiment_url(mlflow_server, "smoke")  # what `sweeper ui smoke` prints
    browser.get(url)
    # every trial, unfolded; the searched parameters and each trial's status as columns (the sweep's saved view)
    body = wait_for_text(browser, ["Training runs", "7 matching runs", "Sort: acc_3x", "dat.switch_step", *ids])
    statuses = {r.data.tags["status"] for r in trials}
    assert "viewStateShareKey" in url and all(s in body for s in statuses), (statuses, body[:2000])
    shown = sorted(ids, key=body.index)
    scores = [r.data.metrics["acc_3x"] for r in sorted(trials, key=lambda r: body.index(r.data.tags["trial_id"]))]
    assert scores == sorted(scores, reverse=True), f"trials not best first: {shown} with acc_3x {scores}"

    browser.get(charts_url(url))  # the same trials as charts
    wait_for_text(browser, ["Model metrics", "acc_3x", *ids])
