"""The image's base without an image registry: a stand-in for `python:3.11-slim` built from
the Debian archive, for `scripts/build-image.sh` (and the container tests) where the official
image cannot be pulled.

Debian bookworm's Python 3.11 (`mmdebstrap --variant=minbase` with python3, pip, venv and the
CA certificates), without what Debian's slim images leave out (manuals, documentation,
translations), kept as a tarball in a cache folder, imported with `docker import` under the
official image's PATH and LANG, with the host's CA bundle on top (HTTPS to the package
registries may be re-signed by a local CA that pip must trust in a build step). Needs root and
Debian's `mmdebstrap`. Imports nothing of inferd: it runs from a checkout as it is.

    python3 src/inferd/tools/base_image.py [--cache DIR] [--tag python:3.11-slim]
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

BASE_PACKAGES = ("python3", "python3-pip", "python3-venv", "ca-certificates")
SLIM = (
    # what Debian's official slim images (and so python:3.11-slim) leave out: manuals, docs but
    # their copyright files, translations; and /usr merged by a hook, not by the usrmerge
    # package (which brings Perl)
    "--dpkgopt=path-exclude=/usr/share/man/*",
    "--dpkgopt=path-exclude=/usr/share/info/*",
    "--dpkgopt=path-exclude=/usr/share/groff/*",
    "--dpkgopt=path-exclude=/usr/share/lintian/*",
    "--dpkgopt=path-exclude=/usr/share/linda/*",
    "--dpkgopt=path-exclude=/usr/share/doc/*",
    "--dpkgopt=path-include=/usr/share/doc/*/copyright",
    "--dpkgopt=path-exclude=/usr/share/locale/*",
    "--dpkgopt=path-include=/usr/share/locale/locale.alias",
    "--hook-dir=/usr/share/mmdebstrap/hooks/merged-usr",
)
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
TAG = "python:3.11-slim"

Docker = Callable[..., str]
"""Runs the `docker` client with these arguments (and a `timeout`); returns its stdout."""


def base_rootfs(cache: Path) -> Path:
    """The root filesystem as a tarball, built by mmdebstrap once and kept in `cache`."""
    tarball = cache / "bookworm-slim-python3.tar"
    if tarball.exists():
        return tarball
    if shutil.which("mmdebstrap") is None:
        raise RuntimeError("mmdebstrap is needed: apt-get install mmdebstrap")
    cache.mkdir(parents=True, exist_ok=True)
    partial = tarball.with_suffix(".partial.tar")
    command = [
        "mmdebstrap",
        "--quiet",
        "--variant=minbase",
        f"--include={','.join(BASE_PACKAGES)}",
        *SLIM,
        "bookworm",
        str(partial),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise RuntimeError(f"mmdebstrap failed ({done.returncode}):\n{done.stderr[-4000:]}")
    partial.rename(tarball)
    return tarball


def import_base(docker: Docker, cache: Path, tag: str = TAG) -> str:
    """Imports the root filesystem as `tag` (the official image's PATH and LANG; pip may
    install into the system Python) with the host's CA bundle on top; returns the tag."""
    rootfs = base_rootfs(cache)
    docker(
        "import",
        "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "--change", "ENV PIP_BREAK_SYSTEM_PACKAGES=1",
        "--change", "ENV LANG=C.UTF-8",
        "--change", 'CMD ["python3"]',
        str(rootfs), f"{tag}-rootfs",
        timeout=300,
    )  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="inferd-base-") as folder:
        context = Path(folder)
        shutil.copyfile(HOST_CA_BUNDLE, context / "ca-certificates.crt")
        (context / "Dockerfile").write_text(
            f"FROM {tag}-rootfs\nCOPY ca-certificates.crt /etc/ssl/certs/ca-certificates.crt\n"
        )
        docker("build", "--quiet", "--tag", tag, str(context), timeout=300)
    docker("rmi", f"{tag}-rootfs")  # the tag only: the layers stay under `tag`
    return tag


def docker_client(*args: str, timeout: float = 120) -> str:
    """The `docker` client of this shell (its DOCKER_HOST)."""
    done = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if done.returncode != 0:
        raise RuntimeError(f"docker {shlex.join(args)} failed:\n{done.stderr[-4000:]}")
    return done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cache", type=Path, default=Path(".cache/container"))
    parser.add_argument("--tag", default=TAG)
    args = parser.parse_args()
    try:
        print(import_base(docker_client, args.cache, args.tag))
    except RuntimeError as exc:
        print(f"base image: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
