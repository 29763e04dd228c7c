"""A task directory on disk: loading and checking it, and hashing its content.

A task is a directory holding instruction.md, task.toml, environment/ and tests/test.sh, with
solution/solve.sh optional (only the oracle agent needs it; a task of seed 004 may have its
solve.sh at its root instead). Loading checks every required file and reports every problem at
once, so that an author fixes a task in one round. A dataset keeps going past a broken task
(`load_task_or_broken`): the task is kept as a `BrokenTask`, whose trials fail with its error type
and message and start no container (seed 000: "For task_invalid and task_not_found errors, no
container is started").

The content hashes identify a task (and its environment/, which names the built image) by what
is in it, the same on every machine: relative POSIX paths in sorted order, the executable bit (not
the full mode, not the owner), symlink targets and file bytes; never timestamps.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from rollout.api.archive import link_escapes
from rollout.api.dockerfile import DockerfileError, lift
from rollout.api.errors import ErrorType, InvalidInput, Problem
from rollout.api.task import TaskConfig, load_task_config

INSTRUCTION = "instruction.md"
TASK_TOML = "task.toml"
ENVIRONMENT = "environment"
DOCKERFILE = "Dockerfile"
TEST_SCRIPT = "tests/test.sh"
SOLUTION_SCRIPT = "solution/solve.sh"
ROOT_SOLUTION_SCRIPT = "solve.sh"
"""Seed 004's oracle script: at the task root, used where solution/solve.sh is absent."""
NO_SOLUTION = (
    f"the oracle agent needs {SOLUTION_SCRIPT} (or, as in seed 004, {ROOT_SOLUTION_SCRIPT} at "
    "the task root), and the task has neither"
)
TASK_SHAPE = "a task is a directory with instruction.md, task.toml, environment/ and tests/test.sh"

# Bump when the framing below changes, so that old and new hashes can never be confused.
_HASH_VERSION = b"rollout-tree-v1\n"


@dataclass(frozen=True)
class Task:
    """A loaded, valid task directory."""

    name: str
    """The task's name in trial names and result paths: its directory name (or registry name)."""
    path: Path
    config: TaskConfig
    instruction: str
    solution: str | None
    """The oracle's script, relative to the task: solution/solve.sh, else seed 004's solve.sh at
    the root, else None (the oracle cannot run the task)."""
    lifted: bool = False
    """Its docker_image (and maybe workdir and env) came from its Dockerfile, which needs no
    build (`rollout.api.dockerfile.lift`), not from task.toml."""

    @property
    def has_solution(self) -> bool:
        return self.solution is not None

    @property
    def environment_dir(self) -> Path:
        return self.path / ENVIRONMENT

    @property
    def dockerfile(self) -> Path:
        return self.path / ENVIRONMENT / DOCKERFILE


def load_task(path: str | Path, *, name: str | None = None) -> Task:
    """Load and check a task directory; `name` defaults to the directory's name.

    Raises InvalidInput with `task_not_found` when there is no directory at `path`, and with
    `task_invalid` listing every missing or broken file otherwise.
    """
    path = Path(path).absolute()
    if not os.path.lexists(path):
        raise InvalidInput.one(
            path, None, "task directory does not exist", ErrorType.TASK_NOT_FOUND
        )
    if path.is_symlink() and not path.exists():
        message = f"is a symbolic link to {os.readlink(path)!r}, which does not exist"
        raise InvalidInput.one(path, None, message, ErrorType.TASK_NOT_FOUND)
    if not path.is_dir():
        raise InvalidInput.one(
            path, None, f"is not a directory ({TASK_SHAPE})", ErrorType.TASK_NOT_FOUND
        )
    problems: list[Problem] = []
    instruction = _read_instruction(path / INSTRUCTION, problems)
    config = _read_config(path / TASK_TOML, problems)
    _expect(path / ENVIRONMENT, "dir", problems, "holds the environment definition (Dockerfile)")
    lifted = False
    if config is not None:
        own_image = config.environment.docker_image
        config = _lifted(config, path / ENVIRONMENT / DOCKERFILE, problems)
        lifted = own_image is None and config.environment.docker_image is not None
    _expect(path / "tests", "dir", problems, "holds tests/test.sh, which the verifier runs")
    if (path / "tests").is_dir():
        _expect(path / TEST_SCRIPT, "file", problems, "the verifier runs it")
    for script in (path / SOLUTION_SCRIPT, path / ROOT_SOLUTION_SCRIPT):
        if os.path.lexists(script) and not script.is_file():
            problems.append(Problem(str(script), None, f"is {_describe(script)}, expected a file"))
    _check_tree(path, problems)
    if problems or config is None or instruction is None:
        raise InvalidInput(problems, ErrorType.TASK_INVALID)
    return Task(
        name=name or _directory_name(path),
        path=path,
        config=config,
        instruction=instruction,
        solution=_solution(path),
        lifted=lifted,
    )


