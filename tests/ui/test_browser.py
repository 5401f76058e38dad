"""The dashboard and the quickstart report in a real browser, headless Chromium.

The dashboard: `streamlit run app.py` on a loopback port. A Streamlit page renders client-side over a
websocket, which Chromium's `--virtual-time-budget` does not wait for (`--dump-dom` returns the loading
skeleton). So the test drives Chromium through the DevTools protocol over `--remote-debugging-pipe` (what
Playwright does, with no extra package): it waits in the page until the verdict, the summary table and the
charts are drawn (or an error box appears), then saves the DOM and a screenshot, the CI artifact
`out/ci/dashboard.png`.

The report: `servesim compare scenarios/quickstart.yaml`, opened as a file at 1,400 px wide. The test reads the
page as drawn: the verdict first, naming the winner the rule picks from summary.json; the latency axes
logarithmic; every variant's curve over a readable share of its axis; no table wider than its container. Its
screenshot is the CI artifact `out/ci/report.png`.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import shutil
import select
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACT = ROOT / "out" / "ci" / "dashboard.png"
REPORT_ARTIFACT = ROOT / "out" / "ci" / "report.png"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]
WINDOW = (1600, 2400)
REPORT_WINDOW = (1400, 2400)  # the width the issue found the table cut off at
MIN_CURVE_SHARE = 0.05  # every curve spans at least this share of its axis (readable, not squashed)
# Upper bounds on waiting (generous for a loaded 2-core CI machine), not assertions about speed.
SERVE_WAIT_S = 60
RENDER_WAIT_S = 120

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is not installed "
                                "(CI installs Debian's chromium package in .ci/run)")

# What the page shows, read from the live DOM: Streamlit's element test ids and plotly's classes.
PAGE_STATE_JS = """JSON.stringify({
  verdict: (document.querySelector('.st-key-verdict') || {}).innerText || '',
  verdict_top: (document.querySelector('.st-key-verdict') || {getBoundingClientRect: () => ({top: -1})})
    .getBoundingClientRect().top,
  table_top: (document.querySelector('[data-testid="stTable"]') || {getBoundingClientRect: () => ({top: -1})})
    .getBoundingClientRect().top,
  tables: document.querySelectorAll('[data-testid="stTable"] table').length,
  table_text: Array.from(document.querySelectorAll('[data-testid="stTable"] th')).map(e => e.innerText).join('|'),
  plots: document.querySelectorAll('.js-plotly-plot .main-svg').length,
  plot_divs: document.querySelectorAll('[data-testid="stPlotlyChart"]').length,
  exceptions: document.querySelectorAll('[data-testid="stException"]').length,
  errors: Array.from(document.querySelectorAll('[data-testid="stAlertContentError"]')).map(e => e.innerText),
  running: document.querySelectorAll('[data-testid="stStatusWidget"]').length,
})"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_serving(url: str, server: subprocess.Popen) -> None:
    """Block on the server's own output until it says it serves (Streamlit prints its URL), then check once."""
    deadline = time.monotonic() + SERVE_WAIT_S
    seen = b""
    while b"URL:" not in seen:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"streamlit did not serve {url} within {SERVE_WAIT_S} s: {seen[-500:]!r}")
        readable, _, _ = select.select([server.stdout], [], [], left)  # wakes on output, not on a timer
        chunk = os.read(server.stdout.fileno(), 1 << 16) if readable else b""
        if readable and not chunk:
            raise RuntimeError(f"streamlit exited with {server.wait()}: {seen[-500:]!r}")
        seen += chunk
    with urllib.request.urlopen(url + "_stcore/health", timeout=SERVE_WAIT_S) as reply:
        assert reply.status == 200


