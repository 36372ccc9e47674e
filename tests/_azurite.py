"""Azurite, Microsoft's Azure Storage emulator (npm package `azurite`), for the azblob:// tests.

`.ci/run` installs it with npm into ~/.cache/berth-azurite when it is missing (CONTRIBUTING.md
says how a laptop gets it); the test session starts its blob service on a free loopback port,
in memory, with telemetry off (tests/conftest.py), unless BERTH_TEST_AZURITE_URL names a
running one (its blob endpoint, `http://127.0.0.1:10000/devstoreaccount1`).

    azurite_command(port)        # the command, or None when Azurite is not installed
    connection_string(endpoint)  # the well-known development account's connection string
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["ACCOUNT", "ACCOUNT_KEY", "INSTALLED_AT", "azurite_command", "connection_string"]

ACCOUNT = "devstoreaccount1"
ACCOUNT_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
"""Azurite's published development key: a public constant, not a secret."""
INSTALLED_AT = Path(os.environ.get("BERTH_AZURITE_HOME", Path.home() / ".cache" / "berth-azurite"))


def azurite_command(port: int) -> list[str] | None:
    """The command that serves Azurite's blob service on 127.0.0.1:`port` in memory, or None."""
    found = shutil.which("azurite-blob")
    local = INSTALLED_AT / "node_modules" / ".bin" / "azurite-blob"
    program = found or (str(local) if local.exists() else None)
    if program is None:
        return None
    return [
        program,
        "--blobHost",
        "127.0.0.1",
        "--blobPort",
        str(port),
        "--inMemoryPersistence",
        "--extentMemoryLimit",
        "2048",
        "--skipApiVersionCheck",  # the SDK may speak a newer service version than this Azurite knows
        "--loose",
        "--silent",
        "--disableTelemetry",  # the tests reach nothing off this machine
    ]


def connection_string(endpoint: str) -> str:
    """The development account's connection string for a blob endpoint (`http://host:port/devstoreaccount1`)."""
    return f"DefaultEndpointsProtocol=http;AccountName={ACCOUNT};AccountKey={ACCOUNT_KEY};BlobEndpoint={endpoint};"
