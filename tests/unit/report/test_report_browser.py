"""Open the report in a real headless Chromium (Debian's, driven by Playwright; no browser
download): no console errors, the charts rendered, a planted <script> stays text."""

from __future__ import annotations

import os
import shutil

import pytest
from run_factory import PLANTED, make_findings, make_run

from gpudoctor.records.rundir import load_run
from gpudoctor.report.html import write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
IN_CI = os.environ.get("CI") == "true"


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        if IN_CI:
            pytest.fail(".ci/run must install playwright (pip install -e '.[test]')")
        pytest.skip("playwright is not installed: pip install -e '.[test]'")
    if CHROMIUM is None:
        if IN_CI:
            pytest.fail(".ci/run must install Debian's chromium (apt-get install chromium)")
        pytest.skip("no system chromium: apt-get install chromium")
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"],
        )
        yield browser
        browser.close()


def test_report_renders_in_chromium(browser, tmp_path) -> None:
    run = load_run(make_run(tmp_path / "run", planted=PLANTED, ranks=2))
    path = write_report(run, make_findings(PLANTED))
    page = browser.new_page()
    errors: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    requests: list[str] = []
    page.on("request", lambda req: requests.append(req.url))
    page.goto(path.as_uri())
    # Bokeh draws into shadow DOM; Playwright's CSS locators pierce it
    charts = page.locator(".chart")
    chart_count = charts.count()
    assert chart_count == 7  # util, memory, power + steps and memory for each of 2 ranks
    page.wait_for_function("() => document.querySelector('.chart') !== null")
    page.locator(".chart canvas").first.wait_for(timeout=20_000)
    page.wait_for_timeout(500)
    assert errors == []
    assert all(url.startswith("file://") for url in requests), requests  # works offline
    # every chart drew on a non-empty canvas
    for i in range(chart_count):
        sizes = charts.nth(i).locator("canvas").evaluate_all("els => els.map(e => [e.width, e.height])")
        assert any(w > 100 and h > 100 for w, h in sizes), (i, sizes)
    # the planted script did not run and is shown as text
    assert page.evaluate("window.__pwned === undefined")
    assert "</script><script>window.__pwned = 1</script>" in page.inner_text("#command")
    assert page.inner_text("#verdict").startswith("Data-loader bound")
    page.close()
