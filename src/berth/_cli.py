"""The `berth` command line: see what is parked, answer what waits on a human, clean up.

Built on click (explicit, stable, and it lets one place own every error and exit
code) with rich for tables and progress bars. Exit codes: 0 success, 1 refused
(expired, lost claim, tampered, nothing parked), 2 bad usage or configuration.
Every failure is one line on stderr naming the identity and key; `BERTH_DEBUG=1`
adds the traceback.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import secrets
import stat
import sys
import traceback
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import IO, TYPE_CHECKING, Any, NoReturn, TypeVar
from urllib.parse import quote, urlsplit, urlunsplit

import click

import berth

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

__all__ = ["cli", "main"]

OK, REFUSED, USAGE = 0, 1, 2
DEFAULT_IDENTITY = "default"
_F = TypeVar("_F", bound=Callable[..., Any])


class Failure(Exception):
    """A one-line refusal (exit 1) or usage/configuration error (exit 2)."""

    def __init__(self, message: str, code: int = REFUSED):
        super().__init__(message)
        self.code = code


def refuse(message: str) -> NoReturn:
    """Stop with exit code 1 and a one-line message."""
    raise Failure(message, REFUSED)


def bad_usage(message: str) -> NoReturn:
    """Stop with exit code 2 and a one-line message."""
    raise Failure(message, USAGE)


def where(identity: str, key: str | None = None) -> str:
    """The identity/key pair every message names."""
    return f"identity {identity!r}" + (f", key {key!r}" if key is not None else "")


# --- configuration -------------------------------------------------------------------------


def default_url() -> str:
    """`sqlite:///` in the user's data directory, created 0700 (the file is created 0600)."""
    import platformdirs

    directory = platformdirs.user_data_path("berth", appauthor=False)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    return "sqlite://" + quote(str(directory / "berth.db"))


def redact(url: str) -> str:
    """`url` without a password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass
class Settings:
    """Where the store is and how it is sealed, from flags, then the environment, then defaults."""

    url: str | None = None
    identity: str | None = None
    keyring: str | None = None
    command: str = "berth"
    key: str | None = None
    _stores: list[Any] = field(default_factory=list)
    _sealer: berth.Sealer | None = None

    @property
    def who(self) -> str:
        """The identity commands run as."""
        return self.identity or DEFAULT_IDENTITY

    def store_url(self) -> str:
        """The configured store URL, or the default SQLite file."""
        return self.url or default_url()

    def sealer(self) -> berth.Sealer | None:
        """The configured sealer, or None when nothing is configured (plaintext).

        `--keyring` stands in for `BERTH_KEYRING`; `berth.sealer_from_env` reads the
        rest (`BERTH_KMS`, and both together: the KMS seals, the keyring still opens).
        """
        environ = dict(os.environ)
        if self.keyring:
            if not environ.get("BERTH_KMS", "").strip():
                return berth.AesGcmSealer(load_keyring(self.keyring))
            environ["BERTH_KEYRING"] = self.keyring
        try:
            return berth.sealer_from_env(environ)
        except (berth.BerthError, ValueError, OSError) as exc:
            bad_usage(f"{where(self.who)}: sealer configuration: {exc}")

    def open(self, *, keys: bool, accept_plaintext: bool = False) -> berth.Store:
        """Open the store; `keys=False` for commands that read headers only and need no sealer."""
        url = self.store_url()
        sealer = self._resolved_sealer() if keys else berth.PlaintextSealer()
        try:
            store = berth.open_store(url, identity=self.who, sealer=sealer, accept_plaintext=accept_plaintext)
        except berth.InvalidKey as exc:
            bad_usage(str(exc))
        except berth.BerthError as exc:
            bad_usage(f"{where(self.who)}: cannot open store {redact(url)}: {exc}")
        self._stores.append(store)
        return store

    def questions(self, *, keys: bool = True) -> berth.QuestionStore:
        """Open the question store next to the envelope store, sealed by the same sealer.

        `keys=False` for sweeping, which reads headers only.
        """
        url = self.store_url()
        sealer = self._resolved_sealer() if keys else berth.PlaintextSealer()
        try:
            qs = berth.open_questions(url, identity=self.who, sealer=sealer)
        except berth.InvalidKey as exc:
            bad_usage(str(exc))
        except berth.BerthError as exc:
            bad_usage(f"{where(self.who)}: cannot open questions at {redact(url)}: {exc}")
        self._stores.append(qs)
        return qs

    def _resolved_sealer(self) -> berth.Sealer:
        if self._sealer is None:
            sealer = self.sealer()
            if sealer is None:
                warn(
                    f"{where(self.who)} at {redact(self.store_url())} is not sealed (plaintext, for development): "
                    "set BERTH_KEYRING or BERTH_KMS to seal it"
                )
                sealer = berth.PlaintextSealer()
            self._sealer = sealer
        return self._sealer

    def close(self) -> None:
        """Close every store this invocation opened."""
        while self._stores:
            self._stores.pop().close()


def load_keyring(path: str) -> berth.Keyring:
    """Read a keyring file, as a configuration error (exit 2) when it cannot be read."""
    try:
        return berth.Keyring.load(path)
    except FileNotFoundError:
        bad_usage(f"keyring {path!r} does not exist: create one with `berth keys generate {path}`")
    except OSError as exc:
        bad_usage(f"keyring {path!r} cannot be read: {exc.strerror or exc}")
    except ValueError as exc:
        bad_usage(f"keyring {path!r}: {exc}")


def warn(message: str) -> None:
    """One line on stderr."""
    click.echo(f"berth: warning: {_one_line(message)}", err=True)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _show_warning(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    warn(str(message))


class _OneLineHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        warn(message.removeprefix("berth: "))


@contextmanager
def _log_to_stderr() -> Iterator[None]:
    """The library's log warnings, as one `berth: warning:` line each, for as long as a command runs."""
    logger = logging.getLogger("berth")
    handler = _OneLineHandler(logging.WARNING)
    saved = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = saved


