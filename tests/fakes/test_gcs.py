"""The in-process Cloud Storage fake against the generation preconditions GCS documents.

berth's exactly-once claim on GCS is tested on this fake (no emulator honours
`ifGenerationMatch` on delete), so the fake itself is held to the service's
documented semantics, over raw HTTP, independent of the google client.

Sources (the JSON API reference for objects.insert / objects.get / objects.delete,
and the "Request preconditions" page):

- ifGenerationMatch: the request proceeds only if the live object's generation
  matches; 0 means it proceeds only if there is no live object (create-only).
- ifGenerationNotMatch: proceeds only if the live generation does not match; if
  no live object exists the precondition fails; 0 means "only if one exists".
- A failed precondition is 412 Precondition Failed; a failed not-match on a
  read is 304 Not Modified.
- Reading or deleting an object that does not exist is 404 whatever its
  preconditions (the object is looked up before they are evaluated; so do
  Google's own storage-testbench and the service).
- Every write gives the object a new generation.
"""

from __future__ import annotations

import http.client
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from urllib.parse import quote, urlencode, urlsplit

import pytest

from tests.fakes.gcs import FakeGcs

NAME = "i/k"


@dataclass(frozen=True)
class Case:
    """One documented behaviour: `op` on an object that is `state`, with preconditions `given`."""

    op: str  # insert | get | media | delete
    state: str  # absent | present
    given: dict[str, str]  # parameter -> "live" (its generation), "stale" (an earlier one), "0", "other"
    status: int
    after: str  # unchanged | gone | new (a new live generation)

    @property
    def id(self) -> str:
        cond = ",".join(f"{k}={v}" for k, v in self.given.items()) or "none"
        return f"{self.op}-{self.state}-{cond}"


M, N = "ifGenerationMatch", "ifGenerationNotMatch"
TABLE = [
    # objects.insert
    Case("insert", "absent", {}, 200, "new"),
    Case("insert", "present", {}, 200, "new"),
    Case("insert", "absent", {M: "0"}, 200, "new"),
    Case("insert", "present", {M: "0"}, 412, "unchanged"),
    Case("insert", "present", {M: "live"}, 200, "new"),
    Case("insert", "present", {M: "stale"}, 412, "unchanged"),
    Case("insert", "absent", {M: "stale"}, 412, "unchanged"),
    Case("insert", "present", {N: "live"}, 412, "unchanged"),
    Case("insert", "present", {N: "stale"}, 200, "new"),
    Case("insert", "present", {N: "0"}, 200, "new"),
    Case("insert", "absent", {N: "stale"}, 412, "unchanged"),
    Case("insert", "absent", {N: "0"}, 412, "unchanged"),
    # objects.get (metadata) and objects.get?alt=media
    *[
        case
        for op in ("get", "media")
        for case in (
            Case(op, "present", {}, 200, "unchanged"),
            Case(op, "present", {M: "live"}, 200, "unchanged"),
            Case(op, "present", {M: "stale"}, 412, "unchanged"),
            Case(op, "present", {M: "0"}, 412, "unchanged"),
            Case(op, "present", {N: "live"}, 304, "unchanged"),
            Case(op, "present", {N: "stale"}, 200, "unchanged"),
            Case(op, "absent", {}, 404, "unchanged"),
            Case(op, "absent", {M: "stale"}, 404, "unchanged"),
            Case(op, "absent", {M: "0"}, 404, "unchanged"),
        )
    ],
    # objects.delete: the claim's commit point
    Case("delete", "present", {}, 204, "gone"),
    Case("delete", "present", {M: "live"}, 204, "gone"),
    Case("delete", "present", {M: "stale"}, 412, "unchanged"),
    Case("delete", "present", {M: "0"}, 412, "unchanged"),
    Case("delete", "present", {M: "other"}, 412, "unchanged"),
    Case("delete", "present", {N: "live"}, 412, "unchanged"),
    Case("delete", "present", {N: "stale"}, 204, "gone"),
    Case("delete", "absent", {}, 404, "unchanged"),
    Case("delete", "absent", {M: "stale"}, 404, "unchanged"),
    Case("delete", "absent", {M: "0"}, 404, "unchanged"),
]


