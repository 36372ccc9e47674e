"""berth: park the suspended state of an agent run while it waits for a human, and wake it exactly once.

`import berth` is the whole API a host needs::

    store = berth.open_store("sqlite:////var/lib/app/berth.db", identity="pr-bot",
                             sealer=berth.AesGcmSealer(berth.Keyring.load("keys.json")))
    store.save("org/repo#42", envelope)
    envelope = store.claim("org/repo#42")   # exactly one caller gets it
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from berth._aesgcm import AesGcmSealer, Keyring
from berth._answers import frame_answer
from berth._checkpoint_store import checkpoint_store
from berth._config import sealer_from_env
from berth._coordinator import Coordinator, Wake, WakeDecision
from berth._envelope import (
    ENVELOPE_VERSION,
    Envelope,
    PendingCall,
    check_resumable,
    digest_file,
    digest_json,
)
from berth._errors import (
    BackendError,
    BerthError,
    ConfigDrift,
    EnvelopeTooLarge,
    Expired,
    FormatError,
    IntegrityError,
    InvalidEnvelope,
    InvalidKey,
    TokenMismatch,
)
from berth._multi import MultiSealer
from berth._plaintext import PlaintextSealer
from berth._questions import Answer, AnswerRefused, Question, QuestionStore, open_questions
from berth._sealer import Sealer
from berth._store import (
    Listing,
    Parked,
    PlaintextWarning,
    ResealReport,
    Store,
    load_checkpoint,
    open_store,
    save_checkpoint,
)
from berth._token import Token
from berth._witness import AuditReport
from berth.backends import Backend

if TYPE_CHECKING:
    from berth import kms
    from berth._kms_sealer import KmsSealer

__version__ = "0.1.0"

# Imported on first use, so that `import berth` stays fast and imports no KMS client module
# (berth.kms pulls in the client wrappers; the cloud libraries themselves load later still).
# `berth.aio` likewise: `import berth` stays free of asyncio's machinery.
_LAZY = {
    "KmsSealer": ("berth._kms_sealer", "KmsSealer"),
    "aio": ("berth.aio", None),
    "kms": ("berth.kms", None),
}


def __getattr__(name: str) -> Any:
    """`berth.kms`, `berth.KmsSealer` and `berth.aio`, imported when first used."""
    if name not in _LAZY:
        raise AttributeError(f"module 'berth' has no attribute {name!r}")
    import importlib

    module_name, attr = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attr is None else getattr(module, attr)
    if attr is not None and getattr(value, "__module__", "").startswith("berth._"):
        value.__module__ = "berth"  # as the eager names below: tracebacks read berth.KmsSealer
    globals()[name] = value
    return value


__all__ = [
    "ENVELOPE_VERSION",
    "AesGcmSealer",
    "Answer",
    "AnswerRefused",
    "AuditReport",
    "Backend",
    "BackendError",
    "BerthError",
    "ConfigDrift",
    "Coordinator",
    "Envelope",
    "EnvelopeTooLarge",
    "Expired",
    "FormatError",
    "IntegrityError",
    "InvalidEnvelope",
    "InvalidKey",
    "Keyring",
    "KmsSealer",
    "Listing",
    "MultiSealer",
    "Parked",
    "PendingCall",
    "PlaintextSealer",
    "PlaintextWarning",
    "Question",
    "QuestionStore",
    "ResealReport",
    "Sealer",
    "Store",
    "Token",
    "TokenMismatch",
    "Wake",
    "WakeDecision",
    "aio",
    "check_resumable",
    "checkpoint_store",
    "digest_file",
    "digest_json",
    "frame_answer",
    "kms",
    "load_checkpoint",
    "open_questions",
    "open_store",
    "save_checkpoint",
    "sealer_from_env",
]


# Tracebacks and reprs name the public path (`berth.TokenMismatch`, not `berth._errors.TokenMismatch`),
# as httpx does; pickles find every class at that path too.
for _name in __all__:
    _obj = globals().get(_name)
    if (isinstance(_obj, type) or callable(_obj)) and getattr(_obj, "__module__", "").startswith("berth._"):
        _obj.__module__ = "berth"
del _name, _obj
