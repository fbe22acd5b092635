"""Processes in a session, read from /proc: for tests that check no worker outlives its parent."""

from __future__ import annotations

import time
from pathlib import Path


def session_members(session: int) -> list[int]:
    """Pids of live (not zombie) processes in a session, read from /proc."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the command name (which may hold spaces) start at the last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[3]) == session and fields[0] != "Z":
            members.append(int(entry.name))
    return members


def wait_session_empty(session: int, timeout: float) -> list[int]:
    """Wait until a session has no live process; return the pids still alive at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        members = session_members(session)
        if not members or time.monotonic() > deadline:
            return members
        time.sleep(0.05)


def wait_blocked_writing_pipe(pid: int, timeout: float) -> bool:
    """Wait until process ``pid`` sleeps in a write to a full pipe (its kernel wait channel, from /proc);
    return whether it did within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if "pipe_write" in Path(f"/proc/{pid}/wchan").read_text():
                return True
        except OSError:
            return False
        time.sleep(0.02)
    return False
