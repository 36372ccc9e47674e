"""`AesGcmSealer` and `Keyring`: AES-256-GCM under local keys the host controls.

`cryptography` is imported on a sealer's first seal or open, not with `import berth`:
it is the heaviest import berth has, and listing, the command line's help and the
header-only commands never need it.
"""

from __future__ import annotations

import base64
import io
import os
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any

import msgspec

from berth._atomic import make_dirs, remove_stale_temps, write_atomic
from berth._errors import IntegrityError
from berth._plan import piecewise
from berth._public import publish
from berth._sealer import LARGE_FRAME, FrameBuffer

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = ["AesGcmSealer", "Keyring", "as_sealed", "gcm_open_split", "gcm_seal_parts"]

_NONCE = 12
_TAG = 16
_FORMAT = 1
_KEYRING_FORMAT = 1
_STREAM = LARGE_FRAME  # bodies from this size are encrypted and decrypted piece by piece, never copied whole


def new_aead(key: bytes) -> AESGCM:
    """cryptography's `AESGCM` under `key` (cryptography is imported now, on first use)."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(key)


def invalid_tag() -> type[Exception]:
    """cryptography's `InvalidTag`, for `except invalid_tag():` (evaluated only when something was raised)."""
    from cryptography.exceptions import InvalidTag

    return InvalidTag


def gcm_seal_parts(key: bytes, aead: AESGCM, nonce: bytes, head: bytes, parts: Sequence[bytes], aad: bytes) -> bytes:
    """`head`, then AES-256-GCM of the concatenation of `parts`, then the tag.

    A small body is joined and sealed in one call; a large one is encrypted a MiB
    at a time straight into the output, so the payload is never copied into a
    joined buffer first. The output is one buffer of the frame's size, except in
    pieces (`berth._plan.in_pieces`: the worker threads an event loop awaits), where it is
    grown a MiB at a time.
    """
    total = sum(map(len, parts))
    if total < _STREAM:
        # Encrypted straight into the frame after its head: joining the head to a separate
        # ciphertext would copy the whole body once more (~2x the seal's time at 64 KiB).
        n = len(head)
        out = bytearray(n + total + _TAG)
        out[:n] = head
        aead.encrypt_into(nonce, parts[0] if len(parts) == 1 else b"".join(parts), aad, memoryview(out)[n:])
        return out  # type: ignore[return-value]  # a bytearray: the codec and the backends take one
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    enc = Cipher(algorithms.AES(key), modes.GCM(nonce)).encryptor()
    enc.authenticate_additional_data(aad)
    if piecewise():
        # Grown a MiB at a time: allocating the whole frame at once zeroes it in one call that holds
        # the GIL (~20 ms at 48 MiB: berth.aio's event loop waits that long), while growing it is a
        # remap. The price is a copy of each piece (~25 % of a 16 MiB seal + open).
        grown = FrameBuffer(head)
        for piece in _mibs(parts):
            grown += enc.update(piece)
        grown += enc.finalize()
        grown += enc.tag
        return grown  # type: ignore[return-value]  # a FrameBuffer: copying 1 MiB+ to bytes would cost a pass
    out = FrameBuffer(len(head) + total + _TAG)
    view = memoryview(out)
    view[: len(head)] = head
    at = len(head)
    for piece in _mibs(parts):  # update_into wants 15 spare bytes past each piece: the tag's room gives them
        at += enc.update_into(piece, view[at:])  # a call per MiB (~0.2 ms of GIL): other threads run between
    enc.finalize()
    view[at:] = enc.tag
    return out  # type: ignore[return-value]  # a FrameBuffer: copying 1 MiB+ to bytes would cost a pass


def _mibs(parts: Sequence[bytes | memoryview]) -> Iterator[memoryview]:
    """`parts` a MiB (or less, at a part's end) at a time, as views: one cipher call each."""
    for part in parts:
        piece = memoryview(part)
        for i in range(0, len(piece), _STREAM):
            yield piece[i : i + _STREAM]


def as_sealed(sealed: bytes | bytearray) -> bytes:
    """What `seal` returns: bytes, or a large frame's `FrameBuffer` as it is (copying it would cost a pass)."""
    if type(sealed) is bytes or type(sealed) is FrameBuffer:
        return sealed  # type: ignore[return-value]  # a FrameBuffer, as `seal` has always given large frames
    return bytes(sealed)


