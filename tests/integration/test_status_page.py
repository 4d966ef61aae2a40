"""The status page in a real browser (headless Debian chromium) against the demo: it loads
with nothing from elsewhere, shows every model of the demo, and its charts move under load.
The screenshot is kept as an artifact (`test-artifacts/status-page.png`, or under
$INFERD_TEST_ARTIFACTS)."""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.chromium import Chromium
from tests.integration.rollouts import act, serve, status
from tests.integration.server import RunningServer, start_server
from tests.models import lookup_model, write_config
from tests.text_corpus import sentences

ARTIFACTS = Path(
    os.environ.get("INFERD_TEST_ARTIFACTS", Path(__file__).parents[2] / "test-artifacts")
)


@pytest.fixture(scope="module")
def demo_server(
    demo_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningServer, list[str]]]:
    log = tmp_path_factory.mktemp("status-logs") / "server.log"
    running = start_server(demo_repo, log)
    models = sorted(p.name for p in demo_repo.iterdir() if (p / "config.yaml").is_file())
    yield running, models
    assert running.stop() == 0, running.log()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Chromium]:
    chromium = Chromium(tmp_path / "profile")
    yield chromium
    chromium.close()


def charts(browser: Chromium, model: str) -> dict[str, Any]:
    """Each chart of a model's card: its last value and its lines' points."""
    return browser.evaluate(
        f"""(() => {{
        const card = document.querySelector('[data-model="{model}"]');
        if (!card) return null;
        const out = {{}};
        for (const plot of card.querySelectorAll('svg[data-series]')) {{
            out[plot.dataset.series] = {{
                last: Number(plot.dataset.last),
                points: [...plot.querySelectorAll('polyline')].map(p => p.getAttribute('points')),
            }};
        }}
        return out;
    }})()"""
    )


