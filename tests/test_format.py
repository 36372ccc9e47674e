"""berth._format: what the command line and the inbox both show, and that it needs neither."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone

import berth
from berth._format import (
    ago,
    deadline_text,
    envelope_doc,
    is_expired,
    labels_text,
    listing_doc,
    rfc3339,
    size_text,
    span,
)

AT = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_the_formatting_loads_without_the_command_line() -> None:
    code = (
        "import sys, berth._format\n"
        "print(' '.join(m for m in sys.modules if m.split('.')[0] in ('click', 'rich') or m.startswith('berth._cli')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == []


def test_times_and_sizes() -> None:
    assert [span(s) for s in (5, 90, 3600, 3660, 86400 * 14 - 1, -5)] == ["5s", "1m", "1h", "1h 1m", "13d 23h", "5s"]
    assert ago(AT + timedelta(days=14), AT) == "in 14d" and ago(AT - timedelta(seconds=5), AT) == "5s ago"
    assert deadline_text(None, AT) == "none"
    assert deadline_text(AT - timedelta(seconds=5), AT) == "expired 5s ago"
    assert not is_expired(AT, AT) and is_expired(AT - timedelta(microseconds=1), AT)
    assert [size_text(n) for n in (812, 1023, 1229, 3 << 20)] == ["812 B", "1,023 B", "1.2 KiB", "3.0 MiB"]
    assert rfc3339(AT) == "2026-01-01T00:00:00Z" and rfc3339(None) is None
    far = datetime(9999, 12, 31, 23, 59, tzinfo=timezone(-timedelta(hours=23, minutes=59)))
    assert rfc3339(far) == "9999-12-31T23:59:00-23:59"  # in UTC it is year 10000


def test_labels_for_people_hide_berths_own() -> None:
    labels = {"pr": "42", "berth.questions": "1"}
    assert labels_text(labels) == "pr=42 berth.questions=1"
    assert labels_text(labels, human=True) == "pr=42"


def test_documents_carry_the_python_api_field_names() -> None:
    store = berth.open_store("memory://", identity="pr-bot", sealer=berth.AesGcmSealer(berth.Keyring.generate()))
    env = berth.Envelope(
        provider="anthropic",
        model="m",
        config_digest=berth.digest_json({}),
        run_id="r1",
        provider_state={"a": 1},
        pending_calls=[berth.PendingCall(id="c1", name="push", input={"force": False})],
        deadline=AT + timedelta(days=1),
        labels={"pr": "42"},
    )
    store.save("org/repo#42", env)
    (item,) = store.list()
    assert listing_doc(item) == {
        "key": "org/repo#42",
        "run_id": "r1",
        "created_at": rfc3339(item.created_at),
        "deadline": "2026-01-02T00:00:00Z",
        "size": item.size,
        "labels": {"pr": "42"},
        "sealed_by": item.sealed_by,
    }
    parked = store.load("org/repo#42", allow_expired=True)
    assert parked is not None
    doc = envelope_doc("org/repo#42", parked.envelope)
    assert doc["provider_state"] == {"a": 1} and doc["loop_state"] is None
    assert doc["pending_calls"] == [{"id": "c1", "name": "push", "input": {"force": False}}]
    assert doc["deadline"] == "2026-01-02T00:00:00Z" and doc["run_id"] == "r1"
