"""`sealer_from_env()`: the sealer that `BERTH_KMS` or `BERTH_KEYRING` names.

    BERTH_KMS=gcpkms://projects/P/locations/L/keyRings/R/cryptoKeys/K   KmsSealer(GcpKms(...))
    BERTH_KMS=awskms://arn:aws:kms:REGION:ACCOUNT:key/ID                 KmsSealer(AwsKms(...))
    BERTH_KMS=awskms://alias/NAME  (or a key id, or an alias ARN)        KmsSealer(AwsKms(...))
    BERTH_KMS=local:///abs/path/keyring.json                             KmsSealer(LocalKms(...))
    BERTH_KEYRING=/abs/path/keyring.json                                 AesGcmSealer(...)

`BERTH_KMS` may list several KEKs separated by commas: the first seals, the
others only open (moving from one KEK to another). With both variables set,
the KMS seals and the keyring still opens older frames: the setting that
`berth reseal` needs to move a keyring store onto a KMS. Nothing set: None,
and the caller decides whether plaintext is acceptable.

A keyring file that others can read or write is refused (`Keyring.load`);
`BERTH_KEYRING_ALLOW_READABLE=1` accepts it, for hosts whose secret store
mounts files so.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from berth._aesgcm import AesGcmSealer, Keyring
from berth._multi import MultiSealer
from berth._sealer import Sealer

if TYPE_CHECKING:
    from berth._kms_sealer import KmsSealer

__all__ = ["keyring_readable_allowed", "sealer_from_env"]

_FORMS = "gcpkms://projects/…/cryptoKeys/…, awskms://arn:… or awskms://alias/…, or local:///path/keyring.json"


def sealer_from_env(environ: Mapping[str, str] | None = None) -> Sealer | None:
    """The sealer `BERTH_KMS` and `BERTH_KEYRING` select, or None when neither is set.

    Args:
        environ: where to read the variables (default `os.environ`).

    Returns:
        `KmsSealer`, `AesGcmSealer`, a `MultiSealer` of them (see the module docstring), or None.

    Raises:
        ValueError: a value berth cannot use (one line naming the variable and what it expects);
            no KMS is contacted here.
    """
    env = os.environ if environ is None else environ
    kms_value = env.get("BERTH_KMS", "").strip()
    keyring_path = env.get("BERTH_KEYRING", "").strip()
    readable = keyring_readable_allowed(env)
    sealers: list[Sealer] = [_kms_sealer(part.strip(), readable) for part in kms_value.split(",")] if kms_value else []
    if keyring_path:
        sealers.append(AesGcmSealer(_keyring("BERTH_KEYRING", keyring_path, readable)))
    if not sealers:
        return None
    return sealers[0] if len(sealers) == 1 else MultiSealer(*sealers)


def keyring_readable_allowed(environ: Mapping[str, str] | None = None) -> bool:
    """Whether `BERTH_KEYRING_ALLOW_READABLE` accepts keyring files others can read (`1`, `true`, `yes`)."""
    env = os.environ if environ is None else environ
    return env.get("BERTH_KEYRING_ALLOW_READABLE", "").strip().lower() in ("1", "true", "yes")


def _kms_sealer(value: str, readable: bool) -> KmsSealer:
    from berth._kms_sealer import KmsSealer  # only when a KMS is configured: `import berth` stays light
    from berth.kms import AwsKms, GcpKms, LocalKms

    scheme, sep, rest = value.partition("://")
    scheme = scheme.lower()
    if not sep or not rest:
        raise ValueError(f"BERTH_KMS={value!r} is not a KMS URL: use {_FORMS}")
    try:
        if scheme == "gcpkms":
            return KmsSealer(GcpKms(rest))
        if scheme == "awskms":
            return KmsSealer(AwsKms(rest))
    except ValueError as exc:
        raise ValueError(f"BERTH_KMS={value!r}: {exc}") from None
    if scheme == "local":
        if not rest.startswith("/"):
            raise ValueError(f"BERTH_KMS={value!r}: a local keyring path must be absolute (local:///path/keyring.json)")
        return KmsSealer(LocalKms(_keyring("BERTH_KMS", rest, readable, shown=value)))
    raise ValueError(f"BERTH_KMS={value!r} has unknown scheme {scheme!r}: use {_FORMS}")


def _keyring(variable: str, path: str, readable: bool, *, shown: str | None = None) -> Keyring:
    try:
        return Keyring.load(path, allow_readable=readable)
    except PermissionError as exc:
        if exc.errno is None:  # refused for its mode: the message says what to do
            raise ValueError(f"{variable}={shown or path!r}: {exc}") from None
        raise ValueError(f"{variable}={shown or path!r}: cannot read the keyring: {exc.strerror or exc}") from None
    except OSError as exc:
        raise ValueError(f"{variable}={shown or path!r}: cannot read the keyring: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ValueError(f"{variable}={shown or path!r}: {exc}") from None
