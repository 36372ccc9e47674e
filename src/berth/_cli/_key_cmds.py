"""The key commands: `keys generate`, `keys rotate`, `keys show` (AES-256-GCM keyring files)."""

from __future__ import annotations

import base64
import os
import stat
from typing import Any

import click

import berth
from berth._cli._app import CONTEXT, Group, cli, output_options
from berth._cli._failures import bad_usage, counted, refuse, warn
from berth._cli._output import emit_json, print_fields
from berth._cli._settings import load_keyring


@cli.group("keys", cls=Group, context_settings=CONTEXT)
def keys_group() -> None:
    """Create, rotate and inspect keyring files (AES-256-GCM keys).

    \b
    Example:
      berth keys generate keys.json && export BERTH_KEYRING=keys.json
    """


def _keyring_doc(path: str, ring: berth.Keyring, reveal: bool) -> dict[str, Any]:
    doc: dict[str, Any] = {"path": path, "primary": ring.primary, "key_ids": ring.key_ids}
    try:
        doc["mode"] = f"{stat.S_IMODE(os.stat(path).st_mode):04o}"
    except OSError:
        doc["mode"] = None
    if reveal:
        doc["keys"] = {kid: base64.b64encode(ring.key(kid) or b"").decode() for kid in ring.key_ids}
    return doc


def _print_keyring(doc: dict[str, Any]) -> None:
    rows = [
        ("keyring", doc["path"]),
        ("mode", doc["mode"] or "?"),
        ("primary", doc["primary"]),
        ("keys", f"{len(doc['key_ids']):,}: " + ", ".join(doc["key_ids"])),
    ]
    for kid, material in doc.get("keys", {}).items():
        rows.append((f"key {kid}", material))
    print_fields(rows)


@keys_group.command("generate", context_settings=CONTEXT)
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="Overwrite an existing file (its keys are lost).")
@output_options()
def keys_generate(path: str, force: bool, out: str | None) -> None:
    """Write a new keyring with one fresh key to PATH (mode 0600).

    \b
    Example:
      berth keys generate ~/.config/berth/keys.json
    """
    if os.path.exists(path) and not force:
        refuse(f"keyring {path!r} already exists: `berth keys rotate {path}` adds a key; --force overwrites")
    ring = berth.Keyring.generate()
    _save_keyring(ring, path)
    if out:
        emit_json(_keyring_doc(path, ring, False))
    else:
        click.echo(f"wrote keyring {path} (primary {ring.primary}, mode 0600): keep it secret, back it up")


@keys_group.command("rotate", context_settings=CONTEXT)
@click.argument("path", type=click.Path(dir_okay=False))
@output_options()
def keys_rotate(path: str, out: str | None) -> None:
    """Add a fresh primary key to the keyring at PATH.

    Older keys stay, so older frames still open; `berth reseal` moves them
    to the new key.

    \b
    Example:
      berth keys rotate keys.json && berth reseal --keyring keys.json
    """
    old = load_keyring(path)
    ring = old.rotate()
    _save_keyring(ring, path)
    if out:
        emit_json(_keyring_doc(path, ring, False))
    else:
        click.echo(
            f"rotated {path}: new primary {ring.primary}, {counted(len(ring), 'key')}; "
            "`berth reseal` moves parked frames to it"
        )


@keys_group.command("show", context_settings=CONTEXT)
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--reveal", is_flag=True, help="Also print the key material (base64). Keep it off screens.")
@output_options()
def keys_show(path: str, reveal: bool, out: str | None) -> None:
    """Describe the keyring at PATH (no key material unless --reveal).

    \b
    Example:
      berth keys show keys.json
    """
    ring = load_keyring(path, allow_readable=True)  # the tool that shows what is wrong with it
    doc = _keyring_doc(path, ring, reveal)
    if out:
        emit_json(doc)
    else:
        _print_keyring(doc)
    if doc["mode"] and int(doc["mode"], 8) & 0o077:
        warn(f"keyring {path!r} has mode {doc['mode']}: others can read it; chmod 600 {path}")


def _save_keyring(ring: berth.Keyring, path: str) -> None:
    try:
        ring.save(path)
    except OSError as exc:
        bad_usage(f"cannot write keyring {path!r}: {exc.strerror or exc}")
