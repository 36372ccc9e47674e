"""boto3 sessions on one shared data loader, for the S3 backend and AwsKms.

botocore's data loader parses the service model, the endpoint rules and the partitions (JSON
files of a few MiB) and keeps them. Each new boto3 session has a new loader, so each S3 backend
or KMS client berth opened parsed them again: ~140 ms of CPU, most of an open. The files do not
change while the process runs, so the sessions berth makes share one loader; everything else
(credentials, config files, profile, region) is still each session's own.
"""

from __future__ import annotations

import threading
from typing import Any

import boto3  # type: ignore[import-untyped, unused-ignore]
import botocore.session  # type: ignore[import-untyped, unused-ignore]

__all__ = ["client", "session"]

_loader: list[Any] = []
_lock = threading.Lock()


def session(profile_name: str | None = None) -> Any:
    """A new `boto3.session.Session` (on `profile_name`) whose clients load models through the shared loader."""
    core = botocore.session.get_session()
    with _lock:
        if _loader:
            core.register_component("data_loader", _loader[0])
        made = boto3.session.Session(botocore_session=core, profile_name=profile_name)
        loader = core.get_component("data_loader")
        # boto3 appends its own data directory to the loader's search path for every session: once is enough
        loader.search_paths[:] = list(dict.fromkeys(loader.search_paths))
        if not _loader:
            _loader.append(loader)
    return made


def client(
    service: str,
    *,
    profile_name: str | None,
    region_name: str | None,
    endpoint_url: str | None,
    attempts: int,
    connect_timeout: float,
    read_timeout: float,
    **config: Any,
) -> Any:
    """A boto3 client of `service` on a `session` (botocore `standard` retries, `attempts` in all).

    The region: `region_name`, else the session's (`AWS_REGION`, `AWS_DEFAULT_REGION`, the
    profile), else us-east-1; `config`: more `botocore.config.Config` options (S3's addressing).
    """
    from botocore.config import Config  # type: ignore[import-untyped, unused-ignore]

    made = session(profile_name)
    settings = Config(
        region_name=region_name or made.region_name or "us-east-1",
        retries={"mode": "standard", "total_max_attempts": max(1, attempts)},
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        **config,
    )
    return made.client(service, endpoint_url=endpoint_url, config=settings)
