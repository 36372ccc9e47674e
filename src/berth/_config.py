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
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from berth._aesgcm import AesGcmSealer, Keyring
from berth._multi import MultiSealer
from berth._public import publish
from berth._sealer import Sealer

if TYPE_CHECKING:
    from berth._kms_sealer import KmsSealer
    from berth.kms import Kms

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


def _gcp(rest: str, value: str, readable: bool) -> Kms:
    from berth.kms import GcpKms

    return GcpKms(rest)


def _aws(rest: str, value: str, readable: bool) -> Kms:
    from berth.kms import AwsKms

    return AwsKms(rest)


def _local(rest: str, value: str, readable: bool) -> Kms:
    from berth.kms import LocalKms

    if not rest.startswith("/"):
        raise ValueError("a local keyring path must be absolute (local:///path/keyring.json)")
    return LocalKms(_keyring("BERTH_KMS", rest, readable, shown=value))


# BERTH_KMS scheme -> the KMS client it opens (from the rest of the URL); each imports its client only
# when named, so `import berth` stays light.
_KMS_SCHEMES: dict[str, Callable[[str, str, bool], Kms]] = {"awskms": _aws, "gcpkms": _gcp, "local": _local}


def _kms_sealer(value: str, readable: bool) -> KmsSealer:
    from berth._kms_sealer import KmsSealer  # only when a KMS is configured: `import berth` stays light

    scheme, sep, rest = value.partition("://")
    opener = _KMS_SCHEMES.get(scheme.lower())
    if not sep or not rest:
        raise ValueError(f"BERTH_KMS={value!r} is not a KMS URL: use {_FORMS}")
    if opener is None:
        raise ValueError(f"BERTH_KMS={value!r} has unknown scheme {scheme.lower()!r}: use {_FORMS}")
    try:
        return KmsSealer(opener(rest, value, readable))
    except ValueError as exc:
        if str(exc).startswith("BERTH_KMS="):
            raise
        raise ValueError(f"BERTH_KMS={value!r}: {exc}") from None


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


publish(globals())  # its public names read as berth.X
