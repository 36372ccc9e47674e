"""The store commands: `ls`, `show`, `park`, `setup`, `claim`, `rm`, `audit` (the bulk walks: `_bulk_cmds`)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import IO

import click

import berth
from berth._cli._app import CONTEXT, cli, output_options, store_options
from berth._cli._failures import bad_usage, counted, refuse, warn
from berth._cli._output import (
    console,
    emit_json,
    emit_json_stream,
    emit_jsonl_stream,
    print_fields,
    print_json_bytes,
    print_listing,
    terminal_safe,
)
from berth._cli._settings import Settings, find_listing, remember_key
from berth._errors import where
from berth._format import ago, deadline_text, envelope_doc, is_expired, labels_text, listing_doc, local, now, size_text

# The commands register themselves on `cli` when this module is imported; these are what others call.
__all__ = ["LS_LIMIT", "parse_deadline"]

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_deadline(value: str, at: datetime | None = None) -> datetime:
    """`30s`, `15m`, `2h`, `14d` from now, or an RFC 3339 time with an offset."""
    at = at or now()
    text = value.strip()
    if text[:-1].isdigit() and text[-1:] in _UNITS:
        return at + timedelta(seconds=int(text[:-1]) * _UNITS[text[-1]])
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise click.BadParameter(f"{value!r} is neither a duration (30s, 15m, 2h, 14d) nor an RFC 3339 time") from None
    if dt.tzinfo is None or dt.utcoffset() is None:
        raise click.BadParameter(f"{value!r} has no UTC offset: add Z or +01:00")
    return dt


def _deadline_option(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    dt = parse_deadline(value)
    if dt <= now():
        raise click.BadParameter(f"{value!r} is not in the future")
    return dt


def _labels_option(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in value:
        k, sep, v = item.partition("=")
        if not sep or not k:
            raise click.BadParameter(f"{item!r} is not k=v")
        labels[k] = v
    return labels


LS_LIMIT = 100
"""Rows the `ls` table shows unless told otherwise (`--limit N`, `--all`); the rest are counted."""


@cli.command("ls", context_settings=CONTEXT)
@click.option("--prefix", default="", metavar="PREFIX", help="Only keys that start with PREFIX.")
@click.option("--expired", is_flag=True, help="Only envelopes past their deadline.")
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help=f"At most N (default: {LS_LIMIT} rows in the table, the rest counted; every one with --json/--jsonl).",
)
@click.option("--all", "everything", is_flag=True, help="Every row in the table, however many.")
@output_options(stream=True)
@store_options(env=False)
@click.pass_obj
def ls_cmd(
    settings: Settings, prefix: str, expired: bool, limit: int | None, everything: bool, out: str | None
) -> None:
    """List what is parked, from frame headers (needs no key).

    \b
    Example:
      berth ls --prefix org/repo --expired
      berth ls --all | less
    """
    if everything and limit is not None:
        raise click.UsageError("--all and --limit exclude each other")
    store = settings.open(keys=False)
    at = now()
    if expired:
        items: Iterator[berth.Listing] = (item for item in store.list(prefix) if is_expired(item.deadline, at))
        if limit is not None and out is not None:
            items = itertools.islice(items, limit)
    else:  # the store's limit: one bounded query where the backend has one
        items = store.list(prefix, limit=limit if out is not None else None)
    if out == "jsonl":
        emit_jsonl_stream(listing_doc(item) for item in items)
    elif out == "json":
        emit_json_stream(listing_doc(item) for item in items)
    else:
        shown, total = print_listing(items, at, None if everything else limit or LS_LIMIT)
        what = f"{'expired ' if expired else ''}envelopes" + (f" under {prefix!r}" if prefix else "")
        if total == 0:
            click.echo(
                f"nothing {'expired' if expired else 'parked'} for {where(store.identity)}"
                + (f" under {prefix!r}" if prefix else ""),
                err=True,
            )
        elif shown < total:
            click.echo(f"{shown:,} of {total:,} {what} shown: --all for every one, --limit N for the first N")


def _header_rows(item: berth.Listing, at: datetime) -> list[tuple[str, str]]:
    return [
        ("key", item.key),
        ("run id", item.run_id or "-"),
        ("created", f"{local(item.created_at)} ({ago(item.created_at, at)})"),
        (
            "deadline",
            "none" if item.deadline is None else f"{local(item.deadline)} ({deadline_text(item.deadline, at)})",
        ),
        ("size", f"{size_text(item.size)} ({counted(item.size, 'byte')})"),
        ("sealed by", item.sealed_by),
        ("labels", labels_text(item.labels) or "-"),
    ]


def _envelope_rows(env: berth.Envelope, at: datetime) -> list[tuple[str, str]]:
    assert env.created_at is not None
    rows = [
        ("run id", env.run_id or "-"),
        ("provider", env.provider or "-"),
        ("model", env.model or "-"),
        ("config", env.config_digest or "-"),
        ("reason", env.reason or "-"),
        ("turn", f"{env.turn} ({env.remaining_turns} left)"),
        ("created", f"{local(env.created_at)} ({ago(env.created_at, at)})"),
        ("deadline", "none" if env.deadline is None else f"{local(env.deadline)} ({deadline_text(env.deadline, at)})"),
        ("labels", labels_text(env.labels) or "-"),
    ]
    if env.trace_id:
        rows.append(("trace id", env.trace_id))
    for call in env.pending_calls:
        rows.append(("pending call", f"{call.name} ({call.id})"))
    return rows


def _print_envelope(key: str, env: berth.Envelope, at: datetime) -> None:
    print_fields([("key", key), *_envelope_rows(env, at)])
    out = console()
    out.print("[bold]provider state[/]")
    print_json_bytes(env.provider_state)
    if env.loop_state is not None:
        out.print("[bold]loop state[/]")
        print_json_bytes(env.loop_state)


@cli.command("show", context_settings=CONTEXT)
@click.argument("key", callback=remember_key)
@click.option("--raw", is_flag=True, help="The frame's cleartext header only; needs no key.")
@output_options()
@store_options(env=False)
@click.pass_obj
def show_cmd(settings: Settings, key: str, raw: bool, out: str | None) -> None:
    """Open one parked envelope and print it (expired ones too).

    \b
    Example:
      berth show 'org/repo#42' --json | jq .provider_state
    """
    at = now()
    if raw:
        store = settings.open(keys=False)
        item = find_listing(store, key)
        if item is None:
            refuse(f"nothing parked at {where(store.identity, key)}")
        if out:
            emit_json(listing_doc(item))
        else:
            print_fields(_header_rows(item, at))
        return
    store = settings.open(keys=True)
    parked = store.load(key, allow_expired=True)
    if parked is None:
        refuse(f"nothing parked at {where(store.identity, key)}")
    if out:
        emit_json(envelope_doc(key, parked.envelope))
    else:
        _print_envelope(key, parked.envelope, at)


@cli.command("park", context_settings=CONTEXT)
@click.argument("key", callback=remember_key)
@click.option(
    "--state",
    "state",
    required=True,
    type=click.File("rb"),
    metavar="FILE|-",
    help="The run's state as JSON, from a file or - for stdin.",
)
@click.option("--run-id", default=None, help="Tells successive runs of KEY apart (default: a fresh random id).")
@click.option("--provider", default="", help="Who produced the state (anthropic, openai, a workflow engine).")
@click.option("--model", default="", help="The model or machine id at suspend time.")
@click.option("--reason", default="awaiting answer", show_default=True, help="Why the run parked.")
@click.option(
    "--deadline",
    callback=_deadline_option,
    metavar="WHEN",
    help="Never resume after this: 30s, 15m, 2h, 14d from now, or an RFC 3339 time.",
)
@click.option("--label", "labels", multiple=True, callback=_labels_option, metavar="K=V", help="A cleartext label.")
@click.option("--question", default=None, metavar="TEXT", help="Ask a human this question once the run is parked.")
@output_options()
@store_options(env=False)
@click.pass_obj
def park_cmd(
    settings: Settings,
    key: str,
    state: IO[bytes],
    run_id: str | None,
    provider: str,
    model: str,
    reason: str,
    deadline: datetime | None,
    labels: dict[str, str],
    question: str | None,
    out: str | None,
) -> None:
    """Seal and park a run's state under KEY (replacing what was there).

    \b
    Example:
      berth park 'org/repo#42' --state state.json --deadline 2h --label repo=org/repo
    """
    data = state.read()
    env = berth.Envelope(
        provider_state=data,
        provider=provider,
        model=model,
        run_id=run_id if run_id is not None else "run-" + os.urandom(4).hex(),
        reason=reason,
        deadline=deadline,
        labels=labels,
    )
    settings.create = True  # parking is how most stores begin
    store = settings.open(keys=True)
    if question is not None:
        berth.Coordinator(store, settings.questions()).suspend(key, env, question=question)
    else:
        store.save(key, env)
    item = find_listing(store, key)
    if item is None:
        refuse(f"{where(store.identity, key)} vanished right after it was parked")
    if out:
        emit_json(listing_doc(item))
        return
    at = now()
    click.echo(
        f"parked {key!r} for {where(store.identity)}: run {terminal_safe(item.run_id)}, "
        f"deadline {deadline_text(item.deadline, at)}, sealed by {terminal_safe(item.sealed_by)}"
    )


@cli.command("setup", context_settings=CONTEXT)
@output_options()
@store_options(env=False)
@click.pass_obj
def setup_cmd(settings: Settings, out: str | None) -> None:
    """Create the store at --url: its directory, database file or tables.

    Idempotent. Every other command but `park` and `serve` opens only a store that
    exists, and exits 66 naming what is missing.

    \b
    Example:
      berth setup --url postgresql://app@db/app
    """
    from berth._redact import redact_url

    settings.create = True
    store = settings.open(keys=False)
    version = store.backend.setup()
    url = redact_url(settings.store_url())
    if out:
        emit_json({"url": url, "identity": store.identity, "schema_version": version})
    else:
        click.echo(f"store ready at {url}" + ("" if version is None else f" (schema version {version})"))


@cli.command("claim", context_settings=CONTEXT)
@click.argument("key", callback=remember_key)
@output_options()
@store_options(env=False)
@click.pass_obj
def claim_cmd(settings: Settings, key: str, out: str | None) -> None:
    """Take the envelope under KEY: exactly one claimer gets it.

    Exit 1 when another claimer won, nothing is parked, or it had expired
    (an expired envelope is removed, never handed out).

    \b
    Example:
      berth claim 'org/repo#42' --json > resumed.json
    """
    store = settings.open(keys=True)
    # store.claim, with everything that can fail done before the conditional delete (the commit
    # point): once that succeeds the run is this caller's, and nothing after it may lose it.
    try:
        parked = store.load(key)
    except berth.Expired as exc:
        if exc.token is not None:
            try:
                store.delete(key, exc.token)  # removed, never handed out (as store.claim does)
            except berth.TokenMismatch:
                pass
        raise
    if parked is None:
        refuse(f"nothing to claim at {where(store.identity, key)}: nothing parked, or another claimer won")
    env = parked.envelope
    try:
        doc = envelope_doc(key, env)  # decodes every raw JSON field: the output cannot fail later
    except (ValueError, RecursionError) as exc:
        refuse(
            f"{where(store.identity, key)} holds state this berth cannot decode ({type(exc).__name__}): "
            "left parked, nothing claimed"
        )
    try:
        store.delete(key, parked.token)
    except berth.TokenMismatch:
        refuse(f"nothing to claim at {where(store.identity, key)}: another claimer won")
    if env.deadline is not None and store.now() > env.deadline:
        refuse(f"{where(store.identity, key)} passed its deadline while being claimed: removed, never resumed")
    if out:
        emit_json(doc)
        return
    click.echo(
        f"claimed {key!r} for {where(store.identity)}: this caller now owns run {terminal_safe(env.run_id)}", err=True
    )
    _print_envelope(key, env, now())


@cli.command("rm", context_settings=CONTEXT)
@click.argument("key", callback=remember_key)
@click.option("--force", is_flag=True, help="Also remove an expired frame, or one that does not open.")
@store_options(env=False)
@click.pass_obj
def rm_cmd(settings: Settings, key: str, force: bool) -> None:
    """Claim the envelope under KEY and discard it.

    --force removes it by its header's token without opening it: for frames
    that have expired, were tampered with, or are sealed under a key you lack.

    \b
    Example:
      berth rm 'org/repo#42' --force
    """
    if force:
        store = settings.open(keys=False)
        item = find_listing(store, key)
        token = item.token if item is not None else None  # unreadable frames are listed too, flagged
        if token is None:
            refuse(f"nothing parked at {where(store.identity, key)}")
        try:
            store.delete(key, token)
        except berth.TokenMismatch:
            refuse(f"{where(store.identity, key)} changed while it was being removed: nothing removed, try again")
        click.echo(f"removed {key!r} for {where(store.identity)} (unopened)")
        return
    store = settings.open(keys=True)
    try:
        parked = store.load(key)
    except berth.Expired:
        refuse(f"{where(store.identity, key)} is past its deadline: `berth rm --force` removes it")
    except (berth.IntegrityError, berth.FormatError) as exc:
        refuse(f"{exc}; `berth rm --force` removes it unopened")
    if parked is None:
        refuse(f"nothing parked at {where(store.identity, key)}")
    try:
        store.delete(key, parked.token)
    except berth.TokenMismatch:
        refuse(f"{where(store.identity, key)} was claimed or re-parked meanwhile: nothing removed")
    _drop_question(settings, key, parked.envelope.run_id)
    click.echo(f"removed {key!r} for {where(store.identity)}")


def _drop_question(settings: Settings, key: str, run_id: str) -> None:
    """Consume the question the removed run was waiting on (a newer run's question is left alone)."""
    try:
        qs = settings.questions()
        q = qs.pending(key)
        if q is not None and q.run_id == run_id:
            qs.consume(key, q.id)
    except berth.BerthError as exc:
        warn(f"removed {key!r}, but its question stays until swept: {exc}")


@cli.command("audit", context_settings=CONTEXT)
@click.option(
    "--adopt",
    is_flag=True,
    help="First record every frame parked before the store had a witness, trusting the store as it is now.",
)
@click.option(
    "--acknowledge",
    "acknowledge",
    multiple=True,
    metavar="KEY",
    help="First accept that the missing run at KEY is gone for good (repeatable); its saves then proceed.",
)
@output_options()
@store_options(env=False)
@click.pass_obj
def audit_cmd(settings: Settings, adopt: bool, acknowledge: tuple[str, ...], out: str | None) -> None:
    """Compare every frame with the witness: find deleted, replayed and unknown runs.

    Needs a witness (--witness or BERTH_WITNESS) and the keys. Reports keys whose
    frame is missing (deleted without a claim), replayed (an older frame put back,
    or a store restored from an older copy), unknown (a frame the witness never
    saw) and tampered (a witness record that does not open). Exit 1 if any.

    --adopt first re-seals, through the witness, every frame written without one
    (no sequence number, no record of its key): it takes the store's contents at
    this moment as genuine. Run it once, when the witness is added.

    --acknowledge KEY first records that the run the witness saw parked at KEY,
    now missing, is gone for good: until then every save over KEY is refused.
    Keys where a witness write failed after a claim or save committed are
    settled and listed once as unsettled (not counted as disagreeing).

    \b
    Example:
      BERTH_WITNESS=postgresql://audit-db/berth berth audit --keyring keys.json --json
    """
    if not settings.witness:
        bad_usage(f"{where(settings.who)}: berth audit needs a witness: pass --witness URL or set BERTH_WITNESS")
    store = settings.open(keys=True)
    adopted = store.adopt() if adopt else None
    if adopted is not None and out != "json":
        click.echo(f"{where(store.identity)}: {counted(adopted, 'frame')} adopted by the witness")
    acknowledged = [key for key in acknowledge if store.acknowledge(key)]
    if acknowledge and out != "json":
        for key in acknowledge:
            done = "acknowledged gone" if key in acknowledged else "not missing: nothing acknowledged"
            click.echo(terminal_safe(f"{where(store.identity, key)}: {done}"))
    report = store.audit()
    kinds = ("missing", "replayed", "unknown", "tampered")
    if out == "json":
        adoption = {} if adopted is None else {"adopted": adopted}
        acks = {"acknowledged": acknowledged} if acknowledge else {}
        lists = {k: list(getattr(report, k)) for k in (*kinds, "unsettled")}
        emit_json({"ok": report.ok, "checked": report.checked, **adoption, **acks, **lists})
    else:
        for kind in (*kinds, "unsettled"):
            for key in getattr(report, kind):
                click.echo(f"{kind:<9} {terminal_safe(key)}")
        found = ", ".join(f"{len(getattr(report, k)):,} {k}" for k in kinds)
        click.echo(f"{where(store.identity)}: {counted(report.checked, 'key')} checked; {found}")
    if not report.ok:
        bad = sum(len(getattr(report, k)) for k in kinds)
        refuse(f"{counted(bad, 'key')} of {where(store.identity)} disagree with the witness", reported=out == "json")
