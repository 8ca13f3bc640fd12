#!/usr/bin/env python3
"""Scrapes a RUNNING Breeze's /metrics in both formats and parses each with the Prometheus
Python client's own parsers: the text format 0.0.4 (no Accept, as most scrapers send) with
`prometheus_client.parser`, OpenMetrics (Prometheus's Accept header) with
`prometheus_client.openmetrics.parser`.

Usage: python metrics_check.py --url http://127.0.0.1:PORT/metrics --token TOKEN
Prints one PASS/FAIL line per format; exits non-zero on failure.
"""

from __future__ import annotations

import argparse
import sys
import urllib.request
from importlib.metadata import version

from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

PROMETHEUS_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)


def scrape(url: str, token: str, accept: str | None) -> tuple[str, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    if accept:
        req.add_header("Accept", accept)
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.headers.get("Content-Type", ""), r.read().decode()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    a = p.parse_args()
    failed = 0
    cases = [
        ("text 0.0.4", None, "text/plain; version=0.0.4", parse_text),
        ("openmetrics", PROMETHEUS_ACCEPT, "application/openmetrics-text", parse_openmetrics),
    ]
    for name, accept, want_type, parse in cases:
        try:
            ctype, body = scrape(a.url, a.token, accept)
            if not ctype.startswith(want_type):
                raise ValueError(f"Content-Type {ctype!r}, want {want_type}")
            families = list(parse(body))
            names = {f.name for f in families}
            if not any(n.startswith("breeze_mcp_tool_calls") for n in names):
                raise ValueError(f"no breeze_mcp_tool_calls family among {sorted(names)[:10]}")
            samples = sum(len(f.samples) for f in families)
            print(f"PASS metrics {name} (prometheus_client {version('prometheus-client')}): "
                  f"{len(families)} families, {samples} samples")
        except Exception as e:  # noqa: BLE001 - every failure is reported
            failed += 1
            print(f"FAIL metrics {name}: {type(e).__name__}: {e}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
