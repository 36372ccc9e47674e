"""berth: park the suspended state of an agent run while it waits for a human, and wake it exactly once.

`import berth` is the whole API a host needs::

    store = berth.open_store("sqlite:////var/lib/app/berth.db", identity="pr-bot",
                             sealer=berth.AesGcmSealer(berth.Keyring.load("keys.json")))
    store.save("org/repo#42", envelope)
    envelope = store.claim("org/repo#42")   # exactly one caller gets it
"""

from __future__ import annotations

from berth import _public  # the table of where each public name lives (it imports nothing)

# `import berth` imports nothing more: each public name is imported from its module on first use
# (PEP 562's module `__getattr__` below), so a host pays only for what it uses and `berth --help`
# never loads a store. Type checkers and the API reference (static analysis) read these imports.
TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing
if TYPE_CHECKING:
    from typing import Any

    from berth import aio, kms
    from berth._aesgcm import AesGcmSealer, Keyring
    from berth._answers import frame_answer
    from berth._batch import SaveItem, SaveResult
    from berth._checkpoint import load_checkpoint, save_checkpoint
    from berth._checkpoint_store import checkpoint_store
    from berth._config import sealer_from_env
    from berth._coordinator import Coordinator
    from berth._coordinator_core import Wake, WakeDecision
    from berth._core import Listing, Parked, PlaintextWarning, ResealReport
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
    from berth._kms_sealer import KmsSealer
    from berth._multi import MultiSealer
    from berth._notify import Webhook, verify_webhook
    from berth._open import open_store
    from berth._plaintext import PlaintextSealer
    from berth._question_types import Answer, AnswerRefused, Decision, InvalidAnswer, Question, ToolRequest
    from berth._questions import QuestionStore, open_questions
    from berth._sealer import Sealer
    from berth._store import Store
    from berth._token import Token
    from berth._witness import AuditReport
    from berth.backends import Backend

__version__ = "0.1.0"

# Where each name lives, from berth._public's table: {"Store": "berth._store", ..., "aio": "berth.aio"}
_HOME = {name: module for module, names in _public.EXPORTS.items() for name in names or (module[6:],)}


def __getattr__(name: str) -> Any:
    """Each public name, imported from its module when first used (then a plain attribute)."""
    module_name = _HOME.get(name)
    if module_name is None:
        raise AttributeError(f"module 'berth' has no attribute {name!r}")
    module = __import__(module_name, fromlist=["_"])
    value = module if module_name[6:] == name else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The module's attributes and every public name, imported or not (so completion and `dir` see the API)."""
    return sorted(set(globals()) | set(__all__))


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
    "Decision",
    "Envelope",
    "EnvelopeTooLarge",
    "Expired",
    "FormatError",
    "IntegrityError",
    "InvalidAnswer",
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
    "SaveItem",
    "SaveResult",
    "Sealer",
    "Store",
    "Token",
    "TokenMismatch",
    "ToolRequest",
    "Wake",
    "WakeDecision",
    "Webhook",
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
    "verify_webhook",
]
