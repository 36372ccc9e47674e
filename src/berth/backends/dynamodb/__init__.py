"""`dynamodb://TABLE`: frames as DynamoDB items; an item version is the token.

Key schema (`berth setup` creates it): partition key `pk`, sort key `sk`, both strings. A
name `{identity}/{key}` is the item `pk = identity, sk = key`, so every listing the store
makes (a prefix `{identity}/...`) is a `Query` on one partition with `begins_with(sk, ...)`,
in name order (DynamoDB orders a string sort key by its UTF-8 bytes, as berth does), one
page at a time; a prefix with no `/` (no store makes one) falls back to a `Scan`.

Attributes of a frame's item: `ver` (the token: a fresh random version per write), `head`
(the frame's first 1,024 bytes: what a listing reads, by projection), `body` (the rest),
`size`. Every conditional write and delete carries a `ConditionExpression` on `ver`
(`attribute_not_exists(pk)` for a create); `ConditionalCheckFailedException` is
`TokenMismatch`, unless botocore retried the call after a transient error (then the
outcome is unknown: `BackendError`, never a lost claim).

A frame over one item's room (384 KiB of data; DynamoDB's limit is 400 KB an item) is
stored in parts: items `pk = name, sk = {ver}/{index}` (a partition of their own: `pk`
holds a `/`, which no frame's partition does), written first, then the frame's item as a
manifest naming the part count (in `ver`: `{random}.{count}`), with `size` and the
SHA-256 of the whole frame (`digest`). The manifest is the commit point: before it lands
no reader sees the frame; a reader that finds a part missing or changed while the
manifest still names that part-set raises `IntegrityError` (a torn frame is never
opened); one whose manifest was replaced meanwhile reads the new one. The part-set of a
replaced or deleted manifest is deleted once it is replaced; part-sets that no manifest
ever named (a writer killed between its parts and its manifest) are deleted by the next
large write of the same name once they are an hour old.

Unconditional puts are never repeated by botocore (a repeat after an ambiguous failure
could re-create a frame a waker claimed between the two attempts); only a throttled one
(`ProvisionedThroughputExceededException`, `ThrottlingException`, `RequestLimitExceeded`:
refused before anything was applied) is repeated, with backoff.

Every item of a frame (its manifest and each of its parts) carries a TTL attribute
(`expires_at` unless `?ttl_attribute=` names another; empty: none), in epoch seconds: the
deadline in the frame's cleartext header plus `TTL_GRACE` (an hour), so DynamoDB deletes
an expired run's items in the end. A backstop only: DynamoDB deletes an expired item up to
days after its time, berth refuses a past-deadline frame itself, and a part deleted before
its manifest leaves a torn frame, refused. A frame without a deadline, or bytes that are not
a frame, get no TTL attribute.
"""

from __future__ import annotations

from berth.backends.dynamodb._backend import DynamoDbBackend
from berth.backends.dynamodb._wire import HEAD_BYTES, ITEM_BYTES, TTL_ATTRIBUTE, TTL_GRACE

__all__ = ["HEAD_BYTES", "ITEM_BYTES", "TTL_ATTRIBUTE", "TTL_GRACE", "DynamoDbBackend"]