def _check_tree(path: Path, problems: list[Problem]) -> None:
    """What would stop the task's files from being hashed and archived: a file that is not a
    regular file, directory or symlink (a socket, a fifo), or a symlink pointing outside the
    task. Found here, so that such a task fails its own trials rather than its whole dataset."""
    try:
        entries = walk_tree(path)
    except InvalidInput as err:
        problems.extend(err.problems)
        return
    except OSError as err:
        problems.append(Problem(str(path), None, f"cannot be read: {err.strerror or err}"))
        return
    for entry in entries:
        target = entry.link_target
        if (
            entry.kind is EntryKind.SYMLINK
            and target is not None
            and link_escapes(entry.path, target)
        ):
            message = f"symbolic link to {target!r} points outside the task"
            problems.append(Problem(str(entry.source), None, message))


@dataclass(frozen=True)
class BrokenTask:
    """A task that cannot run: its trials fail with `error_type` and `message`, with no Pod."""

    name: str
    path: Path
    error_type: ErrorType
    """task_invalid or task_not_found."""
    problems: tuple[Problem, ...]
    """Every problem found, naming files on this machine (for the person at it)."""

    @property
    def message(self) -> str:
        """The trial's error message: the same on every machine (paths relative to the task),
        as it is part of the published dataset's manifest and so of its content address."""
        what = "was not found" if self.error_type is ErrorType.TASK_NOT_FOUND else "is invalid"
        details = "; ".join(_relative(problem, self.path) for problem in self.problems)
        return f"Task {self.name!r} {what}: {details}"


def load_task_or_broken(path: str | Path, *, name: str | None = None) -> Task | BrokenTask:
    """`load_task`, with a broken task kept as a `BrokenTask` instead of raised."""
    try:
        return load_task(path, name=name)
    except InvalidInput as err:
        path = Path(path).absolute()
        return BrokenTask(
            name=name or _directory_name(path),
            path=path,
            error_type=err.error_type or ErrorType.TASK_INVALID,
            problems=tuple(err.problems),
        )


def _relative(problem: Problem, root: Path) -> str:
    """The problem with its file named relative to the task (`task.toml: ...`)."""
    file = Path(problem.file)
    if file == root:
        return problem.message if problem.field is None else f"{problem.field}: {problem.message}"
    if file.is_relative_to(root):
        return str(Problem(file.relative_to(root).as_posix(), problem.field, problem.message))
    return str(problem)


def no_solution_message(task_name: str) -> str:
    """The task_invalid message of the oracle's trials of a task without a solution script."""
    return f"Task {task_name!r} is invalid: {NO_SOLUTION}"


def require_oracle_solution(task: Task) -> None:
    """Refuse to run the oracle agent on a task that has no solution script."""
    if not task.has_solution:
        raise InvalidInput.one(task.path, None, NO_SOLUTION, ErrorType.TASK_INVALID)


def _solution(path: Path) -> str | None:
    """solution/solve.sh when there is one, else a solve.sh at the root (seed 004), else None."""
    return next((s for s in (SOLUTION_SCRIPT, ROOT_SOLUTION_SCRIPT) if (path / s).is_file()), None)


def looks_like_task(path: Path) -> bool:
    """True for a directory with any part of a task in it, so that a broken task is reported."""
    markers = (INSTRUCTION, TASK_TOML, ENVIRONMENT, "tests", "solution")
    return path.is_dir() and any(os.path.lexists(path / m) for m in markers)


def _read_instruction(path: Path, problems: list[Problem]) -> str | None:
    if not _expect(path, "file", problems, "the agent's instruction"):
        return None
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as err:
        problems.append(Problem(str(path), None, f"not UTF-8 text ({err.reason})"))
        return None
    except OSError as err:
        problems.append(Problem(str(path), None, f"cannot be read: {err.strerror or err}"))
        return None
    if not text.strip():
        problems.append(Problem(str(path), None, "is empty: the agent would get no instruction"))
        return None
    return text