class DevTools:
    """A minimal Chrome DevTools protocol client over --remote-debugging-pipe (fds 3 and 4 of the child)."""

    def __init__(self, user_data_dir: Path, window: tuple[int, int] = WINDOW):
        self.window = window
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def wire_fds() -> None:  # in the child: the protocol reads fd 3 and writes fd 4
            # Move both ends above 4 first: a pipe end may itself be fd 3 or 4, and dup2 onto itself
            # would keep its close-on-exec flag.
            reader, writer = (fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (to_child_r, from_child_w))
            os.dup2(reader, 3)
            os.dup2(writer, 4)

        args = [str(CHROMIUM), *CHROMIUM_FLAGS, "--remote-debugging-pipe", f"--user-data-dir={user_data_dir}",
                f"--window-size={window[0]},{window[1]}", "about:blank"]
        # close_fds=False: subprocess would otherwise close fds 3 and 4 after wire_fds made them
        # (Python's own descriptors are not inheritable, so nothing else leaks).
        self.process = subprocess.Popen(args, preexec_fn=wire_fds, close_fds=False,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_child_r)
        os.close(from_child_w)
        self._buffer = b""
        self._next_id = 0
        self.session: str | None = None

    def call(self, method: str, timeout_s: float = 60, **params) -> dict:
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if self.session is not None:
            message["sessionId"] = self.session
        os.write(self._to_child, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\0" not in self._buffer:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no DevTools reply to {method}")
                chunk = os.read(self._from_child, 1 << 20)
                if not chunk:
                    raise RuntimeError("chromium closed the DevTools pipe")
                self._buffer += chunk
            raw, self._buffer = self._buffer.split(b"\0", 1)
            reply = json.loads(raw)
            if reply.get("id") == self._next_id:
                if "error" in reply and "context was destroyed" in str(reply["error"]) and method == "Runtime.evaluate":
                    return {"exceptionDetails": reply["error"]}
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]

    def open(self, url: str) -> None:
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        self.call("Emulation.setDeviceMetricsOverride", width=self.window[0], height=self.window[1],
                  deviceScaleFactor=1, mobile=False)
        self.call("Page.enable")
        self.call("Page.navigate", url=url)

    def evaluate(self, expression: str):
        return self.call("Runtime.evaluate", expression=expression, returnByValue=True)["result"].get("value")

    def screenshot(self, path: Path, scale: float = 1.0) -> None:
        clip = {"x": 0, "y": 0, "width": self.window[0], "height": self.window[1], "scale": scale}
        data = self.call("Page.captureScreenshot", format="png", clip=clip)["data"]
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_bytes(base64.b64decode(data))
        tmp.replace(path)

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout_s=10)
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_child)
        os.close(self._from_child)


# Resolves (in the page) once the table and three drawn charts in three chart elements are there (a chart's SVG
# layers count more than one each: an element still being drawn must be waited for), or an error box is: checked on
# every DOM change, then after two animation frames so plotly's layout pass is painted before the screenshot.
PAGE_READY_JS = """new Promise(resolve => {
  const state = () => JSON.parse(%s);
  const ready = s => s.exceptions || s.errors.length || (s.tables && s.plots >= 3 && s.plot_divs >= 3);
  const settle = () => requestAnimationFrame(() => requestAnimationFrame(() => resolve(JSON.stringify(state()))));
  if (ready(state())) { settle(); return; }
  const watch = new MutationObserver(() => { if (ready(state())) { watch.disconnect(); settle(); } });
  watch.observe(document, {childList: true, subtree: true, attributes: true});
  setTimeout(() => { watch.disconnect(); resolve(JSON.stringify(state())); }, %d);
})""" % (PAGE_STATE_JS, RENDER_WAIT_S * 1000)


def wait_for_page(browser: DevTools) -> dict:
    """The page state once it is ready (or when RENDER_WAIT_S has passed), waited for inside the page. If the
    navigation replaces the document the script runs in (its context is destroyed), it runs again in the new one."""
    deadline = time.monotonic() + RENDER_WAIT_S
    while True:
        reply = browser.call("Runtime.evaluate", timeout_s=RENDER_WAIT_S + 30, expression=PAGE_READY_JS,
                             awaitPromise=True, returnByValue=True)
        if "exceptionDetails" not in reply:
            value = reply["result"].get("value")
            return json.loads(value) if isinstance(value, str) else {}
        if time.monotonic() > deadline:
            raise RuntimeError(f"the page-ready script failed: {reply['exceptionDetails']}")