def gcm_open_split(
    key: bytes, aead: AESGCM, nonce: bytes, sealed: memoryview, aad: bytes, cuts: Sequence[int]
) -> list[bytes]:
    """Decrypt ciphertext + tag and return the plaintext cut at the offsets `cuts` (ascending).

    Each piece of a large body is decrypted into its own fresh bytes, so a piece
    (the state) never needs copying out of the whole; nothing is returned before
    the tag is verified. Raises `InvalidTag`.
    """
    n = len(sealed) - _TAG
    bounds = (0, *cuts, n)
    if n < _STREAM:
        plain = aead.decrypt(nonce, sealed, aad)
        if not cuts:  # the codec's whole body (it cuts the state out as a view): no slicing loop
            return [plain]
        return [plain[a:b] for a, b in pairwise(bounds)]
    from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

    dec = Cipher(algorithms.AES(key), modes.GCM(nonce, bytes(sealed[n:]))).decryptor()
    dec.authenticate_additional_data(aad)
    if piecewise():  # a worker thread an event loop awaits: a MiB per call, so the event loop runs between them
        pieces = [_decrypted(dec, sealed[a:b]) for a, b in pairwise(bounds)]
    else:  # each piece in one call, into bytes of its exact size: no second pass
        pieces = [dec.update(sealed[a:b]) for a, b in pairwise(bounds)]
    dec.finalize()
    return pieces


def _decrypted(dec: Any, sealed: memoryview) -> bytes:
    """`sealed` decrypted by `dec` a MiB per call, into bytes of its own.

    One call over a large piece (the state) holds the GIL all along (~20 ms at 48 MiB: berth.aio's
    event loop waits that long); a MiB at a time, the loop runs between them. The pieces are
    written into a `BytesIO`, whose buffer grows by remapping and becomes the result uncopied.
    """
    if len(sealed) <= _STREAM:
        return dec.update(sealed)  # type: ignore[no-any-return]
    out = io.BytesIO()
    for piece in _mibs((sealed,)):
        out.write(dec.update(piece))
    return out.getvalue()


class _KeyringFile(msgspec.Struct):
    format: int
    primary: str
    keys: dict[str, str]


