"""A task directory on disk: loading and checking it, and hashing its content.

A task is a directory holding instruction.md, task.toml, environment/ and tests/test.sh (or a
Python verifier: tests/evaluate.py, or the file task.toml's `[verifier] python` names), with
solution/solve.sh optional (only the oracle agent needs it; a task of seed 004 may have its
solve.sh at its root instead). Loading checks every required file and reports every problem at
once, so that an author fixes a task in one round. A task of a dataset takes its dataset.toml's
`[verifier]`, `[agent]` and `[environment]` tables as defaults under its own task.toml (seed 004:
"dataset-wide defaults shared by every task"; task.toml wins), merged before validation so that
the merged config is checked as one. A dataset keeps going past a broken task
(`load_task_or_broken`): the task is kept as a `BrokenTask`, whose trials fail with its error type
and message and start no container (seed 000: "For task_invalid and task_not_found errors, no
container is started").

Defaults travel with the task: a runner loads the task from its archive, not from the dataset, so
a task whose config its defaults change carries them in its archive, as `DEFAULTS_FILE` (JSON) at
its root, which `load_archived_task` merges exactly as `load_task` merged dataset.toml's (the
runner then sees the config the manifest has). Only rollout writes that file: `load_task` refuses
an author's task directory holding one (task_invalid), so that no task can change its own config
behind its dataset.toml's back. A task whose config no default changes has no such file: its
archive is its directory as it is, and its content hash stays what it was.

The content hashes identify a task (and its environment/, which names the built image) by what
is in it, the same on every machine: relative POSIX paths in sorted order, the executable bit (not
the full mode, not the owner), symlink targets and file bytes; never timestamps. A task's content
hash (`task_content_hash`) is its archive's tree (`task_tree`): DEFAULTS_FILE included, hashed
like any other file, so the runner's `tree_hash` of the unpacked archive finds the same hash.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path, PurePosixPath
from typing import Any

from rollout.api.archive import link_escapes
from rollout.api.dockerfile import DockerfileError, lift
from rollout.api.errors import ErrorType, InvalidInput, Problem
from rollout.api.task import TaskConfig, load_task_config, parse_task_config
from rollout.api.verifiers import PYTHON_VERIFIER, VerifierChoice, VerifierKind, VerifierSource

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
TASK_SHAPE = (
    "a task is a directory with instruction.md, task.toml, environment/ and tests/test.sh (or "
    "tests/evaluate.py)"
)
DEFAULTS_FILE = ".rollout-defaults.json"
SHELL_VERIFIER = VerifierChoice(VerifierKind.SHELL, VerifierSource.FILES, script=TEST_SCRIPT)
"""The Harbor verifier: `bash /tests/test.sh` in the environment."""
"""At the root of a task's archive (only): the dataset.toml defaults the task inherits, as JSON,
for a task whose config they change. Rollout writes it; an author's task may not hold one."""
RESERVED_DEFAULTS_FILE = (
    "is reserved: rollout writes it into a task's archive to carry its dataset.toml's defaults; "
    "remove it, and give defaults in dataset.toml's [verifier], [agent] and [environment]"
)

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
    defaults_json: str | None = None
    """Its archive's DEFAULTS_FILE: the dataset.toml defaults that change its config, as
    canonical JSON (`encode_defaults`); None when it inherits none that change anything (its
    archive is then its directory as it is)."""
    verifier: VerifierChoice = SHELL_VERIFIER
    """How its trials are verified: tests/test.sh in the environment, or a Python verifier
    (`rollout.api.verifiers`) beside it."""

    @property
    def has_solution(self) -> bool:
        return self.solution is not None

    @property
    def environment_dir(self) -> Path:
        return self.path / ENVIRONMENT

    @property
    def dockerfile(self) -> Path:
        return self.path / ENVIRONMENT / DOCKERFILE


