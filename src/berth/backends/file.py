"""`file:///abs/dir`: one file per frame, written atomically and durably.

Layout: `{root}/{first segment of the name}/{sha256(name)}.frame`. Hashed file
names mean no key can name a path outside its identity's directory, however it
is spelled. Each file holds a small backend header (magic, generation, name)
before the frame. Writes go to a temporary file that is fsynced, renamed over
the old one, and the directory is fsynced; compare-and-swap holds a striped
`flock` so it is safe across threads and processes.

The directory is not trusted: an identity directory is opened without following
symlinks and every file is read through that directory's descriptor, opened
non-blocking and checked to be a regular file, so a planted symlink, FIFO or
device is refused (`IntegrityError`) instead of followed or waited on. A file
whose backend record (magic, generation, name) was changed or swapped is
`FormatError` or `IntegrityError`, never `BackendError`, which a host retries.
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

from berth._atomic import make_dirs, remove_stale_temps, write_atomic
from berth._errors import BackendError, BerthError, FormatError, IntegrityError, TokenMismatch
from berth._sealer import LARGE_FRAME
from berth._token import Token
from berth.backends import Backend
from berth.backends._bulk import Data, Head, sorted_names

__all__ = ["FileBackend"]

_MAGIC = b"BFB1"
_HEAD = struct.Struct(">4sQH")  # magic, generation, name length
_SAFE_DIR = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_STRIPES = 256
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NAME_MAX = 2048  # a berth name is at most 128 + 1 + 1024 bytes: a listing reads this much of the record


def _oserror(exc: OSError, what: str, name: str) -> BackendError:
    return BackendError(f"file backend could not {what} {name!r}: {exc.strerror or exc}")


class FileBackend(Backend):
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
        try:
            make_dirs(self.root)  # with its missing parents, 0700 whatever the umask
        except OSError as exc:
            raise _oserror(exc, "create directory", str(self.root)) from exc
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
            raise IntegrityError(f"file backend refuses {str(path)!r}: not a plain directory (a planted symlink?)")

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
        remove_stale_temps(directory)

    @staticmethod
    def _open_dir(directory: str, name: str) -> int | None:
        """A descriptor of `directory`, never through a symlink; None if it does not exist."""
        try:
            return os.open(directory, _DIR_FLAGS)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise IntegrityError(
                    f"file backend refuses {name!r}: its directory is not a plain directory (a planted symlink?)"
                ) from exc
            raise _oserror(exc, "open the directory of", name) from exc

    def _locked(self, stripe: int) -> _Flock:
        return _Flock(f"{self._locks}/{stripe:02x}.lock")

    # --- reading -----------------------------------------------------------------------

    @staticmethod
    def _read(dfd: int, file: str, name: str | None, *, limit: int | None = None) -> tuple[memoryview, int, int, str]:
        """(data view, generation, data size, name) of the file `file` in the directory `dfd`.

        `name` is the berth name the file must hold (None when listing: any name). Raises
        FileNotFoundError when it is absent.
        """
        what = name if name is not None else file
        try:
            fd = os.open(file, _READ_FLAGS, dir_fd=dfd)
        except FileNotFoundError:
            raise
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise IntegrityError(f"file backend refuses {what!r}: its file is a symlink") from exc
            raise _oserror(exc, "open", what) from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):  # a FIFO would block a read forever; a device is no frame
                raise IntegrityError(f"file backend refuses {what!r}: its file is not a regular file")
            size = st.st_size
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
            raise FormatError(f"file backend found a truncated file for {what!r}")
        magic, gen, nlen = _HEAD.unpack_from(buf)
        start = _HEAD.size + nlen
        if magic != _MAGIC or got < start:
            raise FormatError(f"file backend found a file that is not one of its records for {what!r}")
        stored = bytes(view[_HEAD.size : start])
        if name is not None:
            if stored != name.encode():
                raise IntegrityError(f"file backend found the record of another name where {name!r} belongs: swapped")
        else:
            try:
                name = stored.decode()
            except UnicodeDecodeError:
                raise FormatError(f"file backend found a record with a name that is not UTF-8 in {what!r}") from None
        if gen == 0:
            raise IntegrityError(f"file backend found generation 0 for {name!r}: changed")
        return view[start:got], gen, size - start, name

    def _generation(self, dfd: int, file: str, name: str) -> int | None:
        try:
            return self._read(dfd, file, name, limit=_HEAD.size + _NAME_MAX)[1]
        except FileNotFoundError:
            return None

    def get(self, name: str) -> tuple[Data, Token] | None:
        directory, path, _ = self._paths(name)
        dfd = self._open_dir(directory, name)
        if dfd is None:
            return None
        try:
            view, gen, _, _ = self._read(dfd, path[len(directory) + 1 :], name)
        except FileNotFoundError:
            return None
        finally:
            os.close(dfd)
        # bytes, as the seam promises (`b"x" in memoryview` is always False: a view would break callers'
        # checks silently); only frames of 1 MiB and more stay a view, where a copy costs a pass.
        data = bytes(view) if len(view) < LARGE_FRAME else view
        return data, Token(gen)

    def head(self, name: str, size: int) -> tuple[bytes, Token] | None:
        """The first `size` bytes of the frame under `name` and its token (a listing's long header)."""
        directory, path, _ = self._paths(name)
        dfd = self._open_dir(directory, name)
        if dfd is None:
            return None
        try:
            view, gen, _, _ = self._read(dfd, path[len(directory) + 1 :], name, limit=_HEAD.size + _NAME_MAX + size)
        except FileNotFoundError:
            return None
        finally:
            os.close(dfd)
        return bytes(view[:size]), Token(gen)

    # --- writing -----------------------------------------------------------------------

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        directory, path, stripe = self._paths(name)
        self._ensure_dir(directory)
        file = path[len(directory) + 1 :]
        gen = secrets.randbits(63) | 1  # never 0; random so a deleted-and-recreated key never reuses one
        name_b = name.encode()
        head = _HEAD.pack(_MAGIC, gen, len(name_b)) + name_b
        with self._locked(stripe):
            dfd = self._open_dir(directory, name)
            if dfd is None:
                raise BackendError(f"file backend lost the directory of {name!r} (removed meanwhile)")
            try:
                if if_absent or if_match is not None:
                    current = self._generation(dfd, file, name)
                    if if_absent and current is not None:
                        raise TokenMismatch(f"{name!r} already exists")
                    if if_match is not None and current != if_match.value:
                        raise TokenMismatch(f"{name!r} changed since it was read")
                try:
                    write_atomic(file, (head, data), fsync=self._fsync, dir_fd=dfd)
                except OSError as exc:
                    raise _oserror(exc, "write", name) from exc
            finally:
                os.close(dfd)
        return Token(gen)

    def delete(self, name: str, token: Token) -> None:
        directory, path, stripe = self._paths(name)
        file = path[len(directory) + 1 :]
        with self._locked(stripe):
            dfd = self._open_dir(directory, name)
            if dfd is None:
                raise TokenMismatch(f"{name!r} is not at generation {token.value!r}")
            try:
                current = self._generation(dfd, file, name)
                if current is None or current != token.value:
                    raise TokenMismatch(f"{name!r} is not at generation {token.value!r}")
                try:
                    os.unlink(file, dir_fd=dfd)
                    if self._fsync:
                        os.fsync(dfd)
                except OSError as exc:
                    raise _oserror(exc, "delete", name) from exc
            finally:
                os.close(dfd)

    # --- listing -----------------------------------------------------------------------

    def _directories(self, prefix: str) -> list[str]:
        if "/" in prefix:
            return [self._dir_for(prefix)]
        with os.scandir(self._root) as entries:
            return [e.path for e in entries if e.is_dir(follow_symlinks=False) and e.name != ".locks"]

    def _records(self, prefix: str, size: int) -> Iterator[tuple[str, Any, Token, int, str]]:
        """(name, first `size` bytes of the data or the error reading it, token, data size, path) under `prefix`.

        A file that cannot be read as a record is yielded with the error in place of its data
        (its name is then the identity directory's and the file's: the record's own is unreadable),
        so one bad file never stops a listing.
        """
        for directory in self._directories(prefix):
            dfd = self._open_dir(directory, prefix)
            if dfd is None:
                continue
            try:
                with os.scandir(dfd) as entries:
                    # A temporary file's name ends in hex (`is_temp`), never in ".frame".
                    files = (e.name for e in entries if e.name.endswith(".frame"))
                    for file in files:
                        try:
                            view, gen, full, name = self._read(dfd, file, None, limit=_HEAD.size + _NAME_MAX + size)
                        except FileNotFoundError:
                            continue  # removed since the directory was read
                        except (FormatError, IntegrityError) as exc:
                            name = f"{os.path.basename(directory)}/{file}"
                            if name.startswith(prefix):
                                yield name, exc, Token.ZERO, 0, f"{directory}/{file}"
                            continue
                        if not name.startswith(prefix):
                            continue
                        path = f"{directory}/{file}"
                        if _uncached_layout(self._root, name)[1] == path:  # a listing names each key once
                            yield name, bytes(view[:size]), Token(gen), full, path
                        else:  # a record copied to another file name: swapped
                            swapped = IntegrityError(f"file backend found {name!r} under another file name")
                            yield name, swapped, Token.ZERO, 0, f"{directory}/{file}"
            finally:
                os.close(dfd)

    def scan(self, prefix: str) -> Iterator[str]:
        for name, _, _, _, _ in self._records(prefix, 0):
            yield name

    def _named(self, prefix: str) -> Iterator[tuple[str, str]]:
        """(name, file path) of every record under `prefix` (a bad file: its fallback name and path)."""
        for name, _, _, _, path in self._records(prefix, 0):
            yield name, path

    def _heads_of(self, named: Iterable[tuple[str, str]], size: int) -> Iterator[Head]:
        for name, path in named:
            directory, file = os.path.split(path)
            dfd = self._open_dir(directory, name)
            if dfd is None:
                continue
            try:
                view, gen, full, stored = self._read(dfd, file, None, limit=_HEAD.size + _NAME_MAX + size)
            except FileNotFoundError:
                continue  # removed since it was listed
            except (FormatError, IntegrityError) as exc:
                yield name, exc, Token.ZERO, 0
                continue
            finally:
                os.close(dfd)
            if stored != name or _layout(self._root, name)[1] != path:  # a record copied to another file name
                yield name, IntegrityError(f"file backend found {stored!r} where {name!r} was"), Token.ZERO, 0
                continue
            yield name, bytes(view[:size]), Token(gen), full

    def heads(self, prefix: str, size: int) -> Iterator[Head]:
        """(name, first `size` bytes, token, full size) of every frame under `prefix`, one read each.

        A file that is not a readable record comes with the error in place of its bytes.
        """
        for name, head, token, full, _ in self._records(prefix, size):
            yield name, head, token, full

    def sorted_heads(self, prefix: str, size: int, *, limit: int | None, reverse: bool) -> Iterator[Head]:
        """Heads under `prefix` in name order.

        File names are hashes, so the order is made in memory. A whole listing reads each
        file once, keeping its head with its name (one read per frame, as an unordered scan:
        reading names first and heads after took two), then sorts. With a limit, only the
        names are kept (O(limit), a heap) and the heads wanted are read after.
        """
        if limit is not None:
            named = sorted_names(self._named(prefix), limit, reverse)  # (name, path) tuples order by name
            return self._heads_of(named, size)
        rows = [(name, head, token, full) for name, head, token, full, _ in self._records(prefix, size)]
        rows.sort(key=_by_name, reverse=reverse)
        return iter(rows)

    def close(self) -> None:
        pass


def _by_name(row: Head) -> str:
    return row[0]


@lru_cache(maxsize=4096)  # a store names the same few keys over and over
def _layout(root: str, name: str) -> tuple[str, str, int]:
    """(directory, frame file, lock stripe) of `name` under `root`: hashed names, one directory per identity."""
    digest = hashlib.sha256(name.encode()).hexdigest()
    first = name.partition("/")[0]
    if not _SAFE_DIR.fullmatch(first) or first in (".", "..", ".locks"):
        first = "_" + hashlib.sha256(first.encode()).hexdigest()[:32]
    directory = f"{root}/{first}"
    return directory, f"{directory}/{digest}.frame", int(digest[:2], 16)


_uncached_layout = _layout.__wrapped__  # a listing's million keys would only push a store's few out of the cache


class _Flock:
    """`with`: an exclusive flock on one stripe's lock file, released by closing it (a class: it runs per write)."""

    __slots__ = ("fd", "path")

    def __init__(self, path: str):
        self.path = path
        self.fd = -1

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except BaseException:
            os.close(self.fd)
            raise

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)  # closing releases the flock
