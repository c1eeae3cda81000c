"""Figures every benchmark reports: percentiles of timings, and the processor they were measured on."""

from __future__ import annotations

import os
import platform
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def summarize(values: Sequence[float], *, digits: int = 2) -> dict[str, float]:
    """p50, p95 (linear interpolation), mean and max of `values` (timings in ms)."""
    return {
        "p50": round(float(np.percentile(values, 50)), digits),
        "p95": round(float(np.percentile(values, 95)), digits),
        "mean": round(float(np.mean(values)), digits),
        "max": round(float(np.max(values)), digits),
    }


def cpu_model() -> str:
    """The processor the figures were measured on (Linux: its model name)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def load_average() -> str:
    """The machine's load average over 1, 5 and 15 minutes: how busy its cores were with other work too."""
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "unknown"