def load_task(
    path: str | Path,
    *,
    name: str | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> Task:
    """Load and check an author's task directory; `name` defaults to the directory's name.

    `defaults` are its dataset's dataset.toml tables (`[verifier]`, `[agent]`, `[environment]`,
    seed 004's "defaults shared by every task"), merged under task.toml's own
    (`merge_task_defaults`): what task.toml sets wins. When they change its config, the task
    keeps them (`Task.defaults_json`) for its archive. A DEFAULTS_FILE in the directory is refused
    (task_invalid): only dataset.toml gives defaults.

    Raises InvalidInput with `task_not_found` when there is no directory at `path`, and with
    `task_invalid` listing every missing or broken file otherwise.
    """
    return _load(path, name, defaults, archived=False)


def load_archived_task(path: str | Path, *, name: str | None = None) -> Task:
    """Load and check a task unpacked from its archive (the runner's copy of it).

    Its DEFAULTS_FILE, when it has one, gives its defaults, merged as `load_task` merged them
    from dataset.toml, so that its config is the one its dataset's manifest holds. It takes no
    defaults from anywhere else: the archive, named by its content hash, is the whole task.
    A DEFAULTS_FILE that is not what rollout writes (a JSON object of tables) is task_invalid.
    """
    return _load(path, name, None, archived=True)


def _load(
    path: str | Path, name: str | None, defaults: Mapping[str, Any] | None, *, archived: bool
) -> Task:
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
    defaults_json: str | None = None
    if archived:
        defaults_json, defaults = _read_carried_defaults(path / DEFAULTS_FILE, problems)
    elif os.path.lexists(path / DEFAULTS_FILE):
        problems.append(Problem(str(path / DEFAULTS_FILE), None, RESERVED_DEFAULTS_FILE))
    instruction = _read_instruction(path / INSTRUCTION, problems)
    config, inherits = _read_config(path / TASK_TOML, problems, defaults)
    if inherits and not archived and defaults:
        defaults_json = _encode_for_archive(defaults, path, problems)
    _expect(path / ENVIRONMENT, "dir", problems, "holds the environment definition (Dockerfile)")
    lifted = False
    if config is not None:
        own_image = config.environment.docker_image
        config = _lifted(config, path / ENVIRONMENT / DOCKERFILE, problems)
        lifted = own_image is None and config.environment.docker_image is not None
    verifier = _verifier(path, config, problems)
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
        defaults_json=defaults_json,
        verifier=verifier,
    )


def _verifier(path: Path, config: TaskConfig | None, problems: list[Problem]) -> VerifierChoice:
    """The task's verifier (seed 004): its task.toml's `[verifier] python = "<file>"`, else
    tests/test.sh (the shell verifier), else tests/evaluate.py (a Python verifier, which runs
    beside the environment: it needs none). A `[verifier] metric` is refused: a metric compares
    a data row's answer with its ground truth, which a task directory has not."""
    declared = config.verifier.model_extra or {} if config is not None else {}
    toml = path / TASK_TOML
    if "metric" in declared:
        problems.append(
            Problem(
                str(toml),
                "verifier.metric",
                "a metric scores data rows (dataset.toml with data/<split>.jsonl); a task "
                f"directory is verified by {TEST_SCRIPT} or a Python verifier "
                f'({PYTHON_VERIFIER}, or [verifier] python = "<file>")',
            )
        )
    script = declared.get("python")
    if script is not None:
        relative = PurePosixPath(script) if isinstance(script, str) else None
        if relative is None or relative.is_absolute() or ".." in relative.parts or not script:
            problems.append(
                Problem(str(toml), "verifier.python", "must be a file's path inside the task")
            )
        elif _expect(path / relative, "file", problems, "the task's Python verifier"):
            return VerifierChoice.of_python(relative.as_posix(), VerifierSource.TASK)
        return VerifierChoice(VerifierKind.SHELL, VerifierSource.TASK, script=TEST_SCRIPT)
    if os.path.lexists(path / TEST_SCRIPT) or not os.path.lexists(path / PYTHON_VERIFIER):
        _expect(
            path / "tests",
            "dir",
            problems,
            f"holds {TEST_SCRIPT} (or {PYTHON_VERIFIER}), which the verifier runs",
        )
        if (path / "tests").is_dir():
            _expect(path / TEST_SCRIPT, "file", problems, "the verifier runs it")
        return SHELL_VERIFIER
    _expect(path / PYTHON_VERIFIER, "file", problems, "the task's Python verifier")
    return VerifierChoice.of_python(PYTHON_VERIFIER, VerifierSource.FILES)


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


