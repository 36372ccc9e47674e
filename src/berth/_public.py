"""Where each public name of `berth` lives, and the call that gives those names their public path.

berth/__init__.py imports each name from its module here on first use (`import berth` imports
nothing else but this table); each private module that defines public names ends with
`publish(globals())`. It imports nothing, so every module may import it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing at `import berth`
if TYPE_CHECKING:
    from typing import Any

__all__ = ["EXPORTS", "publish"]

# tests/test_public_api.py checks that this table, berth/__init__.py's imports and `__all__` agree.
EXPORTS: dict[str, tuple[str, ...]] = {
    "berth._aesgcm": ("AesGcmSealer", "Keyring"),
    "berth._answers": ("frame_answer",),
    "berth._batch": ("SaveItem", "SaveResult"),
    "berth._checkpoint": ("load_checkpoint", "save_checkpoint"),
    "berth._checkpoint_store": ("checkpoint_store",),
    "berth._config": ("sealer_from_env",),
    "berth._core": ("Listing", "Parked", "PlaintextWarning", "ResealReport"),
    "berth._coordinator": ("Coordinator",),
    "berth._coordinator_core": ("Wake", "WakeDecision"),
    "berth._envelope": ("ENVELOPE_VERSION", "Envelope", "PendingCall", "check_resumable", "digest_file", "digest_json"),
    "berth._errors": (
        "BackendError", "BerthError", "ConfigDrift", "EnvelopeTooLarge", "Expired", "FormatError",
        "IntegrityError", "InvalidEnvelope", "InvalidKey", "TokenMismatch",
    ),
    "berth._kms_sealer": ("KmsSealer",),
    "berth._multi": ("MultiSealer",),
    "berth._notify": ("Webhook", "verify_webhook"),
    "berth._open": ("open_store",),
    "berth._plaintext": ("PlaintextSealer",),
    "berth._question_types": ("Answer", "AnswerRefused", "Decision", "InvalidAnswer", "Question", "ToolRequest"),
    "berth._questions": ("QuestionStore", "open_questions"),
    "berth._sealer": ("Sealer",),
    "berth._store": ("Store",),
    "berth._token": ("Token",),
    "berth._witness": ("AuditReport",),
    "berth.aio": (),
    "berth.backends": ("Backend",),
    "berth.kms": (),
}  # fmt: skip
"""Each module under berth that defines public names, and those names (`aio` and `kms` are modules)."""


def publish(namespace: dict[str, Any]) -> None:
    """Called at the end of each private module that defines public names: they read as `berth.X`.

    Tracebacks and reprs name the public path (`berth.TokenMismatch`, not `berth._errors.TokenMismatch`),
    as httpx does, however the class was reached; pickles find every class at that path too.
    """
    for name in EXPORTS[namespace["__name__"]]:
        obj = namespace[name]
        if isinstance(obj, type) or callable(obj):
            obj.__module__ = "berth"