@pytest.fixture
def dashboard_url(tmp_path):
    port = free_port()
    env = {**os.environ, "SERVESIM_UPLOAD_DIR": str(tmp_path / "uploads")}
    server = subprocess.Popen(
        [sys.executable, "-m", "streamlit", "run", str(ROOT / "app.py"), "--server.headless", "true",
         "--server.port", str(port), "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    try:
        wait_until_serving(url, server)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def capture(url: str, png: Path, user_data_dir: Path, scale: float = 1.0) -> tuple[dict, str]:
    """Load the page in headless Chromium; returns the page state and the rendered DOM."""
    browser = DevTools(user_data_dir)
    try:
        browser.open(url)
        state = wait_for_page(browser)
        browser.screenshot(png, scale)
        dom = browser.evaluate("document.documentElement.outerHTML")
    finally:
        browser.close()
    return state, dom


def _dashboard_winner() -> str:
    """The winner of the dashboard's default comparison by the verdict's rule, from the summaries alone."""
    from helpers import expected_winners

    from sim.run import simulate
    from sim.views import dashboard as dash
    results = [simulate(sc) for sc in dash.Form().scenario_set().variants.values()]
    return expected_winners({r.name: r.summary for r in results})[0]


def test_the_dashboard_renders_its_table_and_charts_in_chromium(dashboard_url, tmp_path):
    state, dom = capture(dashboard_url, ARTIFACT, tmp_path / "chromium")
    (ARTIFACT.parent / "dashboard.html").write_text(dom)
    assert not state.get("exceptions") and not state.get("errors"), state
    # The page opens with the verdict, above the summary table, naming the winner.
    assert state["verdict"].startswith("Verdict:"), state
    assert f"Winner: {_dashboard_winner()}" in state["verdict"], state["verdict"]
    assert 0 <= state["verdict_top"] < state["table_top"], state
    assert state["tables"] >= 1, state
    assert "throughput incl. drain (req/s)" in state["table_text"] and "TTFT p99 (s)" in state["table_text"]
    assert state["plots"] >= 3 and state["plot_divs"] >= 3, state
    assert 'data-testid="stException"' not in dom
    assert ARTIFACT.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert ARTIFACT.stat().st_size > 20_000  # a blank page compresses to a few kB


# The report as drawn: read from the live DOM and plotly's own layout (gd._fullLayout, gd._fullData).
REPORT_STATE_JS = """JSON.stringify((() => {
  const plots = Array.from(document.querySelectorAll('.js-plotly-plot'));
  const verdict = document.getElementById('verdict');
  const summary = document.getElementById('summary');
  const curves = [];
  for (const gd of plots) {
    for (const t of gd._fullData || []) {
      if (t.visible !== true || !t.x || t.x.length < 2) continue;
      const ax = gd._fullLayout['xaxis' + (t.xaxis || 'x').slice(1)];
      const log = ax.type === 'log';
      const ys = t.y ? Array.from(t.y) : [];  // the points drawn: finite x (positive on a log axis) and y
      const xs = Array.from(t.x).filter((v, i) => Number.isFinite(v) && (!log || v > 0) && Number.isFinite(ys[i]))
        .map(v => log ? Math.log10(v) : v);
      if (xs.length < 2) continue;
      const span = Math.max(...xs) - Math.min(...xs);
      curves.push({plot: gd.id, name: t.name, axis: ax._name, type: ax.type,
                   share: span / Math.abs(ax.range[1] - ax.range[0])});
    }
  }
  const latency = document.getElementById('plot-latency');
  return {
    plots: plots.length, drawn: document.querySelectorAll('.js-plotly-plot .main-svg').length,
    first_section: document.querySelector('body > section').id,
    verdict_text: verdict ? verdict.innerText : '', winner: verdict ? verdict.dataset.winner : null,
    verdict_above_summary: !!(verdict && summary && verdict.getBoundingClientRect().bottom
                              <= summary.getBoundingClientRect().top),
    latency_axes: latency ? ['xaxis', 'xaxis2', 'xaxis3'].map(a => latency._fullLayout[a].type) : [],
    latency_names: latency ? [...new Set(latency._fullData.map(t => t.name))] : [],
    timeseries_names: [...new Set((document.getElementById('plot-timeseries')._fullData || []).map(t => t.name))],
    curves: curves,
    tables: Array.from(document.querySelectorAll('table')).map(t => ({
      caption: (t.querySelector('caption') || {}).innerText || t.className, width: t.scrollWidth,
      container: t.parentElement.clientWidth})),
    page_width: document.documentElement.scrollWidth, viewport: window.innerWidth,
  };
})())"""

REPORT_READY_JS = """new Promise(resolve => {
  const ready = () => document.querySelectorAll('.js-plotly-plot .main-svg').length >= 6;
  const settle = () => requestAnimationFrame(() => requestAnimationFrame(() => resolve(%s)));
  if (ready()) { settle(); return; }
  const watch = new MutationObserver(() => { if (ready()) { watch.disconnect(); settle(); } });
  watch.observe(document, {childList: true, subtree: true});
  setTimeout(() => { watch.disconnect(); resolve(%s); }, %d);
})""" % (REPORT_STATE_JS, REPORT_STATE_JS, RENDER_WAIT_S * 1000)


@pytest.fixture(scope="module")
def quickstart_report(tmp_path_factory):
    """`servesim compare scenarios/quickstart.yaml` (the real one, as `make demo` runs it): its folder."""
    out = tmp_path_factory.mktemp("report") / "quickstart"
    done = subprocess.run([sys.executable, "-m", "sim.views.cli", "compare", "scenarios/quickstart.yaml", "--out",
                           str(out), "-q"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return out


def test_the_quickstart_report_opens_with_the_verdict_and_every_chart_stays_readable(quickstart_report, tmp_path):
    from helpers import expected_winners

    browser = DevTools(tmp_path / "chromium", REPORT_WINDOW)
    try:
        browser.open((quickstart_report / "report.html").as_uri())
        deadline = time.monotonic() + RENDER_WAIT_S
        while True:  # the navigation may replace the document the script started in: run it again there
            reply = browser.call("Runtime.evaluate", timeout_s=RENDER_WAIT_S + 30, expression=REPORT_READY_JS,
                                 awaitPromise=True, returnByValue=True)
            if "exceptionDetails" not in reply or time.monotonic() > deadline:
                break
        assert "exceptionDetails" not in reply, reply
        state = json.loads(reply["result"]["value"])
        browser.screenshot(REPORT_ARTIFACT)
    finally:
        browser.close()
    summaries = json.loads((quickstart_report / "summary.json").read_text())
    # The verdict comes first and names the winner the rule picks from the summaries.
    assert state["first_section"] == "verdict" and state["verdict_above_summary"], state
    winner = expected_winners(summaries)[0]
    assert state["winner"] == winner and f"Winner: {winner}" in state["verdict_text"], state["verdict_text"]
    assert "static batching waits for its longest answer" in state["verdict_text"]
    # Latency: TTFT and E2E span decades on the quickstart, so their axes are logarithmic.
    assert state["latency_axes"][0] == "log" and state["latency_axes"][2] == "log", state["latency_axes"]
    # Every chart shows every variant's curve, each over a readable share of its axis.
    assert set(state["latency_names"]) >= set(summaries) and set(state["timeseries_names"]) == set(summaries)
    measured = {plot: sum(c["plot"] == plot for c in state["curves"]) for plot in ("plot-latency", "plot-timeseries")}
    assert measured == {"plot-latency": 3 * len(summaries), "plot-timeseries": 3 * len(summaries)}, measured
    squashed = [c for c in state["curves"] if c["share"] < MIN_CURVE_SHARE]
    assert state["drawn"] >= 6 and not squashed, squashed
    # No table overflows its container, and the page does not scroll sideways, at 1,400 px.
    wide = [t for t in state["tables"] if t["width"] > t["container"]]
    assert state["tables"] and not wide, wide
    assert state["page_width"] <= state["viewport"], state
    assert REPORT_ARTIFACT.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and REPORT_ARTIFACT.stat().st_size > 20_000


if __name__ == "__main__":  # `python tests/ui/test_browser.py OUT.png [scale]`: a screenshot of a running app
    url = os.environ.get("SERVESIM_URL", "http://127.0.0.1:8501/")
    out = Path(sys.argv[1])
    user_dir = Path(os.environ.get("TMPDIR", "/tmp")) / f"servesim-chromium-{os.getpid()}"
    try:
        print(capture(url, out, user_dir, float(sys.argv[2]) if len(sys.argv) > 2 else 1.0)[0])
    finally:
        shutil.rmtree(user_dir, ignore_errors=True)
