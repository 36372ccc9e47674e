"""`import berth` is the whole API: exactly these names, each documented, nothing leaked."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import berth

DESIGN_NAMES = {
    # DESIGN.md names these; they are fixed.
    "AesGcmSealer", "Answer", "BackendError", "BerthError", "ConfigDrift", "Coordinator",
    "ENVELOPE_VERSION", "Envelope", "EnvelopeTooLarge", "Expired", "FormatError", "IntegrityError",
    "AuditReport", "InvalidEnvelope", "InvalidKey", "Keyring", "KmsSealer", "Listing", "MultiSealer", "Parked",
    "PendingCall", "PlaintextSealer", "Question", "Store", "Token", "TokenMismatch", "Wake",
    "WakeDecision", "check_resumable", "checkpoint_store", "digest_file", "digest_json", "frame_answer", "kms",
    "load_checkpoint", "open_questions", "open_store", "save_checkpoint", "sealer_from_env",
}  # fmt: skip
ADDED_NAMES = {
    # berth's additions where DESIGN.md is silent (docs/store.md says why).
    "AnswerRefused", "Backend", "PlaintextWarning", "aio", "QuestionStore", "ResealReport", "Sealer",
}  # fmt: skip


def test_all_is_exactly_the_public_names() -> None:
    assert set(berth.__all__) == DESIGN_NAMES | ADDED_NAMES
    assert berth.__all__ == sorted(berth.__all__, key=lambda n: (not n.isupper(), n))
    assert len(berth.__all__) == len(set(berth.__all__))


def test_every_public_name_is_documented() -> None:
    for name in berth.__all__:
        obj = getattr(berth, name)
        if inspect.isclass(obj) or inspect.isfunction(obj) or inspect.ismodule(obj):
            assert (obj.__doc__ or "").strip(), f"berth.{name} has no docstring"


def test_errors_form_the_documented_tree() -> None:
    for name in (
        "TokenMismatch",
        "Expired",
        "IntegrityError",
        "FormatError",
        "ConfigDrift",
        "InvalidKey",
        "InvalidEnvelope",
        "EnvelopeTooLarge",
        "BackendError",
    ):
        assert issubclass(getattr(berth, name), berth.BerthError)
    assert issubclass(berth.InvalidKey, ValueError) and issubclass(berth.InvalidEnvelope, ValueError)
    assert issubclass(berth.AnswerRefused, berth.TokenMismatch)


DOCUMENTED_COORDINATOR = [berth.Coordinator.suspend, berth.Coordinator.wake]


@pytest.mark.parametrize(
    "method",
    [berth.Store.save, berth.Store.load, berth.Store.delete, berth.Store.claim, *DOCUMENTED_COORDINATOR],
    ids=lambda m: m.__qualname__,
)
def test_store_methods_have_args_returns_raises(method: Any) -> None:
    """Args names every parameter, Returns is there unless the method returns None, Raises names berth errors."""
    doc = inspect.getdoc(method) or ""
    sections = dict(re.findall(r"^(Args|Returns|Raises):\n((?:(?:    .*)?\n?)+)", doc, re.M))
    params = [p for p in inspect.signature(method).parameters if p != "self"]
    assert "Args" in sections, f"{method.__qualname__} has no Args section"
    for param in params:
        assert re.search(rf"^    {param}:", sections["Args"], re.M), f"{method.__qualname__}: Args omits {param}"
    if inspect.signature(method).return_annotation not in (None, "None"):
        assert sections.get("Returns", "").strip(), f"{method.__qualname__} has no Returns section"
    raised = re.findall(r"^    (\w+(?:, \w+)*):", sections.get("Raises", ""), re.M)
    assert raised, f"{method.__qualname__} does not say what it raises"
    for names in raised:
        for name in names.split(", "):
            assert issubclass(getattr(berth, name), berth.BerthError), f"{method.__qualname__} raises {name}?"


def test_every_public_name_has_an_api_reference_entry() -> None:
    pages = (Path(__file__).resolve().parent.parent / "docs" / "reference").glob("*.md")
    referenced = {name for page in pages for name in re.findall(r"^::: (berth[\w.]*)$", page.read_text(), re.M)}
    missing = sorted(f"berth.{name}" for name in berth.__all__ if f"berth.{name}" not in referenced)
    assert not missing, f"add `::: NAME` to the right page under docs/reference/ (the API reference) for: {missing}"


def test_every_public_class_and_function_reads_as_berth() -> None:
    # Tracebacks say `berth.TokenMismatch` (never `berth._errors...`), as httpx's say `httpx.ConnectError`.
    for name in berth.__all__:
        obj = getattr(berth, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            private = [part for part in obj.__module__.split(".") if part.startswith("_")]
            assert not private, f"berth.{name}.__module__ is {obj.__module__!r}: a private path"
    assert repr(berth.TokenMismatch("x")) == "TokenMismatch('x')"
    assert f"{berth.TokenMismatch.__module__}.{berth.TokenMismatch.__qualname__}" == "berth.TokenMismatch"


def test_import_berth_imports_no_cloud_client_rich_click_crypto_or_kms_module() -> None:
    # cryptography loads on a sealer's first seal or open (and is then there: the last line checks it).
    code = (
        "import sys, berth\n"
        "heavy = ('boto3', 'botocore', 'psycopg', 'redis', 'rich', 'click', 'starlette', 'uvicorn', 'asyncio',\n"
        "         'cryptography', 'secrets', 'pathlib', 'urllib')\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in heavy or m.startswith('google.cloud')\n"
        "             or m.startswith('berth.kms') or m in ('berth._kms_sealer', 'berth.aio'))\n"
        "print(bad)\n"
        "s = berth.AesGcmSealer(berth.Keyring.generate())\n"
        "assert 'cryptography' not in sys.modules\n"
        "assert s.open(s.seal(b'x', aad=b'a'), aad=b'a') == b'x' and 'cryptography' in sys.modules\n"
        "assert berth.KmsSealer.__name__ == 'KmsSealer' and berth.kms.LocalKms and berth.aio.open_store\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", done.stdout
