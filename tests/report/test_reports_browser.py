"""Every HTML report opened in a real browser: headless Chromium (Debian's ``chromium`` and
``chromium-driver``, driven by Selenium; nothing downloaded at run time) loads each report from
``file://`` with the network off, and the test checks that

- the page logs no console error (a broken script, a missing resource);
- the headline section is there and visible, in sentences with units;
- every figure is visible and decoded (an ``<img>`` with a natural width);
- clicking a column header sorts the table by that column (numbers by value), again the other way;
- every table sits in its own scrolling box no wider than the page, with its CSV/Parquet linked;

and saves a screenshot of the whole page per report (``$DDLSCOPE_SCREENSHOTS`` or the test's tmp
folder; see :func:`full_page_screenshots`). Skipped where Chromium or its driver is not installed
(``.ci/run`` installs them).
"""

from __future__ import annotations

import math
import os
import shutil
import struct
import warnings
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


MAX_SHOT_PX = 32_000
"""The tallest single screenshot (CSS px at device scale 1; a 1280 x 32000 RGBA image is 164 MB). A
taller page is shot in parts of at most this height, and a warning says so."""
WIDTH_PX = 1280


def _png_size(path: Path) -> tuple[int, int]:
    """``(width, height)`` in pixels from a PNG's IHDR chunk (PNG specification, section 11.2.2)."""
    head = path.read_bytes()[:24]
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        raise ValueError(f"{path}: not a PNG file")
    return struct.unpack(">II", head[16:24])


def _page_height(browser) -> int:
    """The height of the whole document in CSS px (the larger of the root's and the body's scroll height)."""
    return int(browser.execute_script(
        "return Math.max(document.documentElement.scrollHeight, document.body.scrollHeight)"))


def full_page_screenshots(browser, path: Path, max_px: int = MAX_SHOT_PX) -> tuple[int, list[tuple[Path, int, int]]]:
    """Screenshots that together show the whole page, ``WIDTH_PX`` wide.

    The window is made as tall as the page plus the browser's own frame (outer minus inner height:
    a window of height H shows only H - frame px of the page), so one screenshot holds the page. A
    page taller than ``max_px`` is shot in parts, ``path`` with ``.part1``, ``.part2``... before the
    suffix, each ``max_px`` tall (the last one scrolled to the bottom, overlapping the one before),
    and a :class:`UserWarning` names the page height and the parts.

    Returns:
        ``(page_height_px, [(file, top_px, bottom_px), ...])``: the page region each file shows.
    """
    browser.execute_script("window.scrollTo(0, 0)")
    page = _page_height(browser)
    for _ in range(3):  # the layout may grow with the viewport (vh units): until the height settles
        view = min(page, max_px)
        browser.set_window_size(WIDTH_PX, 1000)
        frame = browser.get_window_size()["height"] - int(browser.execute_script("return window.innerHeight"))
        browser.set_window_size(WIDTH_PX, view + frame)
        if _page_height(browser) == page:
            break
        page = _page_height(browser)
    inner = int(browser.execute_script("return window.innerHeight"))
    parts = math.ceil(page / inner)
    shots: list[tuple[Path, int, int]] = []
    for k in range(parts):
        browser.execute_script("window.scrollTo(0, arguments[0])", k * inner)
        top = int(browser.execute_script("return window.scrollY"))
        file = path if parts == 1 else path.with_suffix(f".part{k + 1}{path.suffix}")
        if not browser.save_screenshot(str(file)):
            raise RuntimeError(f"{file}: the browser took no screenshot")
        shots.append((file, top, top + _png_size(file)[1]))
    if parts > 1:
        warnings.warn(f"{path.name}: the page is {page} px tall, over the {max_px} px of one screenshot: shot in "
                      f"{parts} parts ({', '.join(f.name for f, _, _ in shots)})", stacklevel=2)
    browser.execute_script("window.scrollTo(0, 0)")
    browser.set_window_size(WIDTH_PX, 1000)
    return page, shots


def _assert_covers(page: int, shots: list[tuple[Path, int, int]]) -> None:
    """The shots' regions, in order, leave no gap from the page's top to its bottom."""
    reached = 0
    for file, top, bottom in shots:
        assert top <= reached, f"{file.name}: starts at {top} px, the shots before end at {reached} px"
        reached = max(reached, bottom)
    assert reached >= page, f"the screenshots end at {reached} px, the page at {page} px"


def test_full_page_screenshots_cover_a_tall_page(browser, tmp_path):
    rows = 120  # 120 rows of 100 px (border included) = 12000 px; the page has no margin
    page = tmp_path / "tall.html"
    page.write_text("<!doctype html><html><body style='margin:0'>" + "".join(
        f"<div style='height:99px;border-bottom:1px solid #000'>row {i}</div>" for i in range(rows))
        + "</body></html>")
    browser.get(page.as_uri())
    height, shots = full_page_screenshots(browser, tmp_path / "tall.png")
    assert height == rows * 100 and len(shots) == 1
    assert _png_size(shots[0][0]) == (WIDTH_PX, rows * 100)  # the whole page, not the page minus the frame
    _assert_covers(height, shots)
    # over the bound: parts of 5000 px (0-5000, 5000-10000, then 7000-12000 scrolled to the bottom), said so
    with pytest.warns(UserWarning, match="12000 px tall, over the 5000 px of one screenshot: shot in 3 parts"):
        height, shots = full_page_screenshots(browser, tmp_path / "tall.png", max_px=5000)
    assert [(f.name, top, bottom) for f, top, bottom in shots] == [
        ("tall.part1.png", 0, 5000), ("tall.part2.png", 5000, 10000), ("tall.part3.png", 7000, 12000)]
    _assert_covers(height, shots)


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

    page, shots = full_page_screenshots(browser, _screenshot_dir(tmp_path) / f"{name}.png")
    assert all(f.stat().st_size > 10_000 and _png_size(f)[0] == WIDTH_PX for f, _, _ in shots)
    _assert_covers(page, shots)