def load_task_or_broken(
    path: str | Path,
    *,
    name: str | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> Task | BrokenTask:
    """`load_task`, with a broken task kept as a `BrokenTask` instead of raised."""
    try:
        return load_task(path, name=name, defaults=defaults)
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
    return read_instruction_text(path, problems)


def read_instruction_text(path: Path, problems: list[Problem]) -> str | None:
    """An instruction's text (instruction.md, or a data dataset's instruction.md.tpl), or None
    with the problem noted: not UTF-8, unreadable, or empty (the agent would get nothing)."""
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


def _read_config(
    path: Path, problems: list[Problem], defaults: Mapping[str, Any] | None
) -> tuple[TaskConfig | None, bool]:
    """task.toml's config with `defaults` merged under it, and whether they changed it."""
    if not _expect(path, "file", problems, "the task's configuration"):
        return None, False
    try:
        # task.toml alone first: its own problems are reported in its own terms.
        config = load_task_config(path)
        if not defaults:
            return config, False
        own = tomllib.loads(path.read_bytes().decode("utf-8"))
        merged = parse_task_config(merge_task_defaults(defaults, own), path)
        return merged, merged != config or merged.to_dict() != config.to_dict()
    except InvalidInput as err:
        problems.extend(err.problems)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        problems.append(Problem(str(path), None, f"cannot be read: {err}"))  # changed meanwhile
    return None, False


def encode_defaults(defaults: Mapping[str, Any]) -> str:
    """DEFAULTS_FILE's content: `defaults` as canonical JSON (sorted keys, no spaces, UTF-8, a
    final newline), which reads back equal. Raises TypeError for a TOML date or time and
    ValueError for nan or inf, which JSON cannot carry as they are."""
    text = json.dumps(
        dict(defaults),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=_not_json,
    )
    return text + "\n"


def _not_json(value: object) -> object:
    raise TypeError(f"{value!r} is a TOML {type(value).__name__}, which JSON cannot carry")


def _encode_for_archive(
    defaults: Mapping[str, Any], path: Path, problems: list[Problem]
) -> str | None:
    try:
        return encode_defaults(defaults)
    except (TypeError, ValueError) as err:
        message = (
            "its dataset.toml's defaults cannot travel in its archive (as JSON, for the runner): "
            f"{err}"
        )
        problems.append(Problem(str(path), None, message))
        return None


def _read_carried_defaults(
    path: Path, problems: list[Problem]
) -> tuple[str | None, dict[str, Any] | None]:
    """An unpacked archive's DEFAULTS_FILE, verbatim and parsed; (None, None) when it has none."""
    if not os.path.lexists(path):
        return None, None
    what = "is not a defaults file as rollout writes it"
    if path.is_symlink() or not path.is_file():
        problems.append(Problem(str(path), None, f"{what}: it is {_describe(path)}"))
        return None, None
    try:
        text = path.read_bytes().decode("utf-8")
        data = json.loads(text)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        problems.append(Problem(str(path), None, f"{what}: {err}"))
        return None, None
    if not isinstance(data, dict) or not all(
        key in DEFAULT_TABLES and isinstance(value, dict) for key, value in data.items()
    ):
        tables = ", ".join(DEFAULT_TABLES)
        problems.append(Problem(str(path), None, f"{what}: a JSON object of tables ({tables})"))
        return None, None
    return text, data


DEFAULT_TABLES = ("verifier", "agent", "environment")
"""The task.toml tables a dataset.toml may give defaults for (seed 004)."""

_TIED_KEYS = {
    "environment": (
        frozenset({"memory", "memory_mb"}),
        frozenset({"storage", "storage_mb"}),
        frozenset({"network_mode", "allow_internet"}),
    )
}
"""Keys that say one thing two ways: a task setting either of them takes neither default, so
that a default `memory` never disagrees with a task's own `memory_mb`."""


def merge_task_defaults(defaults: Mapping[str, Any], own: Mapping[str, Any]) -> dict[str, Any]:
    """task.toml's content `own` with `defaults` (dataset.toml's tables) deep-merged under it.

    Tables merge key by key, at every depth (a default `[environment.env]` variable stays
    beside the task's own); any other value the task sets replaces the default whole, a list
    included. Of two keys that say one thing (`memory` and `memory_mb`, `storage` and
    `storage_mb`, `network_mode` and `allow_internet`), a task that sets one takes neither
    default."""
    merged = _deep_merge(defaults, own)
    for table, groups in _TIED_KEYS.items():
        mine, given = own.get(table), merged.get(table)
        if not isinstance(mine, Mapping) or not isinstance(given, dict):
            continue
        for group in groups:
            if group & mine.keys():
                for key in group - mine.keys():
                    given.pop(key, None)
    return merged


def _deep_merge(under: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(under)
    for key, value in over.items():
        below = merged.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            merged[key] = _deep_merge(below, value)
        else:
            merged[key] = value
    return merged


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
    """Where the entry is on this machine (where it would be, for one with `content`)."""
    content: bytes | None = None
    """A file's bytes when they are not on disk (DEFAULTS_FILE of `task_tree`): read from
    `source` otherwise."""

    def read_bytes(self) -> bytes:
        """A file's bytes."""
        return self.content if self.content is not None else self.source.read_bytes()


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
    return _entries_hash(walk_tree(root))


def _entries_hash(entries: list[TreeEntry]) -> str:
    digest = hashlib.sha256(_HASH_VERSION)
    for entry in entries:
        digest.update(_framed(entry.kind.value.encode()))
        digest.update(_framed(os.fsencode(entry.path)))
        if entry.kind is EntryKind.FILE:
            digest.update(_framed(b"x" if entry.executable else b"-"))
            digest.update(_framed(_file_digest(entry)))
        elif entry.kind is EntryKind.SYMLINK:
            digest.update(_framed(os.fsencode(entry.link_target or "")))
    return digest.hexdigest()


def task_tree(task: Task) -> list[TreeEntry]:
    """The entries of the task's archive, sorted as `walk_tree` sorts them: its directory's, and
    DEFAULTS_FILE holding `task.defaults_json` when it has defaults (never a DEFAULTS_FILE of the
    directory's own). Without defaults, exactly `walk_tree(task.path)`."""
    entries = walk_tree(task.path)
    if task.defaults_json is None:
        return entries
    entries = [entry for entry in entries if entry.path != DEFAULTS_FILE]
    content = task.defaults_json.encode("utf-8")
    source = task.path / DEFAULTS_FILE
    entries.append(TreeEntry(DEFAULTS_FILE, EntryKind.FILE, False, None, source, content))
    entries.sort(key=lambda e: os.fsencode(e.path))
    return entries


def task_content_hash(task: Task | str | Path) -> str:
    """Content hash of a task: of its archive's tree (`task_tree`) for a loaded Task, which
    names its archive (`tasks/<hash>.tar.gz`) and is what a runner's `tree_hash` finds in it;
    of the directory as it is for a path."""
    if isinstance(task, Task):
        return _entries_hash(task_tree(task))
    return tree_hash(task)


def environment_hash(path: str | Path) -> str:
    """Content hash of the task's environment/ alone: what a built image depends on."""
    return tree_hash(Path(path) / ENVIRONMENT)


def _framed(data: bytes) -> bytes:
    return len(data).to_bytes(8, "big") + data


def _file_digest(entry: TreeEntry) -> bytes:
    if entry.content is not None:
        return hashlib.sha256(entry.content).digest()
    with entry.source.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").digest()
