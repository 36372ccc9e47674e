"""`import berth` is the whole API: exactly these names, each documented, nothing leaked."""

from __future__ import annotations

import ast
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
    "Decision", "InvalidAnswer", "ToolRequest",
    "SaveItem", "SaveResult",  # save_many (docs/store.md)
    "Webhook", "verify_webhook",  # notifications (docs/notifications.md)
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
    assert issubclass(berth.InvalidAnswer, berth.BerthError) and issubclass(berth.InvalidAnswer, ValueError)


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


def test_import_berth_imports_nothing_but_berth() -> None:
    # Each public name is imported on first use (timing is a benchmark's job, benchmarks/_startup.py);
    # berth._public is the table of where each lives.
    code = "import sys\nbefore = set(sys.modules)\nimport berth\nprint(sorted(set(sys.modules) - before))\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['__future__', 'berth', 'berth._public']", done.stdout


def test_the_api_in_use_imports_no_cloud_client_rich_click_crypto_or_kms_module() -> None:
    # Every public name but the KMS and async ones, and a store that saves and claims; cryptography
    # loads on a sealer's first seal or open (and is then there: the last lines check it).
    code = (
        "import sys, berth\n"
        "names = [getattr(berth, n) for n in berth.__all__ if n not in ('KmsSealer', 'kms', 'aio')]\n"
        "store = berth.open_store('memory://', identity='a', sealer=berth.PlaintextSealer())\n"
        "env = berth.Envelope(provider='p', model='m', config_digest=berth.digest_json({}), provider_state=b'{}')\n"
        "store.save('k', env)\n"
        "assert store.claim('k') is not None\n"
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


def test_dir_lists_every_public_name_before_any_is_used() -> None:
    code = "import berth\nprint(sorted(set(berth.__all__) - set(dir(berth))), sorted(vars(berth)).count('Store'))\n"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[] 0"  # all listed, none yet imported
    with pytest.raises(AttributeError, match="no attribute 'Stor'"):
        berth.Stor  # noqa: B018


def test_public_names_read_as_berth_however_their_module_is_reached() -> None:
    # No `berth.X` is touched: each defining module is imported directly, as berth.aio, berth.langgraph
    # or the command line reach them, and a traceback must still read `berth.TokenMismatch`.
    code = (
        "import importlib, berth\n"
        "wrong = []\n"
        "for module, names in berth._public.EXPORTS.items():\n"
        "    ns = vars(importlib.import_module(module))\n"
        "    want = 'berth' if module.startswith('berth._') else module\n"
        "    wrong += [f'{module}.{n}' for n in names if callable(ns[n]) and ns[n].__module__ != want]\n"
        "print(wrong, sorted(set(berth.__all__) - set(vars(berth))))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    unbound = sorted(set(berth.__all__) - {"aio", "kms"})  # importing a submodule binds it, and nothing else
    assert done.stdout.strip() == f"[] {unbound}", done.stdout


def test_the_lazy_table_the_type_checking_imports_and_all_agree() -> None:
    # berth/__init__.py names each public name three times: in the imports that type checkers and the
    # API reference read, in the table `__getattr__` imports from, and in `__all__`.
    tree = ast.parse(Path(berth.__file__).read_text())
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    imported = {
        alias.name: f"berth.{alias.name}" if node.module == "berth" else node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("berth")
        for alias in node.names
    }
    assert imported == berth._HOME
    assert set(imported) == set(berth.__all__)