class Wire:
    """Raw JSON API calls to one bucket of the fake."""

    def __init__(self, fake: FakeGcs, bucket: str):
        parts = urlsplit(fake.url)
        self.host, self.port, self.bucket = parts.hostname or "127.0.0.1", parts.port or 80, bucket

    def call(self, method: str, path: str, query: dict[str, str], body: bytes = b"", ctype: str = "") -> tuple:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=10)
        try:
            headers = {"Content-Type": ctype} if ctype else {}
            conn.request(method, f"{path}?{urlencode(query)}", body=body, headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def insert(self, data: bytes, query: dict[str, str]) -> tuple:
        boundary = uuid.uuid4().hex
        meta = json.dumps({"name": NAME}).encode()
        body = b"".join([
            f"--{boundary}\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n".encode(), meta, b"\r\n",
            f"--{boundary}\r\nContent-Type: application/octet-stream\r\n\r\n".encode(), data, b"\r\n",
            f"--{boundary}--\r\n".encode(),
        ])  # fmt: skip
        query = {"uploadType": "multipart", **query}
        path = f"/upload/storage/v1/b/{self.bucket}/o"
        return self.call("POST", path, query, body, f'multipart/related; boundary="{boundary}"')

    def object_path(self) -> str:
        return f"/storage/v1/b/{self.bucket}/o/{quote(NAME, safe='')}"

    def live(self) -> int | None:
        status, body = self.call("GET", self.object_path(), {})
        return int(json.loads(body)["generation"]) if status == 200 else None


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGcs]:
    with FakeGcs() as fake:
        yield fake


@pytest.mark.parametrize("case", TABLE, ids=lambda c: c.id)
def test_the_fake_keeps_the_documented_precondition_semantics(fake: FakeGcs, case: Case) -> None:
    bucket = f"semantics-{uuid.uuid4().hex[:12]}"
    fake.create_bucket(bucket)
    wire = Wire(fake, bucket)
    assert wire.insert(b"first", {})[0] == 200
    stale = wire.live()
    assert wire.insert(b"second", {})[0] == 200
    live = wire.live()
    assert stale is not None and live is not None and live > stale
    if case.state == "absent":
        assert wire.call("DELETE", wire.object_path(), {})[0] == 204
    values = {"live": str(live), "stale": str(stale), "0": "0", "other": str(live + 10**9)}
    query = {k: values[v] for k, v in case.given.items()}
    before = wire.live()

    if case.op == "insert":
        status, body = wire.insert(b"third", query)
    elif case.op == "delete":
        status, body = wire.call("DELETE", wire.object_path(), query)
    else:
        status, body = wire.call(
            "GET", wire.object_path(), {**query, **({"alt": "media"} if case.op == "media" else {})}
        )

    assert status == case.status, body
    now = wire.live()
    if case.after == "unchanged":
        assert now == before
    elif case.after == "gone":
        assert now is None
    else:
        assert now is not None and now > (before or live), "every write gives a new, higher generation"
    if status == 412:
        assert json.loads(body)["error"]["errors"][0]["reason"] == "conditionNotMet"
    if case.op == "media" and status == 200:
        assert body == b"second"


def test_a_precondition_the_fake_does_not_implement_is_refused_not_ignored(fake: FakeGcs) -> None:
    bucket = f"semantics-{uuid.uuid4().hex[:12]}"
    fake.create_bucket(bucket)
    wire = Wire(fake, bucket)
    assert wire.insert(b"x", {})[0] == 200
    status, _ = wire.call("DELETE", wire.object_path(), {"ifMetagenerationMatch": "7"})
    assert status == 501
    assert wire.live() is not None


def test_the_table_covers_every_precondition_on_every_call() -> None:
    for op in ("insert", "get", "media", "delete"):
        for param in (M, N):
            assert any(c.op == op and param in c.given for c in TABLE), (op, param)
        assert {c.state for c in TABLE if c.op == op} == {"absent", "present"}
