"""Helpers for the ps-train tests: finding processes a run may have left behind."""

from __future__ import annotations

from pathlib import Path


def live_processes_mentioning(text: str) -> list[int]:
    """PIDs of live processes whose command line contains ``text`` (zombies excluded)."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if text in cmdline and state != "Z":
            found.append(int(proc.name))
    return found