# --- shared options ------------------------------------------------------------------------


def _set(attr: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def callback(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is not None:
            setattr(ctx.ensure_object(Settings), attr, value)

    return callback


def store_options(*, env: bool) -> Callable[[_F], _F]:
    """`--url`, `--identity`, `--keyring`: on the group (with their environment variables) and on each command."""

    def envvar(name: str) -> str | None:
        return name if env else None

    def decorate(f: _F) -> _F:
        opts = [
            click.option(
                "--url",
                metavar="URL",
                envvar=envvar("BERTH_URL"),
                show_envvar=env,
                expose_value=False,
                callback=_set("url"),
                help="Store URL (default: an SQLite file in the user data directory).",
            ),
            click.option(
                "--identity",
                metavar="NAME",
                envvar=envvar("BERTH_IDENTITY"),
                show_envvar=env,
                expose_value=False,
                callback=_set("identity"),
                help="Namespace of the agent or tenant (default: default).",
            ),
            click.option(
                "--keyring",
                metavar="PATH",
                expose_value=False,
                callback=_set("keyring"),
                help="Keyring file that seals the store (AES-256-GCM); or set BERTH_KEYRING, or BERTH_KMS.",
            ),
        ]
        for opt in reversed(opts):
            f = opt(f)
        return f

    return decorate


def output_options(*, stream: bool = False) -> Callable[[_F], _F]:
    """`--json` (one document), and `--jsonl` (one object a line) where the command streams."""

    def decorate(f: _F) -> _F:
        if stream:
            f = click.option("--jsonl", "out", flag_value="jsonl", help="One JSON object per line, streamed.")(f)
        return click.option("--json", "out", flag_value="json", help="One JSON document for scripts.")(f)

    return decorate


class Group(click.Group):
    """The `berth` group: owns every error and exit code, so no traceback reaches a user."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        """Run the command line; exits with 0, 1 or 2 unless `standalone_mode=False`."""
        settings = extra.pop("obj", None) or Settings()
        with warnings.catch_warnings(), _log_to_stderr():
            warnings.showwarning = _show_warning
            code = _run(
                settings,
                lambda: super(Group, self).main(
                    args, prog_name or "berth", complete_var, standalone_mode=False, obj=settings, **extra
                ),
            )
        settings.close()
        if not standalone_mode:
            return code
        sys.exit(code)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """Remember the command path for error messages."""
        name, cmd, rest = super().resolve_command(ctx, args)
        if cmd is not None:
            ctx.ensure_object(Settings).command = f"{ctx.command_path} {cmd.name}"
        return name, cmd, rest


def _debug() -> bool:
    return os.environ.get("BERTH_DEBUG", "") not in ("", "0")


def _run(settings: Settings, fn: Callable[[], Any]) -> int:
    def fail(message: str, code: int) -> int:
        if _debug():
            traceback.print_exc()
        click.echo(f"{settings.command}: {_one_line(message)}", err=True)
        return code

    try:
        rv = fn()
    except Failure as exc:
        return fail(str(exc), exc.code)
    except click.exceptions.NoArgsIsHelpError as exc:  # bare `berth` or `berth keys`: the help, as usual
        click.echo(exc.format_message())
        return USAGE
    except click.UsageError as exc:
        path = exc.ctx.command_path if exc.ctx is not None else "berth"
        settings.command = path
        return fail(f"{exc.format_message()} (see `{path} --help`)", USAGE)
    except click.ClickException as exc:
        return fail(exc.format_message(), USAGE)
    except click.Abort:
        return fail("aborted", 130)
    except (berth.InvalidKey, berth.InvalidEnvelope) as exc:
        return fail(_named(settings, exc), USAGE)
    except berth.BerthError as exc:
        return fail(_named(settings, exc), REFUSED)
    except BrokenPipeError:
        sys.stderr = open(os.devnull, "w")  # noqa: SIM115 - the reader went away; say nothing more
        return REFUSED
    except Exception as exc:
        return fail(
            f"internal error: {type(exc).__name__}: {exc} ({where(settings.who)}; BERTH_DEBUG=1 shows the traceback)",
            REFUSED,
        )
    return rv if isinstance(rv, int) else OK


def _named(settings: Settings, exc: berth.BerthError) -> str:
    """The error's message, led by the identity and key when it does not name them itself."""
    text = str(exc)
    key = exc.key or settings.key
    if "identity" in text and (key is None or f"key {key!r}" in text):
        return text
    return f"{where(exc.identity or settings.who, key)}: {text}"


# --- time, sizes and JSON ------------------------------------------------------------------


def now() -> datetime:
    """The current time, aware."""
    return datetime.now(timezone.utc)


def rfc3339(dt: datetime | None) -> str | None:
    """RFC 3339 in UTC with a `Z`, for JSON."""
    if dt is None:
        return None
    return dt.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def local(dt: datetime) -> str:
    """Local time for people: `2026-11-30 08:12:03 CET`."""
    return dt.astimezone().strftime("%Y-%m-%d %H:%M:%S %Z").strip()


def span(seconds: float) -> str:
    """A duration in at most two units: `45s`, `12m`, `3h 5m`, `13d 23h`."""
    s = int(abs(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86400:
        h, m = divmod(s // 60, 60)
        return f"{h}h {m}m" if m else f"{h}h"
    d, h = divmod(s // 3600, 24)
    return f"{d}d {h}h" if h else f"{d}d"


def ago(dt: datetime, at: datetime) -> str:
    """`5s ago` or `in 14d`, relative to `at`."""
    delta = (dt - at).total_seconds()
    return f"in {span(delta)}" if delta > 0 else f"{span(delta)} ago"


def is_expired(deadline: datetime | None, at: datetime) -> bool:
    """Past its deadline (strictly), as the store decides."""
    return deadline is not None and at > deadline


def deadline_text(deadline: datetime | None, at: datetime) -> str:
    """`in 13d 23h`, `expired 5s ago`, or `none`."""
    if deadline is None:
        return "none"
    return f"expired {ago(deadline, at)}" if is_expired(deadline, at) else ago(deadline, at)


def size_text(n: int) -> str:
    """`812 B`, `1.2 KiB`, `3.4 MiB`."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{n} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"  # pragma: no cover


def labels_text(labels: Any, *, human: bool = False) -> str:
    """`k=v k2=v2`; for people, without berth's own bookkeeping labels (`berth.*`)."""
    return " ".join(f"{k}={v}" for k, v in labels.items() if not (human and k.startswith("berth.")))


def listing_doc(item: berth.Listing) -> dict[str, Any]:
    """A listing as JSON, with the Python API's field names."""
    return {
        "key": item.key,
        "run_id": item.run_id,
        "created_at": rfc3339(item.created_at),
        "deadline": rfc3339(item.deadline),
        "size": item.size,
        "labels": dict(item.labels),
        "sealed_by": item.sealed_by,
    }


def _raw(data: bytes | None) -> Any:
    if data is None:
        return None
    return json.loads(data)


def envelope_doc(key: str, env: berth.Envelope) -> dict[str, Any]:
    """An envelope as JSON, with the Python API's field names (raw JSON fields decoded)."""
    return {
        "key": key,
        "version": env.version,
        "provider": env.provider,
        "model": env.model,
        "config_digest": env.config_digest,
        "run_id": env.run_id,
        "provider_state": _raw(env.provider_state),
        "loop_state": _raw(env.loop_state),
        "pending_calls": [{"id": c.id, "name": c.name, "input": _raw(c.input)} for c in env.pending_calls],
        "turn": env.turn,
        "remaining_turns": env.remaining_turns,
        "reason": env.reason,
        "trace_id": env.trace_id,
        "deadline": rfc3339(env.deadline),
        "created_at": rfc3339(env.created_at),
        "labels": dict(env.labels),
    }


def emit_json(doc: Any) -> None:
    """One JSON document on stdout."""
    click.echo(json.dumps(doc, ensure_ascii=False, indent=2))


def emit_jsonl(doc: Any) -> None:
    """One JSON object on one line of stdout."""
    click.echo(json.dumps(doc, ensure_ascii=False, separators=(",", ":")))


def console(*, stderr: bool = False) -> Console:
    """A rich console on stdout (or stderr); plain text when it is not a terminal."""
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


@contextmanager
def progress(label: str, total: int | None) -> Iterator[Callable[[], None]]:
    """A progress bar on stderr when stderr is a terminal; yields a function that advances it."""
    if not sys.stderr.isatty():
        yield lambda: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    bar: Progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console(stderr=True),
        transient=True,
    )
    with bar:
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)


def listing_table(items: Iterable[berth.Listing], at: datetime) -> Any:
    """The `ls` table: key, run id, age, deadline, size, sealed by, labels (berth's own labels hidden)."""
    from rich import box
    from rich.table import Table

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True, header_style="bold")
    table.add_column("KEY", overflow="fold", ratio=3)
    table.add_column("RUN ID", overflow="fold", ratio=2)
    table.add_column("AGE", no_wrap=True)
    table.add_column("DEADLINE", no_wrap=True)
    table.add_column("SIZE", justify="right", no_wrap=True)
    table.add_column("SEALED BY", overflow="fold", ratio=2)
    table.add_column("LABELS", overflow="fold", ratio=2)
    for item in items:
        dl = deadline_text(item.deadline, at)
        style = "red" if is_expired(item.deadline, at) else ""
        table.add_row(
            escape(item.key),
            escape(item.run_id) or "-",
            span((at - item.created_at).total_seconds()),
            f"[{style}]{dl}[/]" if style else dl,
            size_text(item.size),
            escape(item.sealed_by),
            escape(labels_text(item.labels, human=True)) or "-",
        )
    return table


def escape(text: str) -> str:
    """`text` safe to print as rich markup."""
    from rich.markup import escape as _escape

    return _escape(text)


def find_listing(store: berth.Store, key: str) -> berth.Listing | None:
    """The listing of exactly `key`, from its header (no keys needed)."""
    check_key(store, key)
    for item in store.list(prefix=key):
        if item.key == key:
            return item
    return None


def check_key(store: berth.Store, key: str) -> None:
    """Raise `berth.InvalidKey` for a key the store refuses, before any I/O.

    The store validates keys before it does anything; a delete with the zero
    token is the documented no-I/O path (a zero token never reaches the backend).
    """
    try:
        store.delete(key, berth.Token.ZERO)
    except berth.TokenMismatch:
        pass


def _remember_key(ctx: click.Context, param: click.Parameter, value: str) -> str:
    ctx.ensure_object(Settings).key = value
    return value


# --- parsing -------------------------------------------------------------------------------

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


# --- the commands --------------------------------------------------------------------------

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(
    cls=Group,
    context_settings=CONTEXT,
    epilog=(
        "Sealing: BERTH_KEYRING=PATH (a keyring from `berth keys generate`) or BERTH_KMS=URL "
        "(gcpkms://..., awskms://..., local:///path); with neither, plaintext (development only). "
        "Run `berth demo` first: it shows the whole job in a few seconds."
    ),
)
@click.version_option(berth.__version__, "-V", "--version", prog_name="berth", message="%(prog)s %(version)s")
@store_options(env=True)
def cli() -> None:
    """Park sealed agent runs while they wait for a human; wake each exactly once.

    \b
    Example:
      berth demo
      BERTH_KEYRING=keys.json berth ls --prefix org/repo
    """


@cli.command("ls", context_settings=CONTEXT)
@click.option("--prefix", default="", metavar="PREFIX", help="Only keys that start with PREFIX.")
@click.option("--expired", is_flag=True, help="Only envelopes past their deadline.")
@output_options(stream=True)
@store_options(env=False)
@click.pass_obj
def ls_cmd(settings: Settings, prefix: str, expired: bool, out: str | None) -> None:
    """List what is parked, from frame headers (needs no key).

    \b
    Example:
      berth ls --prefix org/repo --expired
    """
    store = settings.open(keys=False)
    at = now()
    items = (item for item in store.list(prefix) if not expired or is_expired(item.deadline, at))
    if out == "jsonl":
        for item in items:
            emit_jsonl(listing_doc(item))
    elif out == "json":
        emit_json([listing_doc(item) for item in items])
    else:
        rows = list(items)
        if not rows:
            click.echo(
                f"nothing parked for {where(store.identity)}" + (f" under {prefix!r}" if prefix else ""), err=True
            )
            return
        console().print(listing_table(rows, at))


def _header_rows(item: berth.Listing, at: datetime) -> list[tuple[str, str]]:
    return [
        ("key", item.key),
        ("run id", item.run_id or "-"),
        ("created", f"{local(item.created_at)} ({ago(item.created_at, at)})"),
        (
            "deadline",
            "none" if item.deadline is None else f"{local(item.deadline)} ({deadline_text(item.deadline, at)})",
        ),
        ("size", f"{size_text(item.size)} ({item.size} bytes)"),
        ("sealed by", item.sealed_by),
        ("labels", labels_text(item.labels) or "-"),
    ]


def _print_fields(rows: list[tuple[str, str]]) -> None:
    from rich.table import Table

    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold", no_wrap=True)
    table.add_column(overflow="fold")
    for name, value in rows:
        table.add_row(name, escape(value))
    console().print(table)


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
    _print_fields([("key", key), *_envelope_rows(env, at)])
    out = console()
    out.print("[bold]provider state[/]")
    out.print_json(env.provider_state.decode("utf-8"), indent=2)
    if env.loop_state is not None:
        out.print("[bold]loop state[/]")
        out.print_json(env.loop_state.decode("utf-8"), indent=2)


@cli.command("show", context_settings=CONTEXT)
@click.argument("key", callback=_remember_key)
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
            _print_fields(_header_rows(item, at))
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
@click.argument("key", callback=_remember_key)
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
        run_id=run_id if run_id is not None else "run-" + secrets.token_hex(4),
        reason=reason,
        deadline=deadline,
        labels=labels,
    )
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
        f"parked {key!r} for {where(store.identity)}: run {item.run_id}, "
        f"deadline {deadline_text(item.deadline, at)}, sealed by {item.sealed_by}"
    )


@cli.command("claim", context_settings=CONTEXT)
@click.argument("key", callback=_remember_key)
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
    env = store.claim(key)
    if env is None:
        refuse(f"nothing to claim at {where(store.identity, key)}: nothing parked, or another claimer won")
    if out:
        emit_json(envelope_doc(key, env))
        return
    click.echo(f"claimed {key!r} for {where(store.identity)}: this caller now owns run {env.run_id}", err=True)
    _print_envelope(key, env, now())


@cli.command("rm", context_settings=CONTEXT)
@click.argument("key", callback=_remember_key)
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
        token = item.token if item is not None else _raw_token(store, key)
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


def _raw_token(store: berth.Store, key: str) -> berth.Token | None:
    """The token of bytes under `key` that are not a readable frame (listing skips them)."""
    found = store.backend.get(f"{store.identity}/{key}")
    return None if found is None else found[1]


def _drop_question(settings: Settings, key: str, run_id: str) -> None:
    """Consume the question the removed run was waiting on (a newer run's question is left alone)."""
    try:
        qs = settings.questions()
        q = qs.pending(key)
        if q is not None and q.run_id == run_id:
            qs.consume(key, q.id)
    except berth.BerthError as exc:
        warn(f"removed {key!r}, but its question stays until swept: {exc}")


@cli.command("sweep", context_settings=CONTEXT)
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@output_options()
@store_options(env=False)
@click.pass_obj
def sweep_cmd(settings: Settings, dry_run: bool, out: str | None) -> None:
    """Remove every envelope past its deadline (needs no key).

    Each is removed only if unchanged since it was listed: a run re-parked
    meanwhile survives. Their questions go with them.

    \b
    Example:
      berth sweep --dry-run
    """
    store = settings.open(keys=False)
    at = now()
    expired = [item for item in store.list() if is_expired(item.deadline, at)]
    removed: list[str] = []
    if not dry_run:
        with progress("sweeping", len(expired)) as advance:
            for item in expired:
                try:
                    store.delete(item.key, item.token)
                    removed.append(item.key)
                except berth.TokenMismatch:
                    pass  # re-parked or claimed since it was listed: not ours to remove
                advance()
    keys = [item.key for item in expired] if dry_run else removed
    dropped = 0 if dry_run else settings.questions(keys=False).sweep(at)
    if out:
        emit_json({"dry_run": dry_run, "swept": len(keys), "keys": keys, "questions": dropped})
        return
    verb = "would remove" if dry_run else "removed"
    click.echo(
        f"{verb} {len(keys)} expired envelope{'s' if len(keys) != 1 else ''} for {where(store.identity)}"
        + (f" and {dropped} question{'s' if dropped != 1 else ''}" if dropped else "")
    )
    for key in keys:
        click.echo(f"  {key}")


@cli.command("reseal", context_settings=CONTEXT)
@click.option(
    "--accept-plaintext", is_flag=True, help="Also seal legacy plaintext frames (a migration; off by default)."
)
@output_options()
@store_options(env=False)
@click.pass_obj
def reseal_cmd(settings: Settings, accept_plaintext: bool, out: str | None) -> None:
    """Re-seal every envelope not sealed by the current key.

    Run it after `berth keys rotate`, or with BERTH_KMS and BERTH_KEYRING both
    set to move a keyring store onto a KMS.

    Exit 1 if any frame could not be opened.

    \b
    Example:
      berth keys rotate keys.json && berth reseal --keyring keys.json
    """
    store = settings.open(keys=True, accept_plaintext=accept_plaintext)
    with progress("resealing", None):
        report = store.reseal()
    moved, skipped, failed = int(report), getattr(report, "skipped", 0), getattr(report, "failed", 0)
    if out:
        emit_json({"moved": moved, "skipped": skipped, "failed": failed})
    else:
        sealed_by = f"{store.sealer.name}:{store.sealer.key_id}"
        click.echo(
            f"resealed {moved} envelope{'s' if moved != 1 else ''} for {where(store.identity)} under {sealed_by}"
            + (f"; {skipped} changed meanwhile" if skipped else "")
            + (f"; {failed} did not open" if failed else "")
        )
    if failed:
        refuse(
            f"{failed} frame{'s' if failed != 1 else ''} of {where(store.identity)} did not open: run `berth verify`"
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
                return "unknown_key", f"sealed by {item.sealed_by}, which the configured sealer does not hold"
        return "tampered", str(exc)
    except berth.FormatError as exc:
        return "unreadable", str(exc)
    if parked is None:
        return "gone", "claimed or removed while verifying"
    return "ok", ""


def _names(store: berth.Store) -> Iterator[str]:
    prefix = store.identity + "/"
    for name in store.backend.scan(prefix):
        yield name[len(prefix) :]


@cli.command("verify", context_settings=CONTEXT)
@output_options(stream=True)
@store_options(env=False)
@click.pass_obj
def verify_cmd(settings: Settings, out: str | None) -> None:
    """Open every frame; count ok, expired, tampered, unknown key.

    Exit 1 if any frame is tampered with (or unreadable).

    \b
    Example:
      berth verify --keyring keys.json --jsonl | grep -v '"ok"'
    """
    store = settings.open(keys=True)
    counts = dict.fromkeys(VERIFY_STATES, 0)
    problems: list[dict[str, str]] = []
    total = sum(1 for _ in _names(store)) if sys.stderr.isatty() else None
    with progress("verifying", total) as advance:
        for key in _names(store):
            state, why = verify_one(store, key)
            advance()
            if state == "gone":
                continue
            counts[state] += 1
            if out == "jsonl":
                emit_jsonl({"key": key, "status": state, "error": why or None})
            elif state != "ok":
                problems.append({"key": key, "status": state, "error": why})
    if out == "json":
        emit_json({**counts, "problems": problems})
    elif out is None:
        for p in problems:
            click.echo(f"{p['status'].replace('_', ' '):<11} {p['key']}: {_one_line(p['error'])}")
        summary = ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items() if n or s in ("ok", "tampered"))
        click.echo(f"{where(store.identity)}: {summary}")
    bad = counts["tampered"] + counts["unreadable"]
    if bad:
        refuse(f"{bad} frame{'s' if bad != 1 else ''} of {where(store.identity)} refused as tampered or unreadable")


# --- questions -----------------------------------------------------------------------------


@cli.command("questions", context_settings=CONTEXT)
@click.option("--prefix", default="", metavar="PREFIX", help="Only keys that start with PREFIX.")
@output_options(stream=True)
@store_options(env=False)
@click.pass_obj
def questions_cmd(settings: Settings, prefix: str, out: str | None) -> None:
    """List the questions parked runs wait on, with deadlines.

    \b
    Example:
      berth questions --prefix org/repo
    """
    store = settings.open(keys=False)
    deadlines = {item.key: item.deadline for item in store.list(prefix)}
    qs = settings.questions()
    at = now()
    rows: list[dict[str, Any]] = []
    for q, a in qs.list(prefix):
        doc = _question_doc(q, a, deadlines.get(q.key))
        if out == "jsonl":
            emit_jsonl(doc)
        else:
            rows.append(doc)
    if out == "json":
        emit_json(rows)
    elif out is None:
        if not rows:
            click.echo(f"no pending questions for {where(store.identity)}", err=True)
            return
        from rich import box
        from rich.table import Table

        table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True, header_style="bold")
        table.add_column("KEY", overflow="fold")
        table.add_column("ASKED", no_wrap=True)
        table.add_column("DEADLINE", no_wrap=True)
        table.add_column("STATUS", overflow="fold")
        table.add_column("QUESTION", overflow="fold", ratio=1)
        for doc in rows:
            dl = datetime.fromisoformat(doc["deadline"]) if doc["deadline"] else None
            status = f"answered by {doc['answered_by']}" if doc["answered"] else "waiting"
            table.add_row(
                escape(doc["key"]),
                span((at - datetime.fromisoformat(doc["asked_at"])).total_seconds()),
                deadline_text(dl, at),
                escape(status),
                escape(doc["prompt"]),
            )
        console().print(table)


