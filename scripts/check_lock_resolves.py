"""Check that requirements.lock and requirements-dev.lock resolve from the public index alone.

This machine's pip is configured with a local wheel folder and local indexes (they hold the CPU
build of torch). A lock that only resolves with them breaks every install elsewhere, so this
check runs pip's resolver with none of that configuration: no config files, no PIP_* settings
other than the certificate bundle, a fresh HOME, no cache. It uses `pip install --dry-run
--report`, which reads the wheels' metadata files and downloads no wheel, so resolving torch's
CUDA build costs megabytes, not gigabytes.

Each lock is resolved on its own (the dev lock includes the runtime lock with `-r`), so the
runtime lock must hold everything that running needs. It fails (exit 1) when pip cannot resolve a
lock, when a pin resolves to another version, when anything would come from a local file, or
when the resolution adds packages beyond the lock other than torch's CUDA runtime (which a GPU
node gets and this machine's CPU wheel does not).

Usage: python scripts/check_lock_resolves.py [--lock FILE ...]   (default: both locks)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Network settings a user's machine may need to reach the index; everything else is dropped.
PASSED_THROUGH = (
    "PATH",
    "PIP_CERT",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
)
# The public torch wheel depends on CUDA runtime packages that the lock (frozen from the CPU
# build) does not list; pip installs them on a GPU node.
MINIMUM_PIP_MAJOR = 25
CUDA_RUNTIME = re.compile(r"^(nvidia-.*|cuda-.*|triton|setuptools)$")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


LOCKS = (REPO / "requirements.lock", REPO / "requirements-dev.lock")


def read_lock(path: Path) -> dict[str, str]:
    """{normalized name: version} of every pin, those of a `-r FILE` it includes too."""
    pins: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        option, _, included = line.partition(" ")
        if option in ("-r", "--requirement"):
            pins.update(read_lock(path.parent / included.strip()))
            continue
        name, separator, version = line.partition("==")
        if not separator or "+" in version:
            raise SystemExit(
                f"{path}:{number}: {line!r} is not an exact public pin (name==version, "
                "no local label such as +cpu: the public index serves none)"
            )
        pins[normalized(name)] = version.strip()
    return pins


def check_pip() -> None:
    from importlib.metadata import version

    major = int(version("pip").split(".")[0])
    if major < MINIMUM_PIP_MAJOR:
        raise SystemExit(
            f"pip {version('pip')} downloads every wheel in a dry run (gigabytes for torch's CUDA "
            f"build); run scripts/setup.sh, which installs pip>={MINIMUM_PIP_MAJOR}, first"
        )


def resolve(lock: Path, workdir: Path) -> dict:
    environment = {key: os.environ[key] for key in PASSED_THROUGH if key in os.environ}
    environment.update(HOME=str(workdir), PIP_CONFIG_FILE=os.devnull, PYTHONNOUSERSITE="1")
    report = workdir / "report.json"
    command = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        # Metadata through HTTP range requests: an index that serves no separate metadata
        # files would otherwise make pip download every wheel (about 3 GB for torch and CUDA).
        "--use-feature=fast-deps",
        "--ignore-installed",
        "--no-cache-dir",
        "--disable-pip-version-check",
        "--quiet",
        "--report",
        str(report),
        "-r",
        str(lock),
    ]
    completed = subprocess.run(command, env=environment, capture_output=True, text=True)
    if completed.returncode != 0:
        raise SystemExit(
            f"{lock} does not resolve from the public index alone:\n{completed.stderr.strip()}"
        )
    return json.loads(report.read_text())


def problems_in(report: dict, pins: dict[str, str]) -> list[str]:
    problems: list[str] = []
    resolved = {}
    for item in report["install"]:
        name = normalized(item["metadata"]["name"])
        resolved[name] = item["metadata"]["version"]
        url = item.get("download_info", {}).get("url", "")
        if url.startswith("file:"):
            problems.append(f"{name} would come from a local file ({url})")
    for name, version in pins.items():
        if resolved.get(name) != version:
            problems.append(f"{name}=={version} resolved to {resolved.get(name, 'nothing')}")
    extras = sorted(name for name in resolved if name not in pins and not CUDA_RUNTIME.match(name))
    if extras:
        problems.append(f"packages missing from the lock: {', '.join(extras)}")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lock", type=Path, nargs="+", default=list(LOCKS))
    arguments = parser.parse_args()
    check_pip()
    return max(check_lock(lock) for lock in arguments.lock)


def check_lock(lock: Path) -> int:
    """0 when `lock` resolves from the public index to exactly its pins (it says so), else 1."""
    pins = read_lock(lock)
    with tempfile.TemporaryDirectory(prefix="sacbench-lock-") as workdir:
        report = resolve(lock, Path(workdir))
    problems = problems_in(report, pins)
    if problems:
        print(f"{lock}: " + "; ".join(problems), file=sys.stderr)
        return 1
    torch = next(
        item["metadata"]["version"]
        for item in report["install"]
        if normalized(item["metadata"]["name"]) == "torch"
    )
    print(
        f"{lock}: all {len(pins)} pins resolve from the public index alone "
        f"(torch {torch} with {len(report['install']) - len(pins)} CUDA runtime packages)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
