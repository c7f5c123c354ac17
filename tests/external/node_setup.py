"""Make ``node`` and a project's ``node_modules`` available, once per machine.

:func:`ensure_node_modules` installs Debian's ``nodejs npm`` when ``node`` is missing
(as root, or with sudo), then runs ``npm ci`` (``npm install`` without a lock file) in
the package directory unless its ``node_modules`` is newer than its ``package.json``.
An exclusive ``flock`` on ``<dir>/.install.lock`` makes parallel test processes wait
for the one that installs instead of installing twice.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from pathlib import Path

INSTALL_TIMEOUT_S = 600


def _as_root(cmd: list[str]) -> list[str]:
    return cmd if os.geteuid() == 0 else ["sudo", "-n", *cmd]


def _ensure_node() -> None:
    if shutil.which("node") and shutil.which("npm"):
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(
        _as_root(["apt-get", "update", "-q"]), check=True, env=env, timeout=INSTALL_TIMEOUT_S
    )
    subprocess.run(
        _as_root(["apt-get", "install", "-y", "-q", "nodejs", "npm"]),
        check=True,
        env=env,
        timeout=INSTALL_TIMEOUT_S,
    )


def ensure_node_modules(package_dir: Path) -> Path:
    """Install ``package_dir``'s dependencies if needed; returns its ``node_modules``.

    Raises ``subprocess.CalledProcessError`` (with npm's output) when an install fails.
    """
    modules = package_dir / "node_modules"
    with open(package_dir / ".install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        _ensure_node()
        manifest = package_dir / "package.json"
        if modules.is_dir() and modules.stat().st_mtime >= manifest.stat().st_mtime:
            return modules
        has_lock = (package_dir / "package-lock.json").exists()
        cmd = ["npm", "ci" if has_lock else "install", "--no-audit", "--no-fund"]
        subprocess.run(
            cmd,
            cwd=package_dir,
            check=True,
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
        )
        modules.touch()
    return modules
