"""Every HTML report opened in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by Selenium; nothing downloaded at run time) loads each report from
``file://`` with the network off, and the test checks that

- the page logs no console error (a broken script, a missing resource);
- the headline section is there and visible, in sentences with units;
- every figure is visible and decoded (an ``<img>`` with a natural width);
- clicking a column header sorts the table by that column (numbers by value), again the other way;
- every table sits in its own scrolling box no wider than the page, with its CSV/Parquet linked;

and saves a full-page screenshot per report (``$DDLSCOPE_SCREENSHOTS`` or the test's tmp folder).
Skipped where Chromium or its driver is not installed (``.ci/run`` installs them).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

selenium = pytest.importorskip("selenium")
from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER), reason="chromium and chromium-driver not installed")


@pytest.fixture(scope="module")
def browser():
    options = Options()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1000", "--proxy-server=127.0.0.1:9", "--no-first-run"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def reports(tmp_path_factory, shared_data) -> dict[str, Path]:
    """Every kind of report, built on the shared data (and a synthetic RPC log, labelled so)."""
    from typer.testing import CliRunner

    import ddlscope
    from ddlscope.cli.main import app
    from ddlscope.rpc.synthetic import synthetic_rpc_log

    root = tmp_path_factory.mktemp("reports")
    out = {}
    ddlscope.characterize(scenarios=["ethernet-100g", "ps-to-allreduce-nvlink", "gpu-a100"],
                          report_dir=root / "characterize")
    out["characterize"] = root / "characterize"
    ddlscope.trace(shared_data / "hta_traces" / "trace_filter", scenarios=None, report_dir=root / "trace")
    out["trace"] = root / "trace"
    ddlscope.validate("dle", data=shared_data, report_dir=root / "validate")
    out["validate"] = root / "validate"
    # the figures need measured curves: a quick calibration of this CPU (gloo collectives on 2 processes)
    ddlscope.calibrate(quick=True, device="cpu", processes=2, report_dir=root / "calibrate")
    out["calibrate"] = root / "calibrate"
    log = root / "rpc.csv"
    synthetic_rpc_log(8000, seed=0).write_csv(log)
    runner = CliRunner()
    criteo = shared_data / "criteo" / "criteo_sample.txt"
    for name, args in (
        ("rpc_dissect", ["rpc", "dissect", str(log), "-o", str(root / "rpc_dissect")]),
        ("skew", ["rpc", "skew", str(criteo), "-c", "C3", "-o", str(root / "skew")]),
        ("offload", ["rpc", "offload", str(criteo), "-c", "C3", "--workers", "8", "--batch-events", "2",
                     "-o", str(root / "offload")]),
    ):
        res = runner.invoke(app, args)
        assert res.exit_code == 0, res.output
        out[name] = root / name
    return out


def _screenshot_dir(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("DDLSCOPE_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _column(table, col: int) -> list[str]:
    return [row.find_elements(By.TAG_NAME, "td")[col].get_attribute("data-v")
            or row.find_elements(By.TAG_NAME, "td")[col].text
            for row in table.find_elements(By.CSS_SELECTOR, "tbody tr")]


@pytest.mark.parametrize("name", ["characterize", "trace", "rpc_dissect", "skew", "offload", "validate",
                                  "calibrate"])
def test_report_renders_sorts_and_is_self_contained(browser, reports, name, tmp_path):
    index = reports[name] / "index.html"
    html = index.read_text()
    assert "http://" not in html.replace("http://www.w3.org", "") and "https://" not in html  # nothing fetched
    browser.get_log("browser")  # drop what an earlier page logged
    browser.get(index.as_uri())
    errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    assert errors == [], errors

    headline = browser.find_element(By.ID, "headline")
    assert headline.is_displayed()
    sentences = headline.find_elements(By.TAG_NAME, "li")
    assert sentences and all(s.text.strip().endswith((".", ")")) or "%" in s.text for s in sentences)
    assert any(ch.isdigit() for ch in headline.text)

    images = browser.find_elements(By.CSS_SELECTOR, "figure img")
    assert images, "no figure"
    for img in images:
        browser.execute_script("arguments[0].scrollIntoView()", img)
        assert img.is_displayed()
        assert browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", img) > 100

    width = browser.execute_script("return document.documentElement.clientWidth")
    boxes = browser.find_elements(By.CSS_SELECTOR, "div.tablebox")
    assert boxes
    for box in boxes:
        assert box.size["width"] <= width  # the table scrolls inside its box, not the page
        assert box.find_element(By.TAG_NAME, "table").get_attribute("class") == "sortable"
    assert browser.find_elements(By.CSS_SELECTOR, "span.tablefiles a[href$='.csv']")

    # sort the first table with a numeric column that has at least two different values
    sorted_one = False
    for box in boxes:
        table = box.find_element(By.TAG_NAME, "table")
        cells = table.find_elements(By.CSS_SELECTOR, "tbody tr:first-child td")
        for col, cell in enumerate(cells):
            if cell.get_attribute("data-v") in (None, ""):
                continue
            values = [float(v) for v in _column(table, col) if v not in ("",)]
            if len(set(values)) < 2 or len(values) > 200:
                continue
            header = table.find_elements(By.CSS_SELECTOR, "thead th")[col]
            browser.execute_script("arguments[0].scrollIntoView()", header)
            browser.execute_script("arguments[0].click()", header)
            up = [float(v) for v in _column(table, col) if v != ""]
            assert up == sorted(values) and header.get_attribute("aria-sort") == "ascending"
            browser.execute_script("arguments[0].click()", header)
            down = [float(v) for v in _column(table, col) if v != ""]
            assert down == sorted(values, reverse=True) and header.get_attribute("aria-sort") == "descending"
            sorted_one = True
            break
        if sorted_one:
            break
    assert sorted_one, "no sortable numeric column found"
    assert [e for e in browser.get_log("browser") if e["level"] == "SEVERE"] == []

    browser.execute_script("window.scrollTo(0, 0)")
    height = browser.execute_script("return Math.min(document.body.scrollHeight, 6000)")
    browser.set_window_size(1280, height)
    shot = _screenshot_dir(tmp_path) / f"{name}.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
    browser.set_window_size(1280, 1000)
