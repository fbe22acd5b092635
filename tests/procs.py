"""Processes in a session, read from /proc: for tests that check no worker outlives its parent."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import WAIT_SECONDS, wait_until


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


def wait_session_empty(session: int, timeout: float = WAIT_SECONDS) -> list[int]:
    """Wait until a session has no live process; return the pids still alive at the timeout."""
    try:
        wait_until(lambda: not session_members(session), timeout, f"session {session} to empty")
    except AssertionError:
        pass  # the caller asserts on the pids left, which name what outlived its parent
    return session_members(session)


def _pipe_state(pid: int) -> str:
    """``"writing"`` if ``pid`` sleeps in a write to a full pipe (its kernel wait channel), ``"gone"`` once
    it has exited, else ``""``."""
    try:
        return "writing" if "pipe_write" in Path(f"/proc/{pid}/wchan").read_text() else ""
    except OSError:
        return "gone"


def wait_blocked_writing_pipe(pid: int, timeout: float) -> bool:
    """Wait until process ``pid`` sleeps in a write to a full pipe (its kernel wait channel, from /proc);
    return whether it did within ``timeout`` seconds (``False`` at once if it is gone)."""
    try:
        return wait_until(lambda: _pipe_state(pid), timeout, f"{pid} to write to a full pipe") == "writing"
    except AssertionError:
        return False
