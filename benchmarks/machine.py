"""What machine and software a benchmark ran on, for headers and results.json.

Every number FlowRank publishes is a ratio against Redis measured in the same
run on the same machine; :func:`describe` records that machine so a reader can
tell which runs are comparable. Nothing here raises: a missing piece of
information is recorded as ``None``.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def _ram_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except ImportError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def _version(module: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:
        return None


def describe() -> dict:
    """A JSON-ready description of this machine and the software under test."""
    from .redis_peer import redis_server_version

    dirty = _git("status", "--porcelain", "--untracked-files=no")
    return {
        "cpu_model": _cpu_model(),
        "cores_logical": os.cpu_count(),
        "cores_usable": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "ram_bytes": _ram_bytes(),
        "os": f"{platform.system()} {platform.release()}",
        "os_pretty": _os_pretty(),
        "python": platform.python_version(),
        "python_impl": platform.python_implementation(),
        "ray": _version("ray"),
        "redis_py": _version("redis"),
        "numpy": _version("numpy"),
        "redis_server": redis_server_version(),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(dirty) if dirty is not None else None,
        "argv": [repo_relative(sys.argv[0]), *sys.argv[1:]] if sys.argv else [],
    }


def repo_relative(path: str) -> str:
    """``path`` relative to the repository root when it lies inside it, else unchanged.

    Committed outputs must not carry the absolute paths of the machine that made them.
    """
    try:
        return Path(path).resolve().relative_to(REPO_ROOT).as_posix()
    except ValueError:
        return path


def _os_pretty() -> str | None:
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return None


def header(params: dict, machine: dict | None = None) -> str:
    """A short multi-line header: machine, versions, then the run parameters."""
    m = machine or describe()
    ram = f"{m['ram_bytes'] / 2**30:.1f} GiB" if m.get("ram_bytes") else "?"
    commit = (m.get("git_commit") or "?")[:12] + (" (dirty)" if m.get("git_dirty") else "")
    lines = [
        "FlowRank benchmarks",
        f"  machine : {m.get('cpu_model')} | {m.get('cores_usable')}/{m.get('cores_logical')} cores | {ram} | "
        f"{m.get('os_pretty') or m.get('os')}",
        f"  software: Python {m.get('python')} | Ray {m.get('ray')} | redis-server {m.get('redis_server')} | "
        f"redis-py {m.get('redis_py')}",
        f"  commit  : {commit}",
    ]
    lines.append("  params  : " + " ".join(f"{k}={v}" for k, v in params.items()))
    return "\n".join(lines)


def run_and_report(args, run, targets: dict) -> int:
    """What a one-scenario benchmark's ``main`` does after parsing: print the machine, the parameters and
    the load average, ``run(args)``, add the load after it, the machine and the targets, print the result
    as JSON and write it to ``args.json`` when given."""
    import json
    from pathlib import Path

    machine = describe()
    print(header({k: v for k, v in vars(args).items() if k != "json"}, machine))
    load_before = os.getloadavg()
    print(f"  load    : {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f} (1/5/15 min, before the run)")
    result = run(args)
    result["load_before"] = load_before
    result["machine"] = machine
    result["load_after"] = os.getloadavg()
    result["targets"] = targets
    print(json.dumps({k: v for k, v in result.items() if k != "machine"}, indent=2, default=str))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2, default=str))
    return 0
