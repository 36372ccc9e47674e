"""The bulk commands, each a walk over every frame under a prefix: `sweep`, `reseal`, `verify`, `delete-prefix`.

Each shows progress with a total and a rate on a terminal, takes `--prefix` and `--after KEY`,
and on Ctrl-C says where it stopped and how to resume (exit 130): the walk is in key order, and
`--after KEY` resumes it after the last key it dealt with (docs/cli.md, "Bulk commands").
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import click

import berth
from berth._cli._app import CONTEXT, cli, output_options, store_options
from berth._cli._failures import INTERRUPTED, Failure, bad_usage, counted, one_line, refuse
from berth._cli._output import emit_json, emit_jsonl, progress, terminal_safe
from berth._cli._settings import Settings, find_listing
from berth._errors import where
from berth._format import is_expired, now

# The commands register themselves on `cli` when this module is imported; these are what others call.
__all__ = ["VERIFY_STATES", "verify_one"]

_F = TypeVar("_F", bound=Callable[..., Any])


def walk_options(f: _F) -> _F:
    """`--prefix` and `--after KEY`, the same on every bulk command."""
    f = click.option(
        "--after",
        default=None,
        metavar="KEY",
        help="Resume a walk cut short: only keys that sort after KEY (the one Ctrl-C printed).",
    )(f)
    return click.option("--prefix", default="", metavar="PREFIX", help="Only keys that start with PREFIX.")(f)


@contextmanager
def walking(
    settings: Settings, store: berth.Store, label: str, prefix: str, after: str | None
) -> Iterator[Callable[[str], None]]:
    """A bulk walk's progress (a total and a rate on a terminal) and its Ctrl-C.

    Yields the `on_progress` to pass the store: called with each key dealt with, in key order.
    Ctrl-C ends the command with exit 130 and one line naming the last key dealt with and the
    `--after` that resumes from there (in `--json`, `stopped_after` and `done`).
    """
    last: list[Any] = [after, 0]
    total = None
    if sys.stderr.isatty():  # the bar's total: a pass over the headers (never the frames) first
        total = sum(1 for item in store.list(prefix) if after is None or item.key > after)
    with progress(label, total) as advance:

        def step(key: str) -> None:
            last[0] = key
            last[1] += 1
            advance()

        try:
            yield step
        except KeyboardInterrupt:
            key, done = last
            again = f"{settings.command}" + (f" --prefix {_quoted(prefix)}" if prefix else "")
            where_now = (
                "before its first key"
                if key is None
                else f"after key {key!r}: resume with `{again} --after {_quoted(key)}`"
            )
            raise Failure(
                f"{where(store.identity)}: interrupted after {counted(done, 'key')}, {where_now}",
                INTERRUPTED,
                details={"stopped_after": key, "done": done},
            ) from None


def _quoted(text: str) -> str:
    import shlex

    return shlex.quote(text)


@cli.command("sweep", context_settings=CONTEXT)
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@walk_options
@output_options()
@store_options(env=False)
@click.pass_obj
def sweep_cmd(settings: Settings, dry_run: bool, prefix: str, after: str | None, out: str | None) -> None:
    """Remove every envelope past its deadline (needs no key).

    Each is removed only if unchanged since it was listed: a run re-parked
    meanwhile survives. Their questions go with them.

    \b
    Example:
      berth sweep --dry-run
      berth sweep --prefix org/repo/ --after 'org/repo/#42'
    """
    store = settings.open(keys=False)
    at = now()
    if dry_run:
        keys = [
            item.key
            for item in store.list(prefix)
            if item.error is None and is_expired(item.deadline, at) and (after is None or item.key > after)
        ]
    else:
        keys = []
        with walking(settings, store, "sweeping", prefix, after) as step:
            store.sweep(at, prefix=prefix, after=after, on_removed=lambda item: keys.append(item.key), on_progress=step)
    dropped = 0 if dry_run else settings.questions(keys=False).sweep(at)
    if out:
        emit_json({"dry_run": dry_run, "swept": len(keys), "keys": keys, "questions": dropped})
        return
    verb = "would remove" if dry_run else "removed"
    click.echo(
        f"{verb} {counted(len(keys), 'expired envelope')} for {where(store.identity)}"
        + (f" under {prefix!r}" if prefix else "")
        + (f" and {counted(dropped, 'question')}" if dropped else "")
    )
    for key in keys:
        click.echo(f"  {terminal_safe(key)}")


@cli.command("reseal", context_settings=CONTEXT)
@click.option(
    "--accept-plaintext", is_flag=True, help="Also seal legacy plaintext frames (a migration; off by default)."
)
@walk_options
@output_options()
@store_options(env=False)
@click.pass_obj
def reseal_cmd(settings: Settings, accept_plaintext: bool, prefix: str, after: str | None, out: str | None) -> None:
    """Re-seal every envelope not sealed by the current key.

    Run it after `berth keys rotate`, or with BERTH_KMS and BERTH_KEYRING both
    set to move a keyring store onto a KMS.

    Exit 1 if any frame could not be opened.

    \b
    Example:
      berth keys rotate keys.json && berth reseal --keyring keys.json
    """
    store = settings.open(keys=True, accept_plaintext=accept_plaintext)
    with walking(settings, store, "resealing", prefix, after) as step:
        report = store.reseal(prefix=prefix, after=after, on_progress=step)
    moved, skipped, failed = int(report), report.skipped, report.failed
    if out:
        emit_json({"moved": moved, "skipped": skipped, "failed": failed})
    else:
        sealed_by = f"{store.sealer.name}:{store.sealer.key_id}"
        click.echo(
            f"resealed {counted(moved, 'envelope')} for {where(store.identity)} under {sealed_by}"
            + (f"; {skipped:,} changed meanwhile" if skipped else "")
            + (f"; {failed:,} did not open" if failed else "")
        )
    if failed:
        refuse(
            f"{counted(failed, 'frame')} of {where(store.identity)} did not open: run `berth verify`",
            reported=out == "json",
        )


@cli.command("delete-prefix", context_settings=CONTEXT)
@walk_options
@click.option("--yes", is_flag=True, help="Do not ask for confirmation (a script; needed without a terminal).")
@output_options()
@store_options(env=False)
@click.pass_obj
def delete_prefix_cmd(settings: Settings, prefix: str, after: str | None, yes: bool, out: str | None) -> None:
    """Remove every envelope whose key starts with --prefix (needs no key).

    Each is removed only if unchanged since it was listed; frames that do not
    open are removed too. Without --prefix, every envelope of the identity.
    `berth ls --prefix PREFIX` shows what it would remove.

    \b
    Example:
      berth delete-prefix --prefix 'org/old-repo/' --yes
    """
    store = settings.open(keys=False)
    what = (
        f"every envelope {f'under {prefix!r}' if prefix else '(no --prefix: all of them)'} for {where(store.identity)}"
    )
    if not yes:
        if not sys.stdin.isatty():
            bad_usage(f"delete-prefix removes {what}: add --yes to confirm")
        if not click.confirm(f"Remove {what}?", err=True):
            refuse("nothing removed: not confirmed")
    with walking(settings, store, "removing", prefix, after) as step:
        removed = store.delete_prefix(prefix, after=after, on_progress=step)
    if out:
        emit_json({"prefix": prefix, "removed": removed})
    else:
        click.echo(
            f"removed {counted(removed, 'envelope')} for {where(store.identity)}"
            + (f" under {prefix!r}" if prefix else "")
        )


VERIFY_STATES = ("ok", "expired", "tampered", "unknown_key", "unreadable")


def verify_one(store: berth.Store, key: str) -> tuple[str, str]:
    """Open the frame under `key`: one of VERIFY_STATES (or `gone`) and why."""
    try:
        parked = store.load(key)
    except berth.Expired:
        return "expired", "past its deadline: never resumed (`berth sweep` removes it)"
    except berth.IntegrityError as exc:
        item = find_listing(store, key)
        if item is not None:
            name, _, key_id = item.sealed_by.partition(":")
            if name != berth.PlaintextSealer.name and not store.sealer.can_open(name, key_id):
                return "unknown_key", (
                    f"claims to be sealed by {item.sealed_by}, which the configured sealer does not hold "
                    "(or its header was rewritten)"
                )
        return "tampered", str(exc)
    except berth.FormatError as exc:
        return "unreadable", str(exc)
    if parked is None:
        return "gone", "claimed or removed while verifying"
    return "ok", ""


@cli.command("verify", context_settings=CONTEXT)
@walk_options
@output_options(stream=True)
@store_options(env=False)
@click.pass_obj
def verify_cmd(settings: Settings, prefix: str, after: str | None, out: str | None) -> None:
    """Open every frame; count ok, expired, tampered, unknown key.

    Exit 1 if any frame does not open: tampered, unreadable, or sealed under a
    key id the configured sealer does not hold (the header's key id is not
    authenticated until the frame opens).

    \b
    Example:
      berth verify --keyring keys.json --jsonl | grep -v '"ok"'
    """
    store = settings.open(keys=True)
    counts = dict.fromkeys(VERIFY_STATES, 0)
    problems: list[dict[str, str]] = []
    with walking(settings, store, "verifying", prefix, after) as step:
        for item in store.list(prefix):  # in key order; unreadable frames included, flagged
            key = item.key
            if after is not None and key <= after:
                continue
            state, why = verify_one(store, key)
            if state != "gone":
                counts[state] += 1
                if out == "jsonl":
                    emit_jsonl({"key": key, "status": state, "error": why or None})
                elif state != "ok":
                    problems.append({"key": key, "status": state, "error": why})
            step(key)
    if out == "json":
        emit_json({**counts, "problems": problems})
    elif out is None:
        for p in problems:
            click.echo(f"{p['status'].replace('_', ' '):<11} {terminal_safe(p['key'])}: {one_line(p['error'])}")
        summary = ", ".join(f"{n:,} {s.replace('_', ' ')}" for s, n in counts.items() if n or s in ("ok", "tampered"))
        click.echo(f"{where(store.identity)}: {summary}")
    # A frame's key id is in its cleartext header, which only the seal authenticates: "sealed
    # under a key we lack" may be a rewritten header. Whatever it claims, a frame that does not
    # open fails the command.
    bad = counts["tampered"] + counts["unreadable"] + counts["unknown_key"]
    if bad:
        refuse(
            f"{counted(bad, 'frame')} of {where(store.identity)} did not open "
            "(tampered, unreadable, or sealed under a key id the sealer does not hold)",
            reported=out is not None,  # the report, or a line per frame, told it
        )
