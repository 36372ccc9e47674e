"""`file:///abs/dir`: one file per frame, written atomically and durably.

Layout: `{root}/{first segment of the name}/{sha256(name)}.frame`. Hashed file
names mean no key can name a path outside its identity's directory, however it
is spelled. Each file holds a small backend header (magic, generation, name)
before the frame. Writes go to a temporary file that is fsynced, renamed over
the old one, and the directory is fsynced; compare-and-swap holds a striped
`flock` so it is safe across threads and processes.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import secrets
import stat
import struct
import threading
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from berth._errors import BackendError, BerthError, TokenMismatch
from berth._token import Token
from berth.backends._bulk import Head, sorted_names

__all__ = ["FileBackend"]

_MAGIC = b"BFB1"
_HEAD = struct.Struct(">4sQH")  # magic, generation, name length
_SAFE_DIR = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_STRIPES = 256
_TMP = re.compile(r"\.tmp-(\d+)-[0-9a-f]+$")


def _oserror(exc: OSError, what: str, name: str) -> BackendError:
    return BackendError(f"file backend could not {what} {name!r}: {exc.strerror or exc}")


class FileBackend:
    """Frames as files under `root`: 0600 files, 0700 directories, whatever the umask."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True):
        self.root = Path(root)
        if not self.root.is_absolute():
            raise BerthError(f"file:// needs an absolute directory, got {str(root)!r}")
        self._fsync = fsync
        self._root = str(self.root)
        self._locks = f"{self._root}/.locks"
        self._cleaned: set[str] = set()
        self._lock = threading.Lock()
        self._mkdir(self.root)
        self._mkdir(self.root / ".locks")

    @classmethod
    def from_url(cls, url: str, **options: Any) -> FileBackend:
        parts = urlsplit(url)
        if parts.netloc not in ("", "localhost"):
            raise BerthError(f"file:// URL {url!r} names host {parts.netloc!r}: use file:///abs/dir")
        return cls(unquote(parts.path), **options)

    # --- paths -------------------------------------------------------------------------

    @staticmethod
    def _mkdir(path: Path) -> None:
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise _oserror(exc, "create directory", str(path)) from exc
        else:
            os.chmod(path, 0o700)
            return
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise BackendError(f"file backend refuses {str(path)!r}: not a plain directory (a planted symlink?)")

    def _dir_for(self, name: str) -> str:
        return _layout(self._root, name)[0]

    def _paths(self, name: str) -> tuple[str, str, int]:
        return _layout(self._root, name)

    def _ensure_dir(self, directory: str) -> None:
        if directory in self._cleaned:
            return
        self._mkdir(Path(directory))
        self._remove_stale_temps(directory)
        with self._lock:
            self._cleaned.add(directory)

    @staticmethod
    def _remove_stale_temps(directory: str) -> None:
        # A temp file whose writer died (SIGKILL, power loss) is garbage: remove it.
        for entry in os.scandir(directory):
            m = _TMP.match(entry.name)
            if m and not _pid_alive(int(m.group(1))):
                try:
                    os.unlink(entry.path)
                except FileNotFoundError:
                    pass

    def _locked(self, stripe: int) -> _Flock:
        return _Flock(f"{self._locks}/{stripe:02x}.lock")

    # --- reading -----------------------------------------------------------------------

    @staticmethod
    def _read(path: str, name: str, *, limit: int | None = None) -> tuple[memoryview, int, int] | None:
        """(data view, generation, data size) of the file at `path`, or None if absent."""
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise BackendError(f"file backend refuses {name!r}: its file is a symlink") from exc
            raise _oserror(exc, "open", name) from exc
        try:
            size = os.fstat(fd).st_size
            want = size if limit is None else min(size, limit)
            # os.read fills a fresh, uninitialised buffer: a zeroed bytearray would cost one more
            # pass over the whole frame (page faults and all) before the read even starts.
            chunks = [os.read(fd, want)]
            got = len(chunks[0])
            while got < want:  # a short read (a signal, say): read on
                more = os.read(fd, want - got)
                if not more:
                    break
                chunks.append(more)
                got += len(more)
            buf = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            view = memoryview(buf)
        finally:
            os.close(fd)
        if got < _HEAD.size:
            raise BackendError(f"file backend found a truncated file for {name!r}")
        magic, gen, nlen = _HEAD.unpack_from(buf)
        start = _HEAD.size + nlen
        if magic != _MAGIC or got < start or bytes(view[_HEAD.size : start]) != name.encode():
            raise BackendError(f"file backend found a foreign file where {name!r} belongs")
        return view[start:got], gen, size - start

    def _generation(self, path: str, name: str) -> int | None:
        found = self._read(path, name, limit=_HEAD.size + 4096)
        return None if found is None else found[1]

    def get(self, name: str) -> tuple[bytes, Token] | None:
        _, path, _ = self._paths(name)
        found = self._read(path, name)
        if found is None:
            return None
        view, gen, _ = found
        # bytes, as the seam promises (`b"x" in memoryview` is always False: a view would break callers'
        # checks silently); only frames of 1 MiB and more stay a view, where a copy costs a pass.
        data = bytes(view) if len(view) < 1 << 20 else view
        return data, Token(gen)  # type: ignore[return-value]

    # --- writing -----------------------------------------------------------------------

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        directory, path, stripe = self._paths(name)
        self._ensure_dir(directory)
        gen = secrets.randbits(63) | 1  # never 0; random so a deleted-and-recreated key never reuses one
        name_b = name.encode()
        head = _HEAD.pack(_MAGIC, gen, len(name_b)) + name_b
        with self._locked(stripe):
            if if_absent or if_match is not None:
                current = self._generation(path, name)
                if if_absent and current is not None:
                    raise TokenMismatch(f"{name!r} already exists")
                if if_match is not None and current != if_match.value:
                    raise TokenMismatch(f"{name!r} changed since it was read")
            tmp = f"{directory}/.tmp-{os.getpid()}-{secrets.token_hex(6)}"
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
                try:
                    os.fchmod(fd, 0o600)
                    _write_all(fd, head)
                    _write_all(fd, data)
                    if self._fsync:
                        os.fsync(fd)
                finally:
                    os.close(fd)
                os.replace(tmp, path)
            except OSError as exc:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
                raise _oserror(exc, "write", name) from exc
            self._sync_dir(directory, name)
        return Token(gen)

    def delete(self, name: str, token: Token) -> None:
        directory, path, stripe = self._paths(name)
        with self._locked(stripe):
            current = self._generation(path, name)
            if current is None or current != token.value:
                raise TokenMismatch(f"{name!r} is not at generation {token.value!r}")
            try:
                os.unlink(path)
            except OSError as exc:
                raise _oserror(exc, "delete", name) from exc
            self._sync_dir(directory, name)

    def _sync_dir(self, directory: str, name: str) -> None:
        if not self._fsync:
            return
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            raise _oserror(exc, "sync the directory of", name) from exc

    # --- listing -----------------------------------------------------------------------

    def _candidates(self, prefix: str) -> Iterator[os.DirEntry[str]]:
        if "/" in prefix:
            dirs = [self._dir_for(prefix)]
        else:
            dirs = [e.path for e in os.scandir(self._root) if e.is_dir(follow_symlinks=False) and e.name != ".locks"]
        for d in dirs:
            try:
                entries = os.scandir(d)
            except FileNotFoundError:
                continue
            with entries:
                for entry in entries:
                    if entry.name.endswith(".frame") and entry.is_file(follow_symlinks=False):
                        yield entry

    def _name_of(self, entry: os.DirEntry[str]) -> str | None:
        try:
            with open(entry.path, "rb", opener=_nofollow) as f:
                head = f.read(_HEAD.size + 4096)
        except FileNotFoundError:
            return None
        if len(head) < _HEAD.size:
            return None
        magic, _, nlen = _HEAD.unpack_from(head)
        if magic != _MAGIC:
            return None
        return head[_HEAD.size : _HEAD.size + nlen].decode("utf-8", "replace")

    def scan(self, prefix: str) -> Iterator[str]:
        for entry in self._candidates(prefix):
            name = self._name_of(entry)
            if name is not None and name.startswith(prefix):
                yield name

    def _named(self, prefix: str) -> Iterator[tuple[str, str]]:
        for entry in self._candidates(prefix):
            name = self._name_of(entry)
            if name is not None and name.startswith(prefix):
                yield name, entry.path

    def _heads_of(self, named: Iterable[tuple[str, str]], size: int) -> Iterator[Head]:
        for name, path in named:
            found = self._read(path, name, limit=_HEAD.size + len(name.encode()) + size)
            if found is not None:
                view, gen, full = found
                yield name, bytes(view), Token(gen), full

    def heads(self, prefix: str, size: int) -> Iterator[Head]:
        """(name, first `size` bytes, token, full size) of every frame under `prefix`."""
        return self._heads_of(self._named(prefix), size)

    def sorted_heads(self, prefix: str, size: int, *, limit: int | None, reverse: bool) -> Iterator[Head]:
        """Heads under `prefix` in name order.

        File names are hashes, so every file's name is read (its first bytes, not the
        frame) and ordered in memory: O(limit) with a limit, else O(names); then the
        heads wanted are read.
        """
        named = sorted_names(self._named(prefix), limit, reverse)  # (name, path) tuples order by name
        return self._heads_of(named, size)

    def close(self) -> None:
        pass


@lru_cache(maxsize=4096)  # a store names the same few keys over and over
def _layout(root: str, name: str) -> tuple[str, str, int]:
    """(directory, frame file, lock stripe) of `name` under `root`: hashed names, one directory per identity."""
    digest = hashlib.sha256(name.encode()).hexdigest()
    first = name.partition("/")[0]
    if not _SAFE_DIR.fullmatch(first) or first in (".", "..", ".locks"):
        first = "_" + hashlib.sha256(first.encode()).hexdigest()[:32]
    directory = f"{root}/{first}"
    return directory, f"{directory}/{digest}.frame", int(digest[:2], 16)


class _Flock:
    """`with`: an exclusive flock on one stripe's lock file, released by closing it (a class: it runs per write)."""

    __slots__ = ("fd", "path")

    def __init__(self, path: str):
        self.path = path
        self.fd = -1

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(self.fd)
            raise

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # closing releases the flock


def _nofollow(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC)


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
