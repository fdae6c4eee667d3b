"""Runs headless Chromium on a URL with a throw-away profile and no network chatter; returns
(exit status, stdout). Extra arguments (--screenshot=..., --dump-dom) go before the URL."""
import subprocess
import tempfile


def run_chromium(chromium, url, *args):
    with tempfile.TemporaryDirectory(prefix="xtimer-chromium-") as profile:
        cmd = [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=3000",
            *args,
            url,
        ]
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        return p.returncode, p.stdout
