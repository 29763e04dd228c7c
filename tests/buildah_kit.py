"""buildah for tests: a tiny base image made without the internet, pushed to a test registry.

Image builds need a base image, and a test machine cannot pull one. `push_base_image` makes one
from the host: /usr/bin/busybox and the shared libraries `ldd` lists for it (at the same paths),
with /bin/sh, /bin/echo and /bin/cat linked to busybox, so that a Dockerfile
`FROM <that image>` with `RUN echo hi > /x` builds (`buildah build --isolation chroot`).

Every `Buildah` keeps its images in a private store (vfs driver, its own --root and --runroot
in a temporary directory), so tests share nothing with each other or with the host's
containers. buildah runs as root here; `buildah_unavailable_reason` says when it cannot run.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

BUILDAH = "buildah"
BUSYBOX = "/usr/bin/busybox"
BUSYBOX_LINKS = ("/bin/sh", "/bin/echo", "/bin/cat")
COMMAND_TIMEOUT_SEC = 120.0
IMAGE_PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


class BuildahError(Exception):
    """A buildah command failed; the message has its stderr."""


class Buildah:
    """buildah with a private image store under `workdir`."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir

    def command(self, *args: str) -> list[str]:
        """The buildah command line for `args`, against this store."""
        return [
            BUILDAH,
            "--root",
            str(self.workdir / "root"),
            "--runroot",
            str(self.workdir / "runroot"),
            "--storage-driver",
            "vfs",
            *args,
        ]

    def run(self, *args: str, timeout: float = COMMAND_TIMEOUT_SEC) -> str:
        """Run `buildah args` and return its stdout; BuildahError with stderr on failure."""
        try:
            done = subprocess.run(
                self.command(*args),
                capture_output=True,
                text=True,
                timeout=timeout,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise BuildahError(f"buildah {' '.join(args)} took over {timeout} s") from None
        if done.returncode != 0:
            raise BuildahError(
                f"buildah {' '.join(args)} exited with {done.returncode}: {done.stderr.strip()}"
            )
        return done.stdout

    def push(
        self, image: str, destination: str, *, credentials: tuple[str, str] | None = None
    ) -> str:
        """Push a local image to `destination` (registry/repository[:tag]) over plain HTTP;
        return the manifest digest the push reports."""
        digest_file = self.workdir / "pushed.digest"
        args = ["push", "--quiet", "--tls-verify=false", "--digestfile", str(digest_file)]
        if credentials is not None:
            # An auth file, not --creds: no password on a command line or in an error.
            registry = destination.split("/", 1)[0]
            args += ["--authfile", str(self._auth_file(registry, *credentials))]
        self.run(*args, image, f"docker://{destination}")
        return digest_file.read_text().strip()

    def _auth_file(self, registry: str, user: str, password: str) -> Path:
        auth = base64.b64encode(f"{user}:{password}".encode()).decode()
        path = self.workdir / "auth.json"
        path.write_text(json.dumps({"auths": {registry: {"auth": auth}}}))
        path.chmod(0o600)
        return path


@contextmanager
def buildah_store() -> Iterator[Buildah]:
    """A `Buildah` with a fresh private store, removed afterwards."""
    workdir = Path(tempfile.mkdtemp(prefix="buildah-"))
    try:
        yield Buildah(workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


@functools.cache
def buildah_unavailable_reason() -> str | None:
    """Why buildah cannot build images here, or None when it can. Checked once per session."""
    if shutil.which(BUILDAH) is None:
        return "buildah is not installed (Debian package buildah)"
    if os.geteuid() != 0:
        return (
            "buildah needs root here (vfs store, chroot isolation); "
            f"the tests run as uid {os.geteuid()}"
        )
    with buildah_store() as buildah:
        try:
            buildah.run("from", "scratch", timeout=60)
        except BuildahError as error:
            return f"buildah cannot make a container here (`buildah from scratch` failed): {error}"
    return None


def base_image_unavailable_reason() -> str | None:
    """Why `push_base_image` cannot work here (buildah's reason, or no busybox), or None."""
    reason = buildah_unavailable_reason()
    if reason is None and not Path(BUSYBOX).is_file():
        reason = f"{BUSYBOX} is missing (Debian package busybox): the test base image is made of it"
    return reason


def shared_libraries(executable: str) -> list[str]:
    """The absolute paths of the shared libraries `ldd` lists for `executable` (none for a
    static one)."""
    done = subprocess.run(
        ["ldd", executable], capture_output=True, text=True, timeout=30, check=False
    )
    if done.returncode != 0:
        if "not a dynamic executable" in done.stdout + done.stderr:
            return []
        raise RuntimeError(f"ldd {executable} failed: {done.stderr.strip()}")
    paths = []
    for line in done.stdout.splitlines():
        # "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux... (0x...)"
        words = line.split()
        candidates = words[words.index("=>") + 1 :] if "=>" in words else words
        if candidates and candidates[0].startswith("/"):
            paths.append(candidates[0])
    return paths


def busybox_rootfs(target: Path) -> Path:
    """A root filesystem at `target`: busybox, its libraries, and sh, echo and cat."""
    for path in (BUSYBOX, *shared_libraries(BUSYBOX)):
        copy = target / path.lstrip("/")
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, copy)  # follows symlinks: the image gets the files themselves
    for link in BUSYBOX_LINKS:
        linked = target / link.lstrip("/")
        linked.parent.mkdir(parents=True, exist_ok=True)
        linked.symlink_to(BUSYBOX)
    (target / "tmp").mkdir(exist_ok=True)
    (target / "tmp").chmod(0o1777)
    return target


def push_base_image(
    registry_host: str, name: str, *, credentials: tuple[str, str] | None = None
) -> str:
    """Make the busybox base image and push it as `registry_host/name` (name is
    repository[:tag]) over plain HTTP; return the manifest digest the push reported."""
    with buildah_store() as buildah:
        rootfs = busybox_rootfs(buildah.workdir / "rootfs")
        container = buildah.run("from", "scratch").strip()
        buildah.run("copy", container, f"{rootfs}/", "/")
        buildah.run("config", "--env", f"PATH={IMAGE_PATH}", "--cmd", "/bin/sh", container)
        buildah.run("commit", "--quiet", container, "rollout-test-base")
        return buildah.push("rollout-test-base", f"{registry_host}/{name}", credentials=credentials)


def build(buildah: Buildah, context: Path, tag: str, extra: Sequence[str] = ()) -> str:
    """`buildah build --isolation chroot` of `context` (pulling over plain HTTP); its output."""
    return buildah.run(
        "build", "--isolation", "chroot", "--tls-verify=false", "-t", tag, *extra, str(context)
    )