def _question_doc(q: Any, a: Any, deadline: datetime | None) -> dict[str, Any]:
    return {
        "key": q.key,
        "question_id": q.id,
        "run_id": q.run_id,
        "prompt": q.prompt,
        "asked_at": rfc3339(q.asked_at),
        "deadline": rfc3339(deadline),
        "answered": a is not None,
        "answered_by": None if a is None else a.by,
        "answered_at": None if a is None else rfc3339(a.answered_at),
    }


@cli.command("answer", context_settings=CONTEXT)
@click.argument("key", callback=_remember_key)
@click.argument("text", required=False)
@click.option("--file", "file", type=click.File("r"), metavar="FILE|-", help="Read the answer from a file or stdin.")
@click.option("--by", default=None, metavar="NAME", help="Who answers (default: your user name).")
@output_options()
@store_options(env=False)
@click.pass_obj
def answer_cmd(
    settings: Settings, key: str, text: str | None, file: IO[str] | None, by: str | None, out: str | None
) -> None:
    """Answer the question the run parked under KEY is waiting on.

    \b
    Example:
      berth answer 'org/repo#42' 'yes, push it'
    """
    if text is None and file is None:
        raise click.UsageError("give the answer as TEXT, or with --file FILE (- for stdin)")
    if text is not None and file is not None:
        raise click.UsageError("give the answer as TEXT or with --file, not both")
    body = text if text is not None else file.read()  # type: ignore[union-attr]
    qs = settings.questions()
    q = qs.pending(key)
    if q is None:
        refuse(f"no question is pending at {where(settings.who, key)}")
    who = by or _user()
    answer = qs.provide(key, q.id, body, by=who)
    if out:
        emit_json({"key": key, "question_id": q.id, "by": answer.by, "answered_at": rfc3339(answer.answered_at)})
        return
    click.echo(f"answered {key!r} for {where(settings.who)} as {who}: the next waker resumes the run")


