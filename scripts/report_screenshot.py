"""Render a traincheck HTML report in a headless browser and save a PNG screenshot.

Proves that the report renders without network access. Needs Chromium (Debian:
``apt-get install -y chromium``); nothing else depends on it.

    python scripts/report_screenshot.py REPORT.html -o report.png
    python scripts/report_screenshot.py VIOLATIONS_DIR -o report.png   # writes the report first
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def find_browser() -> str | None:
    for name in BROWSERS:
        found = shutil.which(name)
        if found:
            return found
    return None


def screenshot(html_file: Path, png: Path, width: int, height: int, timeout: float = 120) -> None:
    browser = find_browser()
    if browser is None:
        raise SystemExit(f"no headless browser found (looked for {', '.join(BROWSERS)}); "
                         "on Debian: apt-get install -y chromium")
    png = png.resolve()
    png.parent.mkdir(parents=True, exist_ok=True)
    if png.exists():
        png.unlink()
    with tempfile.TemporaryDirectory() as profile:
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--no-first-run", "--disable-extensions", "--disable-background-networking",
               f"--user-data-dir={profile}", f"--window-size={width},{height}",
               f"--screenshot={png}", html_file.resolve().as_uri()]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, "HOME": profile})
    if not png.is_file() or png.read_bytes()[:8] != PNG_MAGIC:
        raise SystemExit(f"the browser wrote no screenshot (exit {proc.returncode}):\n"
                         f"{proc.stderr[-2000:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path, help="report HTML file, or a violations directory")
    parser.add_argument("-o", "--output", type=Path, default=Path("report.png"))
    parser.add_argument("--width", type=int, default=1100)
    parser.add_argument("--height", type=int, default=2400)
    args = parser.parse_args(argv)
    html_file = args.source
    if args.source.is_dir():
        from traincheck_agent.report.html import write_report

        html_file = args.output.with_suffix(".html")
        write_report(args.source, html_file)
    screenshot(html_file, args.output, args.width, args.height)
    print(f"{html_file} -> {args.output} ({args.output.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
