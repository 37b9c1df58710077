"""Prometheus's own rule engine for the tests: ``promtool`` from Debian's ``prometheus`` package, unpacked, never
installed.

No PyPI or npm package carries promtool, and only PyPI, npm and Debian's archive are reachable from the machines
this project is tested on; Debian 12 ships ``/usr/bin/promtool`` (a Go binary linked to libc only) in ``prometheus``.
``make test`` runs ``python tools/promtool.py install``: ``apt-get download`` of exactly :data:`DEB_VERSION` (after
one ``apt-get update`` when the local lists do not have it) and ``dpkg-deb -x`` into :data:`DIR` (git-ignored); no
service, no dependencies. tests/promtool.py runs ``promtool test rules`` over the rendered rule groups.

A Debian point release can replace the pinned version in the archive: the install then fails and says so; move
:data:`DEB_VERSION` to the archive's current ``prometheus`` (``apt-cache policy prometheus``) in a commit of its own.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEB_VERSION = "2.42.0+ds-5+deb12u1"
"""Debian 12 (bookworm) ``prometheus``: Prometheus 2.42.0."""
PROMETHEUS_VERSION = DEB_VERSION.split("+")[0]
DIR = ROOT / ".tools" / f"prometheus-{DEB_VERSION}"
PROMTOOL = DIR / "usr" / "bin" / "promtool"


def _download(into: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["apt-get", "download", f"prometheus={DEB_VERSION}"], cwd=into, capture_output=True, text=True, check=False
    )


def install() -> int:
    if PROMTOOL.is_file():
        PROMTOOL.touch()  # dpkg-deb keeps the package's file times: newer than this script for make
        return 0
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        print(
            f"error: promtool comes from Debian's prometheus {DEB_VERSION} package, fetched with apt-get download and "
            "unpacked with dpkg-deb; neither is on PATH (a Debian or Ubuntu machine is needed for make test)",
            file=sys.stderr,
        )
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        result = _download(Path(tmp))
        if result.returncode != 0:
            # A fresh machine has no package lists yet (or an old one): update once and try again.
            subprocess.run(["apt-get", "update", "-qq"], capture_output=True, text=True, check=False)
            result = _download(Path(tmp))
        debs = sorted(Path(tmp).glob("prometheus_*.deb"))
        if result.returncode != 0 or not debs:
            print(
                f"error: could not download Debian's prometheus={DEB_VERSION} (for promtool): "
                f"{(result.stderr or result.stdout).strip()}\n"
                "  Is it still in the archive? `apt-cache policy prometheus` lists the versions apt can fetch; "
                "a Debian point release replaces the old one. Set DEB_VERSION in tools/promtool.py to the new one.",
                file=sys.stderr,
            )
            return 1
        staging = DIR.with_name(DIR.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        subprocess.run(["dpkg-deb", "-x", str(debs[0]), str(staging)], check=True)
        shutil.rmtree(DIR, ignore_errors=True)
        staging.rename(DIR)
    version = subprocess.run([str(PROMTOOL), "--version"], capture_output=True, text=True, check=False)
    if f"version {PROMETHEUS_VERSION}" not in version.stdout + version.stderr:
        print(f"error: {PROMTOOL} does not say version {PROMETHEUS_VERSION}: {version.stdout}", file=sys.stderr)
        return 1
    PROMTOOL.touch()
    print(f"promtool {PROMETHEUS_VERSION} (Debian prometheus {DEB_VERSION}) in {DIR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    if sys.argv[1:] == ["install"]:
        sys.exit(install())
    if sys.argv[1:] == ["--path"]:
        print(PROMTOOL.relative_to(ROOT))
        sys.exit(0)
    print("usage: tools/promtool.py install | --path", file=sys.stderr)
    sys.exit(2)