def load(url: str, seconds: float) -> None:
    texts = sentences(200)
    stop = time.monotonic() + seconds

    def client(offset: int) -> None:
        with httpx.Client(base_url=url, timeout=30) as c:
            i = offset
            while time.monotonic() < stop:
                c.post(
                    "/embed", json={"model": "minilm", "texts": [texts[i % len(texts)]]}
                ).raise_for_status()
                c.post("/predict", json={"texts": [texts[(i * 7) % len(texts)]]}).raise_for_status()
                i += 1

    threads = [threading.Thread(target=client, args=(n * 50,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def test_the_status_page_shows_every_model_and_its_charts_move_under_load(
    demo_server: tuple[RunningServer, list[str]], browser: Chromium
) -> None:
    server, models = demo_server
    page = httpx.get(server.url + "/", timeout=10)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    # nothing loaded from elsewhere: its one script is a file of this server, and the policy
    # runs no other script (none inline)
    assert re.findall(r"<script[^>]*>", page.text) == ['<script src="/status.js">']
    assert "<link" not in page.text
    policy = dict(
        part.strip().split(" ", 1) for part in page.headers["content-security-policy"].split(";")
    )
    assert policy["default-src"] == "'none'" and policy["script-src"] == "'self'"
    assert "unsafe-inline" not in policy["script-src"]
    script = httpx.get(server.url + "/status.js", timeout=10)
    assert script.status_code == 200 and script.headers["content-type"].startswith(
        "text/javascript"
    )

    browser.open(server.url + "/")
    deadline = time.monotonic() + 20
    while True:
        shown = browser.evaluate(
            "[...document.querySelectorAll('[data-model]')].map(e => e.dataset.model).sort()"
        )
        if shown == models:
            break
        assert time.monotonic() < deadline, f"the page shows {shown}, the demo has {models}"
        time.sleep(0.2)
    assert browser.evaluate("document.getElementById('ready').textContent") == "yes"
    before = charts(browser, "minilm")
    assert before["rps"]["last"] == 0

    worker = threading.Thread(target=load, args=(server.url, 8.0))
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while True:
            during = charts(browser, "minilm")
            predicted = charts(browser, "sentiment")
            moved = (
                during["rps"]["last"] > 0
                and predicted["rps"]["last"] > 0
                and during["rps"]["points"] != before["rps"]["points"]
                and during["latency"]["points"][1]  # p99 has points
                and during["batch"]["last"] > 0  # batches ran between two polls
            )
            if moved:
                break
            assert time.monotonic() < deadline, (during, predicted)
            time.sleep(0.5)
    finally:
        worker.join()
    assert browser.evaluate("document.getElementById('error').textContent") == ""
    fetched = browser.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
    assert fetched and all(name.startswith(server.url + "/") for name in fetched), fetched
    shot = browser.screenshot(ARTIFACTS / "status-page.png")
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 10_000


def test_a_failed_rollout_shows_its_reason_and_a_running_one_its_split(
    tmp_path: Path, browser: Chromium
) -> None:
    """A rollout whose state file could not be read has a status and a reason, no share:
    the page says so (no NaN); a running one shows its stable, baseline and candidate."""
    root = tmp_path / "repo"
    for name in ("broken", "rolling"):
        lookup_model(root / name / "1" / "model.onnx", rows=16)
        write_config(root / name, {"rollout": {"steps": [10, 100], "analysis_window_s": 3600}})
    folder = root / ".inferd" / "rollouts"
    folder.mkdir(parents=True)
    (folder / "broken.json").write_text("[]")
    server = serve(root, tmp_path / "server.log")
    try:
        lookup_model(root / "rolling" / "2" / "model.onnx", rows=16)
        assert act(server, "rolling", "start", to=2).status_code == 200
        browser.open(server.url + "/")
        read = """(() => {
            const out = {};
            for (const card of document.querySelectorAll('[data-model]')) {
                const split = card.querySelector('.split');
                out[card.dataset.model] = {hidden: split.hidden, text: split.textContent,
                    widths: [...split.children].map(c => c.style.width)};
            }
            return out;
        })()"""
        deadline = time.monotonic() + 20
        while True:
            shown = browser.evaluate(read)
            if set(shown) == {"broken", "rolling"} and not shown["broken"]["hidden"]:
                break
            assert time.monotonic() < deadline, shown
            time.sleep(0.2)
        broken, rolling = shown["broken"], shown["rolling"]
        assert "NaN" not in broken["text"] and "undefined" not in broken["text"], broken
        assert broken["text"].startswith(
            "rollout failed: rollout state .inferd/rollouts/broken.json"
        )
        assert "NaN" not in rolling["text"], rolling
        assert rolling["text"] == "v1 80%v1 baseline 10%v2 10%", rolling
        assert rolling["widths"] == ["80%", "10%", "10%"]
        assert browser.evaluate("document.getElementById('error').textContent") == ""
        browser.screenshot(ARTIFACTS / "status-page-rollouts.png")
        # the baseline takes as many requests as the candidate, and is what it is judged against
        with httpx.Client(base_url=server.url, timeout=30) as http:
            for i in range(300):
                answer = http.post(
                    "/v2/models/rolling/infer",
                    json={
                        "inputs": [
                            {"name": "idx", "datatype": "INT64", "shape": [1, 1], "data": [1]}
                        ]
                    },
                    headers={"X-Inferd-Route-Key": f"user-{i}"},
                )
                assert answer.status_code == 200, answer.text
        window = status(server, "rolling")["window"]
        assert window["judged_against"] == "baseline"
        counts = [window[arm]["requests"] for arm in ("stable", "baseline", "candidate")]
        assert sum(counts) == 300 and all(10 <= n <= 60 for n in counts[1:]), counts
    finally:
        assert server.stop() == 0, server.log()


def test_a_phones_width_fits_the_page_and_no_label_overlaps_another(tmp_path: Path) -> None:
    """At 500 pixels wide (Chromium's narrowest window): nothing wider than the screen, no
    chart's name under its value, no split's label spilling out of its part (a 10% canary's
    included)."""
    root = tmp_path / "repo"
    lookup_model(root / "rolling" / "1" / "model.onnx", rows=16)
    write_config(root / "rolling", {"rollout": {"steps": [10, 100], "analysis_window_s": 3600}})
    server = serve(root, tmp_path / "server.log")
    narrow = Chromium(tmp_path / "narrow", width=500, height=900)
    try:
        lookup_model(root / "rolling" / "2" / "model.onnx", rows=16)
        assert act(server, "rolling", "start", to=2).status_code == 200
        narrow.open(server.url + "/")
        measure = """(() => {
            const box = e => e.getBoundingClientRect();
            const overlaps = (a, b) => !(a.right <= b.left || b.right <= a.left ||
                                        a.bottom <= b.top || b.bottom <= a.top);
            const charts = [...document.querySelectorAll('.chart')].map(c => {
                const name = c.querySelector('.name'), value = c.querySelector('.value');
                return name && value && overlaps(box(name), box(value));
            });
            const spilled = [...document.querySelectorAll('.split div')]
                .filter(d => d.scrollWidth > d.clientWidth + 1 && !d.textContent.includes('...')
                        && getComputedStyle(d).textOverflow !== 'ellipsis').length;
            return {wide: document.documentElement.scrollWidth, screen: window.innerWidth,
                    charts: charts.length, overlapping: charts.filter(Boolean).length,
                    spilled, split: (document.querySelector('[data-model="rolling"] .split')
                                     || {}).textContent};
        })()"""
        deadline = time.monotonic() + 20
        while True:
            shown = narrow.evaluate(measure)
            if shown["charts"] and shown["split"]:
                break
            assert time.monotonic() < deadline, shown
            time.sleep(0.2)
        assert shown["wide"] <= shown["screen"], shown
        assert shown["overlapping"] == 0 and shown["spilled"] == 0, shown
        narrow.screenshot(ARTIFACTS / "status-page-narrow.png")
    finally:
        narrow.close()
        assert server.stop() == 0, server.log()


def test_the_first_paint_shows_models_and_a_rollouts_step_and_reason_without_scripts(
    tmp_path: Path, browser: Chromium
) -> None:
    """The page as the server writes it, scripts off: every model with its versions, a
    running rollout's split, step and last decision with its reason, and a rolled-back
    version; a model's reason is text, never markup."""
    root = tmp_path / "repo"
    for name in ("rolling", "withdrawn", "plain"):
        lookup_model(root / name / "1" / "model.onnx", rows=16)
        write_config(root / name, {"rollout": {"steps": [10, 50, 100], "analysis_window_s": 3600}})
    server = serve(root, tmp_path / "server.log")
    try:
        for name in ("rolling", "withdrawn"):
            lookup_model(root / name / "2" / "model.onnx", rows=16)
            assert act(server, name, "start", to=2).status_code == 200
        rolled = act(server, "withdrawn", "rollback")
        assert rolled.status_code == 200, rolled.text
        page = httpx.get(server.url + "/", timeout=10)
        assert re.findall(r"<script[^>]*>", page.text) == ['<script src="/status.js">']
        for path in ("/", "/status.js"):  # what a monitor's HEAD gets: the headers alone
            head = httpx.head(server.url + path, timeout=10)
            assert head.status_code == 200 and head.content == b"", (path, head.status_code)
        policy = dict(
            part.strip().split(" ", 1)
            for part in page.headers["content-security-policy"].split(";")
        )
        assert policy["script-src"] == "'self'"  # no inline script: the status is markup

        browser.run_no_scripts()
        browser.open(server.url + "/")
        read = """(() => {
            const text = sel => (document.querySelector(sel) || {}).textContent;
            const out = {updated: text('#updated'), ready: text('#ready'), models: {}};
            for (const card of document.querySelectorAll('[data-model]')) {
                const one = s => card.querySelector(s);
                out.models[card.dataset.model] = {
                    versions: [...card.querySelectorAll('.badge')].map(b => b.textContent),
                    split: one('.split').hidden ? null : one('.split').textContent,
                    step: one('.rollout .step') && one('.rollout .step').textContent,
                    decision: one('.rollout .decision') && one('.rollout .decision').textContent,
                    withdrawn: one('.rollout .withdrawn') && one('.rollout .withdrawn').textContent,
                    charts: card.querySelectorAll('svg[data-series]').length,
                };
            }
            return out;
        })()"""
        shown = browser.evaluate(read)
        # no script ran: the time is the server's, and /v1/status was never fetched
        assert shown["updated"].endswith(" UTC"), shown
        fetched = browser.evaluate("performance.getEntriesByType('resource').map(e => e.name)")
        assert not any(name.endswith("/v1/status") for name in fetched), fetched
        assert shown["ready"] == "yes"
        models = shown["models"]
        assert set(models) == {"rolling", "withdrawn", "plain"}, models
        # each version in memory shows what its load added to the process
        badges = [b for m in models.values() for b in m["versions"] if " READY" in b]
        assert badges and all(re.search(r" READY \d+(\.\d)? MB$", b) for b in badges), badges
        for model in models.values():
            model["versions"] = [re.sub(r" [\d.]+ MB$", "", b) for b in model["versions"]]
        assert models["plain"]["versions"] == ["v1 READY"]
        assert models["plain"]["split"] is None and models["plain"]["step"] is None
        rolling = models["rolling"]
        assert rolling["versions"] == ["v1 READY", "v2 READY"]
        assert rolling["split"] == "v1 80%v1 baseline 10%v2 10%", rolling
        assert rolling["step"] == "step 1 of 3"
        assert rolling["decision"] == (
            "last decision: start: version 2 loaded, given the first step's share"
        )
        assert rolling["charts"] == 6
        withdrawn = models["withdrawn"]
        assert withdrawn["split"] is None
        assert withdrawn["step"] == "rollout of v2 rolled back"
        assert withdrawn["decision"] == "last decision: rollback: rolled back by the admin"
        assert withdrawn["withdrawn"] == "withdrawn: v2"
        browser.screenshot(ARTIFACTS / "status-page-first-paint.png")
    finally:
        assert server.stop() == 0, server.log()