def _user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except Exception:
        return "cli"


# --- keys ----------------------------------------------------------------------------------


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
        ("keys", f"{len(doc['key_ids'])}: " + ", ".join(doc["key_ids"])),
    ]
    for kid, material in doc.get("keys", {}).items():
        rows.append((f"key {kid}", material))
    _print_fields(rows)


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
            f"rotated {path}: new primary {ring.primary}, {len(ring)} keys; `berth reseal` moves parked frames to it"
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
    ring = load_keyring(path)
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


# --- demo ----------------------------------------------------------------------------------


@cli.command("demo", context_settings=CONTEXT)
@click.option(
    "--url",
    "demo_url",
    default=None,
    metavar="URL",
    help="Run on this store (default: a fresh SQLite file in a temporary directory).",
)
@click.option("--keep", is_flag=True, help="Keep the temporary directory and print where it is.")
def demo_cmd(demo_url: str | None, keep: bool) -> None:
    """The whole job in seconds: park, answer, race, tamper, expire.

    Exit 0 only if every step behaved as stated.

    \b
    Example:
      berth demo
    """
    from berth._demo import DemoError, run_demo

    try:
        ok = run_demo(url=demo_url, keep=keep)
    except DemoError as exc:
        bad_usage(str(exc))
    if not ok:
        refuse("demo: a step did not behave as stated (see above)")


def main() -> None:
    """Entry point of the `berth` console script."""
    cli(prog_name="berth")


if __name__ == "__main__":  # pragma: no cover
    main()
