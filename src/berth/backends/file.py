"""`file:///abs/dir`: one file per frame, written atomically and durably.

Layout (the ordered layout, of every identity directory this version creates):
`{root}/{first segment}@2/k{hex of the rest of the name}.frame`. The file name is
the key's UTF-8 bytes in lower-case hex, so sorting file names sorts keys
bytewise: a listing orders names read from the directory alone and reads each
file once, in order, in bounded memory, and a prefix selects file names without
opening the others. A key too long for a file name (over 124 bytes) is stored
as `{sha256(name)}.frame`, whose name a listing learns from the record. Hex and
hashed names mean no key can name a path outside its identity's directory,
however it is spelled, and no two keys meet on a case-insensitive file system.
Each file holds a small backend header (magic, generation, name) before the
frame.

The legacy layout, `{root}/{first segment}/{sha256(name)}.frame` (every file
hashed), is what berth before the ordered layout wrote. An identity directory
in it is used as it is: read, written and listed as before (a listing then
reads every file of the identity and orders what it read in memory). Creating
an ordered directory first plants a regular file where the legacy directory
would be, so an older berth sharing the store fails on it (`IntegrityError`)
instead of writing frames the newer one would never see. Writes go to a temporary file that is fsynced, renamed over
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

from berth._atomic import make_dirs, remove_stale_temps, sync_dir, write_atomic
from berth._errors import BackendError, BerthError, FormatError, IntegrityError, StoreMissing, TokenMismatch
from berth._sealer import LARGE_FRAME
from berth._token import Token
from berth.backends import Backend
from berth.backends._bulk import Data, Head, ordered, sorted_names
from berth.backends._errmap import ErrorMap, Row

__all__ = ["FileBackend"]

_MAGIC = b"BFB1"
_HEAD = struct.Struct(">4sQH")  # magic, generation, name length
_SAFE_DIR = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_STRIPES = 256
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_READ_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_NAME_MAX = 2048  # a berth name is at most 128 + 1 + 1024 bytes: a listing reads this much of the record
_ORDERED = "@2"  # an identity directory's suffix in the ordered layout ('@' is in no legacy directory's name)
_KEYED_MAX = 124  # bytes of a key that fit a file name as hex: "k" + 248 + ".frame" = 255
_MARKER = b"berth: this identity's frames are in the directory of this name plus @2 (berth's ordered file layout)\n"


_ERRORS = ErrorMap(
    "file",
    [
        Row(
            OSError,
            IntegrityError,
            "file backend refuses {name!r}: its directory is not a plain directory (a planted symlink?)",
            lambda exc, call: call.op == "open the directory of" and _errno(exc) in (errno.ELOOP, errno.ENOTDIR),
        ),
        Row(
            OSError,
            IntegrityError,
            "file backend refuses {name!r}: its file is a symlink",
            lambda exc, call: call.op == "open" and _errno(exc) == errno.ELOOP,
        ),
        Row(OSError),
    ],
    detail=lambda exc: str(getattr(exc, "strerror", None) or exc),
)


def _errno(exc: BaseException) -> int | None:
    return getattr(exc, "errno", None)


class FileBackend(Backend):
    """Frames as files under `root`: 0600 files, 0700 directories, whatever the umask."""

    creates = True

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True, create: bool = True):
        self.root = Path(root)
        if not self.root.is_absolute():
            raise BerthError(f"file:// needs an absolute directory, got {str(root)!r}")
        self._fsync = fsync
        self._root = str(self.root)
        self._locks = f"{self._root}/.locks"
        self._cleaned: set[str] = set()
        self._legacy: dict[str, bool] = {}  # legacy directory -> whether it is in use (False: the ordered one is)
        self._lock = threading.Lock()
        if not create:  # open what exists; create nothing
            if not os.path.isdir(self._locks):
                raise StoreMissing(f"file store {self._root!r} does not exist (`berth setup` creates it)")
            return
        try:
            make_dirs(self.root)  # with its missing parents, 0700 whatever the umask
        except OSError as exc:
            raise _ERRORS.error(exc, "create directory", str(self.root)) from exc
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
            raise _ERRORS.error(exc, "create directory", str(path)) from exc
        else:
            os.chmod(path, 0o700)
            return
        st = os.lstat(path)
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise IntegrityError(f"file backend refuses {str(path)!r}: not a plain directory (a planted symlink?)")

    def _place(self, name: str) -> tuple[str, str, int]:
        """(directory, file name in it, lock stripe) of `name`, in its identity directory's layout."""
        legacy, hashed, keyed, stripe = _layout(self._root, name)
        if self._is_legacy(legacy):
            return legacy, hashed, stripe
        return legacy + _ORDERED, keyed, stripe

    def _paths(self, name: str) -> tuple[str, str, int]:
        """(directory, file path, lock stripe) of `name`."""
        directory, file, stripe = self._place(name)
        return directory, f"{directory}/{file}", stripe

    def _is_legacy(self, legacy: str) -> bool:
        """Whether the identity directory `legacy` is in the legacy layout (else: its ordered twin is used).

        Decided by what is at `legacy`: a directory (written by an older berth) is the legacy
        layout, a regular file is the ordered layout's marker, nothing (not remembered: an older
        berth may yet create it) the ordered layout.
        """
        known = self._legacy.get(legacy)
        if known is not None:
            return known
        try:
            st = os.lstat(legacy)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise _ERRORS.error(exc, "inspect directory", legacy) from exc
        known = not stat.S_ISREG(st.st_mode)  # a symlink stays legacy: opening it is refused, as before
        if known and os.path.lexists(legacy + _ORDERED):
            raise IntegrityError(
                f"file backend found both layouts for {os.path.basename(legacy)!r} in {self._root!r}: "
                "an older berth wrote beside a newer one; move the frames of one into the other"
            )
        with self._lock:
            self._legacy[legacy] = known
        return known

    def _ensure_dir(self, directory: str) -> None:
        if directory in self._cleaned:
            return
        if directory.endswith(_ORDERED):
            self._plant_marker(directory[: -len(_ORDERED)])
        self._mkdir(Path(directory))
        self._remove_stale_temps(directory)
        if self._fsync:
            sync_dir(self._root)  # the marker and the directory outlive a crash before the first frame's
        with self._lock:
            self._cleaned.add(directory)

    def _plant_marker(self, legacy: str) -> None:
        """A regular file where the legacy directory would be: an older berth refuses it, never writes beside."""
        try:
            fd = os.open(legacy, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except FileExistsError:
            with self._lock:
                self._legacy.pop(legacy, None)
            if self._is_legacy(legacy):  # an older berth made the directory first: the caller must start over
                raise _LayoutChanged from None
            return
        except OSError as exc:
            raise _ERRORS.error(exc, "create", legacy) from exc
        try:
            os.fchmod(fd, 0o600)  # as every file of the store, whatever the umask
            os.write(fd, _MARKER)
        finally:
            os.close(fd)

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
            raise _ERRORS.error(exc, "open the directory of", name) from exc

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
            raise _ERRORS.error(exc, "open", what) from exc
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
        directory, file, _ = self._place(name)
        dfd = self._open_dir(directory, name)
        if dfd is None:
            return None
        try:
            view, gen, _, _ = self._read(dfd, file, name)
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
        directory, file, _ = self._place(name)
        dfd = self._open_dir(directory, name)
        if dfd is None:
            return None
        try:
            view, gen, _, _ = self._read(dfd, file, name, limit=_HEAD.size + _NAME_MAX + size)
        except FileNotFoundError:
            return None
        finally:
            os.close(dfd)
        return bytes(view[:size]), Token(gen)

    # --- writing -----------------------------------------------------------------------

    def put(self, name: str, data: bytes, *, if_match: Token | None = None, if_absent: bool = False) -> Token:
        directory, file, stripe = self._place(name)
        try:
            self._ensure_dir(directory)
        except _LayoutChanged:  # an older berth created the identity's legacy directory just now: use it
            directory, file, stripe = self._place(name)
            self._ensure_dir(directory)
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
                    raise _ERRORS.error(exc, "write", name) from exc
            finally:
                os.close(dfd)
        return Token(gen)

    def delete(self, name: str, token: Token) -> None:
        directory, file, stripe = self._place(name)
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
                    raise _ERRORS.error(exc, "delete", name) from exc
            finally:
                os.close(dfd)

    # --- listing -----------------------------------------------------------------------

    def _directories(self, prefix: str) -> list[str]:
        if "/" in prefix:
            return [self._place(prefix)[0]]
        with os.scandir(self._root) as entries:
            return [e.path for e in entries if e.is_dir(follow_symlinks=False) and e.name != ".locks"]

    def _in_place(self, directory: str, file: str, name: str) -> bool:
        """Whether `file` in `directory` is where `name` belongs (else: a record copied to another file name)."""
        legacy, hashed, keyed, _ = _uncached_layout(self._root, name)  # a listing names each key once
        if directory.endswith(_ORDERED):
            return directory == legacy + _ORDERED and file == keyed
        return directory == legacy and file == hashed

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
            label = os.path.basename(directory).removesuffix(_ORDERED)
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
                            name = f"{label}/{file}"
                            if name.startswith(prefix):
                                yield name, exc, Token.ZERO, 0, f"{directory}/{file}"
                            continue
                        if not name.startswith(prefix):
                            continue
                        if self._in_place(directory, file, name):
                            yield name, bytes(view[:size]), Token(gen), full, f"{directory}/{file}"
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
            if stored != name or not self._in_place(directory, file, name):  # a record copied to another file name
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

        In the ordered layout, file names sort as keys do: the names under the prefix are
        read from the directory (no file opened), ordered in bounded memory (`ordered`; a
        heap of `limit` with a limit) and each file is read once, in order. In the legacy
        layout file names are hashes, so the order is made in memory: a whole listing reads
        each file once, keeping its head with its name, then sorts (O(frames) memory); with
        a limit, only the names are kept (O(limit), a heap) and the heads wanted read after.
        """
        if "/" in prefix:
            directory = self._place(prefix)[0]
            if directory.endswith(_ORDERED):
                return self._ordered_heads(directory, prefix, size, limit, reverse)
        if limit is not None:
            named = sorted_names(self._named(prefix), limit, reverse)  # (name, path) tuples order by name
            return self._heads_of(named, size)
        rows = [(name, head, token, full) for name, head, token, full, _ in self._records(prefix, size)]
        rows.sort(key=_by_name, reverse=reverse)
        return iter(rows)

    def _ordered_heads(
        self, directory: str, prefix: str, size: int, limit: int | None, reverse: bool
    ) -> Iterator[Head]:
        dfd = self._open_dir(directory, prefix)
        if dfd is None:
            return
        try:
            listed = self._listed(dfd, prefix)
            files = (
                ordered(listed, reverse=reverse, directory=self._root)
                if limit is None
                else iter(sorted_names(listed, limit, reverse))
            )
            first = prefix.partition("/")[0]
            base = f"{first}/"
            limit_read = _HEAD.size + _NAME_MAX + size
            for entry in files:
                # The common entry, a keyed file holding its own record, read here with the least
                # Python per file (a listing's cost is per entry); anything else: _ordered_row.
                row = self._keyed_head(dfd, base, entry, size, limit_read) if "/" not in entry else None
                if row is None:
                    row = self._ordered_row(dfd, directory, first, prefix, entry, size)
                if row is not None:
                    yield row
        finally:
            os.close(dfd)

    def _listed(self, dfd: int, prefix: str) -> Iterator[str]:
        """The frame files under `prefix` in an ordered directory, as strings that sort as their names do.

        `k<hex>.frame` is its own sort key. A hashed file (a key too long for a file name) is
        read for its name and comes as `k<hex of its key>/<file>`: "/" sorts below every hex
        digit and above ".", as a key sorts below the keys it is a prefix of.
        """
        first, _, rest = prefix.partition("/")
        start = f"k{rest.encode().hex()}"
        with os.scandir(dfd) as entries:
            for entry in entries:
                file = entry.name
                if not file.endswith(".frame"):
                    continue  # a temporary file
                if file[0] == "k":
                    if file.startswith(start):
                        yield file
                    continue
                try:
                    name = self._read(dfd, file, None, limit=_HEAD.size + _NAME_MAX)[3]
                except FileNotFoundError:
                    continue
                except (FormatError, IntegrityError):
                    name = f"{first}/{file}"  # listed flagged, where this name sorts
                if name.startswith(prefix):
                    yield f"k{name[len(first) + 1 :].encode().hex()}/{file}"

    @staticmethod
    def _keyed_head(dfd: int, base: str, file: str, size: int, limit: int) -> Head | None:
        """The head of the keyed file `file` when it is a regular file holding the record its name
        names, in lower-case hex (else None: `_ordered_row` reads it again and says what is wrong)."""
        hexed = file[1:-6]
        try:
            key = bytes.fromhex(hexed)
        except ValueError:
            return None
        if len(key) > _KEYED_MAX or key.hex() != hexed:
            return None
        try:
            fd = os.open(file, _READ_FLAGS, dir_fd=dfd)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                return None
            full = st.st_size
            buf = os.read(fd, full if full < limit else limit)
        except OSError:
            return None
        finally:
            os.close(fd)
        got = len(buf)
        if got < _HEAD.size or got < (full if full < limit else limit):
            return None  # a short read or a truncated file
        magic, gen, nlen = _HEAD.unpack_from(buf)
        start = _HEAD.size + nlen
        if magic != _MAGIC or gen == 0 or got < start:
            return None
        try:
            name = base + key.decode()
        except UnicodeDecodeError:
            return None
        if buf[_HEAD.size : start] != name.encode():
            return None
        return name, buf[start : start + size], Token(gen), full - start

    def _ordered_row(self, dfd: int, directory: str, first: str, prefix: str, entry: str, size: int) -> Head | None:
        """The head of one entry of `_listed`, read now; None if it is gone."""
        expected: str | None = None
        slash = entry.find("/")
        if slash < 0:
            file = entry
            try:
                key = bytes.fromhex(entry[1:-6])
                expected = f"{first}/{key.decode()}"
            except ValueError:  # not hex, or not UTF-8
                return f"{first}/{file}", FormatError(f"file backend found {file!r}: it names no key"), Token.ZERO, 0
            if key.hex() != entry[1:-6] or len(key) > _KEYED_MAX:  # upper-case hex: not where any key is put
                return (
                    expected,
                    IntegrityError(f"file backend found {expected!r} under another file name"),
                    Token.ZERO,
                    0,
                )
        else:
            file = entry[slash + 1 :]
        try:
            view, gen, full, name = self._read(dfd, file, expected, limit=_HEAD.size + _NAME_MAX + size)
        except FileNotFoundError:
            return None  # removed since the directory was read
        except (FormatError, IntegrityError) as exc:
            return expected or f"{first}/{file}", exc, Token.ZERO, 0
        if expected is None:
            if not name.startswith(prefix):
                return None  # replaced since the directory was read
            if not self._in_place(directory, file, name):
                return name, IntegrityError(f"file backend found {name!r} under another file name"), Token.ZERO, 0
        return name, bytes(view[:size]), Token(gen), full

    def close(self) -> None:
        pass


def _by_name(row: Head) -> str:
    return row[0]


# Kept, measured (issue 33; benchmarks/bench_microopts.py, CPU, interleaved, median of 15): a sealed
# 1 KiB save + load on file:// costs 425 µs with this cache against 471 uncached (9.8 %); the call
# alone is 0.24 µs cached against 3.2 (sha256 and a regex), once per save and once per load.
@lru_cache(maxsize=4096)  # a store names the same few keys over and over
def _layout(root: str, name: str) -> tuple[str, str, str, int]:
    """(legacy identity directory, hashed file name, ordered file name, lock stripe) of `name` under `root`.

    The lock stripe is the same in both layouts, so an older berth and this one lock alike.
    """
    encoded = name.encode()
    digest = hashlib.sha256(encoded).hexdigest()
    first, _, rest = name.partition("/")
    if not _SAFE_DIR.fullmatch(first) or first in (".", "..", ".locks"):
        first = "_" + hashlib.sha256(first.encode()).hexdigest()[:32]
    hashed = f"{digest}.frame"
    tail = rest.encode()
    keyed = f"k{tail.hex()}.frame" if 0 < len(tail) <= _KEYED_MAX else hashed
    return f"{root}/{first}", hashed, keyed, int(digest[:2], 16)


_uncached_layout = _layout.__wrapped__  # a listing's million keys would only push a store's few out of the cache


class _LayoutChanged(Exception):
    """An older berth created an identity's legacy directory while this one was creating the ordered one."""


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
