"""One frame at a path: `save_checkpoint` and `load_checkpoint`, with the file backend's permissions and sealing."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

from berth._atomic import make_dirs, write_atomic
from berth._core import warn_plaintext
from berth._envelope import Envelope
from berth._errors import BackendError, IntegrityError
from berth._keys import validate_key
from berth._plaintext import PlaintextSealer
from berth._public import publish
from berth._sealer import Sealer
from berth._store import Store

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["load_checkpoint", "save_checkpoint"]

_CHECKPOINT_IDENTITY = "checkpoint"


def _checkpoint_store(path: Path, sealer: Sealer | None) -> tuple[Store, str]:
    from berth.backends.memory import MemoryBackend

    if sealer is None:
        warn_plaintext(f"at checkpoint {path.name!r}")
        sealer = PlaintextSealer()
    return Store(MemoryBackend(), identity=_CHECKPOINT_IDENTITY, sealer=sealer), validate_key(path.name)


def save_checkpoint(path: str | os.PathLike[str], envelope: Envelope, *, sealer: Sealer | None = None) -> None:
    """Write one sealed frame to `path` (0600, atomic, fsynced, missing directories 0700); bound to the file's name.

    Raises:
        InvalidEnvelope, EnvelopeTooLarge: as `Store.save`.
        BackendError: the file could not be written; any previous file is intact.
    """
    from pathlib import Path  # imported here: `import berth` stays without pathlib

    path = Path(path)
    store, key = _checkpoint_store(path, sealer)
    frame = store.core.build(key, envelope)
    try:
        make_dirs(path.parent)
        write_atomic(path, frame)
    except OSError as exc:
        raise BackendError(f"cannot write checkpoint {str(path)!r}: {exc.strerror or exc}") from exc


def load_checkpoint(
    path: str | os.PathLike[str], *, sealer: Sealer | None = None, allow_expired: bool = False
) -> Envelope:
    """Read and open the frame at `path` written by `save_checkpoint`.

    Raises:
        FileNotFoundError: nothing at `path`.
        Expired: past its deadline (unless `allow_expired`).
        IntegrityError, FormatError: as `Store.load`.
    """
    from pathlib import Path  # imported here: `import berth` stays without pathlib

    path = Path(path)
    store, key = _checkpoint_store(path, sealer)
    with open(path, "rb", opener=lambda p, f: os.open(p, f | os.O_NOFOLLOW | os.O_NONBLOCK)) as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # a FIFO would block the read forever
            raise IntegrityError(
                f"checkpoint {str(path)!r} is not a regular file", identity=_CHECKPOINT_IDENTITY, key=key
            )
        data = f.read()
    store.backend.put(store.core.prefix + key, data)
    parked = store.load(key, allow_expired=allow_expired)
    assert parked is not None
    return parked.envelope


publish(globals())  # its public names read as berth.X
