"""The one way berth writes a file (frames, checkpoints, keyrings) and creates a directory.

`write_atomic` writes a temporary file next to the target (0600, `O_EXCL`,
`O_NOFOLLOW`), fsyncs it, renames it over the target and fsyncs the directory,
so a reader sees the old file or the new one, never a part, and a crash after
it returned cannot undo it. A failure removes the temporary file. A writer
killed mid-write (SIGKILL, power loss) cannot remove its own: its temporary
file is named after its pid, and the next write into that directory from any
process removes the temporary files of writers that are no longer alive.

`make_dirs` creates a directory and its missing parents 0700 whatever the
umask, and refuses a symlink or a non-directory where a directory belongs.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections.abc import Sequence

__all__ = ["is_temp", "make_dirs", "remove_stale_temps", "sync_dir", "write_atomic"]

_TEMP = re.compile(r"\.(?:.*\.)?tmp-(\d+)-[0-9a-f]+\Z")
_cleaned: set[str] = set()
_cleaned_lock = threading.Lock()


def is_temp(name: str) -> bool:
    """Whether a directory entry's name is one of `write_atomic`'s temporary files."""
    return _TEMP.match(name) is not None


def make_dirs(path: str | os.PathLike[str]) -> None:
    """Create `path` and every missing parent with mode 0700, whatever the umask.

    Directories that already exist keep their mode (the host chose it, or a symlink to
    a directory the host made). Something other than a directory where one belongs
    raises `NotADirectoryError` (an `OSError`).
    """
    path = os.path.abspath(os.fspath(path))
    missing: list[str] = []
    probe = path
    while True:
        try:
            st = os.stat(probe)
        except FileNotFoundError:
            missing.append(probe)
            parent = os.path.dirname(probe)
            if parent == probe:
                break
            probe = parent
            continue
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(f"{probe!r} is not a directory")
        break
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            st = os.lstat(directory)
            if not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(f"{directory!r} is not a plain directory") from None
            continue
        os.chmod(directory, 0o700)  # the umask may have taken bits off 0700, never added any


def sync_dir(directory: str | os.PathLike[str]) -> None:
    """fsync a directory, so a rename or unlink in it survives a crash."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_stale_temps(directory: str | os.PathLike[str], *, once: bool = False) -> None:
    """Remove the temporary files of `write_atomic` writers that died in `directory`.

    With `once`, a directory is cleaned at most once per process.
    """
    directory = os.fspath(directory)
    if once:
        with _cleaned_lock:
            if directory in _cleaned:
                return
            _cleaned.add(directory)
    try:
        entries = os.scandir(directory)
    except OSError:
        return
    with entries:
        for entry in entries:
            m = _TEMP.match(entry.name)
            if m and not _pid_alive(int(m.group(1))):
                try:
                    os.unlink(entry.path)
                except OSError:
                    pass


def write_atomic(
    path: str | os.PathLike[str],
    data: bytes | memoryview | Sequence[bytes | memoryview],
    *,
    fsync: bool = True,
    dir_fd: int | None = None,
    clean_once: bool = True,
) -> None:
    """Replace the file at `path` with `data` (one buffer or parts), atomically and durably.

    The file is 0600 whatever the umask; its directory must exist. A symlink at
    `path` is replaced, never followed. With `dir_fd`, `path` is a name in that
    open directory (the caller opened it without following symlinks). Raises
    `OSError`; the temporary file is gone by then, and any previous file at
    `path` is intact. Dead writers' temporary files in the directory are removed
    first (once per directory and process with `clean_once`; with `dir_fd` the
    caller does it).
    """
    path = os.fspath(path)
    if dir_fd is None:
        directory, name = os.path.split(path)
        directory = directory or "."
        remove_stale_temps(directory, once=clean_once)
        tmp = f"{directory}/.{name}.tmp-{os.getpid()}-{os.urandom(6).hex()}"
    else:
        directory, name = "", path
        tmp = f".tmp-{os.getpid()}-{os.urandom(6).hex()}"  # a directory of frames: `.tmp-<pid>-<random>`
    parts = (data,) if isinstance(data, (bytes, bytearray, memoryview)) else data
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        try:
            os.fchmod(fd, 0o600)
            for part in parts:
                _write_all(fd, part)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError:
            pass
        raise
    if fsync:
        if dir_fd is None:
            sync_dir(directory)
        else:
            os.fsync(dir_fd)


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