class Keyring:
    """A set of 256-bit keys by id: seal with the primary, open with any."""

    def __init__(self, keys: Mapping[str, bytes], primary: str):
        if primary not in keys:
            raise ValueError(f"keyring primary {primary!r} is not one of its keys")
        for kid, key in keys.items():
            if not (isinstance(kid, str) and 0 < len(kid.encode()) <= 64 and kid.isprintable()):
                raise ValueError(f"keyring key id {kid!r} must be 1-64 printable characters")
            if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
                raise ValueError(f"keyring key {kid!r} must be 32 bytes (AES-256)")
        self._keys = {kid: bytes(k) for kid, k in keys.items()}
        self._primary = primary

    @classmethod
    def generate(cls) -> Keyring:
        """A keyring holding one fresh random key."""
        kid = _new_id()
        return cls({kid: os.urandom(32)}, kid)  # what AESGCM.generate_key(bit_length=256) returns

    def rotate(self) -> Keyring:
        """A keyring with a fresh primary key that still holds every older key."""
        kid = _new_id()
        while kid in self._keys:
            kid = _new_id()
        return Keyring({**self._keys, kid: os.urandom(32)}, kid)

    @property
    def primary(self) -> str:
        """The id of the key new frames are sealed under."""
        return self._primary

    @property
    def key_ids(self) -> list[str]:
        """Every key id held, the primary first."""
        return [self._primary, *(k for k in self._keys if k != self._primary)]

    def key(self, key_id: str) -> bytes | None:
        """The key with `key_id`, or None."""
        return self._keys.get(key_id)

    def __contains__(self, key_id: object) -> bool:
        return key_id in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(self.key_ids)

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:  # never shows key material
        return f"Keyring(primary={self._primary!r}, keys={len(self._keys)})"

    def to_json(self) -> bytes:
        """The keyring as JSON (contains the keys: keep it secret)."""
        keys = {kid: base64.b64encode(k).decode() for kid, k in self._keys.items()}
        return msgspec.json.encode(_KeyringFile(_KEYRING_FORMAT, self._primary, keys))

    @classmethod
    def from_json(cls, data: bytes | str) -> Keyring:
        """Parse `to_json` output; raises ValueError on anything else."""
        try:
            f = msgspec.json.decode(data, type=_KeyringFile)
            if f.format != _KEYRING_FORMAT:
                raise ValueError(f"keyring format {f.format} is not supported")
            keys = {kid: base64.b64decode(v, validate=True) for kid, v in f.keys.items()}
        except (msgspec.DecodeError, ValueError) as exc:
            raise ValueError(f"not a berth keyring: {exc}") from None
        return cls(keys, f.primary)

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the keyring to `path` with mode 0600, atomically and durably (file and directory fsynced).

        A missing directory is created 0700 (with its parents). A writer killed mid-save leaves
        no keyring-bearing temporary file for long: the next save or load in that directory
        removes it.
        """
        make_dirs(os.path.dirname(os.path.abspath(path)))
        write_atomic(path, self.to_json(), clean_once=False)  # a keyring's temp copy holds every key

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, allow_readable: bool = False) -> Keyring:
        """Read a keyring written by `save`, refusing a file others can read or write.

        As ssh refuses a private key with such a mode: a keyring whose mode gives the
        group or others any access (0644, 0666, 0640) is not used, silently or otherwise.

        Args:
            path: the keyring file.
            allow_readable: accept such a mode anyway, for hosts whose secret store mounts
                files so (a Kubernetes secret volume's default is 0644); the environment's
                switch for it is `BERTH_KEYRING_ALLOW_READABLE=1`.

        Raises:
            PermissionError: the mode lets others in (one line, naming `chmod 600 PATH`).
            ValueError: the file is not a berth keyring.
            OSError: the file cannot be read.
        """
        remove_stale_temps(os.path.dirname(os.path.abspath(path)))  # a killed save's temporary copy of the keys
        with open(path, "rb") as f:
            mode = stat.S_IMODE(os.fstat(f.fileno()).st_mode)
            if mode & 0o077 and not allow_readable:
                import shlex

                shown = os.fspath(path)
                raise PermissionError(
                    f"keyring {shown!r} has mode {mode:04o}: others can read or change it, so berth will not use "
                    f"it; run `chmod 600 {shlex.quote(shown)}` (or, where a secret store mounts it so, "
                    "pass allow_readable=True or set BERTH_KEYRING_ALLOW_READABLE=1)"
                )
            data = f.read()
        return cls.from_json(data)


def _new_id() -> str:
    return os.urandom(4).hex()  # secrets.token_hex(4), without importing secrets (and hmac) at start-up


class AesGcmSealer:
    """AES-256-GCM under a `Keyring`; the key id travels in the frame.

    Sealed bytes: format (1) | key id length (1) | key id | nonce (12) | ciphertext+tag.
    The nonce is random per seal; callers never supply one.
    """

    name = "aes-gcm"

    def __init__(self, keyring: Keyring):
        if not isinstance(keyring, Keyring):
            raise TypeError("AesGcmSealer needs a berth.Keyring (Keyring.generate() or Keyring.load(path))")
        self._keyring = keyring
        self._keys = {kid: keyring.key(kid) or b"" for kid in keyring.key_ids}
        self._aead: dict[str, AESGCM] = {}  # made on a key's first seal or open (imports cryptography then)
        self._nonce: Callable[[], bytes] = lambda: os.urandom(_NONCE)  # tests inject a fixed nonce here

    @property
    def keyring(self) -> Keyring:
        """The keyring this sealer holds."""
        return self._keyring

    @property
    def key_id(self) -> str:
        """The keyring's primary key id."""
        return self._keyring.primary

    def seal(self, plaintext: bytes, *, aad: bytes) -> bytes:
        """Encrypt under the primary key with a fresh random nonce."""
        return as_sealed(self.seal_parts(b"", (plaintext,), aad=aad))

    def seal_parts(self, head: bytes, parts: Sequence[bytes], *, aad: bytes) -> bytes:
        """`head` (the store's frame head), then the concatenation of `parts` sealed, in one buffer."""
        kid = self._keyring.primary
        nonce = self._nonce()
        kid_b = kid.encode()
        out = b"".join((head, bytes((_FORMAT, len(kid_b))), kid_b, nonce))
        aead = self._aead.get(kid) or self._new_aead(kid)
        return gcm_seal_parts(self._keys[kid], aead, nonce, out, parts, aad)

    def _new_aead(self, kid: str) -> AESGCM:
        aead = self._aead[kid] = new_aead(self._keys[kid])
        return aead

    def open(self, sealed: bytes, *, aad: bytes) -> bytes:
        """Decrypt with whichever held key the sealed bytes name; `IntegrityError` otherwise."""
        return self.open_parts(sealed, (), aad=aad)[0]

    def open_parts(self, sealed: bytes | memoryview, cuts: Sequence[int], *, aad: bytes) -> list[bytes]:
        """`open`, with the plaintext returned cut at the ascending offsets `cuts` (the codec's envelope and state)."""
        view = memoryview(sealed)
        if len(view) < 2 or view[0] != _FORMAT:
            raise IntegrityError("not an aes-gcm sealed body")
        n = view[1]
        start = 2 + n + _NONCE
        if len(view) < start + _TAG:
            raise IntegrityError("aes-gcm sealed body is truncated")
        try:
            kid = bytes(view[2 : 2 + n]).decode()
        except UnicodeDecodeError:
            raise IntegrityError("aes-gcm sealed body names no valid key id") from None
        aead = self._aead.get(kid) or (self._new_aead(kid) if kid in self._keys else None)
        if aead is None:
            raise IntegrityError(f"sealed under key id {kid!r}, which this keyring does not hold")
        try:
            return gcm_open_split(self._keys[kid], aead, bytes(view[2 + n : start]), view[start:], aad, cuts)
        except invalid_tag():
            raise IntegrityError("aes-gcm authentication failed: tampered, moved or wrong key") from None

    def can_open(self, sealer: str, key_id: str) -> bool:
        """True for aes-gcm frames under a key this keyring holds."""
        return sealer == self.name and key_id in self._keyring

    def __repr__(self) -> str:
        return f"AesGcmSealer({self._keyring!r})"

    def __reduce__(self) -> tuple[type[AesGcmSealer], tuple[Keyring]]:
        return (AesGcmSealer, (self._keyring,))


publish(globals())  # its public names read as berth.X
