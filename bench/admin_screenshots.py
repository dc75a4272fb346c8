"""The README's pictures of the admin page, taken from the shipped demo pool under real traffic:
a `hedgespec serve` on the demo pool (the served defaults: the time loss, bf16 where native),
a few streaming chat requests of different domains through the official SDK, and headless
Chromium signed in to `/admin` -> docs/images/admin_live.png (the finished request with the
most tokens a round opened: its learner's weights, choices and regret) and
docs/images/admin_overview.png.

    python -m bench.admin_screenshots [--chromium /usr/bin/chromium]

Not a benchmark: it measures nothing, it shows what a user sees.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from openai import OpenAI

from bench.harness.server import ServerProcess
from bench.prompts import DEFAULT_POOL

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "images"
ADMIN_KEY = "screenshot-admin"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
QUESTIONS = [
    "Write a SQL query that counts users per city.",
    "What are the common symptoms of iron deficiency anaemia?",
    "Solve for x: 3x + 7 = 22. Show each step.",
    "Summarise the main causes of the French Revolution in three sentences.",
]


def copy_heavy_prompt() -> str:
    """One code edit whose answer copies its input (bench/data/copy_heavy.jsonl)."""
    first = (ROOT / "bench" / "data" / "copy_heavy.jsonl").read_text().splitlines()[0]
    return str(json.loads(first)["messages"][0]["content"])


def send(client: OpenAI, prompt: str) -> None:
    stream = client.chat.completions.create(
        model="SmolLM2-135M-Instruct", max_tokens=128, stream=True, temperature=0,
        messages=[{"role": "user", "content": prompt}])
    for _ in stream:
        pass


def traffic(base_url: str) -> None:
    client = OpenAI(base_url=f"{base_url}/v1", api_key="unused")
    prompts = [copy_heavy_prompt(), *QUESTIONS]
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda p: send(client, p), prompts))


def tokens_per_round(row: Any) -> float:
    """A live-table row's tokens over its rounds (cells 6 and 5, after id, status, policy, the
    choice strip and the acceptance sparkline): the request speculation served best."""
    cells = row.locator("td")
    try:
        return float(cells.nth(6).inner_text()) / max(1.0, float(cells.nth(5).inner_text()))
    except ValueError:
        return 0.0


def shoot(base_url: str, chromium: Path) -> None:
    from playwright.sync_api import sync_playwright

    OUT.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(chromium), headless=True,
                                     args=CHROMIUM_ARGS)
        page = browser.new_context(viewport={"width": 1440, "height": 900}).new_page()
        page.goto(f"{base_url}/admin")
        page.fill("#admin-key", ADMIN_KEY)
        page.click("#signin-form button[type=submit]")
        page.wait_for_selector("#conn.conn-live")
        traffic(base_url)
        rows = page.locator("#live-table tbody tr[data-status=finished]")
        rows.nth(len(QUESTIONS)).wait_for()  # every request listed as finished
        rows.nth(max(range(rows.count()), key=lambda i: tokens_per_round(rows.nth(i)))).click()
        page.wait_for_selector("#detail:not([hidden])")
        time.sleep(1.0)  # charts drawn, bar transitions done
        page.screenshot(path=str(OUT / "admin_live.png"))
        page.keyboard.press("Escape")
        page.click("button[data-tab=overview]")
        time.sleep(2.0)
        page.screenshot(path=str(OUT / "admin_overview.png"))
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", type=Path, default=Path("/usr/bin/chromium"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        server = ServerProcess.start(DEFAULT_POOL, Path(work), "--admin-key", ADMIN_KEY,
                                     "--loss", "time", timeout_s=300)
        try:
            shoot(server.base_url, args.chromium)
        finally:
            server.stop()
    print(f"wrote {OUT / 'admin_live.png'} and {OUT / 'admin_overview.png'}")


if __name__ == "__main__":
    main()