def _lifted(config: TaskConfig, dockerfile: Path, problems: list[Problem]) -> TaskConfig:
    """task.toml's config with what its Dockerfile sets, when the Dockerfile needs no build
    (`rollout.api.dockerfile`): its FROM image as docker_image, its WORKDIR as workdir and its ENV
    under [environment.env]; task.toml's own values win. A task with a docker_image never reads
    its Dockerfile; one without needs it, so a Dockerfile Docker would refuse is the task's
    problem."""
    environment = config.environment
    if environment.docker_image or not dockerfile.is_file():
        return config  # a missing Dockerfile: its trials fail as images that need a build
    try:
        lifted = lift(dockerfile.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as err:
        problems.append(Problem(str(dockerfile), None, f"cannot be read: {err}"))
        return config
    except DockerfileError as err:
        problems.append(Problem(str(dockerfile), None, f"is not a valid Dockerfile: {err}"))
        return config
    if isinstance(lifted, str):
        return config  # it needs a build
    update = {
        "docker_image": lifted.image,
        "workdir": environment.workdir or lifted.workdir,
        "env": {**lifted.env, **environment.env},
    }
    return config.model_copy(update={"environment": environment.model_copy(update=update)})


def _read_config(path: Path, problems: list[Problem]) -> TaskConfig | None:
    if not _expect(path, "file", problems, "the task's configuration"):
        return None
    try:
        return load_task_config(path)
    except InvalidInput as err:
        problems.extend(err.problems)
        return None


def _expect(path: Path, kind: str, problems: list[Problem], purpose: str) -> bool:
    """Check `path` is a file or a directory; record a problem saying what it is instead."""
    ok = path.is_dir() if kind == "dir" else path.is_file()
    if ok:
        return True
    found = _describe(path)
    wanted = "a directory" if kind == "dir" else "a file"
    if found == "missing":
        problems.append(Problem(str(path), None, f"missing ({purpose})"))
    else:
        problems.append(Problem(str(path), None, f"is {found}, expected {wanted} ({purpose})"))
    return False


def _describe(path: Path) -> str:
    if not os.path.lexists(path):
        return "missing"
    if path.is_symlink() and not path.exists():
        return "a broken symbolic link"
    if path.is_dir():
        return "a directory"
    if path.is_file():
        return "a file"
    return "not a regular file or directory"


def _directory_name(path: Path) -> str:
    return path.name if path.name not in ("", ".", "..") else path.resolve().name


# --- Content hashes -------------------------------------------------------------------------


class EntryKind(StrEnum):
    DIRECTORY = "d"
    FILE = "f"
    SYMLINK = "l"


@dataclass(frozen=True)
class TreeEntry:
    """One entry below a root, in the form both the hash and the task archive use."""

    path: str
    """Relative POSIX path from the root."""
    kind: EntryKind
    executable: bool
    """The owner's executable bit, for files only; the rest of the mode is not content."""
    link_target: str | None
    source: Path
    """Where the entry is on this machine."""


def walk_tree(root: Path) -> list[TreeEntry]:
    """Every entry below `root` (not following symlinks), sorted by path bytes.

    Sorting whole paths keeps every directory before its contents. Anything other than a
    directory, a regular file or a symlink (a socket, a device) is refused.
    """
    entries: list[TreeEntry] = []
    pending = [root]
    while pending:
        directory = pending.pop()
        with os.scandir(directory) as scan:
            for item in scan:
                source = Path(item.path)
                rel = source.relative_to(root).as_posix()
                mode = item.stat(follow_symlinks=False).st_mode
                if stat.S_ISLNK(mode):
                    target = os.readlink(source)
                    entries.append(TreeEntry(rel, EntryKind.SYMLINK, False, target, source))
                elif stat.S_ISDIR(mode):
                    entries.append(TreeEntry(rel, EntryKind.DIRECTORY, False, None, source))
                    pending.append(source)
                elif stat.S_ISREG(mode):
                    executable = bool(mode & stat.S_IXUSR)
                    entries.append(TreeEntry(rel, EntryKind.FILE, executable, None, source))
                else:
                    raise InvalidInput.one(
                        source,
                        None,
                        "is not a regular file, directory or symbolic link",
                        ErrorType.TASK_INVALID,
                    )
    entries.sort(key=lambda e: os.fsencode(e.path))
    return entries


def tree_hash(root: str | Path) -> str:
    """sha256 hex of the tree below `root`: paths, kinds, exec bits, link targets, file bytes.

    Every variable-length field is length-prefixed and file bytes enter as their own sha256, so
    no two different trees can produce the same stream of bytes.
    """
    root = Path(root)
    if not root.is_dir():
        raise InvalidInput.one(root, None, "is not a directory", ErrorType.TASK_INVALID)
    digest = hashlib.sha256(_HASH_VERSION)
    for entry in walk_tree(root):
        digest.update(_framed(entry.kind.value.encode()))
        digest.update(_framed(os.fsencode(entry.path)))
        if entry.kind is EntryKind.FILE:
            digest.update(_framed(b"x" if entry.executable else b"-"))
            digest.update(_framed(_file_digest(entry.source)))
        elif entry.kind is EntryKind.SYMLINK:
            digest.update(_framed(os.fsencode(entry.link_target or "")))
    return digest.hexdigest()


def task_content_hash(path: str | Path) -> str:
    """Content hash of a whole task directory."""
    return tree_hash(path)


def environment_hash(path: str | Path) -> str:
    """Content hash of the task's environment/ alone: what a built image depends on."""
    return tree_hash(Path(path) / ENVIRONMENT)


def _framed(data: bytes) -> bytes:
    return len(data).to_bytes(8, "big") + data


def _file_digest(path: Path) -> bytes:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").digest()
