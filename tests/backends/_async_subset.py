"""The contract's representative cases, for the runs whose emulators make every case slow.

GCS and S3 reach berth.aio through `ThreadedBackend`, the same adapter that runs SQLite
and the file backend (whose async contract runs in full by default). Against their HTTP
emulators each case costs dozens of requests, so the default run takes this subset for
them -- every new call, the races, expiry, listing, tampering -- and the full async
contract runs under `-m slow` (`pytest -m slow tests/backends/test_s3.py`). The contract
under AwsKms (moto's KMS) runs in full on memory and takes this subset on SQLite
(`pytest -m slow tests/sealers/test_kms_sealer.py` for all of it).
"""

from __future__ import annotations

from typing import Any

import pytest

__all__ = ["REPRESENTATIVE", "split"]

REPRESENTATIVE = frozenset(
    {
        "test_round_trip_keeps_every_field",
        "test_save_returns_the_token_of_what_it_parked",
        "test_save_if_absent_is_first_writer_wins",
        "test_save_if_match_is_compare_and_set",
        "test_impossible_save_conditions_never_reach_the_backend",
        "test_load_many_keeps_order_and_gaps",
        "test_delete_with_stale_token_mismatches",
        "test_zero_token_never_matches_and_never_reaches_the_backend",
        "test_claim_once",
        "test_claim_race_between_threads",
        "test_claim_race_between_processes",
        "test_claim_of_expired_removes_and_raises",
        "test_deadline_fails_closed",
        "test_list_streams_headers",
        "test_list_is_in_bytewise_key_order",
        "test_list_latest_under_a_prefix",
        "test_delete_prefix_removes_only_under_the_prefix",
        "test_save_racing_a_delete_prefix_survives",
        "test_sweep_removes_only_the_expired",
        "test_save_racing_a_sweep_survives",
        "test_reseal_moves_plaintext_to_the_sealer",
        "test_frame_copied_to_another_key_fails",
        "test_bad_key_is_refused_before_any_io",
        "test_garbage_where_a_frame_should_be",
    }
)


def split(cls: type, name: str) -> tuple[type, type]:
    """(every case of the contract class `cls`, marked slow; the REPRESENTATIVE cases), named `name`
    and `name + "Core"`; `cls` itself must not be collected (a name without the `Test` prefix)."""
    full = pytest.mark.slow(type(name, (cls,), {"__doc__": cls.__doc__, "__module__": cls.__module__}))
    dropped: dict[str, Any] = {n: None for n in dir(cls) if n.startswith("test_") and n not in REPRESENTATIVE}
    doc = f"The representative cases of {name} (all of them run under -m slow)."
    core = type(name + "Core", (cls,), {**dropped, "__doc__": doc, "__module__": cls.__module__})
    return full, core
